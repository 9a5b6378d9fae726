/* lock.h — the pool's lock: a test-and-test-and-set spinlock for critical sections of a few
 * dozen instructions (a free-list push or pop, a map probe). Unlocking is a plain release store,
 * not an atomic read-modify-write; a waiter spins briefly, then yields the CPU, so a preempted
 * holder costs a waiter a time slice, never a hang. Never held across a backend call. */
#ifndef GPUPOOL_LOCK_H
#define GPUPOOL_LOCK_H

#include <sched.h>
#include <stdatomic.h>

/* The unit the pool's layout keeps threads apart by: block records, lists, counters, map
 * shards and the fence fields each start on a boundary of it and fill whole units. 128 bytes,
 * not the 64 of a cache line: Intel's spatial prefetcher fetches lines in aligned pairs, so two
 * threads writing the two lines of a pair slow each other as if they shared one (measured with
 * several threads, docs/BENCHMARKS.md). -DGP_LINE=64 for the old layout. */
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
	if (__builtin_expect(!atomic_exchange_explicit(&l->held, 1, memory_order_acquire), 1))
		return;
	gp_lock_slow(l);
}

static inline void gp_unlock(struct gp_lock *l)
{
	atomic_store_explicit(&l->held, 0, memory_order_release);
}

#endif
