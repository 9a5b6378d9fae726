/* lookup.c — finding the real functions, once: the driver's by their exact symbols in the
 * libcuda.so.1 the process has loaded (RTLD_NOLOAD: the runtime or the program loaded it), the
 * shared runtime's where the program has one, and the real dlsym behind our own. Never loads a
 * CUDA library itself, and never takes a function of ours for the real one. */
#define _GNU_SOURCE
#include "lookup.h"
#include "log.h"
#include "state.h" /* gp_shim.door, gp_shim_early.door, gp_shim.real */

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct gp_cu gp_cu;
struct gp_real gp_real;

/* Where each driver row's real function goes, by its symbol. */
#define FIELD(cls, name, base, version, flavour, params, args, stream)                            \
	{ "cu" #name, offsetof(struct gp_cu, name) },
static const struct {
	const char *sym;
	size_t off;
} fields[] = { GP_DRIVER_ALL(FIELD) };
#undef FIELD

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

/* This library's address range (gp_shim.door.self_lo, self_hi), found once: the driver door
 * asks whether a function is ours for every driver function looked up at start-up, and dladdr
 * walks every loaded object each time. */
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
	/* The reference NOLOAD took is kept: gp_cu points into the driver, which its owner may
	 * unload (a runtime does, with a driver older than itself), and must stay mapped. */
	atomic_store_explicit(&gp_shim.door.resolved, 1, memory_order_release);
	gp_log(GP_LOG_DEBUG, "the driver's entry points are resolved");
out:
	pthread_mutex_unlock(&gp_shim.door.resolve_lock);
	return atomic_load(&gp_shim.door.resolved) ? 0 : -1;
}

void *gp_cu_find(const char *sym)
{
	void *p = gp_real_dlsym(RTLD_NEXT, sym); /* relative to this library: what comes after it */
	void *h;

	if (p != NULL && !gp_is_ours(p))
		return p;
	h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (h != NULL) {
		p = gp_real_dlsym(h, sym);
		dlclose(h); /* NOLOAD took a reference; the driver stays loaded by its owner */
		if (p != NULL && !gp_is_ours(p))
			return p;
	}
	gp_dl_forget_error();
	return NULL;
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

/* ---- the shared runtime ---- */

void gp_dl_forget_error(void)
{
	(void)dlerror(); /* returns the message, marks it returned */
	(void)dlerror(); /* frees the record */
}

static void *find_in_runtime(const char *name)
{
	static const char *const sonames[] = { "libcudart.so.13", "libcudart.so.12" };
	void *p = gp_real_dlsym(RTLD_NEXT, name); /* relative to this library: what comes after it */

	if (p != NULL && !gp_is_ours(p))
		return p;
	for (size_t i = 0; i < sizeof(sonames) / sizeof(sonames[0]); i++) {
		void *h = dlopen(sonames[i], RTLD_LAZY | RTLD_NOLOAD);
		if (h == NULL)
			continue;
		p = gp_real_dlsym(h, name);
		dlclose(h); /* NOLOAD took a reference; the library stays loaded by its owner */
		if (p != NULL && !gp_is_ours(p))
			return p;
	}
	gp_dl_forget_error();
	return NULL;
}

/* Where each runtime row's real function goes, by its name. */
#define RUNTIME_FIELD(name, params) { "cuda" #name, offsetof(struct gp_real, name) },
static const struct {
	const char *sym;
	size_t off;
} runtime_fields[] = { GP_RUNTIME_ALL(RUNTIME_FIELD) };
#undef RUNTIME_FIELD

static void resolve(void)
{
	for (size_t i = 0; i < sizeof(runtime_fields) / sizeof(runtime_fields[0]); i++) {
		/* dlsym returns an object pointer: its bytes make the function pointer */
		void *p = find_in_runtime(runtime_fields[i].sym);
		memcpy((char *)&gp_real + runtime_fields[i].off, &p, sizeof(p));
	}
	gp_shim.real.resolved_ok = gp_real.Malloc != NULL && gp_real.Free != NULL &&
				   gp_real.GetDevice != NULL && gp_real.SetDevice != NULL &&
				   gp_real.GetLastError != NULL;
	if (!gp_shim.real.resolved_ok)
		memset(&gp_real, 0, sizeof(gp_real)); /* a runtime is all there or not at all */
}

int gp_real_resolve(void)
{
	pthread_once(&gp_shim.real.once, resolve);
	return gp_shim.real.resolved_ok ? 0 : -1;
}
