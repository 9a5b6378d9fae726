/* lookup.c — the real driver's entry points, found once by their exact names in the libcuda.so.1
 * the process has loaded (RTLD_NOLOAD: the runtime or the program loaded it; we never do), and
 * the real dlsym behind our own. */
#define _GNU_SOURCE
#include "lookup.h"
#include "log.h"
#include "state.h" /* gp_shim.door, gp_shim_early.door */

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
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
	F(IpcGetMemHandle),
	F(MemGetAddressRange_v2),
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
	F(MemRelease),
	F(MemAddressReserve),
	F(MemAddressFree),
	F(MemMap),
	F(MemUnmap),
	F(MemSetAccess),
	F(MemGetAllocationGranularity),
	F(DeviceGetAttribute),
	F(DeviceCanAccessPeer),
};
#undef F

typedef void *(*dlsym_fn)(void *, const char *);

/* Any object of ours, to find our own base address. */
static const char anchor;

struct walk {
	void *self;      /* our base address */
	int passed;      /* the walk is past our library */
	dlsym_fn libc;   /* libc's dlsym, to look into each object */
	void *found;
};

/* The first object after ours, in load order (the order of the global scope), that defines a
 * dlsym of its own: another preloaded hook, or libc. */
static int next_hook(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct walk *w = arg;
	Dl_info where;
	void *h, *p;

	(void)size;
	if (!w->passed) {
		w->passed = (void *)info->dlpi_addr == w->self;
		return 0;
	}
	if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0')
		return 0;
	h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL) {
		(void)dlerror();
		return 0;
	}
	p = w->libc(h, "dlsym");
	dlclose(h);
	if (p != NULL && dladdr(p, &where) != 0 && (uintptr_t)where.dli_fbase == info->dlpi_addr) {
		w->found = p;
		return 1;
	}
	return 0;
}

/* Ours is the global dlsym: the next one is found by version (libc's), then by walking the
 * objects loaded after us for a hook of another tool, so that it still sees what it wraps. */
static void *find_next_dlsym(void)
{
	struct walk w = { NULL, 0, NULL, NULL };
	Dl_info mine;
	void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");

	if (p == NULL)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	if (p == NULL)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
	if (p == NULL || dladdr(&anchor, &mine) == 0)
		return p;
	memcpy(&w.libc, &p, sizeof(p));
	w.self = mine.dli_fbase;
	dl_iterate_phdr(next_hook, &w);
	return w.found != NULL ? w.found : p;
}

void gp_cu_constructed(void)
{
	__atomic_store_n(&gp_shim_early.door.constructed, 1, __ATOMIC_RELEASE);
}

/* Before our constructor has run (a sanitizer's runtime starting, an earlier library's
 * constructor), walking the loaded objects is not safe yet (it calls dlopen, which such a
 * runtime may intercept before it is ready): libc's dlsym then, not remembered. Called from
 * gp_door_route, for every dlsym of the process, also while a sanitizer's runtime initialises
 * itself: uninstrumented, and no call into anything instrumented until our constructor ran. */
GP_NO_SANITIZE dlsym_fn gp_real_dlsym_fn(void)
{
	union {
		void *p;
		dlsym_fn fn;
	} u;

	u.p = __atomic_load_n(&gp_shim.door.real_dlsym, __ATOMIC_ACQUIRE);
	if (u.p != NULL)
		return u.fn;
	if (!__atomic_load_n(&gp_shim_early.door.constructed, __ATOMIC_ACQUIRE)) {
		u.p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (u.p == NULL)
			u.p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		if (u.p == NULL)
			u.p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
		return u.fn;
	}
	u.p = find_next_dlsym();
	__atomic_store_n(&gp_shim.door.real_dlsym, u.p, __ATOMIC_RELEASE);
	return u.fn;
}

void *gp_real_dlsym(void *handle, const char *name)
{
	dlsym_fn fn = gp_real_dlsym_fn();

	return fn != NULL ? fn(handle, name) : NULL;
}

/* This library's address range (gp_shim.door.self_lo, self_hi), found once: a driver lookup
 * asks whether a function is ours hundreds of times at start-up, and dladdr walks every loaded
 * object each time. */
static int own_range(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t hi = 0;

	(void)size;
	if ((void *)info->dlpi_addr != arg)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && ph->p_vaddr + ph->p_memsz > hi)
			hi = ph->p_vaddr + ph->p_memsz;
	}
	__atomic_store_n(&gp_shim.door.self_lo, info->dlpi_addr, __ATOMIC_RELAXED);
	__atomic_store_n(&gp_shim.door.self_hi, info->dlpi_addr + hi, __ATOMIC_RELEASE);
	return 1;
}

int gp_is_ours(const void *p)
{
	uintptr_t hi = __atomic_load_n(&gp_shim.door.self_hi, __ATOMIC_ACQUIRE);
	Dl_info mine;

	if (hi == 0) {
		if (dladdr(&anchor, &mine) == 0)
			return 0;
		dl_iterate_phdr(own_range, mine.dli_fbase);
		hi = __atomic_load_n(&gp_shim.door.self_hi, __ATOMIC_ACQUIRE);
	}
	return (uintptr_t)p >= __atomic_load_n(&gp_shim.door.self_lo, __ATOMIC_RELAXED) &&
	       (uintptr_t)p < hi;
}

int gp_cu_resolve(void)
{
	void *h;

	if (atomic_load_explicit(&gp_shim.door.resolved, memory_order_acquire))
		return 0;
	pthread_mutex_lock(&gp_shim.door.resolve_lock);
	if (atomic_load(&gp_shim.door.resolved))
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
	atomic_store_explicit(&gp_shim.door.resolved, 1, memory_order_release);
	gp_log(GP_LOG_DEBUG, "the driver's entry points are resolved");
out:
	pthread_mutex_unlock(&gp_shim.door.resolve_lock);
	return atomic_load(&gp_shim.door.resolved) ? 0 : -1;
}

int gp_cu_missing(void **slot, const char *name)
{
	void *p;

	memcpy(&p, slot, sizeof(p));
	if (p != NULL)
		return 0;
	gp_cu_resolve();
	memcpy(&p, slot, sizeof(p));
	if (p == NULL)
		gp_log_capped(GP_LOG_WARN, &gp_shim.door.said_missing,
			      "%s: not found in the driver; the call fails", name);
	return p == NULL;
}
