/* driver.h — the few driver-API calls the fences make where the runtime's equivalent costs more
 * (bench/cuda_calls.cu): found in the libcuda.so.1 the runtime has loaded, never loaded by us. */
#ifndef GPUPOOL_DRIVER_H
#define GPUPOOL_DRIVER_H

#include <cuda.h>

struct gp_drv {
	CUresult (*CtxGetCurrent)(CUcontext *);
	CUresult (*CtxGetDevice)(CUdevice *);
	CUresult (*StreamQuery)(CUstream);
	CUresult (*EventRecord)(CUevent, CUstream);
	CUresult (*EventQuery)(CUevent);
};

extern struct gp_drv gp_drv;

/* Find them, once (thread-safe; call it only after the runtime has done real work, which is when
 * the runtime has loaded the driver). 0 when all were found, else -1 and the runtime's calls are
 * the only way. */
int gp_drv_resolve(void);

#endif
