/* hooks.h — what the pool offers its unit tests, compiled in only with GP_POOL_TEST_HOOKS
 * (tests/unit builds the pool once more with it; libgpupool.so never has these). They let a test
 * see the pool's locks and lists from outside, and stage races inside one call. Never part of
 * the pool's contract with the shim. */
#ifndef GPUPOOL_POOL_HOOKS_H
#define GPUPOOL_POOL_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "pool.h"

#ifdef GP_POOL_TEST_HOOKS
/* Pool locks (spinlocks and mutexes) the calling thread holds now: 0 in every backend call and
 * callback (pool.h), which the fake backend checks. */
unsigned gp_pool_test_locks_held(void);
/* Pool locks the calling thread has taken since it started. */
unsigned long gp_pool_test_locks_taken(void);

/* Locked read-modify-write instructions the calling thread has made on the hit and free paths
 * outside a lock (lock.h gp_rmw_note) since it started. */
unsigned long gp_pool_test_rmw_count(void);
/* Blocks and bytes in the calling thread's own cache of p; blocks in every thread's cache of p;
 * whether p has thread caches at all (cfg.tcache_bytes and the kernel's membarrier). */
uint64_t gp_pool_test_tcache_blocks(struct gp_pool *p);
uint64_t gp_pool_test_tcache_bytes(struct gp_pool *p);
uint64_t gp_pool_test_tcaches_blocks(struct gp_pool *p);
int gp_pool_test_tcache_on(struct gp_pool *p);

/* Take (lock != 0) or give back the lock of the list that a request of `bytes` on `device` by
 * the calling thread looks at first (its own stripe of the class): to prove what must not wait
 * for a list lock, and that a backend call under one is caught. GP_EINVAL: no such list. */
int gp_pool_test_list_lock(struct gp_pool *p, int device, size_t bytes, int lock);

/* Every list of every device walked under its lock: the lists' invariants checked (free order:
 * epochs nondecreasing from head to tail; the head-epoch hint at most the head's epoch; the
 * cached counters equal to what the list holds; the fenced bytes and blocks its counters say
 * (what gp_pool_dev_stats sums) at least those the walk finds). Returns how many lists break one
 * (0: none). */
unsigned gp_pool_test_check_lists(struct gp_pool *p);

/* The pending bytes and blocks of a device as a walk of its lists under their locks finds them:
 * the exact figures that gp_pool_dev_stats computes from counters without a lock. */
int gp_pool_test_fenced(struct gp_pool *p, int device, uint64_t *bytes, uint64_t *blocks);

/* Runs inside a thread's section on its own cache (a hit from it, or a free into it), and in a
 * thief that holds a thread's cache (owner kept out), to stage what other threads do there
 * (NULL: nothing). */
extern void (*gp_pool_test_in_section)(struct gp_pool *p);
extern void (*gp_pool_test_in_steal)(struct gp_pool *p);
/* Runs in the free of a block by its own cache's owner (own_free), inside its section, after the
 * look at the block's state and before the plain store that frees it (NULL: nothing). */
extern void (*gp_pool_test_in_own_free)(void *ptr);
/* Runs in a free by a cache's owner that pushed blocks out of its full cache, after its section
 * and before it puts them back on their lists (NULL: nothing). */
extern void (*gp_pool_test_after_evict)(struct gp_pool *p);

/* Runs between a free's lookup and its change of the block's state, to stage what another
 * thread could do there (NULL: nothing). */
extern void (*gp_pool_test_after_lookup)(struct gp_pool *p, void *ptr);
/* Runs in a free (or unhold) between the block's change of state and its list's lock. */
extern void (*gp_pool_test_before_list)(struct gp_pool *p, void *ptr);
#endif

#endif
