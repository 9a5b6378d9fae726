/* stubs.c — the stubs that cuGetProcAddress and dlsym hand out in front of the driver's functions
 * that are not ours (gp_gate_stub): a fixed pool made by the assembler, one entry each, given out
 * in order and found again by the real function's address, so the same function always gets the
 * same stub. Only lookups come here (a few hundred at a program's start), under one mutex; calls
 * go through the stub alone. When the pool is used up, the real function is handed out: that
 * function is then not gated, which is said once. Compiled without LTO: its assembler names C
 * objects. */
#include "gate.h"
#include "stub_asm.h"
#include "log.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if GP_GATE_STUBS

#define GP_GATE_POOL 4096      /* stubs */
#define GP_GATE_HASH 8192      /* buckets of the address table: a power of two, twice the pool */
#define GP_GATE_NAME_MAX 64    /* bytes of a stub's name, with its NUL: longer ones are cut */
#define GP_GATE_ENTRY_SIZE 40  /* bytes of struct gp_gate_entry, as the assembler steps */

_Static_assert(sizeof(struct gp_gate_entry) == GP_GATE_ENTRY_SIZE, "the stubs' entry stride");
_Static_assert(offsetof(struct gp_gate_entry, slot) == 0, "a stub jumps through its entry");

/* The pool's entries, named by the assembler below; written under the mutex, before the stub is
 * handed out, and never again. */
__attribute__((visibility("hidden"))) struct gp_gate_entry gp_gate_pool_entries[GP_GATE_POOL];
void *gp_gate_pool_enter(struct gp_gate_entry *e) __attribute__((visibility("hidden")));

/* The pool's code: stub i at gp_gate_pool_code + i * GP_GATE_STUB_STRIDE, for entry i. */
__asm__(".text\n"
	".hidden gp_gate_closed\n"
	GP_GATE_ASM_SLOW("gp_gate_pool_slow", "gp_gate_pool_enter")
	"	.p2align 5\n"
	"	.globl gp_gate_pool_code\n"
	"	.hidden gp_gate_pool_code\n"
	"	.type gp_gate_pool_code, %function\n"
	"gp_gate_pool_code:\n"
	"	.cfi_startproc\n"
	"	.set gp_gate_pool_i, 0\n"
	"	.rept " GP_GATE_STR(GP_GATE_POOL) "\n"
	GP_GATE_ASM_STUB("gp_gate_pool_entries + gp_gate_pool_i * " GP_GATE_STR(GP_GATE_ENTRY_SIZE),
			 "gp_gate_pool_slow")
	"	.p2align 5\n"
	"	.set gp_gate_pool_i, gp_gate_pool_i + 1\n"
	"	.endr\n"
	"	.cfi_endproc\n"
	"	.size gp_gate_pool_code, .-gp_gate_pool_code\n");
extern const char gp_gate_pool_code[] __attribute__((visibility("hidden")));

/* What the pool's bookkeeping holds; every field under lock. */
static struct {
	pthread_mutex_t lock;
	unsigned used;                       /* entries given out, [0, used) */
	uint16_t bucket[GP_GATE_HASH];       /* entry + 1 by the real function's hash; 0: empty */
	char names[GP_GATE_POOL][GP_GATE_NAME_MAX];
	_Atomic int said_full;               /* "no stub left" said (gp_log_capped) */
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER };

void *gp_gate_pool_enter(struct gp_gate_entry *e)
{
	return gp_gate_enter(&e->fn);
}

static unsigned hash(const void *p)
{
	uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;

	return (unsigned)(h >> 40) & (GP_GATE_HASH - 1);
}

static void *stub_of(unsigned i)
{
	return (void *)(gp_gate_pool_code + (size_t)i * GP_GATE_STUB_STRIDE);
}

/* A new entry for `real`, or -1 when the pool is used up. Under the lock. */
static int take(const char *name, void *real)
{
	struct gp_gate_entry *e;
	unsigned i = pool.used;

	if (i == GP_GATE_POOL)
		return -1;
	e = &gp_gate_pool_entries[i];
	strncpy(pool.names[i], name, GP_GATE_NAME_MAX - 1);
	e->fn.name = pool.names[i];
	e->fn.real = real;
	e->fn.answer = gp_gate_answer_of(name);
	e->fn.kind = gp_gate_kind_of(name);
	__atomic_store_n(&e->slot, real, __ATOMIC_RELEASE);
	pool.used = i + 1;
	return (int)i;
}

void *gp_gate_stub(const char *name, void *real)
{
	void *stub = real;
	unsigned b;
	int i;

	if (real == NULL || name == NULL)
		return real;
	pthread_mutex_lock(&pool.lock);
	for (b = hash(real); pool.bucket[b] != 0; b = (b + 1) & (GP_GATE_HASH - 1)) {
		if (gp_gate_pool_entries[pool.bucket[b] - 1].fn.real == real) {
			stub = stub_of(pool.bucket[b] - 1u);
			goto out;
		}
	}
	i = take(name, real);
	if (i < 0) {
		gp_log_capped(GP_LOG_WARN, &pool.said_full,
			      "%s: no gate stub left (%d given out): handed out ungated, a suspended "
			      "process is not woken by it", name, GP_GATE_POOL);
		goto out;
	}
	pool.bucket[b] = (uint16_t)(i + 1);
	stub = stub_of((unsigned)i);
out:
	pthread_mutex_unlock(&pool.lock);
	return stub;
}

#else

/* No stubs on this architecture: only our own entry points are gated. */
void *gp_gate_stub(const char *name, void *real)
{
	(void)name;
	return real;
}

#endif
