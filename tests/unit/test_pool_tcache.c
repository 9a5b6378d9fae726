/* test_pool_tcache.c — each thread's own cache of the blocks it freed (cfg.tcache_bytes): its hit,
 * and its free of a block it handed out, take no lock and make no locked instruction (another
 * thread that changes such a block's state makes the cache shared first), a fenced block never
 * enters it, releases and
 * misses take blocks out of any thread's cache (an idle owner's, and one racing its owner, staged
 * with the pool's test hooks), an exiting thread hands its cache back, its bounds hold, a double
 * free is still caught and the figures stay right. Skipped where the kernel has no expedited
 * membarrier (the pool then makes no thread cache). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "pool_fixture.h"
#include "hooks.h"

#define TC_BYTES (4 * MiB)
#define SEC 1000000000ull

static int setup_tc(void **state, int ordered)
{
	struct gp_pool_config cfg = { .ordered = ordered, .tcache_bytes = TC_BYTES };

	return fx_setup_cfg(state, &cfg);
}

static int setup_ordered_tc(void **state)
{
	return setup_tc(state, 1);
}

static int setup_unordered_tc(void **state)
{
	return setup_tc(state, 0);
}

/* Ordered, and a cached block above 1 MiB may serve a request of up to half its size. */
static int setup_oversize_tc(void **state)
{
	struct gp_pool_config cfg = { .ordered = 1, .tcache_bytes = TC_BYTES, .oversize_pct = 200 };

	return fx_setup_cfg(state, &cfg);
}

/* Ordered, and a miss that must grow gives back idle blocks of other sizes (cfg.remap_trim). */
static int setup_trim_tc(void **state)
{
	struct gp_pool_config cfg = { .ordered = 1, .tcache_bytes = TC_BYTES, .remap_trim = 1 };

	return fx_setup_cfg(state, &cfg);
}

/* n blocks of `bytes` on device 0 into p[], then the first nfree of them freed, in order. */
static void alloc_free(struct fx *fx, void **p, int n, size_t bytes, int nfree)
{
	for (int i = 0; i < n; i++)
		p[i] = fx_alloc(fx, 0, bytes);
	for (int i = 0; i < nfree; i++)
		fx_free(fx, p[i]);
}

static void need_tcache(struct fx *fx)
{
	if (!gp_pool_test_tcache_on(fx->pool))
		skip();
}

/* Proves: a thread's free of a block puts it in its own cache and its next allocation of the size
 * takes it back: no pool lock taken by either, no locked instruction in the hit, and none in the
 * free of a block the cache handed out (the first free, of a block from the lists, takes the
 * compare-and-swap), no backend call and no reading of the clock by either; the figures count the
 * hit, the free and the cached block. */
static void test_own_free_then_alloc_takes_no_lock(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats st;
	unsigned long locks, rmw;
	uint64_t allocs, clocks;
	void *a, *b;

	need_tcache(fx);
	a = fx_alloc(fx, 0, 4 * KiB);
	fx_free(fx, a); /* the thread's first free makes its cache (a lock) */
	a = fx_alloc(fx, 0, 4 * KiB);
	locks = gp_pool_test_locks_taken();
	rmw = gp_pool_test_rmw_count();
	clocks = fake_calls(&fx->fake, FAKE_OP_NOW);
	fx_free(fx, a);
	assert_int_equal(gp_pool_test_locks_taken() - locks, 0);
	assert_int_equal(gp_pool_test_rmw_count() - rmw, 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_NOW), clocks);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 1);
	st = fx_stats(fx, 0);
	assert_int_equal(st.idle_blocks, 1);
	assert_int_equal(st.idle_bytes, cb(4 * KiB));
	assert_int_equal(st.live_blocks, 0);
	assert_int_equal(st.frees, 2);

	allocs = fake_calls(&fx->fake, FAKE_OP_ALLOC);
	locks = gp_pool_test_locks_taken();
	rmw = gp_pool_test_rmw_count();
	b = fx_alloc(fx, 0, 4 * KiB);
	assert_int_equal(gp_pool_test_locks_taken() - locks, 0);
	assert_int_equal(gp_pool_test_rmw_count() - rmw, 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_NOW), clocks);
	assert_ptr_equal(a, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), allocs);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 0);
	st = fx_stats(fx, 0);
	assert_int_equal(st.live_blocks, 1);
	assert_int_equal(st.live_bytes, cb(4 * KiB));
	assert_int_equal(st.requested_bytes, 4 * KiB);
	assert_int_equal(st.idle_blocks, 0);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.allocs, 3);
	fx_free(fx, b);
}

/* Proves: with reuse behind fences (unordered), a freed block never enters a thread cache; and a
 * cache filled while reuse needed none is emptied into the lists at its owner's next allocation
 * once a stream makes fences necessary, whose block is then not handed out before its fence. */
static void test_fenced_block_never_enters(void **state)
{
	struct fx *fx = *state;
	void *a, *b;

	need_tcache(fx);
	gp_pool_set_ordered(fx->pool, 1);
	a = fx_alloc(fx, 0, 64 * KiB);
	fx_free(fx, a);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 1);
	gp_pool_set_ordered(fx->pool, 0); /* a stream was created */
	b = fx_alloc(fx, 0, 64 * KiB);
	assert_ptr_not_equal(a, b); /* a waits for its fence */
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 0);
	fx_free(fx, b);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 0);
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 2);
	fx_settle(fx);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 2);
}

/* The fixture of the test whose hooks stage a race. */
static struct fx *race_fx;

/* A thread that fills its cache and waits. */
struct owner {
	struct fx *fx;
	size_t size;
	int n;
	sem_t filled, go, done;
	void *after; /* what its allocation after `go` got */
};

static void *owner_main(void *arg)
{
	struct owner *o = arg;
	void *p[8];

	for (int i = 0; i < o->n; i++)
		p[i] = fx_alloc(o->fx, 0, o->size);
	for (int i = 0; i < o->n; i++)
		fx_free(o->fx, p[i]);
	sem_post(&o->filled);
	sem_wait(&o->go);
	o->after = fx_alloc(o->fx, 0, o->size);
	fx_free(o->fx, o->after);
	sem_post(&o->done);
	sem_wait(&o->go); /* stays alive until told */
	return NULL;
}

static void owner_start(struct owner *o, pthread_t *t, struct fx *fx, size_t size, int n)
{
	o->fx = fx;
	o->size = size;
	o->n = n;
	sem_init(&o->filled, 0, 0);
	sem_init(&o->go, 0, 0);
	sem_init(&o->done, 0, 0);
	assert_int_equal(pthread_create(t, NULL, owner_main, o), 0);
	sem_wait(&o->filled);
}

static void owner_end(struct owner *o, pthread_t t)
{
	sem_post(&o->go);
	assert_int_equal(pthread_join(t, NULL), 0);
	sem_destroy(&o->filled);
	sem_destroy(&o->go);
	sem_destroy(&o->done);
}

/* Proves: a release gives back the blocks in another thread's cache while that thread is idle
 * (blocked): every cached byte goes back to the backend, and the owner's next allocation is served
 * afresh, not from its emptied cache. */
static void test_release_takes_idle_owners_cache(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	struct owner o;
	pthread_t t;

	need_tcache(fx);
	owner_start(&o, &t, fx, 256 * KiB, 3);
	assert_int_equal(gp_pool_test_tcaches_blocks(fx->pool), 3);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 3);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_SIGNAL, &res), GP_OK);
	assert_int_equal(res.blocks, 3);
	assert_int_equal(gp_pool_test_tcaches_blocks(fx->pool), 0);
	assert_int_equal(fake_used_total(&fx->fake), 0);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 0);
	sem_post(&o.go);
	sem_wait(&o.done);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 4);
	owner_end(&o, t);
}

/* Proves: a miss about to grow the pool takes a block of its size from another thread's cache
 * (no backend allocation). */
static void test_miss_takes_other_threads_block(void **state)
{
	struct fx *fx = *state;
	struct owner o;
	pthread_t t;
	uint64_t allocs;
	void *a;

	need_tcache(fx);
	owner_start(&o, &t, fx, 16 * KiB, 1);
	allocs = fake_calls(&fx->fake, FAKE_OP_ALLOC);
	a = fx_alloc(fx, 0, 16 * KiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), allocs);
	assert_int_equal(gp_pool_test_tcaches_blocks(fx->pool), 0);
	fx_free(fx, a);
	sem_post(&o.go);
	sem_wait(&o.done);
	owner_end(&o, t);
}

/* Proves: a miss about to grow the pool also takes a larger block that may serve it
 * (cfg.oversize_pct) from another thread's cache, as it would from the lists: no backend
 * allocation, the larger block handed out. */
static void test_miss_takes_larger_cached_block(void **state)
{
	struct fx *fx = *state;
	struct owner o;
	pthread_t t;
	uint64_t allocs;
	void *a;

	need_tcache(fx);
	owner_start(&o, &t, fx, 3 * MiB, 1);
	assert_int_equal(gp_pool_test_tcaches_blocks(fx->pool), 1);
	allocs = fake_calls(&fx->fake, FAKE_OP_ALLOC);
	a = fx_alloc(fx, 0, 2 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), allocs);
	assert_int_equal(gp_pool_test_tcaches_blocks(fx->pool), 0);
	assert_int_equal(fx_stats(fx, 0).oversize_hits, 1);
	fx_free(fx, a);
	sem_post(&o.go);
	sem_wait(&o.done);
	owner_end(&o, t);
}

/* Proves: with cfg.remap_trim, a miss that must grow while the GPU is idle gives back an idle
 * block of another size from another thread's cache, as it would from the lists. */
static void test_trim_takes_cached_block(void **state)
{
	struct fx *fx = *state;
	struct owner o;
	pthread_t t;
	void *a;

	need_tcache(fx);
	owner_start(&o, &t, fx, 256 * KiB, 1);
	fake_set_quiet(&fx->fake, 1);
	a = fx_alloc(fx, 0, 512 * KiB);
	assert_int_equal(fx_stats(fx, 0).trims, 1);
	assert_int_equal(fx_stats(fx, 0).trimmed_bytes, cb(256 * KiB));
	assert_int_equal(gp_pool_test_tcaches_blocks(fx->pool), 0);
	assert_int_equal(fake_used_total(&fx->fake), cb(512 * KiB));
	fx_free(fx, a);
	sem_post(&o.go);
	sem_wait(&o.done);
	owner_end(&o, t);
}

/* Proves: a cache keeps a size's newest frees and pushes the oldest into the lists, so that a
 * release down to a target gives back the oldest blocks first even when every free time ties (the
 * fake's clock stands still): the two freed last stay. */
static void test_release_oldest_first(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *p[6];

	need_tcache(fx);
	alloc_free(fx, p, 6, 4 * KiB, 6);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 4);
	assert_int_equal(gp_pool_release(fx->pool, -1, 2 * cb(4 * KiB), GP_CAUSE_CAP, &res), GP_OK);
	assert_int_equal(res.blocks, 4);
	for (int i = 0; i < 4; i++)
		assert_false(fake_holds(&fx->fake, p[i], NULL, NULL));
	assert_true(fake_holds(&fx->fake, p[4], NULL, NULL));
	assert_true(fake_holds(&fx->fake, p[5], NULL, NULL));
}

/* A release to a target started between the owner's section that pushed its oldest block out
 * of the cache and the owner's putting it back on its list: given up to 200 ms to finish first
 * (without the wait for the owner, it lists the cache's newer blocks ahead of the pushed one). */
static sem_t evict_race_done;
static pthread_t evict_race_thread;
static uint64_t evict_race_target;

static void *evict_release_main(void *arg)
{
	(void)arg;
	gp_pool_release(race_fx->pool, -1, evict_race_target, GP_CAUSE_CAP, NULL);
	sem_post(&evict_race_done);
	return NULL;
}

static void after_evict(struct gp_pool *p)
{
	struct timespec ts;

	(void)p;
	gp_pool_test_after_evict = NULL;
	assert_int_equal(pthread_create(&evict_race_thread, NULL, evict_release_main, NULL), 0);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 200 * 1000 * 1000;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	(void)sem_timedwait(&evict_race_done, &ts); /* a wait that ends is the order given up */
}

/* Proves: a release that comes between a free's push of the class's oldest block out of the full
 * cache and the owner's putting it back on its list still gives back the oldest block: five
 * frees of one size (the cache keeps four), and a release that keeps four blocks started in that
 * window gives back the block freed first, never one of the four newer ones. */
static void test_release_waits_for_relist(void **state)
{
	struct fx *fx = *state;
	void *p[5];

	need_tcache(fx);
	alloc_free(fx, p, 5, 16 * KiB, 4);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 4);
	race_fx = fx;
	evict_race_target = 4 * cb(16 * KiB);
	sem_init(&evict_race_done, 0, 0);
	gp_pool_test_after_evict = after_evict;
	fx_free(fx, p[4]); /* pushes p[0] out of the cache */
	assert_null(gp_pool_test_after_evict);
	assert_int_equal(pthread_join(evict_race_thread, NULL), 0);
	assert_false(fake_holds(&fx->fake, p[0], NULL, NULL));
	for (int i = 1; i < 5; i++)
		assert_true(fake_holds(&fx->fake, p[i], NULL, NULL));
	sem_destroy(&evict_race_done);
}

/* Proves: a block's idle age in a thread cache is never counted from before its free, though the
 * free reads no clock: freed 20 s into the clock's run and looked at by a release of the blocks
 * freed before 15 s, it stays (the release moved it to its list, stamped then); 10 s later a
 * release of those freed before 25 s gives it back. */
static void test_cached_age_not_before_free(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *a;

	need_tcache(fx);
	fake_set_clock(&fx->fake, 20 * SEC);
	a = fx_alloc(fx, 0, 64 * KiB);
	fx_free(fx, a);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 1);
	assert_int_equal(gp_pool_release_idle(fx->pool, -1, 15 * SEC, GP_CAUSE_IDLE, &res), GP_OK);
	assert_int_equal(res.blocks, 0);
	assert_true(fake_holds(&fx->fake, a, NULL, NULL));
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 0);
	fake_advance_clock(&fx->fake, 10 * SEC);
	assert_int_equal(gp_pool_release_idle(fx->pool, -1, 25 * SEC, GP_CAUSE_IDLE, &res), GP_OK);
	assert_int_equal(res.blocks, 1);
	assert_false(fake_holds(&fx->fake, a, NULL, NULL));
}

/* A thread that takes a block of `size` from its own cache (allocated, freed, allocated again: the
 * cache owns it), hands it over, and at `go` frees one more block of its cache's, counting the
 * locked instructions of that free. */
struct keeper {
	struct fx *fx;
	size_t size;
	void *owned;
	unsigned long rmw; /* of its free after `go` */
	int freed_rc;      /* that free's answer */
	sem_t ready, go, done;
};

static void *keeper_main(void *arg)
{
	struct keeper *k = arg;
	unsigned long rmw;
	void *x;

	k->owned = fx_alloc(k->fx, 0, k->size);
	fx_free(k->fx, k->owned);
	k->owned = fx_alloc(k->fx, 0, k->size);
	x = fx_alloc(k->fx, 0, k->size);
	fx_free(k->fx, x);
	x = fx_alloc(k->fx, 0, k->size); /* from the cache: owned too */
	sem_post(&k->ready);
	sem_wait(&k->go);
	rmw = gp_pool_test_rmw_count();
	k->freed_rc = gp_pool_free(k->fx->pool, x);
	k->rmw = gp_pool_test_rmw_count() - rmw;
	sem_post(&k->done);
	return NULL;
}

static void keeper_start(struct keeper *k, pthread_t *t, struct fx *fx, size_t size)
{
	memset(k, 0, sizeof(*k));
	k->fx = fx;
	k->size = size;
	sem_init(&k->ready, 0, 0);
	sem_init(&k->go, 0, 0);
	sem_init(&k->done, 0, 0);
	assert_int_equal(pthread_create(t, NULL, keeper_main, k), 0);
	sem_wait(&k->ready);
}

static void keeper_end(struct keeper *k, pthread_t t)
{
	sem_post(&k->go);
	sem_wait(&k->done);
	assert_int_equal(pthread_join(t, NULL), 0);
	sem_destroy(&k->ready);
	sem_destroy(&k->go);
	sem_destroy(&k->done);
}

/* Proves: another thread's free of a block a thread's cache owns makes that cache shared (one
 * revoke, and the stats say so while its thread holds it), succeeds once (a second free of it is a
 * double free), and leaves the block cached; the owner's own frees take the compare-and-swap from
 * then on (one locked instruction). */
static void test_foreign_free_makes_cache_shared(void **state)
{
	struct fx *fx = *state;
	struct keeper k;
	pthread_t t;

	need_tcache(fx);
	keeper_start(&k, &t, fx, 8 * KiB);
	assert_int_equal(fx_stats(fx, 0).tcaches, 1);
	assert_int_equal(fx_stats(fx, 0).tcaches_shared, 0);
	assert_int_equal(gp_pool_free(fx->pool, k.owned), GP_OK);
	assert_int_equal(fx_stats(fx, 0).tcaches_shared, 1);
	assert_int_equal(gp_pool_free(fx->pool, k.owned), GP_EINVAL);
	assert_int_equal(fx_stats(fx, 0).bad_frees, 1);
	keeper_end(&k, t);
	/* Its thread left it: this thread's own cache (its free cached the block there) is left. */
	assert_int_equal(fx_stats(fx, 0).tcaches, 1);
	assert_int_equal(fx_stats(fx, 0).tcaches_shared, 0);
	assert_int_equal(k.freed_rc, GP_OK);
	assert_int_equal(k.rmw, 1);
	assert_int_equal(fx_stats(fx, 0).live_blocks, 0);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 2);
}

/* Proves: a thread holding (for a graph) a block another thread's cache owns makes that cache
 * shared first; the hold succeeds, and so does the unhold, which caches the block. */
static void test_hold_makes_cache_shared(void **state)
{
	struct fx *fx = *state;
	struct keeper k;
	uint32_t ticket;
	pthread_t t;

	need_tcache(fx);
	keeper_start(&k, &t, fx, 8 * KiB);
	assert_int_equal(gp_pool_hold(fx->pool, k.owned, &ticket, NULL, NULL), GP_OK);
	assert_int_equal(fx_stats(fx, 0).tcaches_shared, 1);
	assert_int_equal(gp_pool_unhold(fx->pool, k.owned, ticket), GP_OK);
	keeper_end(&k, t);
	assert_int_equal(k.rmw, 1);
	assert_int_equal(fx_stats(fx, 0).live_blocks, 0);
}

/* The owner's free of its block, staged: inside its section, between its look at the state and
 * its store, another thread frees the same block (a double free racing it). */
static sem_t own_in_window, foreign_done;
static void *own_raced;
static int foreign_rc = -100, foreign_early;

static void *foreign_free_main(void *arg)
{
	(void)arg;
	sem_wait(&own_in_window);
	foreign_rc = gp_pool_free(race_fx->pool, own_raced);
	sem_post(&foreign_done);
	return NULL;
}

static void in_own_free(void *ptr)
{
	struct timespec ts;

	gp_pool_test_in_own_free = NULL;
	assert_ptr_equal(ptr, own_raced);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 1; /* the foreign free's time to get through */
	sem_post(&own_in_window);
	/* A free that got through here would have freed the block under the owner's store. */
	while ((foreign_early = sem_timedwait(&foreign_done, &ts) == 0) == 0 && errno == EINTR)
		;
}

/* Proves: a double free racing the owner's own free, staged inside the owner's section (where its
 * store is plain), waits for the section to end (the revoke) and then fails: the block is freed
 * once, cached once, and counted as one bad free. */
static void test_foreign_free_waits_for_owner(void **state)
{
	struct fx *fx = *state;
	pthread_t t;
	void *a;

	need_tcache(fx);
	a = fx_alloc(fx, 0, 16 * KiB);
	fx_free(fx, a);
	own_raced = fx_alloc(fx, 0, 16 * KiB); /* from the cache: ours */
	race_fx = fx;
	sem_init(&own_in_window, 0, 0);
	sem_init(&foreign_done, 0, 0);
	assert_int_equal(pthread_create(&t, NULL, foreign_free_main, NULL), 0);
	gp_pool_test_in_own_free = in_own_free;
	assert_int_equal(gp_pool_free(fx->pool, own_raced), GP_OK);
	assert_null(gp_pool_test_in_own_free); /* the plain store was staged */
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_false(foreign_early);
	assert_int_equal(foreign_rc, GP_EINVAL);
	assert_int_equal(fx_stats(fx, 0).bad_frees, 1);
	assert_int_equal(fx_stats(fx, 0).live_blocks, 0);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 1);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 1);
	assert_ptr_equal(fx_alloc(fx, 0, 16 * KiB), own_raced);
	assert_ptr_not_equal(fx_alloc(fx, 0, 16 * KiB), own_raced);
	sem_destroy(&own_in_window);
	sem_destroy(&foreign_done);
}

/* The free in its section: a stream is created and its fence recorded and done right there,
 * between the free's look at the ordered mode and its epoch. */
static void stream_made_in_free(struct gp_pool *p)
{
	gp_pool_test_in_section = NULL;
	gp_pool_set_ordered(p, 0);
	fx_settle(race_fx);
}

/* Proves: a block that a free put in its cache while a stream was created (so stamped after the
 * fence that the end of ordered mode asked for) is covered by a later fence once the cache goes
 * to the lists: it settles and becomes reusable, not pending for good. */
static void test_fence_after_ordered_ends_in_free(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats st;
	void *a, *b;

	need_tcache(fx);
	a = fx_alloc(fx, 0, 64 * KiB);
	race_fx = fx;
	gp_pool_test_in_section = stream_made_in_free;
	fx_free(fx, a);
	assert_null(gp_pool_test_in_section);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 1);
	b = fx_alloc(fx, 0, 64 * KiB); /* the cache goes to the lists; a is fenced */
	assert_ptr_not_equal(a, b);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 0);
	fx_settle(fx);
	st = fx_stats(fx, 0);
	assert_int_equal(st.pending_blocks, 0);
	assert_int_equal(st.idle_blocks, 1);
	fx_free(fx, b);
}

/* Proves: a thread that exits hands its cache back: its blocks are in the lists (still cached,
 * counted), and the next thread's allocation of the size gets one with no backend call. */
static void test_exit_hands_cache_back(void **state)
{
	struct fx *fx = *state;
	struct owner o;
	pthread_t t;
	uint64_t allocs;
	void *a;

	need_tcache(fx);
	owner_start(&o, &t, fx, 8 * KiB, 2);
	sem_post(&o.go);
	sem_wait(&o.done);
	owner_end(&o, t);
	assert_int_equal(gp_pool_test_tcaches_blocks(fx->pool), 0);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 2);
	allocs = fake_calls(&fx->fake, FAKE_OP_ALLOC);
	a = fx_alloc(fx, 0, 8 * KiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), allocs);
	fx_free(fx, a);
}

/* Proves: a cache holds at most TC_CLASS_MAX (4) blocks of a size and cfg.tcache_bytes in all;
 * the rest go to the lists, cached and counted all the same. */
static void test_bounds(void **state)
{
	struct fx *fx = *state;
	void *p[8];

	need_tcache(fx);
	alloc_free(fx, p, 6, 4 * KiB, 6);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 4);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 6);
	alloc_free(fx, p, 3, 2 * MiB, 3);
	assert_true(gp_pool_test_tcache_bytes(fx->pool) <= TC_BYTES);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 5); /* one 2 MiB block fits */
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 9);
}

/* Proves: a second free of a block in the thread's cache is a double free (GP_EINVAL, counted),
 * changes nothing, and the block is handed out once. */
static void test_double_free_caught(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *c;

	need_tcache(fx);
	a = fx_alloc(fx, 0, 512);
	fx_free(fx, a);
	assert_int_equal(gp_pool_free(fx->pool, a), GP_EINVAL);
	assert_int_equal(fx_stats(fx, 0).bad_frees, 1);
	assert_int_equal(gp_pool_test_tcache_blocks(fx->pool), 1);
	b = fx_alloc(fx, 0, 512);
	c = fx_alloc(fx, 0, 512);
	assert_ptr_equal(a, b);
	assert_ptr_not_equal(b, c);
	fx_free(fx, b);
	fx_free(fx, c);
}

/* A release started from inside the owner's section: it must wait for the section to end. */
static sem_t race_started;
static volatile int race_released;
static pthread_t race_thread;

static void *release_main(void *arg)
{
	(void)arg;
	sem_post(&race_started);
	gp_pool_release(race_fx->pool, -1, 0, GP_CAUSE_PRESSURE, NULL);
	race_released = 1;
	return NULL;
}

static void in_section(struct gp_pool *p)
{
	struct timespec ts = { 0, 50 * 1000 * 1000 };

	(void)p;
	gp_pool_test_in_section = NULL;
	sem_init(&race_started, 0, 0);
	assert_int_equal(pthread_create(&race_thread, NULL, release_main, NULL), 0);
	sem_wait(&race_started);
	nanosleep(&ts, NULL);
	assert_false(race_released); /* the thief waits for the owner */
}

/* Proves: a release that comes while the owner is inside its section (taking a block from its
 * cache) waits for it, then gives back what is left, never the block just handed out. */
static void test_release_waits_for_owner(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats st;
	void *p[3], *a;

	need_tcache(fx);
	alloc_free(fx, p, 3, 32 * KiB, 3);
	race_fx = fx;
	race_released = 0;
	gp_pool_test_in_section = in_section;
	a = fx_alloc(fx, 0, 32 * KiB);
	assert_int_equal(pthread_join(race_thread, NULL), 0);
	assert_true(race_released);
	st = fx_stats(fx, 0);
	assert_int_equal(st.live_blocks, 1);
	assert_int_equal(st.idle_blocks + st.pending_blocks, 0);
	assert_int_equal(fake_used_total(&fx->fake), cb(32 * KiB));
	assert_true(fake_holds(&fx->fake, a, NULL, NULL));
	fx_free(fx, a);
	sem_destroy(&race_started);
}

/* The owner allocates while a thief holds its cache: it must not wait, nor get a block from it. */
static void *stolen_alloc;

static void *alloc_main(void *arg)
{
	(void)arg;
	stolen_alloc = fx_alloc(race_fx, 0, 32 * KiB);
	return NULL;
}

static struct owner *steal_owner;

static void in_steal(struct gp_pool *p)
{
	(void)p;
	gp_pool_test_in_steal = NULL;
	sem_post(&steal_owner->go); /* the owner allocates now, while its cache is held */
	sem_wait(&steal_owner->done);
}

/* Proves: an owner that allocates while a release holds its cache keeps out of it (served from
 * the lists or the backend, without waiting), and the release gives back every block the cache
 * held; nothing is handed out twice. */
static void test_owner_allocates_during_steal(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	struct owner o;
	pthread_t t;

	need_tcache(fx);
	(void)alloc_main;
	owner_start(&o, &t, fx, 32 * KiB, 2);
	race_fx = fx;
	steal_owner = &o;
	gp_pool_test_in_steal = in_steal;
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_SIGNAL, &res), GP_OK);
	assert_null(gp_pool_test_in_steal);
	/* The two it held, and the owner's new block if its free (into the lists: its cache was
	 * held) came before the release's pass over them. */
	assert_true(res.blocks == 2 || res.blocks == 3);
	assert_int_equal(gp_pool_test_tcaches_blocks(fx->pool), 0);
	owner_end(&o, t);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 3 - res.blocks);
	assert_int_equal(fake_used_total(&fx->fake), (3 - res.blocks) * cb(32 * KiB));
}

/* Many threads allocating and freeing while releases run: nothing lost, nothing twice. */
#define CHURN_THREADS 4
#define CHURN_ROUNDS 3000

static void *churn_main(void *arg)
{
	struct fx *fx = arg;
	void *p[4];

	for (int r = 0; r < CHURN_ROUNDS; r++) {
		for (int i = 0; i < 4; i++) {
			p[i] = fx_alloc(fx, 0, (size_t)(512 << (i + (r & 3))));
			*(volatile uint8_t *)p[i] = (uint8_t)r;
		}
		for (int i = 0; i < 4; i++)
			fx_free(fx, p[i]);
	}
	return NULL;
}

/* Proves: threads churning through their caches while another thread releases again and again
 * lose no block and hand none out twice (the fake checks every backend free; the lists keep
 * their invariants); afterwards one release gives back every byte. */
static void test_churn_with_releases(void **state)
{
	struct fx *fx = *state;
	pthread_t t[CHURN_THREADS];
	struct gp_pool_dev_stats st;

	need_tcache(fx);
	for (int i = 0; i < CHURN_THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, churn_main, fx), 0);
	for (int i = 0; i < 200; i++)
		gp_pool_release(fx->pool, -1, i & 1 ? 0 : 64 * KiB, GP_CAUSE_PRESSURE, NULL);
	for (int i = 0; i < CHURN_THREADS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	st = fx_stats(fx, 0);
	assert_int_equal(st.live_blocks, 0);
	assert_int_equal(st.allocs, (uint64_t)CHURN_THREADS * CHURN_ROUNDS * 4);
	assert_int_equal(st.frees, st.allocs);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, NULL), GP_OK);
	assert_int_equal(fake_used_total(&fx->fake), 0);
	assert_int_equal(fake_misuse(&fx->fake), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_own_free_then_alloc_takes_no_lock,
						setup_ordered_tc, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fenced_block_never_enters, setup_unordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_takes_idle_owners_cache,
						setup_ordered_tc, fx_teardown),
		cmocka_unit_test_setup_teardown(test_miss_takes_other_threads_block,
						setup_ordered_tc, fx_teardown),
		cmocka_unit_test_setup_teardown(test_exit_hands_cache_back, setup_ordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_bounds, setup_ordered_tc, fx_teardown),
		cmocka_unit_test_setup_teardown(test_double_free_caught, setup_ordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_waits_for_relist, setup_ordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_waits_for_owner, setup_ordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_owner_allocates_during_steal, setup_ordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_churn_with_releases, setup_ordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_miss_takes_larger_cached_block,
						setup_oversize_tc, fx_teardown),
		cmocka_unit_test_setup_teardown(test_cached_age_not_before_free, setup_ordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_foreign_free_makes_cache_shared,
						setup_ordered_tc, fx_teardown),
		cmocka_unit_test_setup_teardown(test_hold_makes_cache_shared, setup_ordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_foreign_free_waits_for_owner, setup_ordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_oldest_first, setup_ordered_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_trim_takes_cached_block, setup_trim_tc,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_fence_after_ordered_ends_in_free,
						setup_ordered_tc, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
