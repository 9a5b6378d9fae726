/* handout.c — the driver door. Runtimes and libraries find the driver with dlsym on a libcuda
 * handle and then with cuGetProcAddress: ours stand in front of both and answer with our entry
 * points (driver.c, work.c: table.h's GP_DRIVER_OURS) for the calls the pool needs to see, and
 * with the gate's stub in front of the driver's own function for every other name (gate.h: a
 * suspended process is woken by any call). A function is matched by identity: what
 * the real lookup returned is compared with the driver's exported symbols we wrap, so every
 * version and per-thread-stream flavour a caller asks for gets the wrapper of exactly the function
 * it would have got. Never a global lookup on the caller's behalf: the caller's handle is kept.
 * Names that are not the driver's (cu[A-Z]...) never come here: the dlsym stub jumps straight to
 * the real one, keeping the caller's return address, so RTLD_NEXT still means "after the
 * caller". */
#define _GNU_SOURCE
#include "handout.h"
#include "lookup.h"
#include "driver.h"
#include "gate.h"
#include "log.h"
#include "shim.h"
#include "state.h" /* gp_shim.door */

#include <dlfcn.h>
#include <link.h> /* ElfW */
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

typedef void (*any_fn)(void);

/* Our entry points, each with the real function it stands in front of (its field of gp_cu), and
 * the name and version a lookup asks for to get that function. */
#define HOOK(cls, name, base, version, flavour, params, args, stream)                             \
	{ (any_fn)cu##name, offsetof(struct gp_cu, name), "cu" #base, version, GP_CU_##cls },
/* Deprecated calls (cuLaunch, cuLaunchGrid, ...) too: programs built against older toolkits make
 * them still. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static const struct {
	any_fn ours;
	size_t off;       /* of the real one in struct gp_cu */
	const char *base; /* as cuGetProcAddress is asked for it */
	int version;      /* the first CUDA version that gets it */
	enum gp_cu_class cls;
} hooks[] = { GP_DRIVER_OURS(HOOK) };
#pragma GCC diagnostic pop
#undef HOOK

int gp_door_seen(void)
{
	return atomic_load_explicit(&gp_shim.door.seen, memory_order_relaxed);
}

int gp_door_blind(void)
{
	return atomic_load_explicit(&gp_shim.door.blind, memory_order_relaxed);
}

static void *as_ptr(any_fn f)
{
	void *p;

	memcpy(&p, &f, sizeof(p));
	return p;
}

/* Our entry point for the real function `p`, or p itself. */
static void *ours_for(void *p)
{
	for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
		void *real;
		memcpy(&real, (const char *)&gp_cu + hooks[i].off, sizeof(real));
		if (real == p)
			return as_ptr(hooks[i].ours);
	}
	return p;
}

/* Whether `p`, what dlsym found, is a function by its symbol's type: a stub stands in front of
 * functions only, never of data a library names cu[A-Z]... */
static int is_function(void *p)
{
	const ElfW(Sym) *sym = NULL;
	Dl_info info;

	if (dladdr1(p, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || sym == NULL ||
	    info.dli_saddr != p)
		return 0;
	/* the type is the low four bits of st_info in either class */
	return ELF64_ST_TYPE(sym->st_info) == STT_FUNC ||
	       ELF64_ST_TYPE(sym->st_info) == STT_GNU_IFUNC;
}

/* What dlsym hands out for the driver's function `p`, looked up as `name`: our entry point, else
 * the gate's stub in front of it (gate.h), so that every call a caller makes passes the gate. */
static void *handout_for(const char *name, void *p)
{
	void *ours = ours_for(p);

	if (ours != p)
		return ours;
	return is_function(p) ? gp_gate_stub(name, p) : p;
}

/* A lookup of `base` at `version` must come to us (table.h, GP_CU_ESSENTIAL): it gets one of
 * our essential rows, or would but for a variant we do not know. Below the first of them, it
 * gets a variant that cannot reach pooled memory (the 32-bit cuMemAlloc of CUDA 2.0). */
static int is_essential(const char *base, int version)
{
	for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++)
		if (GP_CU_ESSENTIAL(hooks[i].cls) && hooks[i].version <= version &&
		    strcmp(base, hooks[i].base) == 0)
			return 1;
	return 0;
}

static CUresult door_gpa2(const char *sym, void **pfn, int version, cuuint64_t flags,
			  CUdriverProcAddressQueryResult *status);
static CUresult door_gpa1(const char *sym, void **pfn, int version, cuuint64_t flags);

/* What a successful lookup of `sym` (a base name) returned becomes. */
static void *swap(const char *sym, void *p, int version)
{
	void *ours;

	if (gp_is_ours(p))
		return p;
	if (strcmp(sym, "cuGetProcAddress") == 0)
		return version >= 12000 ? as_ptr((any_fn)door_gpa2) : as_ptr((any_fn)door_gpa1);
	ours = ours_for(p);
	if (ours != p)
		return ours;
	if (is_essential(sym, version) && !atomic_exchange(&gp_shim.door.blind, 1)) {
		gp_log(GP_LOG_ERROR, "cuGetProcAddress(\"%s\", %d) returned a function that is not "
				     "the driver's exported one: allocations are passed through, not "
				     "pooled", sym, version);
		gp_shim_door_blind();
	}
	return gp_gate_stub(sym, p);
}

static CUresult door_gpa2(const char *sym, void **pfn, int version, cuuint64_t flags,
			  CUdriverProcAddressQueryResult *status)
{
	CUresult rc;

	(void)GP_GATE(GP_GATE_WORK); /* the real lookup is a driver call like any other */
	if (gp_cu_resolve() != 0 || gp_cu.GetProcAddress_v2 == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	atomic_store_explicit(&gp_shim.door.seen, 1, memory_order_relaxed);
	rc = gp_cu.GetProcAddress_v2(sym, pfn, version, flags, status);
	if (rc == CUDA_SUCCESS && sym != NULL && pfn != NULL && *pfn != NULL)
		*pfn = swap(sym, *pfn, version);
	return rc;
}

static CUresult door_gpa1(const char *sym, void **pfn, int version, cuuint64_t flags)
{
	CUresult rc;

	(void)GP_GATE(GP_GATE_WORK);
	if (gp_cu_resolve() != 0 || gp_cu.GetProcAddress == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	atomic_store_explicit(&gp_shim.door.seen, 1, memory_order_relaxed);
	rc = gp_cu.GetProcAddress(sym, pfn, version, flags);
	if (rc == CUDA_SUCCESS && sym != NULL && pfn != NULL && *pfn != NULL)
		*pfn = swap(sym, *pfn, version);
	return rc;
}

/* For programs that call cuGetProcAddress themselves, linked to libcuda.so.1. */
#undef cuGetProcAddress
GP_EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, cuuint64_t flags,
				       CUdriverProcAddressQueryResult *status)
{
	return door_gpa2(sym, pfn, version, flags, status);
}

GP_EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, cuuint64_t flags)
{
	return door_gpa1(sym, pfn, version, flags);
}

/* dlsym of a driver name, with the caller's own handle. */
static void *door_dlsym(void *handle, const char *name)
{
	void *p = gp_real_dlsym(handle, name);

	if (p == NULL || gp_is_ours(p))
		return p;
	if (gp_cu_resolve() != 0)
		return p; /* a library of driver names that is not the driver: not ours to change */
	atomic_store_explicit(&gp_shim.door.seen, 1, memory_order_relaxed);
	if (strcmp(name, "cuGetProcAddress_v2") == 0)
		return as_ptr((any_fn)door_gpa2);
	if (strcmp(name, "cuGetProcAddress") == 0)
		return as_ptr((any_fn)door_gpa1);
	return handout_for(name, p);
}

static void *no_dlsym(void *handle, const char *name)
{
	(void)handle;
	(void)name;
	return NULL;
}

/* Where a call of dlsym goes: to door_dlsym for the driver's names (cu and a capital letter:
 * never cublas*, cudnn*, curl*), else to the real one. It runs for every dlsym of the process,
 * also while a sanitizer's runtime initialises itself: uninstrumented (lookup.h). */
GP_NO_SANITIZE __attribute__((used, visibility("hidden"))) void *gp_door_route(void *handle,
									const char *name)
{
	union {
		void *(*fn)(void *, const char *);
		void *p;
	} to;

	(void)handle;
	if (name != NULL && name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z')
		to.fn = door_dlsym;
	else if ((to.fn = gp_real_dlsym_fn()) == NULL)
		to.fn = no_dlsym;
	return to.p;
}

/* dlsym itself: ask gp_door_route where to go, then jump there with the caller's arguments and
 * return address untouched (a call from C would make this library the caller of the real dlsym,
 * and RTLD_NEXT relative to it). */
#if defined(__x86_64__)
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	"dlsym:\n"
	"	.cfi_startproc\n"
	"	push %rdi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	push %rsi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	sub $8, %rsp\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	call gp_door_route\n"
	"	add $8, %rsp\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	pop %rsi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	pop %rdi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	jmp *%rax\n"
	"	.cfi_endproc\n"
	".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, %function\n"
	"dlsym:\n"
	"	stp x29, x30, [sp, #-32]!\n"
	"	mov x29, sp\n"
	"	stp x0, x1, [sp, #16]\n"
	"	bl gp_door_route\n"
	"	mov x16, x0\n"
	"	ldp x0, x1, [sp, #16]\n"
	"	ldp x29, x30, [sp], #32\n"
	"	br x16\n"
	".size dlsym, .-dlsym\n");
#else
/* Elsewhere a plain call: RTLD_NEXT lookups of other names are then relative to this library. */
GP_EXPORT void *dlsym(void *handle, const char *name)
{
	void *(*to)(void *, const char *);
	void *p = gp_door_route(handle, name);

	memcpy(&to, &p, sizeof(to));
	return to(handle, name);
}
#endif
