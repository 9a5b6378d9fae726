/* cu.c — the real driver's entry points, found once by their exact names in the libcuda.so.1
 * the process has loaded (RTLD_NOLOAD: the runtime or the program loaded it; we never do), and
 * the real dlsym behind our own. */
#define _GNU_SOURCE
#include "cu.h"
#include "log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

struct gp_cu gp_cu;

#define F(name) { "cu" #name, offsetof(struct gp_cu, name) }
static const struct {
	const char *sym;
	size_t off;
} fields[] = {
	F(MemAlloc_v2),
	F(MemFree_v2),
	F(MemGetInfo_v2),
	F(MemCreate),
	F(StreamCreate),
	F(StreamCreateWithPriority),
	F(StreamDestroy),
	F(StreamDestroy_v2),
	F(StreamBeginCapture_v2),
	F(StreamBeginCapture_v2_ptsz),
	F(StreamBeginCaptureToGraph),
	F(StreamBeginCaptureToGraph_ptsz),
	F(StreamEndCapture),
	F(StreamEndCapture_ptsz),
	F(GraphInstantiateWithFlags),
	F(GraphInstantiateWithParams),
	F(GraphInstantiateWithParams_ptsz),
	F(GraphExecDestroy),
	F(GraphDestroy),
	F(GraphClone),
	F(GraphAddChildGraphNode),
	F(GraphExecChildGraphNodeSetParams),
	F(GraphExecUpdate_v2),
	F(DevicePrimaryCtxReset_v2),
	F(DevicePrimaryCtxRelease_v2),
	F(GraphInstantiate_v2),
	F(CtxCreate_v2),
	F(CtxCreate_v3),
	F(CtxCreate_v4),
	F(CtxDestroy_v2),
	F(CtxSetCurrent),
	F(CtxPushCurrent_v2),
	F(LaunchKernel_ptsz),
	F(LaunchKernelEx_ptsz),
	F(LaunchCooperativeKernel_ptsz),
	F(LaunchHostFunc_ptsz),
	F(GraphLaunch_ptsz),
	F(Memcpy_ptds),
	F(MemcpyAsync_ptsz),
	F(MemcpyHtoD_v2_ptds),
	F(MemcpyDtoH_v2_ptds),
	F(MemcpyDtoD_v2_ptds),
	F(MemcpyHtoDAsync_v2_ptsz),
	F(MemcpyDtoHAsync_v2_ptsz),
	F(MemcpyDtoDAsync_v2_ptsz),
	F(MemsetD8_v2_ptds),
	F(MemsetD32_v2_ptds),
	F(MemsetD8Async_ptsz),
	F(MemsetD32Async_ptsz),
	F(GetProcAddress_v2),
	F(GetProcAddress),
	F(DeviceGetCount),
	F(DevicePrimaryCtxGetState),
	F(DevicePrimaryCtxRetain),
	F(CtxGetCurrent),
	F(CtxGetDevice),
	F(CtxPopCurrent_v2),
	F(CtxSynchronize),
	F(ThreadExchangeStreamCaptureMode),
	F(EventCreate),
	F(EventDestroy_v2),
	F(EventRecord),
	F(EventQuery),
	F(EventSynchronize),
	F(StreamQuery),
	F(StreamSynchronize),
};
#undef F

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int resolved;

static _Atomic(void *) real_dlsym; /* the next dlsym after ours (libc's, or another preload's) */

typedef void *(*dlsym_fn)(void *, const char *);

dlsym_fn gp_real_dlsym_fn(void)
{
	void *p = atomic_load_explicit(&real_dlsym, memory_order_acquire);
	dlsym_fn fn;

	if (p == NULL) {
		/* Ours is the global dlsym: the real one is found by version, never by dlsym. */
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (p == NULL)
			p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		if (p == NULL)
			p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
		atomic_store_explicit(&real_dlsym, p, memory_order_release);
	}
	memcpy(&fn, &p, sizeof(fn));
	return fn;
}

void *gp_real_dlsym(void *handle, const char *name)
{
	dlsym_fn fn = gp_real_dlsym_fn();

	return fn != NULL ? fn(handle, name) : NULL;
}

/* Any object of ours, to find our own base address. */
static const char anchor;

int gp_is_ours(const void *p)
{
	Dl_info mine, theirs;

	if (dladdr(&anchor, &mine) == 0 || dladdr(p, &theirs) == 0)
		return 0;
	return mine.dli_fbase == theirs.dli_fbase;
}

int gp_cu_resolve(void)
{
	void *h;

	if (atomic_load_explicit(&resolved, memory_order_acquire))
		return 0;
	pthread_mutex_lock(&lock);
	if (atomic_load(&resolved))
		goto out;
	h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL) {
		(void)dlerror();
		goto out;
	}
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		void *p = gp_real_dlsym(h, fields[i].sym);
		if (p != NULL && !gp_is_ours(p))
			memcpy((char *)&gp_cu + fields[i].off, &p, sizeof(p));
	}
	(void)dlerror(); /* the names this driver lacks */
	dlclose(h); /* NOLOAD took a reference; the driver stays loaded by its owner */
	atomic_store_explicit(&resolved, 1, memory_order_release);
	gp_log(GP_LOG_DEBUG, "the driver's entry points are resolved");
out:
	pthread_mutex_unlock(&lock);
	return atomic_load(&resolved) ? 0 : -1;
}

int gp_cu_missing(void **slot, const char *name)
{
	static _Atomic int told;
	void *p;

	memcpy(&p, slot, sizeof(p));
	if (p != NULL)
		return 0;
	gp_cu_resolve();
	memcpy(&p, slot, sizeof(p));
	if (p == NULL)
		gp_log_capped(GP_LOG_WARN, &told, "%s: not found in the driver; the call fails", name);
	return p == NULL;
}
