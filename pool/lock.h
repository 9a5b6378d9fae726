/* lock.h — the pool's locks: a test-and-test-and-set spinlock for critical sections of a few
 * dozen instructions (a free-list push or pop, a map probe), and the mutexes of rarer paths.
 * Unlocking the spinlock is a plain release store, not an atomic read-modify-write; a waiter
 * spins briefly, then yields the CPU, so a preempted holder costs a waiter a time slice, never a
 * hang. Never held across a backend call: built for unit tests (GP_POOL_TEST_HOOKS), every lock
 * taken and given back is counted per thread, and the fake backend checks the count is 0. */
#ifndef GPUPOOL_LOCK_H
#define GPUPOOL_LOCK_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

/* The unit the pool's layout keeps threads apart by: block records, lists, counters, map
 * shards and the fence fields each start on a boundary of it and fill whole units. 128 bytes,
 * not the 64 of a cache line: Intel's spatial prefetcher fetches lines in aligned pairs, so two
 * threads writing the two lines of a pair slow each other as if they shared one. -DGP_LINE=64
 * packs by cache line, to compare the two layouts. */
#ifndef GP_LINE
#define GP_LINE 128
#endif

struct gp_lock {
	_Atomic int held;
};

#define GP_LOCK_SPINS 64

static inline void gp_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#ifdef GP_POOL_TEST_HOOKS
/* Unit tests only (pool.c defines them, hooks.h reads them): the pool locks this thread holds
 * now, and how many it has taken in all. The real build counts nothing: its hit path is as it is. */
extern _Thread_local unsigned gp_pool_test_held;
extern _Thread_local unsigned long gp_pool_test_taken;
extern _Thread_local unsigned long gp_pool_test_rmw;
#endif

/* A locked read-modify-write instruction of the hit and free paths (a compare-and-swap, an atomic
 * add) outside a lock: counted in test builds only, so that tests can hold the thread cache's
 * paths to none. */
static inline void gp_rmw_note(void)
{
#ifdef GP_POOL_TEST_HOOKS
	gp_pool_test_rmw++;
#endif
}

/* A lock of the pool's taken (+1) or given back (-1) by this thread: counted in test builds only. */
static inline void gp_lock_note(int delta)
{
#ifdef GP_POOL_TEST_HOOKS
	gp_pool_test_held += (unsigned)delta;
	if (delta > 0)
		gp_pool_test_taken++;
#else
	(void)delta;
#endif
}

static inline void gp_lock_init(struct gp_lock *l)
{
	atomic_init(&l->held, 0);
}

static inline void gp_lock_slow(struct gp_lock *l)
{
	for (unsigned n = 0;; n++) {
		while (atomic_load_explicit(&l->held, memory_order_relaxed)) {
			if (n++ < GP_LOCK_SPINS)
				gp_cpu_relax();
			else
				sched_yield();
		}
		if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
			return;
	}
}

static inline void gp_lock(struct gp_lock *l)
{
	if (__builtin_expect(atomic_exchange_explicit(&l->held, 1, memory_order_acquire), 0))
		gp_lock_slow(l);
	gp_lock_note(1);
}

static inline void gp_unlock(struct gp_lock *l)
{
	gp_lock_note(-1);
	atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* The pool's mutexes (device creation, the fence ring), counted as its spinlocks are. */
static inline void gp_mutex_lock(pthread_mutex_t *m)
{
	pthread_mutex_lock(m);
	gp_lock_note(1);
}

static inline void gp_mutex_unlock(pthread_mutex_t *m)
{
	gp_lock_note(-1);
	pthread_mutex_unlock(m);
}

#endif
