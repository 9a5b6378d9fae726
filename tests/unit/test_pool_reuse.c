/* test_pool_reuse.c — when a freed block may be handed out again: by size class, at once in
 * ordered mode, and in unordered mode only after a fence recorded after its free has completed
 * (fences taken in recording order; a fence that cannot be recorded means no reuse, nothing
 * worse). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"

/* Proves: alloc/free/alloc of one size returns the same pointer with a single backend alloc, of
 * exactly the class size, counted as a hit; and free makes no backend call. */
static void test_same_size_reuses_block(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	int dev = -1;
	void *a, *b;

	a = fx_alloc(fx, 0, 1000);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	assert_int_equal(fake_last_alloc_bytes(&fx->fake, &dev), cb(1000));
	assert_int_equal(dev, 0);
	assert_int_equal(gp_pool_block_size(fx->pool, a, &dev), cb(1000));
	fx_free(fx, a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 0);
	b = fx_alloc(fx, 0, 1000);
	assert_ptr_equal(a, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	s = fx_stats(fx, 0);
	assert_int_equal(s.hits, 1);
	assert_int_equal(s.real_allocs, 1);
	fx_free(fx, b);
}

/* Proves: a request of a smaller class does not take a cached block of a bigger class; it gets a
 * new backend allocation of its own class size. */
static void test_smaller_class_does_not_take_bigger_block(void **state)
{
	struct fx *fx = *state;
	unsigned c = gp_pool_class_of(MiB);
	size_t small = gp_pool_class_bytes(c - 1);
	void *big, *p;

	assert_true(c > 0);
	big = fx_alloc(fx, 0, MiB);
	fx_free(fx, big);
	p = fx_alloc(fx, 0, small);
	assert_ptr_not_equal(p, big);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	assert_int_equal(fake_last_alloc_bytes(&fx->fake, NULL), small);
	assert_int_equal(fx_stats(fx, 0).hits, 0);
	fx_free(fx, p);
}

/* Proves: different request sizes within one class share blocks: the smallest and the largest
 * request of a class each reuse the block the other freed. */
static void test_same_class_different_sizes_reuse(void **state)
{
	struct fx *fx = *state;
	unsigned c = gp_pool_class_of(3 * MiB);
	size_t lo = gp_pool_class_bytes(c - 1) + 1, hi = gp_pool_class_bytes(c);
	void *a, *b, *d;

	assert_int_equal(gp_pool_class_of(lo), c);
	a = fx_alloc(fx, 0, lo);
	fx_free(fx, a);
	b = fx_alloc(fx, 0, hi);
	assert_ptr_equal(a, b);
	fx_free(fx, b);
	d = fx_alloc(fx, 0, lo);
	assert_ptr_equal(a, d);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	assert_int_equal(fx_stats(fx, 0).hits, 2);
	fx_free(fx, d);
}

/* Proves: in ordered mode a freed block is reused at once and no fence is ever recorded. */
static void test_ordered_reuses_without_fence(void **state)
{
	struct fx *fx = *state;
	void *a, *b;
	int i;

	a = fx_alloc(fx, 0, 64 * KiB);
	for (i = 0; i < 100; i++) {
		fx_free(fx, a);
		b = fx_alloc(fx, 0, 64 * KiB);
		assert_ptr_equal(a, b);
	}
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	fx_free(fx, a);
}

/* Proves: in unordered mode a freed block is not handed out while no fence covers its free (the
 * pool allocates anew, without waiting on any fence), and is handed out once a fence recorded
 * after the free has completed and been polled. */
static void test_unordered_needs_completed_fence(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *a, *b, *c;

	a = fx_alloc(fx, 0, 4096);
	fx_free(fx, a);
	s = fx_stats(fx, 0);
	assert_int_equal(s.pending_blocks, 1);
	assert_int_equal(s.idle_blocks, 0);
	b = fx_alloc(fx, 0, 4096);
	assert_ptr_not_equal(a, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	/* nothing completed yet: polling alone must not make it reusable */
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	assert_true(fake_fences_recorded(&fx->fake) >= 1);
	c = fx_alloc(fx, 0, 4096);
	assert_ptr_not_equal(c, a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 3);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_WAIT), 0);

	fake_complete_all_fences(&fx->fake);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	s = fx_stats(fx, 0);
	assert_int_equal(s.pending_blocks, 0);
	assert_int_equal(s.idle_blocks, 1);
	assert_ptr_equal(fx_alloc(fx, 0, 4096), a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 3);
	fx_free(fx, a);
	fx_free(fx, b);
	fx_free(fx, c);
}

/* Proves: the allocation miss path polls fences itself: after a fence covering a free completes,
 * the next allocation of that class reuses the block without an explicit gp_pool_advance. */
static void test_unordered_miss_path_polls_fences(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *c;

	a = fx_alloc(fx, 0, 8192);
	fx_free(fx, a);
	b = fx_alloc(fx, 0, 8192); /* a miss: may record the fence that covers a's free */
	assert_ptr_not_equal(a, b);
	if (fake_fences_recorded(&fx->fake) == 0)
		assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	assert_true(fake_fences_recorded(&fx->fake) >= 1);
	fake_complete_all_fences(&fx->fake);
	c = fx_alloc(fx, 0, 8192);
	assert_ptr_equal(a, c);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fx_free(fx, b);
	fx_free(fx, c);
}

/* Proves: only a fence recorded after a free releases that block: a fence that was recorded
 * before the free (and completes) makes the earlier-freed block reusable but not this one. */
static void test_fence_recorded_before_free_does_not_cover_it(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *p, *q;
	size_t f1;

	a = fx_alloc(fx, 0, 20000);
	b = fx_alloc(fx, 0, 20000);
	fx_free(fx, b);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	f1 = fake_fences_recorded(&fx->fake);
	assert_true(f1 >= 1);
	fx_free(fx, a);
	fake_complete_fence(&fx->fake, f1); /* the fence that covers b only */
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	p = fx_alloc(fx, 0, 20000);
	assert_ptr_equal(p, b);
	q = fx_alloc(fx, 0, 20000);
	assert_ptr_not_equal(q, a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 3);
	fx_settle(fx);
	assert_ptr_equal(fx_alloc(fx, 0, 20000), a);
	fx_free(fx, a);
	fx_free(fx, p);
	fx_free(fx, q);
}

/* Proves: fences are taken in recording order: when a later fence completes before an earlier
 * one, blocks covered only by the earlier, incomplete fence stay pending. */
static void test_fences_complete_in_order(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *p[2];
	size_t f1, f2;
	int i;

	a = fx_alloc(fx, 0, 100000);
	b = fx_alloc(fx, 0, 100000);
	fx_free(fx, a);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	f1 = fake_fences_recorded(&fx->fake);
	fx_free(fx, b);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	f2 = fake_fences_recorded(&fx->fake);
	assert_true(f1 >= 1);
	assert_true(f2 > f1); /* b's free was not covered, so advance recorded a new fence */
	fake_complete_fence(&fx->fake, f2);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	assert_true(fx_stats(fx, 0).pending_blocks >= 1);
	for (i = 0; i < 2; i++) {
		p[i] = fx_alloc(fx, 0, 100000);
		assert_ptr_not_equal(p[i], a);
	}
	fake_complete_fence(&fx->fake, f1);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	fx_settle(fx);
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 0);
	assert_true(fx_stats(fx, 0).idle_blocks >= 1);
	for (i = 0; i < 2; i++)
		fx_free(fx, p[i]);
}

/* Proves: when fence_record answers GP_EAGAIN (a graph capture), unfenced blocks are not reused,
 * calls still succeed, and once recording works again the blocks are fenced and reused. */
static void test_fence_eagain_means_no_reuse(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *a, *b, *c;

	fake_set_fence_record_rc(&fx->fake, GP_EAGAIN);
	a = fx_alloc(fx, 0, 300000);
	fx_free(fx, a);
	gp_pool_advance(fx->pool, 0);
	fake_complete_all_fences(&fx->fake);
	gp_pool_advance(fx->pool, 0);
	b = fx_alloc(fx, 0, 300000);
	assert_ptr_not_equal(a, b);
	fx_free(fx, b);
	gp_pool_advance(fx->pool, 0);
	s = fx_stats(fx, 0);
	assert_int_equal(s.pending_blocks, 2);
	assert_int_equal(s.idle_blocks, 0);
	assert_int_equal(s.live_blocks, 0);
	assert_int_equal(fake_fences_recorded(&fx->fake), 0);

	fake_set_fence_record_rc(&fx->fake, GP_OK);
	fx_settle(fx);
	s = fx_stats(fx, 0);
	assert_int_equal(s.pending_blocks, 0);
	assert_int_equal(s.idle_blocks, 2);
	c = fx_alloc(fx, 0, 300000);
	assert_true(c == a || c == b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fx_free(fx, c);
}

/* Proves: gp_pool_advance(pool, 1) waits (through fence_wait) until every pending free is fenced,
 * so the blocks are idle afterwards without completing anything by hand. */
static void test_advance_wait_makes_pending_idle(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *a, *b;

	a = fx_alloc(fx, 0, 5000);
	b = fx_alloc(fx, 0, 7 * MiB);
	fx_free(fx, a);
	fx_free(fx, b);
	assert_int_equal(gp_pool_advance(fx->pool, 1), GP_OK);
	assert_true(fake_calls(&fx->fake, FAKE_OP_FENCE_WAIT) >= 1);
	s = fx_stats(fx, 0);
	assert_int_equal(s.pending_blocks, 0);
	assert_int_equal(s.idle_blocks, 2);
	assert_ptr_equal(fx_alloc(fx, 0, 5000), a);
	assert_ptr_equal(fx_alloc(fx, 0, 7 * MiB), b);
	fx_free(fx, a);
	fx_free(fx, b);
}

/* Proves: every fence the pool has recorded and seen complete is destroyed (no leaked events). */
static void test_completed_fences_are_destroyed(void **state)
{
	struct fx *fx = *state;
	size_t i, n;
	void *a;

	for (i = 0; i < 5; i++) {
		a = fx_alloc(fx, 0, 4096);
		fx_free(fx, a);
		fx_settle(fx);
	}
	n = fake_fences_recorded(&fx->fake);
	assert_true(n >= 1);
	for (i = 1; i <= n; i++) {
		if (!fake_fence_destroyed(&fx->fake, i))
			fail_msg("fence %zu of %zu is complete and polled but never destroyed", i, n);
	}
}

/* Proves: blocks freed in ordered mode need a fence once ordered mode is turned off. */
static void test_set_unordered_fences_earlier_frees(void **state)
{
	struct fx *fx = *state;
	void *a, *b;

	a = fx_alloc(fx, 0, 2 * MiB);
	fx_free(fx, a);
	gp_pool_set_ordered(fx->pool, 0);
	b = fx_alloc(fx, 0, 2 * MiB);
	assert_ptr_not_equal(a, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fx_settle(fx);
	assert_ptr_equal(fx_alloc(fx, 0, 2 * MiB), a);
	fx_free(fx, b);
	/* still unordered: b waits for a fence */
	assert_ptr_not_equal(fx_alloc(fx, 0, 2 * MiB), b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 3);
	fx_free(fx, a);
}

static int setup_reuse_wait(void **state, uint64_t ns)
{
	struct gp_pool_config cfg = { .ordered = 0, .reuse_wait_ns = ns };

	return fx_setup_cfg(state, &cfg);
}

static int setup_wait_1s(void **state)
{
	return setup_reuse_wait(state, 1000000000u);
}

static int setup_wait_5ms(void **state)
{
	return setup_reuse_wait(state, 5000000u);
}

/* Proves: with reuse_wait_ns, a miss whose class holds only fenced blocks (two, 128 MiB in
 * all) drives the fences until one may be reused (the fence completes on its third poll) and
 * hands it out: no third backend allocation, so the pool does not grow by what a fence's
 * latency holds. */
static void test_miss_waits_for_fenced_block(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *c;

	fake_set_fence_auto(&fx->fake, 3);
	a = fx_alloc(fx, 0, 64 * MiB);
	b = fx_alloc(fx, 0, 64 * MiB);
	fx_free(fx, a);
	fx_free(fx, b);
	c = fx_alloc(fx, 0, 64 * MiB);
	assert_true(c == a || c == b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	assert_true(fake_fences_recorded(&fx->fake) >= 1);
	assert_int_equal(fx_stats(fx, 0).fence_waits, 1);
	assert_int_equal(fx_stats(fx, 0).fence_wait_timeouts, 0);
	fx_free(fx, c);
}

/* Proves: the wait is bounded: fences that never complete (a busy GPU) cost the miss about
 * reuse_wait_ns, then a real allocation; no fenced block is handed out. And it naps: after its
 * first 50 us it sleeps between polls, so 5 ms cost well under 5000 fence queries (polling back
 * to back would make far more). */
static void test_miss_wait_is_bounded(void **state)
{
	struct fx *fx = *state;
	uint64_t t0, dt, q0, queries;
	void *a, *b, *c;

	a = fx_alloc(fx, 0, 64 * MiB);
	b = fx_alloc(fx, 0, 64 * MiB);
	fx_free(fx, a);
	fx_free(fx, b);
	q0 = fake_calls(&fx->fake, FAKE_OP_FENCE_QUERY);
	t0 = fx_mono_ns();
	c = fx_alloc(fx, 0, 64 * MiB);
	dt = fx_mono_ns() - t0;
	queries = fake_calls(&fx->fake, FAKE_OP_FENCE_QUERY) - q0;
	assert_true(c != a && c != b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 3);
	assert_true(dt >= 5000000u);
	assert_true(queries >= 2);
	assert_true(queries < 5000);
	assert_true(dt < 2000000000u); /* generous: a loaded CI machine */
	assert_int_equal(fx_stats(fx, 0).fence_waits, 1);
	assert_int_equal(fx_stats(fx, 0).fence_wait_timeouts, 1);
	fx_free(fx, c);
}

/* Proves: no wait while the class's fenced blocks are few or small (one 64 MiB block; eight
 * 8 KiB blocks): a new block is cheaper, and a loop over one size rotates through a few blocks
 * at the speed of a hit. The miss polls the fences once, as without reuse_wait_ns. */
static void test_no_wait_below_threshold(void **state)
{
	struct fx *fx = *state;
	void *big, *p[8], *q;

	big = fx_alloc(fx, 0, 64 * MiB);
	fx_free(fx, big);
	q = fx_alloc(fx, 0, 64 * MiB);
	assert_ptr_not_equal(q, big);
	fx_free(fx, q);
	for (int i = 0; i < 8; i++)
		p[i] = fx_alloc(fx, 0, 8192);
	for (int i = 0; i < 8; i++)
		fx_free(fx, p[i]);
	q = fx_alloc(fx, 0, 8192);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2 + 9);
	assert_int_equal(fx_stats(fx, 0).fence_waits, 0);
	fx_free(fx, q);
}

#define BATCH 8
#define MANY 64 /* 1 MiB blocks: 64 MiB, a class worth waiting for */

static int setup_wait_20ms_batch8(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .reuse_wait_ns = 20000000u, .fence_batch = BATCH };

	return fx_setup_cfg(state, &cfg);
}

struct two_threads {
	struct fx *fx;
	int many;   /* blocks of 1 MiB the first thread frees onto its own list */
	void **p;
	uint64_t waits_short, allocs_short, waits_batch, allocs_batch;
	void *got;
};

/* The first thread: t->many blocks of 1 MiB freed onto its own list, all fenced. */
static void *fill_other_list(void *arg)
{
	struct two_threads *t = arg;

	for (int i = 0; i < t->many; i++)
		t->p[i] = fx_alloc(t->fx, 0, MiB);
	for (int i = 0; i < t->many; i++)
		fx_free(t->fx, t->p[i]);
	return NULL;
}

/* The second thread (another list: threads get their lists in turn): a miss with its own list
 * empty, then one with its own list holding a batch plus one. No fence ever completes. */
static void *miss_short_then_batch(void *arg)
{
	struct two_threads *t = arg;
	struct fx *fx = t->fx;
	void *mine[BATCH + 1];
	uint64_t a0 = fake_calls(&fx->fake, FAKE_OP_ALLOC);

	mine[0] = fx_alloc(fx, 0, MiB);
	t->waits_short = fx_stats(fx, 0).fence_waits;
	t->allocs_short = fake_calls(&fx->fake, FAKE_OP_ALLOC) - a0;
	for (int i = 1; i <= BATCH; i++)
		mine[i] = fx_alloc(fx, 0, MiB);
	for (int i = 0; i <= BATCH; i++)
		fx_free(fx, mine[i]);
	a0 = fake_calls(&fx->fake, FAKE_OP_ALLOC);
	t->got = fx_alloc(fx, 0, MiB);
	t->waits_batch = fx_stats(fx, 0).fence_waits - t->waits_short;
	t->allocs_batch = fake_calls(&fx->fake, FAKE_OP_ALLOC) - a0;
	return NULL;
}

static void run_two_threads(struct two_threads *t)
{
	pthread_t th;

	t->p = calloc((size_t)t->many, sizeof(*t->p));
	assert_non_null(t->p);
	assert_int_equal(pthread_create(&th, NULL, fill_other_list, t), 0);
	pthread_join(th, NULL);
	assert_int_equal(pthread_create(&th, NULL, miss_short_then_batch, t), 0);
	pthread_join(th, NULL);
	free(t->p);
}

/* Proves: a small class worth waiting for (64 MiB of 1 MiB blocks, all fenced, on another
 * thread's list) does not make a thread whose own list is shorter than a fence batch wait: it
 * grows at once (one real allocation, no wait). At 16 threads 64 MiB is 4 blocks a thread, fewer
 * than a batch: without this rule nearly every miss would wait. Once its own list holds a batch,
 * its miss waits for the fences (to the 20 ms bound here: none completes). */
static void test_short_own_list_grows_before_waiting(void **state)
{
	struct two_threads t = { .fx = *state, .many = MANY };

	run_two_threads(&t);
	assert_int_equal(t.waits_short, 0);
	assert_int_equal(t.allocs_short, 1);
	assert_int_equal(t.waits_batch, 1);
	assert_int_equal(fx_stats(t.fx, 0).fence_wait_timeouts, 1);
	assert_int_equal(t.allocs_batch, 1);
	fx_free(t.fx, t.got);
}

/* Proves: a short own list grows only while the class holds fewer than a batch a list
 * (GP_STRIPES * 8 blocks): with that many fenced on another thread's list, the miss with its own
 * list empty waits too (to the 20 ms bound) before its one real allocation. Without this bound
 * threads rob each other's lists below a batch and the class keeps growing
 * (e2e_reuse_threads_bound). */
static void test_short_own_list_waits_at_class_bound(void **state)
{
	struct two_threads t = { .fx = *state, .many = GP_STRIPES * BATCH };

	run_two_threads(&t);
	assert_int_equal(t.waits_short, 1);
	assert_int_equal(t.allocs_short, 1);
	assert_true(fx_stats(t.fx, 0).fence_wait_timeouts >= 1);
	fx_free(t.fx, t.got);
}

static int setup_poll(void **state, uint64_t wait_ns, uint64_t poll_ns)
{
	struct gp_pool_config cfg = { .ordered = 0, .reuse_wait_ns = wait_ns, .reuse_poll_ns = poll_ns };

	return fx_setup_cfg(state, &cfg);
}

static int setup_poll_1s(void **state)
{
	return setup_poll(state, 1000000000u, 1000000000u);
}

static int setup_poll_2ms(void **state)
{
	return setup_poll(state, 1000000000u, 2000000u);
}

static int setup_poll_above_wait(void **state)
{
	return setup_poll(state, 0, 1000000000u); /* reuse_wait 0: no poll either */
}

/* A 64 MiB block allocated and freed (*freed, fenced: the pool is unordered), then a 64 MiB
 * allocation: the miss that meets only that fenced block. */
static void *alloc_after_one_free(struct fx *fx, void **freed)
{
	*freed = fx_alloc(fx, 0, 64 * MiB);
	fx_free(fx, *freed);
	return fx_alloc(fx, 0, 64 * MiB);
}

/* Proves: with reuse_poll_ns, a miss whose class holds a single fenced block (below the
 * reuse_wait threshold) polls its fence until it completes (the third poll) and reuses the block:
 * no second backend allocation. Without it (test_no_wait_below_threshold) the pool grows. */
static void test_miss_polls_below_threshold(void **state)
{
	struct fx *fx = *state;
	void *a, *c;

	fake_set_fence_auto(&fx->fake, 3);
	c = alloc_after_one_free(fx, &a);
	assert_ptr_equal(c, a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	assert_int_equal(fx_stats(fx, 0).fence_waits, 1);
	assert_int_equal(fx_stats(fx, 0).fence_wait_timeouts, 0);
	fx_free(fx, c);
}

/* Proves: the poll is bounded by reuse_poll_ns (2 ms) although reuse_wait_ns is 1 s: fences that
 * never complete cost the miss about 2 ms, then a real allocation. */
static void test_miss_poll_is_bounded(void **state)
{
	struct fx *fx = *state;
	uint64_t t0, dt;
	void *a, *c;

	a = fx_alloc(fx, 0, 64 * MiB);
	fx_free(fx, a);
	t0 = fx_mono_ns();
	c = fx_alloc(fx, 0, 64 * MiB);
	dt = fx_mono_ns() - t0;
	assert_ptr_not_equal(c, a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	assert_true(dt >= 2000000u);
	assert_true(dt < 500000000u); /* far below reuse_wait_ns, generous for a loaded machine */
	assert_int_equal(fx_stats(fx, 0).fence_wait_timeouts, 1);
	fx_free(fx, c);
}

/* Proves: reuse_wait_ns 0 ("do not wait") turns the poll off too: one look, a new block. */
static void test_no_poll_when_wait_is_off(void **state)
{
	struct fx *fx = *state;
	void *a, *c;

	fake_set_fence_auto(&fx->fake, 3);
	c = alloc_after_one_free(fx, &a);
	assert_ptr_not_equal(c, a);
	assert_int_equal(fx_stats(fx, 0).fence_waits, 0);
	fx_free(fx, c);
}

static int setup_age_50ms(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .reuse_wait_ns = 1000000000u,
				      .reuse_age_ns = 50000000u };

	return fx_setup_cfg(state, &cfg);
}

/* Proves: with reuse_age_ns, a miss whose class holds a single fenced block (below the
 * reuse_wait threshold, no reuse_poll) grows while the fence covering the block is young (just
 * recorded by this miss), and waits for it once that fence is older than reuse_age_ns (50 ms):
 * the block is reused, no third backend allocation. */
static void test_miss_waits_for_an_old_fence(void **state)
{
	struct fx *fx = *state;
	struct timespec ts = { 0, 60000000 };
	void *a, *b, *c;

	b = alloc_after_one_free(fx, &a);
	assert_ptr_not_equal(b, a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	assert_int_equal(fx_stats(fx, 0).fence_waits, 0);
	assert_int_equal(fake_fences_recorded(&fx->fake), 1);
	nanosleep(&ts, NULL);
	fake_set_fence_auto(&fx->fake, 6); /* completes on a later poll of the wait */
	c = fx_alloc(fx, 0, 64 * MiB);
	assert_ptr_equal(c, a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	assert_int_equal(fx_stats(fx, 0).fence_waits, 1);
	assert_int_equal(fx_stats(fx, 0).fence_wait_timeouts, 0);
	fx_free(fx, b);
	fx_free(fx, c);
}

/* Proves: at or below 1 MiB the age does not make a miss wait: a new block costs little memory
 * there. The same steps as above with 1 MiB blocks: the pool grows both times. */
static void test_no_age_wait_at_1mib(void **state)
{
	struct fx *fx = *state;
	struct timespec ts = { 0, 60000000 };
	void *a, *b, *c;

	a = fx_alloc(fx, 0, 1 * MiB);
	fx_free(fx, a);
	b = fx_alloc(fx, 0, 1 * MiB);
	nanosleep(&ts, NULL);
	fake_set_fence_auto(&fx->fake, 6);
	c = fx_alloc(fx, 0, 1 * MiB);
	assert_true(b != a && c != a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 3);
	assert_int_equal(fx_stats(fx, 0).fence_waits, 0);
	fx_free(fx, b);
	fx_free(fx, c);
}

static int setup_batch_4(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .fence_batch = 4 };

	return fx_setup_cfg(state, &cfg);
}

/* `n` alloc/free pairs of one size, fences completing on their first poll; returns the fences
 * recorded, *allocs the backend allocations. */
static size_t loop_pairs(struct fx *fx, size_t bytes, int n, uint64_t *allocs)
{
	size_t f0 = fake_fences_recorded(&fx->fake);
	uint64_t a0 = fake_calls(&fx->fake, FAKE_OP_ALLOC);

	for (int i = 0; i < n; i++)
		fx_free(fx, fx_alloc(fx, 0, bytes));
	*allocs = fake_calls(&fx->fake, FAKE_OP_ALLOC) - a0;
	return fake_fences_recorded(&fx->fake) - f0;
}

/* Proves: with fence_batch 4, a loop over one small size grows the class to a few blocks and
 * records a fence per batch of frees, not per allocation; without it, a fence per allocation;
 * above 1 MiB, no batching. Every reuse still follows a completed fence (fake's misuse check
 * and the fixture's teardown). */
static void test_fence_batch(void **state)
{
	struct fx *fx = *state;
	uint64_t allocs;
	size_t fences;

	fake_set_fence_auto(&fx->fake, 1);
	fences = loop_pairs(fx, 8192, 20, &allocs);
	assert_true(allocs >= 2 && allocs <= 5);
	assert_true(fences <= 7);
	fences = loop_pairs(fx, 2 * MiB, 20, &allocs);
	assert_int_equal(allocs, 1);
	assert_true(fences >= 19);
}

static int setup_batch_bytes(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .fence_batch = 4, .fence_batch_bytes = 64 * 1024 };

	return fx_setup_cfg(state, &cfg);
}

/* Proves: with fence_batch 4 and fence_batch_bytes 64 KiB, a small size batches as many blocks
 * as fit in 64 KiB (8 of 8 KiB), at most 4 times fence_batch (16 of 512 B), and never fewer
 * than fence_batch (4 of 1 MiB); the fences per pair fall with the batch. */
static void test_fence_batch_bytes(void **state)
{
	struct fx *fx = *state;
	uint64_t allocs;
	size_t fences;

	fake_set_fence_auto(&fx->fake, 1);
	fences = loop_pairs(fx, 8192, 80, &allocs);
	assert_true(allocs >= 7 && allocs <= 9);
	assert_true(fences <= 80 / 7 + 2);
	fences = loop_pairs(fx, 512, 160, &allocs);
	assert_true(allocs >= 15 && allocs <= 17);
	assert_true(fences <= 160 / 15 + 2);
	fences = loop_pairs(fx, 1 * MiB, 40, &allocs);
	assert_true(allocs >= 3 && allocs <= 5);
	assert_true(fences >= 40 / 5 - 1);
}

static void test_no_fence_batch(void **state)
{
	struct fx *fx = *state;
	uint64_t allocs;
	size_t fences;

	fake_set_fence_auto(&fx->fake, 1);
	fences = loop_pairs(fx, 8192, 20, &allocs);
	assert_int_equal(allocs, 1);
	assert_true(fences >= 19);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_same_size_reuses_block, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_smaller_class_does_not_take_bigger_block,
						fx_setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_same_class_different_sizes_reuse,
						fx_setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_ordered_reuses_without_fence, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_unordered_needs_completed_fence,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_unordered_miss_path_polls_fences,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fence_recorded_before_free_does_not_cover_it,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fences_complete_in_order, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_fence_eagain_means_no_reuse, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_advance_wait_makes_pending_idle,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_completed_fences_are_destroyed,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_set_unordered_fences_earlier_frees,
						fx_setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_miss_waits_for_fenced_block, setup_wait_1s,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_miss_wait_is_bounded, setup_wait_5ms,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_no_wait_below_threshold, setup_wait_1s,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_short_own_list_grows_before_waiting,
						setup_wait_20ms_batch8, fx_teardown),
		cmocka_unit_test_setup_teardown(test_short_own_list_waits_at_class_bound,
						setup_wait_20ms_batch8, fx_teardown),
		cmocka_unit_test_setup_teardown(test_miss_polls_below_threshold, setup_poll_1s,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_miss_poll_is_bounded, setup_poll_2ms, fx_teardown),
		cmocka_unit_test_setup_teardown(test_no_poll_when_wait_is_off, setup_poll_above_wait,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_miss_waits_for_an_old_fence, setup_age_50ms,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_no_age_wait_at_1mib, setup_age_50ms, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fence_batch, setup_batch_4, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fence_batch_bytes, setup_batch_bytes, fx_teardown),
		cmocka_unit_test_setup_teardown(test_no_fence_batch, fx_setup_unordered, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
