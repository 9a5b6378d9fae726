/* driver_launch.c — kernel launches without kernels: cuLaunchKernel takes the CUfunction for a
 * host function `void fn(void **kernelParams)` and queues it on the stream, and
 * cuLaunchHostFunc queues its host function; the stream's worker runs them later, in order,
 * outside the driver's lock (driver_work.c). On a capturing stream the launch is captured, not
 * queued. Each successful cuLaunchKernel counts in `launches`. Test-only. */
#include "driver.h"

#include <string.h>

/* kernel or host (the other NULL): what runs. */
static CUresult launch(const char *fn, CUstream s, void (*kernel)(void **), void **params,
		       void (*host)(void *), void *arg)
{
	struct work_args a = { .kind = kernel != NULL ? WORK_KERNEL : WORK_HOST_FN, .delayed = 1 };
	struct CUstream_st *t;
	CUresult rc;
	int dev, run = 0;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (kernel == NULL && host == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	a.kernel = kernel;
	a.params = params;
	a.host = host;
	a.arg = arg;
	rc = stream_work(fn, s, &dev, &run);
	if (rc == CUDA_SUCCESS && run) {
		t = stream_of(s, dev, 1);
		rc = t != NULL ? queue_work(t, &a, NULL) : CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc == CUDA_SUCCESS && kernel != NULL)
		st.dev[dev].c.launches++;
out:
	leave();
	return rc;
}

/* An object pointer to a function pointer: by its bytes, as ISO C has no conversion. */
static void (*kernel_of(CUfunction f))(void **)
{
	void (*kernel)(void **);

	memcpy(&kernel, &f, sizeof(kernel));
	return kernel;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
			unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
			void **kernelParams, void **extra)
{
	(void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
	(void)blockDimZ, (void)sharedMemBytes, (void)extra;
	return launch(__func__, hStream, kernel_of(f), kernelParams, NULL, NULL);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
			     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
			     void **kernelParams, void **extra)
{
	(void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
	(void)blockDimZ, (void)sharedMemBytes, (void)extra;
	return launch(__func__, hStream != NULL ? hStream : CU_STREAM_PER_THREAD, kernel_of(f),
		      kernelParams, NULL, NULL);
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	return launch(__func__, hStream, NULL, NULL, fn, userData);
}

CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
	return launch(__func__, hStream != NULL ? hStream : CU_STREAM_PER_THREAD, NULL, NULL, fn,
		      userData);
}
