/* olddriver.c — a libcuda.so.1 from before the checkpoint API (CUDA 12.4): cuInit and
 * cuDriverGetVersion only, in a folder of its own, for the error `gpupool suspend` gives on such a
 * driver. Test-only. */
#include <cuda.h>

CUresult cuInit(unsigned int flags)
{
	return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDriverGetVersion(int *version)
{
	if (version == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 12040;
	return CUDA_SUCCESS;
}
