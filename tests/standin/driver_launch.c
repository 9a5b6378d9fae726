/* driver_launch.c — kernel launches without kernels: cuLaunchKernel takes the CUfunction for a
 * host function `void fn(void **kernelParams)` and calls it at once, outside the driver's lock
 * (it may call CUDA itself), unless the stream is capturing (then the launch is captured, not
 * run). Each successful launch counts in `launches`, and is "in flight" while it runs (a
 * checkpoint lock waits for those). Test-only. */
#include "driver.h"

#include <string.h>

typedef void (*host_kernel)(void **kernelParams);

static CUresult launch(const char *fn, CUfunction f, CUstream s, void **params)
{
	host_kernel kernel;
	CUresult rc;
	int dev, run = 0;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (f == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		rc = stream_work(fn, s, &dev, &run);
	if (rc == CUDA_SUCCESS)
		st.dev[dev].c.launches++;
	if (rc == CUDA_SUCCESS && run)
		atomic_fetch_add(&st_launches_running, 1); /* a checkpoint lock waits for it */
	leave();
	if (rc != CUDA_SUCCESS || !run)
		return rc;
	/* an object pointer to a function pointer: by its bytes, as ISO C has no conversion */
	memcpy(&kernel, &f, sizeof(kernel));
	kernel(params);
	atomic_fetch_sub(&st_launches_running, 1);
	return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
			unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
			void **kernelParams, void **extra)
{
	(void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
	(void)blockDimZ, (void)sharedMemBytes, (void)extra;
	return launch(__func__, f, hStream, kernelParams);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
			     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
			     void **kernelParams, void **extra)
{
	(void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
	(void)blockDimZ, (void)sharedMemBytes, (void)extra;
	return launch(__func__, f, hStream != NULL ? hStream : CU_STREAM_PER_THREAD, kernelParams);
}
