/* table.h — every CUDA function the shim touches, one row each: the real driver's and runtime's
 * tables and the names they are filled from (lookup.c), the door's identity list (handout.c), our
 * entry points' prototypes (driver.h) and the work entry points (work.c) are all made from it, so
 * a missing hook is one line and the places cannot drift apart. Never a row for a function the
 * shim neither calls nor stands in front of.
 *
 * A driver row: X(class, name, base, version, flavour, params, args, stream)
 *   class    what the door does with it (enum gp_cu_class)
 *   name     the symbol libcuda.so.1 exports, without "cu": MemAlloc_v2, MemcpyAsync_ptsz
 *   base     what cuGetProcAddress is asked for to get it, without "cu": MemAlloc
 *   version  the CUDA version that brought the symbol, as cudaTypedefs.h names its type
 *            (PFN_cuMemAlloc_v3020): typecheck.c holds every row to that type at build time
 *   flavour  PLAIN, or PTSZ / PTDS for the per-thread default stream's flavour (_ptsz, _ptds)
 *   params   the parameters with their names; args: the same names, as a call passes them
 *   stream   WORK rows: the stream the work goes to (NULL for the calls that take none: they
 *            queue on the default stream); `-` in the other rows
 * In three sections, by what stands in front of the real function:
 *   GP_DRIVER_HOOKS  an entry point of ours written by hand (driver.c), each a few lines
 *   GP_DRIVER_WORK   an entry point of ours made from its row (work.c)
 *   GP_DRIVER_OWN    none: the shim only calls it itself (fences, contexts, VMM, lookups)
 * A driver that lacks a row's symbol leaves it NULL: that entry point is then never handed out.
 * A variant without a row (an older one a program may still ask for, such as the 32-bit
 * cuMemAlloc of CUDA 2.0) gets the driver's own function, as every unlisted name does. */
#ifndef GPUPOOL_DOOR_TABLE_H
#define GPUPOOL_DOOR_TABLE_H

#include <cuda.h>
#include <cuda_runtime_api.h>

enum gp_cu_class {
	GP_CU_ALLOC,   /* the pool's allocation and free */
	GP_CU_STREAM,  /* streams made and destroyed: a fence covers every one */
	GP_CU_MEM,     /* the other memory calls the pool answers for, or counts (account.h) */
	GP_CU_CAPTURE, /* graph captures begun and ended: frees meanwhile are held (capture.c) */
	GP_CU_GRAPH,   /* graphs made, linked and destroyed: what they hold (graphs.c) */
	GP_CU_CONTEXT, /* contexts made, destroyed, reset or made current (ctx.c) */
	GP_CU_WORK,    /* GPU work queued on a stream: where it went is noted (gp_shim_work) */
	GP_CU_OWN,     /* called by the shim only */
};

/* The classes the pool cannot serve without: a lookup that returns a function of theirs the
 * door cannot match to its row (from the row's version on) makes the door blind (handout.c). */
#define GP_CU_ESSENTIAL(cls) ((cls) == GP_CU_ALLOC || (cls) == GP_CU_STREAM)

/* flavour -> whether the work goes to the calling thread's per-thread default stream. */
#define GP_CU_PER_THREAD_PLAIN 0
#define GP_CU_PER_THREAD_PTSZ 1
#define GP_CU_PER_THREAD_PTDS 1

/* The calls the pool answers for or must know of: entry points written by hand (driver.c). */
#define GP_DRIVER_HOOKS(X)                                                                         \
	X(ALLOC, MemAlloc_v2, MemAlloc, 3020, PLAIN, (CUdeviceptr *dptr, size_t bytes),            \
	  (dptr, bytes), -)                                                                        \
	X(ALLOC, MemFree_v2, MemFree, 3020, PLAIN, (CUdeviceptr dptr), (dptr), -)                  \
	X(STREAM, StreamCreate, StreamCreate, 2000, PLAIN, (CUstream *s, unsigned flags),          \
	  (s, flags), -)                                                                           \
	X(STREAM, StreamCreateWithPriority, StreamCreateWithPriority, 5050, PLAIN,                 \
	  (CUstream *s, unsigned flags, int priority), (s, flags, priority), -)                    \
	X(STREAM, StreamDestroy, StreamDestroy, 2000, PLAIN, (CUstream s), (s), -)                 \
	X(STREAM, StreamDestroy_v2, StreamDestroy, 4000, PLAIN, (CUstream s), (s), -)              \
	X(MEM, MemFreeAsync, MemFreeAsync, 11020, PLAIN, (CUdeviceptr dptr, CUstream s),           \
	  (dptr, s), -)                                                                            \
	X(MEM, MemFreeAsync_ptsz, MemFreeAsync, 11020, PTSZ, (CUdeviceptr dptr, CUstream s),       \
	  (dptr, s), -)                                                                            \
	X(MEM, MemGetInfo_v2, MemGetInfo, 3020, PLAIN, (size_t *free_b, size_t *total_b),          \
	  (free_b, total_b), -)                                                                    \
	X(MEM, IpcGetMemHandle, IpcGetMemHandle, 4010, PLAIN,                                      \
	  (CUipcMemHandle *handle, CUdeviceptr dptr), (handle, dptr), -)                           \
	X(MEM, MemGetAddressRange_v2, MemGetAddressRange, 3020, PLAIN,                             \
	  (CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr), (pbase, psize, dptr), -)          \
	X(MEM, MemCreate, MemCreate, 10020, PLAIN,                                                 \
	  (CUmemGenericAllocationHandle *h, size_t bytes, const CUmemAllocationProp *prop,         \
	   unsigned long long flags),                                                              \
	  (h, bytes, prop, flags), -)                                                              \
	X(MEM, MemRelease, MemRelease, 10020, PLAIN, (CUmemGenericAllocationHandle h), (h), -)     \
	X(MEM, MemAllocManaged, MemAllocManaged, 6000, PLAIN,                                      \
	  (CUdeviceptr *dptr, size_t bytes, unsigned flags), (dptr, bytes, flags), -)              \
	X(MEM, MemAllocPitch_v2, MemAllocPitch, 3020, PLAIN,                                       \
	  (CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem),          \
	  (dptr, pitch, width, height, elem), -)                                                   \
	X(CAPTURE, StreamBeginCapture_v2, StreamBeginCapture, 10010, PLAIN,                        \
	  (CUstream s, CUstreamCaptureMode mode), (s, mode), -)                                    \
	X(CAPTURE, StreamBeginCapture_v2_ptsz, StreamBeginCapture, 10010, PTSZ,                    \
	  (CUstream s, CUstreamCaptureMode mode), (s, mode), -)                                    \
	X(CAPTURE, StreamBeginCaptureToGraph, StreamBeginCaptureToGraph, 12030, PLAIN,             \
	  (CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,  \
	   CUstreamCaptureMode mode),                                                              \
	  (s, g, deps, data, n, mode), -)                                                          \
	X(CAPTURE, StreamBeginCaptureToGraph_ptsz, StreamBeginCaptureToGraph, 12030, PTSZ,         \
	  (CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,  \
	   CUstreamCaptureMode mode),                                                              \
	  (s, g, deps, data, n, mode), -)                                                          \
	X(CAPTURE, StreamEndCapture, StreamEndCapture, 10000, PLAIN, (CUstream s, CUgraph *g),     \
	  (s, g), -)                                                                               \
	X(CAPTURE, StreamEndCapture_ptsz, StreamEndCapture, 10000, PTSZ,                           \
	  (CUstream s, CUgraph *g), (s, g), -)                                                     \
	X(GRAPH, GraphInstantiate_v2, GraphInstantiate, 11000, PLAIN,                              \
	  (CUgraphExec *exec, CUgraph g, CUgraphNode *err, char *log, size_t len),                 \
	  (exec, g, err, log, len), -)                                                             \
	X(GRAPH, GraphInstantiateWithFlags, GraphInstantiateWithFlags, 11040, PLAIN,               \
	  (CUgraphExec *exec, CUgraph g, unsigned long long flags), (exec, g, flags), -)           \
	X(GRAPH, GraphInstantiateWithParams, GraphInstantiateWithParams, 12000, PLAIN,             \
	  (CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *params),                   \
	  (exec, g, params), -)                                                                    \
	X(GRAPH, GraphInstantiateWithParams_ptsz, GraphInstantiateWithParams, 12000, PTSZ,         \
	  (CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *params),                   \
	  (exec, g, params), -)                                                                    \
	X(GRAPH, GraphExecDestroy, GraphExecDestroy, 10000, PLAIN, (CUgraphExec exec), (exec), -)  \
	X(GRAPH, GraphDestroy, GraphDestroy, 10000, PLAIN, (CUgraph g), (g), -)                    \
	X(GRAPH, GraphClone, GraphClone, 10000, PLAIN, (CUgraph *clone, CUgraph g), (clone, g),    \
	  -)                                                                                       \
	X(GRAPH, GraphAddChildGraphNode, GraphAddChildGraphNode, 10000, PLAIN,                     \
	  (CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUgraph child),        \
	  (node, g, deps, n, child), -)                                                            \
	X(GRAPH, GraphExecChildGraphNodeSetParams, GraphExecChildGraphNodeSetParams, 11010,        \
	  PLAIN, (CUgraphExec exec, CUgraphNode node, CUgraph child), (exec, node, child), -)      \
	X(GRAPH, GraphExecUpdate_v2, GraphExecUpdate, 12000, PLAIN,                                \
	  (CUgraphExec exec, CUgraph g, CUgraphExecUpdateResultInfo *info), (exec, g, info), -)    \
	X(CONTEXT, DevicePrimaryCtxReset_v2, DevicePrimaryCtxReset, 11000, PLAIN, (CUdevice dev),  \
	  (dev), -)                                                                                \
	X(CONTEXT, DevicePrimaryCtxRelease_v2, DevicePrimaryCtxRelease, 11000, PLAIN,              \
	  (CUdevice dev), (dev), -)                                                                \
	X(CONTEXT, CtxCreate_v2, CtxCreate, 3020, PLAIN,                                           \
	  (CUcontext *c, unsigned flags, CUdevice dev), (c, flags, dev), -)                        \
	X(CONTEXT, CtxCreate_v3, CtxCreate, 11040, PLAIN,                                          \
	  (CUcontext *c, CUexecAffinityParam *params, int n, unsigned flags, CUdevice dev),        \
	  (c, params, n, flags, dev), -)                                                           \
	X(CONTEXT, CtxCreate_v4, CtxCreate, 12050, PLAIN,                                          \
	  (CUcontext *c, CUctxCreateParams *params, unsigned flags, CUdevice dev),                 \
	  (c, params, flags, dev), -)                                                              \
	X(CONTEXT, CtxDestroy_v2, CtxDestroy, 4000, PLAIN, (CUcontext c), (c), -)                  \
	X(CONTEXT, CtxSetCurrent, CtxSetCurrent, 4000, PLAIN, (CUcontext c), (c), -)               \
	X(CONTEXT, CtxPushCurrent_v2, CtxPushCurrent, 4000, PLAIN, (CUcontext c), (c), -)

/* Every driver function that queues GPU work on a stream, in each flavour the driver exports. A
 * plain flavour's NULL (or CU_STREAM_LEGACY) is the legacy default stream, CU_STREAM_PER_THREAD
 * the thread's own; a _ptsz/_ptds flavour's NULL is the thread's per-thread default stream. */
#define GP_DRIVER_WORK(X)                                                                          \
	GP_DRIVER_WORK_LAUNCHES(X)                                                                 \
	GP_DRIVER_WORK_COPIES(X)                                                                   \
	GP_DRIVER_WORK_MEMSETS(X)                                                                  \
	GP_DRIVER_WORK_MEMOPS(X)                                                                   \
	GP_DRIVER_WORK_12080(X)                                                                    \
	GP_DRIVER_WORK_13000(X)

/* Kernels, host functions and graphs. cuLaunchCooperativeKernelMultiDevice queues one kernel on
 * each of several devices' streams: counted as the per-thread default stream, which notes both
 * default streams (over several devices the work is not in one order anyway). */
#define GP_DRIVER_WORK_LAUNCHES(X)                                                                 \
	X(WORK, LaunchKernel, LaunchKernel, 4000, PLAIN,                                           \
	  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,          \
	   unsigned bz, unsigned shm, CUstream s, void **params, void **extra),                    \
	  (f, gx, gy, gz, bx, by, bz, shm, s, params, extra), s)                                   \
	X(WORK, LaunchKernel_ptsz, LaunchKernel, 7000, PTSZ,                                       \
	  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,          \
	   unsigned bz, unsigned shm, CUstream s, void **params, void **extra),                    \
	  (f, gx, gy, gz, bx, by, bz, shm, s, params, extra), s)                                   \
	X(WORK, LaunchKernelEx, LaunchKernelEx, 11060, PLAIN,                                      \
	  (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),               \
	  (config, f, params, extra), config->hStream)                                             \
	X(WORK, LaunchKernelEx_ptsz, LaunchKernelEx, 11060, PTSZ,                                  \
	  (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),               \
	  (config, f, params, extra), config->hStream)                                             \
	X(WORK, LaunchCooperativeKernel, LaunchCooperativeKernel, 9000, PLAIN,                     \
	  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,          \
	   unsigned bz, unsigned shm, CUstream s, void **params),                                  \
	  (f, gx, gy, gz, bx, by, bz, shm, s, params), s)                                          \
	X(WORK, LaunchCooperativeKernel_ptsz, LaunchCooperativeKernel, 9000, PTSZ,                 \
	  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,          \
	   unsigned bz, unsigned shm, CUstream s, void **params),                                  \
	  (f, gx, gy, gz, bx, by, bz, shm, s, params), s)                                          \
	X(WORK, LaunchCooperativeKernelMultiDevice, LaunchCooperativeKernelMultiDevice, 9000,      \
	  PLAIN, (CUDA_LAUNCH_PARAMS *list, unsigned n, unsigned flags), (list, n, flags),         \
	  CU_STREAM_PER_THREAD)                                                                    \
	X(WORK, Launch, Launch, 2000, PLAIN, (CUfunction f), (f), NULL)                            \
	X(WORK, LaunchGrid, LaunchGrid, 2000, PLAIN, (CUfunction f, int w, int h), (f, w, h),      \
	  NULL)                                                                                    \
	X(WORK, LaunchGridAsync, LaunchGridAsync, 2000, PLAIN,                                     \
	  (CUfunction f, int w, int h, CUstream s), (f, w, h, s), s)                               \
	X(WORK, LaunchHostFunc, LaunchHostFunc, 10000, PLAIN,                                      \
	  (CUstream s, CUhostFn fn, void *data), (s, fn, data), s)                                 \
	X(WORK, LaunchHostFunc_ptsz, LaunchHostFunc, 10000, PTSZ,                                  \
	  (CUstream s, CUhostFn fn, void *data), (s, fn, data), s)                                 \
	X(WORK, StreamAddCallback, StreamAddCallback, 5000, PLAIN,                                 \
	  (CUstream s, CUstreamCallback fn, void *data, unsigned flags), (s, fn, data, flags), s)  \
	X(WORK, StreamAddCallback_ptsz, StreamAddCallback, 7000, PTSZ,                             \
	  (CUstream s, CUstreamCallback fn, void *data, unsigned flags), (s, fn, data, flags), s)  \
	X(WORK, GraphLaunch, GraphLaunch, 10000, PLAIN, (CUgraphExec exec, CUstream s),            \
	  (exec, s), s)                                                                            \
	X(WORK, GraphLaunch_ptsz, GraphLaunch, 10000, PTSZ, (CUgraphExec exec, CUstream s),        \
	  (exec, s), s)

/* Copies: the synchronous ones go to the default stream (NULL). */
#define GP_DRIVER_WORK_COPIES(X)                                                                   \
	X(WORK, Memcpy, Memcpy, 4000, PLAIN, (CUdeviceptr dst, CUdeviceptr src, size_t n),         \
	  (dst, src, n), NULL)                                                                     \
	X(WORK, Memcpy_ptds, Memcpy, 7000, PTDS, (CUdeviceptr dst, CUdeviceptr src, size_t n),     \
	  (dst, src, n), NULL)                                                                     \
	X(WORK, MemcpyAsync, MemcpyAsync, 4000, PLAIN,                                             \
	  (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s), s)           \
	X(WORK, MemcpyAsync_ptsz, MemcpyAsync, 7000, PTSZ,                                         \
	  (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s), s)           \
	X(WORK, MemcpyPeer, MemcpyPeer, 4000, PLAIN,                                               \
	  (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n),            \
	  (dst, dctx, src, sctx, n), NULL)                                                         \
	X(WORK, MemcpyPeer_ptds, MemcpyPeer, 7000, PTDS,                                           \
	  (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n),            \
	  (dst, dctx, src, sctx, n), NULL)                                                         \
	X(WORK, MemcpyPeerAsync, MemcpyPeerAsync, 4000, PLAIN,                                     \
	  (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,             \
	   CUstream s),                                                                            \
	  (dst, dctx, src, sctx, n, s), s)                                                         \
	X(WORK, MemcpyPeerAsync_ptsz, MemcpyPeerAsync, 7000, PTSZ,                                 \
	  (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,             \
	   CUstream s),                                                                            \
	  (dst, dctx, src, sctx, n, s), s)                                                         \
	X(WORK, MemcpyHtoD_v2, MemcpyHtoD, 3020, PLAIN,                                            \
	  (CUdeviceptr dst, const void *src, size_t n), (dst, src, n), NULL)                       \
	X(WORK, MemcpyHtoD_v2_ptds, MemcpyHtoD, 7000, PTDS,                                        \
	  (CUdeviceptr dst, const void *src, size_t n), (dst, src, n), NULL)                       \
	X(WORK, MemcpyDtoH_v2, MemcpyDtoH, 3020, PLAIN, (void *dst, CUdeviceptr src, size_t n),    \
	  (dst, src, n), NULL)                                                                     \
	X(WORK, MemcpyDtoH_v2_ptds, MemcpyDtoH, 7000, PTDS,                                        \
	  (void *dst, CUdeviceptr src, size_t n), (dst, src, n), NULL)                             \
	X(WORK, MemcpyDtoD_v2, MemcpyDtoD, 3020, PLAIN,                                            \
	  (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), NULL)                       \
	X(WORK, MemcpyDtoD_v2_ptds, MemcpyDtoD, 7000, PTDS,                                        \
	  (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), NULL)                       \
	X(WORK, MemcpyDtoA_v2, MemcpyDtoA, 3020, PLAIN,                                            \
	  (CUarray dst, size_t off, CUdeviceptr src, size_t n), (dst, off, src, n), NULL)          \
	X(WORK, MemcpyDtoA_v2_ptds, MemcpyDtoA, 7000, PTDS,                                        \
	  (CUarray dst, size_t off, CUdeviceptr src, size_t n), (dst, off, src, n), NULL)          \
	X(WORK, MemcpyAtoD_v2, MemcpyAtoD, 3020, PLAIN,                                            \
	  (CUdeviceptr dst, CUarray src, size_t off, size_t n), (dst, src, off, n), NULL)          \
	X(WORK, MemcpyAtoD_v2_ptds, MemcpyAtoD, 7000, PTDS,                                        \
	  (CUdeviceptr dst, CUarray src, size_t off, size_t n), (dst, src, off, n), NULL)          \
	X(WORK, MemcpyHtoA_v2, MemcpyHtoA, 3020, PLAIN,                                            \
	  (CUarray dst, size_t off, const void *src, size_t n), (dst, off, src, n), NULL)          \
	X(WORK, MemcpyHtoA_v2_ptds, MemcpyHtoA, 7000, PTDS,                                        \
	  (CUarray dst, size_t off, const void *src, size_t n), (dst, off, src, n), NULL)          \
	X(WORK, MemcpyAtoH_v2, MemcpyAtoH, 3020, PLAIN,                                            \
	  (void *dst, CUarray src, size_t off, size_t n), (dst, src, off, n), NULL)                \
	X(WORK, MemcpyAtoH_v2_ptds, MemcpyAtoH, 7000, PTDS,                                        \
	  (void *dst, CUarray src, size_t off, size_t n), (dst, src, off, n), NULL)                \
	X(WORK, MemcpyAtoA_v2, MemcpyAtoA, 3020, PLAIN,                                            \
	  (CUarray dst, size_t doff, CUarray src, size_t soff, size_t n),                          \
	  (dst, doff, src, soff, n), NULL)                                                         \
	X(WORK, MemcpyAtoA_v2_ptds, MemcpyAtoA, 7000, PTDS,                                        \
	  (CUarray dst, size_t doff, CUarray src, size_t soff, size_t n),                          \
	  (dst, doff, src, soff, n), NULL)                                                         \
	X(WORK, MemcpyHtoDAsync_v2, MemcpyHtoDAsync, 3020, PLAIN,                                  \
	  (CUdeviceptr dst, const void *src, size_t n, CUstream s), (dst, src, n, s), s)           \
	X(WORK, MemcpyHtoDAsync_v2_ptsz, MemcpyHtoDAsync, 7000, PTSZ,                              \
	  (CUdeviceptr dst, const void *src, size_t n, CUstream s), (dst, src, n, s), s)           \
	X(WORK, MemcpyDtoHAsync_v2, MemcpyDtoHAsync, 3020, PLAIN,                                  \
	  (void *dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s), s)                 \
	X(WORK, MemcpyDtoHAsync_v2_ptsz, MemcpyDtoHAsync, 7000, PTSZ,                              \
	  (void *dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s), s)                 \
	X(WORK, MemcpyDtoDAsync_v2, MemcpyDtoDAsync, 3020, PLAIN,                                  \
	  (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s), s)           \
	X(WORK, MemcpyDtoDAsync_v2_ptsz, MemcpyDtoDAsync, 7000, PTSZ,                              \
	  (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s), s)           \
	X(WORK, MemcpyHtoAAsync_v2, MemcpyHtoAAsync, 3020, PLAIN,                                  \
	  (CUarray dst, size_t off, const void *src, size_t n, CUstream s),                        \
	  (dst, off, src, n, s), s)                                                                \
	X(WORK, MemcpyHtoAAsync_v2_ptsz, MemcpyHtoAAsync, 7000, PTSZ,                              \
	  (CUarray dst, size_t off, const void *src, size_t n, CUstream s),                        \
	  (dst, off, src, n, s), s)                                                                \
	X(WORK, MemcpyAtoHAsync_v2, MemcpyAtoHAsync, 3020, PLAIN,                                  \
	  (void *dst, CUarray src, size_t off, size_t n, CUstream s), (dst, src, off, n, s), s)    \
	X(WORK, MemcpyAtoHAsync_v2_ptsz, MemcpyAtoHAsync, 7000, PTSZ,                              \
	  (void *dst, CUarray src, size_t off, size_t n, CUstream s), (dst, src, off, n, s), s)    \
	X(WORK, Memcpy2D_v2, Memcpy2D, 3020, PLAIN, (const CUDA_MEMCPY2D *copy), (copy), NULL)     \
	X(WORK, Memcpy2D_v2_ptds, Memcpy2D, 7000, PTDS, (const CUDA_MEMCPY2D *copy), (copy),       \
	  NULL)                                                                                    \
	X(WORK, Memcpy2DUnaligned_v2, Memcpy2DUnaligned, 3020, PLAIN,                              \
	  (const CUDA_MEMCPY2D *copy), (copy), NULL)                                               \
	X(WORK, Memcpy2DUnaligned_v2_ptds, Memcpy2DUnaligned, 7000, PTDS,                          \
	  (const CUDA_MEMCPY2D *copy), (copy), NULL)                                               \
	X(WORK, Memcpy2DAsync_v2, Memcpy2DAsync, 3020, PLAIN,                                      \
	  (const CUDA_MEMCPY2D *copy, CUstream s), (copy, s), s)                                   \
	X(WORK, Memcpy2DAsync_v2_ptsz, Memcpy2DAsync, 7000, PTSZ,                                  \
	  (const CUDA_MEMCPY2D *copy, CUstream s), (copy, s), s)                                   \
	X(WORK, Memcpy3D_v2, Memcpy3D, 3020, PLAIN, (const CUDA_MEMCPY3D *copy), (copy), NULL)     \
	X(WORK, Memcpy3D_v2_ptds, Memcpy3D, 7000, PTDS, (const CUDA_MEMCPY3D *copy), (copy),       \
	  NULL)                                                                                    \
	X(WORK, Memcpy3DAsync_v2, Memcpy3DAsync, 3020, PLAIN,                                      \
	  (const CUDA_MEMCPY3D *copy, CUstream s), (copy, s), s)                                   \
	X(WORK, Memcpy3DAsync_v2_ptsz, Memcpy3DAsync, 7000, PTSZ,                                  \
	  (const CUDA_MEMCPY3D *copy, CUstream s), (copy, s), s)                                   \
	X(WORK, Memcpy3DPeer, Memcpy3DPeer, 4000, PLAIN, (const CUDA_MEMCPY3D_PEER *copy),         \
	  (copy), NULL)                                                                            \
	X(WORK, Memcpy3DPeer_ptds, Memcpy3DPeer, 7000, PTDS, (const CUDA_MEMCPY3D_PEER *copy),     \
	  (copy), NULL)                                                                            \
	X(WORK, Memcpy3DPeerAsync, Memcpy3DPeerAsync, 4000, PLAIN,                                 \
	  (const CUDA_MEMCPY3D_PEER *copy, CUstream s), (copy, s), s)                              \
	X(WORK, Memcpy3DPeerAsync_ptsz, Memcpy3DPeerAsync, 7000, PTSZ,                             \
	  (const CUDA_MEMCPY3D_PEER *copy, CUstream s), (copy, s), s)

/* Memsets: the synchronous ones go to the default stream (NULL). */
#define GP_DRIVER_WORK_MEMSETS(X)                                                                  \
	X(WORK, MemsetD8_v2, MemsetD8, 3020, PLAIN, (CUdeviceptr dst, unsigned char v, size_t n),  \
	  (dst, v, n), NULL)                                                                       \
	X(WORK, MemsetD8_v2_ptds, MemsetD8, 7000, PTDS,                                            \
	  (CUdeviceptr dst, unsigned char v, size_t n), (dst, v, n), NULL)                         \
	X(WORK, MemsetD16_v2, MemsetD16, 3020, PLAIN,                                              \
	  (CUdeviceptr dst, unsigned short v, size_t n), (dst, v, n), NULL)                        \
	X(WORK, MemsetD16_v2_ptds, MemsetD16, 7000, PTDS,                                          \
	  (CUdeviceptr dst, unsigned short v, size_t n), (dst, v, n), NULL)                        \
	X(WORK, MemsetD32_v2, MemsetD32, 3020, PLAIN, (CUdeviceptr dst, unsigned v, size_t n),     \
	  (dst, v, n), NULL)                                                                       \
	X(WORK, MemsetD32_v2_ptds, MemsetD32, 7000, PTDS, (CUdeviceptr dst, unsigned v, size_t n), \
	  (dst, v, n), NULL)                                                                       \
	X(WORK, MemsetD2D8_v2, MemsetD2D8, 3020, PLAIN,                                            \
	  (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h),                    \
	  (dst, pitch, v, w, h), NULL)                                                             \
	X(WORK, MemsetD2D8_v2_ptds, MemsetD2D8, 7000, PTDS,                                        \
	  (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h),                    \
	  (dst, pitch, v, w, h), NULL)                                                             \
	X(WORK, MemsetD2D16_v2, MemsetD2D16, 3020, PLAIN,                                          \
	  (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h),                   \
	  (dst, pitch, v, w, h), NULL)                                                             \
	X(WORK, MemsetD2D16_v2_ptds, MemsetD2D16, 7000, PTDS,                                      \
	  (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h),                   \
	  (dst, pitch, v, w, h), NULL)                                                             \
	X(WORK, MemsetD2D32_v2, MemsetD2D32, 3020, PLAIN,                                          \
	  (CUdeviceptr dst, size_t pitch, unsigned v, size_t w, size_t h),                         \
	  (dst, pitch, v, w, h), NULL)                                                             \
	X(WORK, MemsetD2D32_v2_ptds, MemsetD2D32, 7000, PTDS,                                      \
	  (CUdeviceptr dst, size_t pitch, unsigned v, size_t w, size_t h),                         \
	  (dst, pitch, v, w, h), NULL)                                                             \
	X(WORK, MemsetD8Async, MemsetD8Async, 3020, PLAIN,                                         \
	  (CUdeviceptr dst, unsigned char v, size_t n, CUstream s), (dst, v, n, s), s)             \
	X(WORK, MemsetD8Async_ptsz, MemsetD8Async, 7000, PTSZ,                                     \
	  (CUdeviceptr dst, unsigned char v, size_t n, CUstream s), (dst, v, n, s), s)             \
	X(WORK, MemsetD16Async, MemsetD16Async, 3020, PLAIN,                                       \
	  (CUdeviceptr dst, unsigned short v, size_t n, CUstream s), (dst, v, n, s), s)            \
	X(WORK, MemsetD16Async_ptsz, MemsetD16Async, 7000, PTSZ,                                   \
	  (CUdeviceptr dst, unsigned short v, size_t n, CUstream s), (dst, v, n, s), s)            \
	X(WORK, MemsetD32Async, MemsetD32Async, 3020, PLAIN,                                       \
	  (CUdeviceptr dst, unsigned v, size_t n, CUstream s), (dst, v, n, s), s)                  \
	X(WORK, MemsetD32Async_ptsz, MemsetD32Async, 7000, PTSZ,                                   \
	  (CUdeviceptr dst, unsigned v, size_t n, CUstream s), (dst, v, n, s), s)                  \
	X(WORK, MemsetD2D8Async, MemsetD2D8Async, 3020, PLAIN,                                     \
	  (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s),        \
	  (dst, pitch, v, w, h, s), s)                                                             \
	X(WORK, MemsetD2D8Async_ptsz, MemsetD2D8Async, 7000, PTSZ,                                 \
	  (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s),        \
	  (dst, pitch, v, w, h, s), s)                                                             \
	X(WORK, MemsetD2D16Async, MemsetD2D16Async, 3020, PLAIN,                                   \
	  (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s),       \
	  (dst, pitch, v, w, h, s), s)                                                             \
	X(WORK, MemsetD2D16Async_ptsz, MemsetD2D16Async, 7000, PTSZ,                               \
	  (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s),       \
	  (dst, pitch, v, w, h, s), s)                                                             \
	X(WORK, MemsetD2D32Async, MemsetD2D32Async, 3020, PLAIN,                                   \
	  (CUdeviceptr dst, size_t pitch, unsigned v, size_t w, size_t h, CUstream s),             \
	  (dst, pitch, v, w, h, s), s)                                                             \
	X(WORK, MemsetD2D32Async_ptsz, MemsetD2D32Async, 7000, PTSZ,                               \
	  (CUdeviceptr dst, size_t pitch, unsigned v, size_t w, size_t h, CUstream s),             \
	  (dst, pitch, v, w, h, s), s)

/* Stream memory operations (the first versions and the second ones, of CUDA 11.7, with the same
 * parameters) and prefetches of managed memory. */
#define GP_DRIVER_WORK_MEMOPS(X)                                                                   \
	X(WORK, StreamWriteValue32, StreamWriteValue32, 8000, PLAIN,                               \
	  (CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWriteValue32_ptsz, StreamWriteValue32, 8000, PTSZ,                           \
	  (CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWriteValue32_v2, StreamWriteValue32, 11070, PLAIN,                           \
	  (CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWriteValue32_v2_ptsz, StreamWriteValue32, 11070, PTSZ,                       \
	  (CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWaitValue32, StreamWaitValue32, 8000, PLAIN,                                 \
	  (CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWaitValue32_ptsz, StreamWaitValue32, 8000, PTSZ,                             \
	  (CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWaitValue32_v2, StreamWaitValue32, 11070, PLAIN,                             \
	  (CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWaitValue32_v2_ptsz, StreamWaitValue32, 11070, PTSZ,                         \
	  (CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWriteValue64, StreamWriteValue64, 9000, PLAIN,                               \
	  (CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWriteValue64_ptsz, StreamWriteValue64, 9000, PTSZ,                           \
	  (CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWriteValue64_v2, StreamWriteValue64, 11070, PLAIN,                           \
	  (CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWriteValue64_v2_ptsz, StreamWriteValue64, 11070, PTSZ,                       \
	  (CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWaitValue64, StreamWaitValue64, 9000, PLAIN,                                 \
	  (CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWaitValue64_ptsz, StreamWaitValue64, 9000, PTSZ,                             \
	  (CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWaitValue64_v2, StreamWaitValue64, 11070, PLAIN,                             \
	  (CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamWaitValue64_v2_ptsz, StreamWaitValue64, 11070, PTSZ,                         \
	  (CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned flags), (s, addr, v, flags), s)    \
	X(WORK, StreamBatchMemOp, StreamBatchMemOp, 8000, PLAIN,                                   \
	  (CUstream s, unsigned n, CUstreamBatchMemOpParams *ops, unsigned flags),                 \
	  (s, n, ops, flags), s)                                                                   \
	X(WORK, StreamBatchMemOp_ptsz, StreamBatchMemOp, 8000, PTSZ,                               \
	  (CUstream s, unsigned n, CUstreamBatchMemOpParams *ops, unsigned flags),                 \
	  (s, n, ops, flags), s)                                                                   \
	X(WORK, StreamBatchMemOp_v2, StreamBatchMemOp, 11070, PLAIN,                               \
	  (CUstream s, unsigned n, CUstreamBatchMemOpParams *ops, unsigned flags),                 \
	  (s, n, ops, flags), s)                                                                   \
	X(WORK, StreamBatchMemOp_v2_ptsz, StreamBatchMemOp, 11070, PTSZ,                           \
	  (CUstream s, unsigned n, CUstreamBatchMemOpParams *ops, unsigned flags),                 \
	  (s, n, ops, flags), s)                                                                   \
	X(WORK, MemPrefetchAsync, MemPrefetchAsync, 8000, PLAIN,                                   \
	  (CUdeviceptr p, size_t n, CUdevice dev, CUstream s), (p, n, dev, s), s)                  \
	X(WORK, MemPrefetchAsync_ptsz, MemPrefetchAsync, 8000, PTSZ,                               \
	  (CUdeviceptr p, size_t n, CUdevice dev, CUstream s), (p, n, dev, s), s)                  \
	X(WORK, MemPrefetchAsync_v2, MemPrefetchAsync, 12020, PLAIN,                               \
	  (CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s),                \
	  (p, n, loc, flags, s), s)                                                                \
	X(WORK, MemPrefetchAsync_v2_ptsz, MemPrefetchAsync, 12020, PTSZ,                           \
	  (CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s),                \
	  (p, n, loc, flags, s), s)

/* Rows whose types only newer headers declare: batched copies and decompression (CUDA 12.6,
 * 12.8), and the second batched copies and batched prefetches and discards (CUDA 13.0). */
#if CUDA_VERSION >= 12080
#define GP_DRIVER_WORK_12080(X)                                                                    \
	X(WORK, MemcpyBatchAsync, MemcpyBatchAsync, 12080, PLAIN,                                  \
	  (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,                      \
	   CUmemcpyAttributes *attrs, size_t *attr_idxs, size_t nattrs, size_t *fail_idx,          \
	   CUstream s),                                                                            \
	  (dsts, srcs, sizes, count, attrs, attr_idxs, nattrs, fail_idx, s), s)                    \
	X(WORK, MemcpyBatchAsync_ptsz, MemcpyBatchAsync, 12080, PTSZ,                              \
	  (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,                      \
	   CUmemcpyAttributes *attrs, size_t *attr_idxs, size_t nattrs, size_t *fail_idx,          \
	   CUstream s),                                                                            \
	  (dsts, srcs, sizes, count, attrs, attr_idxs, nattrs, fail_idx, s), s)                    \
	X(WORK, Memcpy3DBatchAsync, Memcpy3DBatchAsync, 12080, PLAIN,                              \
	  (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail_idx, unsigned long long flags,      \
	   CUstream s),                                                                            \
	  (n, ops, fail_idx, flags, s), s)                                                         \
	X(WORK, Memcpy3DBatchAsync_ptsz, Memcpy3DBatchAsync, 12080, PTSZ,                          \
	  (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail_idx, unsigned long long flags,      \
	   CUstream s),                                                                            \
	  (n, ops, fail_idx, flags, s), s)                                                         \
	X(WORK, MemBatchDecompressAsync, MemBatchDecompressAsync, 12060, PLAIN,                    \
	  (CUmemDecompressParams *params, size_t count, unsigned flags, size_t *err_idx,           \
	   CUstream s),                                                                            \
	  (params, count, flags, err_idx, s), s)                                                   \
	X(WORK, MemBatchDecompressAsync_ptsz, MemBatchDecompressAsync, 12060, PTSZ,                \
	  (CUmemDecompressParams *params, size_t count, unsigned flags, size_t *err_idx,           \
	   CUstream s),                                                                            \
	  (params, count, flags, err_idx, s), s)
#else
#define GP_DRIVER_WORK_12080(X)
#endif
#if CUDA_VERSION >= 13000
#define GP_DRIVER_WORK_13000(X)                                                                    \
	X(WORK, MemcpyBatchAsync_v2, MemcpyBatchAsync, 13000, PLAIN,                               \
	  (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,                      \
	   CUmemcpyAttributes *attrs, size_t *attr_idxs, size_t nattrs, CUstream s),               \
	  (dsts, srcs, sizes, count, attrs, attr_idxs, nattrs, s), s)                              \
	X(WORK, MemcpyBatchAsync_v2_ptsz, MemcpyBatchAsync, 13000, PTSZ,                           \
	  (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,                      \
	   CUmemcpyAttributes *attrs, size_t *attr_idxs, size_t nattrs, CUstream s),               \
	  (dsts, srcs, sizes, count, attrs, attr_idxs, nattrs, s), s)                              \
	X(WORK, Memcpy3DBatchAsync_v2, Memcpy3DBatchAsync, 13000, PLAIN,                           \
	  (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags, CUstream s),           \
	  (n, ops, flags, s), s)                                                                   \
	X(WORK, Memcpy3DBatchAsync_v2_ptsz, Memcpy3DBatchAsync, 13000, PTSZ,                       \
	  (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags, CUstream s),           \
	  (n, ops, flags, s), s)                                                                   \
	X(WORK, MemPrefetchBatchAsync, MemPrefetchBatchAsync, 13000, PLAIN,                        \
	  (CUdeviceptr *ptrs, size_t *sizes, size_t count, CUmemLocation *locs,                    \
	   size_t *loc_idxs, size_t nlocs, unsigned long long flags, CUstream s),                  \
	  (ptrs, sizes, count, locs, loc_idxs, nlocs, flags, s), s)                                \
	X(WORK, MemPrefetchBatchAsync_ptsz, MemPrefetchBatchAsync, 13000, PTSZ,                    \
	  (CUdeviceptr *ptrs, size_t *sizes, size_t count, CUmemLocation *locs,                    \
	   size_t *loc_idxs, size_t nlocs, unsigned long long flags, CUstream s),                  \
	  (ptrs, sizes, count, locs, loc_idxs, nlocs, flags, s), s)                                \
	X(WORK, MemDiscardBatchAsync, MemDiscardBatchAsync, 13000, PLAIN,                          \
	  (CUdeviceptr *ptrs, size_t *sizes, size_t count, unsigned long long flags,               \
	   CUstream s),                                                                            \
	  (ptrs, sizes, count, flags, s), s)                                                       \
	X(WORK, MemDiscardBatchAsync_ptsz, MemDiscardBatchAsync, 13000, PTSZ,                      \
	  (CUdeviceptr *ptrs, size_t *sizes, size_t count, unsigned long long flags,               \
	   CUstream s),                                                                            \
	  (ptrs, sizes, count, flags, s), s)                                                       \
	X(WORK, MemDiscardAndPrefetchBatchAsync, MemDiscardAndPrefetchBatchAsync, 13000, PLAIN,    \
	  (CUdeviceptr *ptrs, size_t *sizes, size_t count, CUmemLocation *locs,                    \
	   size_t *loc_idxs, size_t nlocs, unsigned long long flags, CUstream s),                  \
	  (ptrs, sizes, count, locs, loc_idxs, nlocs, flags, s), s)                                \
	X(WORK, MemDiscardAndPrefetchBatchAsync_ptsz, MemDiscardAndPrefetchBatchAsync, 13000,      \
	  PTSZ,                                                                                    \
	  (CUdeviceptr *ptrs, size_t *sizes, size_t count, CUmemLocation *locs,                    \
	   size_t *loc_idxs, size_t nlocs, unsigned long long flags, CUstream s),                  \
	  (ptrs, sizes, count, locs, loc_idxs, nlocs, flags, s), s)
#else
#define GP_DRIVER_WORK_13000(X)
#endif

/* The driver's checkpoint API (CUDA 12.8, driver 570): auto-suspend parks the process itself
 * with it, on its own pid (park.c). A driver without it leaves these NULL. */
#if CUDA_VERSION >= 12080
#define GP_DRIVER_OWN_12080(X)                                                                     \
	X(OWN, CheckpointProcessGetState, CheckpointProcessGetState, 12080, PLAIN,                 \
	  (int pid, CUprocessState *state), (pid, state), -)                                       \
	X(OWN, CheckpointProcessGetRestoreThreadId, CheckpointProcessGetRestoreThreadId, 12080,    \
	  PLAIN, (int pid, int *tid), (pid, tid), -)                                               \
	X(OWN, CheckpointProcessLock, CheckpointProcessLock, 12080, PLAIN,                         \
	  (int pid, CUcheckpointLockArgs *args), (pid, args), -)                                   \
	X(OWN, CheckpointProcessCheckpoint, CheckpointProcessCheckpoint, 12080, PLAIN,             \
	  (int pid, CUcheckpointCheckpointArgs *args), (pid, args), -)                             \
	X(OWN, CheckpointProcessRestore, CheckpointProcessRestore, 12080, PLAIN,                   \
	  (int pid, CUcheckpointRestoreArgs *args), (pid, args), -)                                \
	X(OWN, CheckpointProcessUnlock, CheckpointProcessUnlock, 12080, PLAIN,                     \
	  (int pid, CUcheckpointUnlockArgs *args), (pid, args), -)
#else
#define GP_DRIVER_OWN_12080(X)
#endif

/* The calls the shim makes itself (fences, contexts, VMM-backed blocks, the door's lookups). */
#define GP_DRIVER_OWN(X)                                                                           \
	X(OWN, GetProcAddress_v2, GetProcAddress, 12000, PLAIN,                                    \
	  (const char *sym, void **pfn, int version, cuuint64_t flags,                             \
	   CUdriverProcAddressQueryResult *status),                                                \
	  (sym, pfn, version, flags, status), -)                                                   \
	X(OWN, GetProcAddress, GetProcAddress, 11030, PLAIN,                                       \
	  (const char *sym, void **pfn, int version, cuuint64_t flags),                            \
	  (sym, pfn, version, flags), -)                                                           \
	X(OWN, DeviceGetCount, DeviceGetCount, 2000, PLAIN, (int *n), (n), -)                      \
	X(OWN, DeviceGetUuid_v2, DeviceGetUuid, 11040, PLAIN, (CUuuid *uuid, CUdevice dev),        \
	  (uuid, dev), -)                                                                          \
	X(OWN, DeviceGetAttribute, DeviceGetAttribute, 2000, PLAIN,                                \
	  (int *v, CUdevice_attribute attr, CUdevice dev), (v, attr, dev), -)                      \
	X(OWN, DeviceCanAccessPeer, DeviceCanAccessPeer, 4000, PLAIN,                              \
	  (int *can, CUdevice dev, CUdevice peer), (can, dev, peer), -)                            \
	X(OWN, DevicePrimaryCtxGetState, DevicePrimaryCtxGetState, 7000, PLAIN,                    \
	  (CUdevice dev, unsigned *flags, int *active), (dev, flags, active), -)                   \
	X(OWN, DevicePrimaryCtxRetain, DevicePrimaryCtxRetain, 7000, PLAIN,                        \
	  (CUcontext *c, CUdevice dev), (c, dev), -)                                               \
	X(OWN, CtxGetCurrent, CtxGetCurrent, 4000, PLAIN, (CUcontext *c), (c), -)                  \
	X(OWN, CtxGetDevice, CtxGetDevice, 2000, PLAIN, (CUdevice *dev), (dev), -)                 \
	X(OWN, CtxPopCurrent_v2, CtxPopCurrent, 4000, PLAIN, (CUcontext *c), (c), -)               \
	X(OWN, CtxSynchronize, CtxSynchronize, 2000, PLAIN, (void), (), -)                         \
	X(OWN, ThreadExchangeStreamCaptureMode, ThreadExchangeStreamCaptureMode, 10010, PLAIN,     \
	  (CUstreamCaptureMode *mode), (mode), -)                                                  \
	X(OWN, EventCreate, EventCreate, 2000, PLAIN, (CUevent *e, unsigned flags), (e, flags),    \
	  -)                                                                                       \
	X(OWN, EventDestroy_v2, EventDestroy, 4000, PLAIN, (CUevent e), (e), -)                    \
	X(OWN, EventRecord, EventRecord, 2000, PLAIN, (CUevent e, CUstream s), (e, s), -)          \
	X(OWN, EventQuery, EventQuery, 2000, PLAIN, (CUevent e), (e), -)                           \
	X(OWN, EventSynchronize, EventSynchronize, 2000, PLAIN, (CUevent e), (e), -)               \
	X(OWN, StreamQuery, StreamQuery, 2000, PLAIN, (CUstream s), (s), -)                        \
	X(OWN, StreamWaitEvent, StreamWaitEvent, 3020, PLAIN,                                      \
	  (CUstream s, CUevent e, unsigned flags), (s, e, flags), -)                               \
	X(OWN, StreamSynchronize, StreamSynchronize, 2000, PLAIN, (CUstream s), (s), -)            \
	X(OWN, MemHostAlloc, MemHostAlloc, 2020, PLAIN, (void **p, size_t bytes, unsigned flags),  \
	  (p, bytes, flags), -)                                                                    \
	X(OWN, MemFreeHost, MemFreeHost, 2000, PLAIN, (void *p), (p), -)                           \
	X(OWN, MemAddressReserve, MemAddressReserve, 10020, PLAIN,                                 \
	  (CUdeviceptr *p, size_t bytes, size_t align, CUdeviceptr addr,                           \
	   unsigned long long flags),                                                              \
	  (p, bytes, align, addr, flags), -)                                                       \
	X(OWN, MemAddressFree, MemAddressFree, 10020, PLAIN, (CUdeviceptr p, size_t bytes),        \
	  (p, bytes), -)                                                                           \
	X(OWN, MemMap, MemMap, 10020, PLAIN,                                                       \
	  (CUdeviceptr p, size_t bytes, size_t off, CUmemGenericAllocationHandle h,                \
	   unsigned long long flags),                                                              \
	  (p, bytes, off, h, flags), -)                                                            \
	X(OWN, MemUnmap, MemUnmap, 10020, PLAIN, (CUdeviceptr p, size_t bytes), (p, bytes), -)     \
	X(OWN, MemSetAccess, MemSetAccess, 10020, PLAIN,                                           \
	  (CUdeviceptr p, size_t bytes, const CUmemAccessDesc *desc, size_t n),                    \
	  (p, bytes, desc, n), -)                                                                  \
	X(OWN, MemGetAllocationGranularity, MemGetAllocationGranularity, 10020, PLAIN,             \
	  (size_t *g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option),   \
	  (g, prop, option), -)                                                                    \
	X(OWN, DeviceGetDefaultMemPool, DeviceGetDefaultMemPool, 11020, PLAIN,                     \
	  (CUmemoryPool *pool, CUdevice dev), (pool, dev), -)                                      \
	X(OWN, MemPoolGetAttribute, MemPoolGetAttribute, 11020, PLAIN,                             \
	  (CUmemoryPool pool, CUmemPool_attribute attr, void *value), (pool, attr, value), -)      \
	GP_DRIVER_OWN_12080(X)

/* Our driver entry points (prototypes, identity list), and every row (the real table). */
#define GP_DRIVER_OURS(X) GP_DRIVER_HOOKS(X) GP_DRIVER_WORK(X)
#define GP_DRIVER_ALL(X) GP_DRIVER_OURS(X) GP_DRIVER_OWN(X)

/* The shared runtime's functions, found by name ("cuda" name) in the runtime the program has:
 * X(name, params). GP_RUNTIME_DOOR: an entry point of ours stands in front of it (runtime.c),
 * exported unversioned; GP_RUNTIME_OWN: the shim only calls it. */
#define GP_RUNTIME_DOOR(X)                                                                         \
	X(Malloc, (void **ptr, size_t size))                                                       \
	X(Free, (void *ptr))                                                                       \
	X(FreeAsync, (void *ptr, cudaStream_t s))                                                  \
	X(FreeAsync_ptsz, (void *ptr, cudaStream_t s))                                             \
	X(IpcGetMemHandle, (cudaIpcMemHandle_t *handle, void *ptr))                                \
	X(MemGetInfo, (size_t *free_b, size_t *total_b))
#define GP_RUNTIME_OWN(X)                                                                          \
	X(GetDevice, (int *dev))                                                                   \
	X(SetDevice, (int dev))                                                                    \
	X(GetDeviceCount, (int *n))                                                                \
	X(GetLastError, (void))                                                                    \
	X(DeviceSynchronize, (void))
#define GP_RUNTIME_ALL(X) GP_RUNTIME_DOOR(X) GP_RUNTIME_OWN(X)

#endif
