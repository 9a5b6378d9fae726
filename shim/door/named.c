/* named.c — every cu* symbol of the driver that is not an entry point of ours, exported as a gate
 * stub: a program linked to libcuda.so.1 binds ours (LD_PRELOAD comes first), so each of its
 * calls passes the gate too. The names are the toolkit's (cmake/gate_names.cmake reads cuda.h at
 * build time into gate_names.h: every versioned and per-thread-stream symbol and the legacy
 * ones). A stub finds its driver function at its first call, where the program's own binding
 * would have (gp_cu_find); a driver without it answers CUDA_ERROR_NOT_FOUND, as a lookup would.
 * Names only go through # and ##: cuda.h's #defines (cuMemAlloc -> cuMemAlloc_v2) never apply.
 * Compiled without LTO: its assembler names C objects. */
#include "gate.h"
#include "stub_asm.h"
#include "lookup.h"
#include "log.h"
#include "gate_names.h"

#include <pthread.h>
#include <string.h>

#if GP_GATE_STUBS

void *gp_gate_named_enter(struct gp_gate_entry *e) __attribute__((visibility("hidden")));
/* Where a stub's slot points until its function is found: the slow path, which finds it. */
extern char gp_gate_named_slow[] __attribute__((visibility("hidden")));

#define NAMED_ENTRY(sym)                                                                           \
	__attribute__((visibility("hidden"))) struct gp_gate_entry gp_gate_named_##sym = {        \
		gp_gate_named_slow, { #sym, NULL, NULL, GP_GATE_WORK }                             \
	};
GP_GATE_NAMED(NAMED_ENTRY)
#undef NAMED_ENTRY

#define NAMED_STUB(sym)                                                                            \
	"	.globl " #sym "\n"                                                                 \
	"	.type " #sym ", %function\n"                                                       \
	"	.p2align 4\n" #sym ":\n"                                                           \
	"	.cfi_startproc\n" GP_GATE_ASM_STUB("gp_gate_named_" #sym, "gp_gate_named_slow")   \
	"	.cfi_endproc\n"                                                                    \
	"	.size " #sym ", .-" #sym "\n"
__asm__(".text\n"
	".hidden gp_gate_closed\n"
	".globl gp_gate_named_slow\n"
	".hidden gp_gate_named_slow\n"
	GP_GATE_ASM_SLOW("gp_gate_named_slow", "gp_gate_named_enter")
	GP_GATE_NAMED(NAMED_STUB));
#undef NAMED_STUB

/* Publishes a found stub's function, one stub at a time. Never held across a lookup: dlsym takes
 * the loader's lock, which a thread running a library's constructor holds while it may call a
 * stub of ours. */
static pthread_mutex_t publish_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int said_missing;

static CUresult not_found(void)
{
	return CUDA_ERROR_NOT_FOUND;
}

static void *not_found_ptr(void)
{
	CUresult (*fn)(void) = not_found;
	void *p;

	memcpy(&p, &fn, sizeof(p));
	return p;
}

/* The stub's driver function, found once (two threads at once find the same one; the first
 * publishes it). A miss is kept only once the driver is loaded: before, a later call may still
 * find it. */
static void *find(struct gp_gate_entry *e)
{
	void *real = gp_cu_find(e->fn.name);
	enum gp_gate_kind kind = gp_gate_kind_of(e->fn.name);
	void *answer = gp_gate_answer_of(e->fn.name);

	if (real == NULL) {
		gp_log_capped(GP_LOG_WARN, &said_missing, "%s: not found in the driver; the call fails",
			      e->fn.name);
		if (gp_cu_resolve() != 0)
			return not_found_ptr();
		real = not_found_ptr();
	}
	pthread_mutex_lock(&publish_lock);
	if (e->fn.real == NULL) {
		e->fn.kind = kind;
		e->fn.answer = answer;
		__atomic_store_n(&e->fn.real, real, __ATOMIC_RELEASE);
		__atomic_store_n(&e->slot, real, __ATOMIC_RELEASE);
	}
	real = e->fn.real;
	pthread_mutex_unlock(&publish_lock);
	return real;
}

void *gp_gate_named_enter(struct gp_gate_entry *e)
{
	void *real = __atomic_load_n(&e->fn.real, __ATOMIC_ACQUIRE);

	if (real == NULL)
		real = find(e);
	if (real == not_found_ptr())
		return real; /* never reaches the driver: nothing to gate */
	return gp_gate_enter(&e->fn);
}

#endif
