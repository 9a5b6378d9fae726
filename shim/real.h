/* real.h — the real CUDA runtime, found once at run time (no DT_NEEDED on libcudart).
 * dlsym(RTLD_NEXT) first, then an already-loaded libcudart.so.13/.12 by soname (RTLD_NOLOAD:
 * never a second copy); a result that points back into this library is refused. */
#ifndef GPUPOOL_REAL_H
#define GPUPOOL_REAL_H

#include <cuda_runtime_api.h>

struct gp_real {
	cudaError_t (*Malloc)(void **, size_t);
	cudaError_t (*Free)(void *);
	cudaError_t (*GetDevice)(int *);
	cudaError_t (*SetDevice)(int);
	cudaError_t (*GetDeviceCount)(int *);
	cudaError_t (*GetLastError)(void);
	cudaError_t (*PeekAtLastError)(void);
	cudaError_t (*MemGetInfo)(size_t *, size_t *);
	cudaError_t (*DeviceReset)(void);
	cudaError_t (*DeviceSynchronize)(void);
	cudaError_t (*EventCreateWithFlags)(cudaEvent_t *, unsigned);
	cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
	cudaError_t (*EventQuery)(cudaEvent_t);
	cudaError_t (*EventSynchronize)(cudaEvent_t);
	cudaError_t (*EventDestroy)(cudaEvent_t);
	cudaError_t (*StreamCreate)(cudaStream_t *);
	cudaError_t (*StreamCreateWithFlags)(cudaStream_t *, unsigned);
	cudaError_t (*StreamCreateWithPriority)(cudaStream_t *, unsigned, int);
	cudaError_t (*StreamDestroy)(cudaStream_t);
	cudaError_t (*StreamSynchronize)(cudaStream_t);
	cudaError_t (*StreamQuery)(cudaStream_t);
	cudaError_t (*StreamBeginCapture)(cudaStream_t, enum cudaStreamCaptureMode);
	cudaError_t (*StreamBeginCaptureToGraph)(cudaStream_t, cudaGraph_t, const cudaGraphNode_t *,
						 const cudaGraphEdgeData *, size_t,
						 enum cudaStreamCaptureMode);
	cudaError_t (*StreamEndCapture)(cudaStream_t, cudaGraph_t *);
	cudaError_t (*ThreadExchangeStreamCaptureMode)(enum cudaStreamCaptureMode *);
	/* Graph lifetimes: blocks freed during a capture are held until the graphs are gone. */
	cudaError_t (*GraphInstantiate)(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
	cudaError_t (*GraphInstantiateWithFlags)(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
	cudaError_t (*GraphInstantiateWithParams)(cudaGraphExec_t *, cudaGraph_t,
						  cudaGraphInstantiateParams *);
	cudaError_t (*GraphExecDestroy)(cudaGraphExec_t);
	cudaError_t (*GraphDestroy)(cudaGraph_t);
	cudaError_t (*GraphClone)(cudaGraph_t *, cudaGraph_t);
	cudaError_t (*GraphAddChildGraphNode)(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *,
					      size_t, cudaGraph_t);
	cudaError_t (*GraphExecChildGraphNodeSetParams)(cudaGraphExec_t, cudaGraphNode_t, cudaGraph_t);
	cudaError_t (*GraphExecUpdate)(cudaGraphExec_t, cudaGraph_t, cudaGraphExecUpdateResultInfo *);
	/* Per-thread default stream variants: seeing one means streams are not one order. */
	cudaError_t (*LaunchKernel_ptsz)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
	cudaError_t (*MemcpyAsync_ptsz)(void *, const void *, size_t, enum cudaMemcpyKind,
					cudaStream_t);
	cudaError_t (*MemsetAsync_ptsz)(void *, int, size_t, cudaStream_t);
	cudaError_t (*Memcpy_ptds)(void *, const void *, size_t, enum cudaMemcpyKind);
	cudaError_t (*Memset_ptds)(void *, int, size_t);
};

extern struct gp_real gp_real;

/* Resolve every entry once (thread-safe). Returns 0 when at least cudaMalloc and cudaFree
 * were found; the others may be NULL and their callers check. */
int gp_real_resolve(void);

/* After a dlsym or dlopen of ours that failed: drop the error it left (glibc keeps a small
 * per-thread record until dlerror() has returned it and is called again). Else the program's
 * next dlerror() reports our lookup, and a thread of ours that exits leaves the record behind
 * (LeakSanitizer caught it once in e2e_plot_trace: 24 bytes from _dlerror_run). */
void gp_dl_forget_error(void);

#endif
