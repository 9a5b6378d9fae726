/* real.c — finding the real runtime's entry points, once, into one typed table.
 * Never loads a runtime itself: it only looks at what the program already has. */
#define _GNU_SOURCE
#include "real.h"
#include "log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

struct gp_real gp_real;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int resolved_ok;

/* Is `p` inside this shared object? Then it is our own wrapper, not the runtime. */
static const char anchor; /* any object of ours, to find our own base address */

static int is_ours(void *p)
{
	Dl_info mine, theirs;

	if (dladdr(&anchor, &mine) == 0 || dladdr(p, &theirs) == 0)
		return 0;
	return mine.dli_fbase == theirs.dli_fbase;
}

void gp_dl_forget_error(void)
{
	(void)dlerror(); /* returns the message, marks it returned */
	(void)dlerror(); /* frees the record */
}

static void *find(const char *name)
{
	static const char *const sonames[] = { "libcudart.so.13", "libcudart.so.12" };
	void *p = dlsym(RTLD_NEXT, name);

	if (p != NULL && !is_ours(p))
		return p;
	for (size_t i = 0; i < sizeof(sonames) / sizeof(sonames[0]); i++) {
		void *h = dlopen(sonames[i], RTLD_LAZY | RTLD_NOLOAD);
		if (h == NULL)
			continue;
		p = dlsym(h, name);
		dlclose(h); /* NOLOAD took a reference; the library stays loaded by its owner */
		if (p != NULL && !is_ours(p))
			return p;
	}
	gp_dl_forget_error();
	return NULL;
}

/* dlsym returns an object pointer; copying its bytes is the portable way to a function pointer. */
#define RESOLVE(field, name)                                                                \
	do {                                                                                \
		void *sym_ = find(name);                                                    \
		memcpy(&gp_real.field, &sym_, sizeof(sym_));                                \
	} while (0)

static void resolve(void)
{
	RESOLVE(Malloc, "cudaMalloc");
	RESOLVE(Free, "cudaFree");
	RESOLVE(GetDevice, "cudaGetDevice");
	RESOLVE(SetDevice, "cudaSetDevice");
	RESOLVE(GetDeviceCount, "cudaGetDeviceCount");
	RESOLVE(GetLastError, "cudaGetLastError");
	RESOLVE(PeekAtLastError, "cudaPeekAtLastError");
	RESOLVE(MemGetInfo, "cudaMemGetInfo");
	RESOLVE(DeviceReset, "cudaDeviceReset");
	RESOLVE(DeviceSynchronize, "cudaDeviceSynchronize");
	RESOLVE(EventCreateWithFlags, "cudaEventCreateWithFlags");
	RESOLVE(EventRecord, "cudaEventRecord");
	RESOLVE(EventQuery, "cudaEventQuery");
	RESOLVE(EventSynchronize, "cudaEventSynchronize");
	RESOLVE(EventDestroy, "cudaEventDestroy");
	RESOLVE(StreamCreate, "cudaStreamCreate");
	RESOLVE(StreamCreateWithFlags, "cudaStreamCreateWithFlags");
	RESOLVE(StreamCreateWithPriority, "cudaStreamCreateWithPriority");
	RESOLVE(StreamDestroy, "cudaStreamDestroy");
	RESOLVE(StreamSynchronize, "cudaStreamSynchronize");
	RESOLVE(StreamQuery, "cudaStreamQuery");
	RESOLVE(StreamBeginCapture, "cudaStreamBeginCapture");
	RESOLVE(StreamBeginCaptureToGraph, "cudaStreamBeginCaptureToGraph");
	RESOLVE(StreamEndCapture, "cudaStreamEndCapture");
	RESOLVE(ThreadExchangeStreamCaptureMode, "cudaThreadExchangeStreamCaptureMode");
	RESOLVE(GraphInstantiate, "cudaGraphInstantiate");
	RESOLVE(GraphInstantiateWithFlags, "cudaGraphInstantiateWithFlags");
	RESOLVE(GraphInstantiateWithParams, "cudaGraphInstantiateWithParams");
	RESOLVE(GraphExecDestroy, "cudaGraphExecDestroy");
	RESOLVE(GraphDestroy, "cudaGraphDestroy");
	RESOLVE(GraphClone, "cudaGraphClone");
	RESOLVE(GraphAddChildGraphNode, "cudaGraphAddChildGraphNode");
	RESOLVE(GraphExecChildGraphNodeSetParams, "cudaGraphExecChildGraphNodeSetParams");
	RESOLVE(GraphExecUpdate, "cudaGraphExecUpdate");
	RESOLVE(LaunchKernel_ptsz, "cudaLaunchKernel_ptsz");
	RESOLVE(MemcpyAsync_ptsz, "cudaMemcpyAsync_ptsz");
	RESOLVE(MemsetAsync_ptsz, "cudaMemsetAsync_ptsz");
	RESOLVE(Memcpy_ptds, "cudaMemcpy_ptds");
	RESOLVE(Memset_ptds, "cudaMemset_ptds");
	resolved_ok = gp_real.Malloc != NULL && gp_real.Free != NULL;
}

int gp_real_resolve(void)
{
	pthread_once(&once, resolve);
	return resolved_ok ? 0 : -1;
}
