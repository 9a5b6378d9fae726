/* test_pool_release.c — giving cached blocks back: everything, down to a target or by an amount
 * (oldest freed first), per device, per cause; the OOM path (release that device's cache, retry
 * once); and forgetting a device. Live blocks must never be touched. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "pool_fixture.h"

/* Proves: a full release gives back every cached block, idle and pending, through exactly one
 * backend free each (with its own device and size), reports bytes and blocks, leaves live blocks
 * usable, and counts itself under its cause. */
static void test_release_all_cached(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	struct gp_pool_dev_stats s;
	uint64_t counts[GP_CAUSE_COUNT], bytes[GP_CAUSE_COUNT];
	void *a, *b, *c, *d, *e;
	uint64_t cached;

	a = fx_alloc(fx, 0, MiB);
	b = fx_alloc(fx, 0, MiB);
	c = fx_alloc(fx, 0, MiB);
	d = fx_alloc(fx, 0, MiB);
	e = fx_alloc(fx, 0, 3 * MiB);
	fx_free(fx, a);
	fx_free(fx, e);
	fx_settle(fx);
	fx_free(fx, b);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* b pending under a fence */
	s = fx_stats(fx, 0);
	assert_int_equal(s.idle_blocks, 2);
	assert_int_equal(s.pending_blocks, 1);
	assert_int_equal(s.live_blocks, 2);
	cached = 2 * cb(MiB) + cb(3 * MiB);

	memset(&res, 0xff, sizeof(res));
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);
	assert_int_equal(res.blocks, 3);
	assert_int_equal(res.bytes, cached);
	assert_int_equal(res.errors, 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 3);
	assert_false(fake_holds(&fx->fake, a, NULL, NULL));
	assert_false(fake_holds(&fx->fake, b, NULL, NULL));
	assert_false(fake_holds(&fx->fake, e, NULL, NULL));
	assert_true(fake_holds(&fx->fake, c, NULL, NULL));
	assert_true(fake_holds(&fx->fake, d, NULL, NULL));
	s = fx_stats(fx, 0);
	assert_int_equal(s.idle_blocks + s.idle_bytes + s.pending_blocks + s.pending_bytes, 0);
	assert_int_equal(s.live_blocks, 2);
	assert_int_equal(s.live_bytes, 2 * cb(MiB));
	assert_int_equal(s.real_frees, 3);
	assert_int_equal(gp_pool_block_size(fx->pool, c, NULL), cb(MiB));

	/* a fence recorded before the release completes afterwards: nothing stale comes back */
	fake_complete_all_fences(&fx->fake);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	s = fx_stats(fx, 0);
	assert_int_equal(s.idle_blocks + s.pending_blocks, 0);

	fx_free(fx, c);
	fx_free(fx, d);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);
	assert_int_equal(res.blocks, 2);
	assert_int_equal(fake_blocks(&fx->fake), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 5);
	gp_pool_release_counts(fx->pool, counts, bytes);
	assert_int_equal(counts[GP_CAUSE_API], 2);
	assert_int_equal(bytes[GP_CAUSE_API], cached + 2 * cb(MiB));
	assert_int_equal(counts[GP_CAUSE_SIGNAL] + counts[GP_CAUSE_OOM] + counts[GP_CAUSE_CAP], 0);
}

/* Proves: a release with a target keeps at most `target` cached bytes and gives back the blocks
 * freed longest ago first, across size classes, in that order. */
static void test_release_target_oldest_first(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	struct gp_pool_dev_stats s;
	size_t sa = MiB, sb = 4 * MiB, sc = 2 * MiB, sd = 512 * KiB;
	void *a, *b, *c, *d;

	a = fx_alloc(fx, 0, sa);
	b = fx_alloc(fx, 0, sb);
	c = fx_alloc(fx, 0, sc);
	d = fx_alloc(fx, 0, sd);
	fx_free(fx, b); /* freed in the order b, c, a, d, one second apart */
	fake_advance_clock(&fx->fake, 1000000000ull);
	fx_free(fx, c);
	fake_advance_clock(&fx->fake, 1000000000ull);
	fx_free(fx, a);
	fake_advance_clock(&fx->fake, 1000000000ull);
	fx_free(fx, d);
	fake_advance_clock(&fx->fake, 1000000000ull);

	assert_int_equal(gp_pool_release(fx->pool, -1, cb(sa) + cb(sd), GP_CAUSE_CAP, &res), GP_OK);
	assert_int_equal(res.blocks, 2);
	assert_int_equal(res.bytes, cb(sb) + cb(sc));
	assert_false(fake_holds(&fx->fake, b, NULL, NULL));
	assert_false(fake_holds(&fx->fake, c, NULL, NULL));
	assert_true(fake_free_log_find(&fx->fake, b) < fake_free_log_find(&fx->fake, c));
	s = fx_stats(fx, 0);
	assert_int_equal(s.idle_bytes, cb(sa) + cb(sd));

	/* one byte under what is cached: the older of the two goes */
	assert_int_equal(gp_pool_release(fx->pool, -1, cb(sa) + cb(sd) - 1, GP_CAUSE_CAP, &res),
			 GP_OK);
	assert_int_equal(res.blocks, 1);
	assert_int_equal(res.bytes, cb(sa));
	assert_false(fake_holds(&fx->fake, a, NULL, NULL));
	assert_true(fake_holds(&fx->fake, d, NULL, NULL));
	assert_ptr_equal(fx_alloc(fx, 0, sd), d);
	fx_free(fx, d);
}

/* Proves: a release by amount (gp_pool_release_bytes, the pressure policy's) gives back whole
 * blocks, the oldest freed first, until the amount is reached, and no more however much was
 * freed since the caller looked at the cache: with c and d cached, a cut of one block worked out
 * then takes c alone after e and f were freed too (a target of cached-then less the cut would
 * have taken c, d and e). A cut of 0 does nothing; one larger than the cache takes all of it and
 * leaves live blocks alone. Each call that cut counts under its cause. */
static void test_release_bytes_oldest_first(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	uint64_t counts[GP_CAUSE_COUNT], bytes[GP_CAUSE_COUNT];
	void *p[7];

	for (int i = 0; i < 7; i++)
		p[i] = fx_alloc(fx, 0, MiB);
	for (int i = 0; i < 4; i++) { /* a, b, c, d: one second apart */
		fx_free(fx, p[i]);
		fake_advance_clock(&fx->fake, 1000000000ull);
	}
	assert_int_equal(gp_pool_release_bytes(fx->pool, -1, cb(MiB) + 1, GP_CAUSE_PRESSURE, &res),
			 GP_OK);
	assert_int_equal(res.blocks, 2);
	assert_int_equal(res.bytes, 2 * cb(MiB));
	assert_false(fake_holds(&fx->fake, p[0], NULL, NULL));
	assert_false(fake_holds(&fx->fake, p[1], NULL, NULL));
	assert_true(fake_free_log_find(&fx->fake, p[0]) < fake_free_log_find(&fx->fake, p[1]));

	/* The cut decided with c and d cached; e and f freed before it runs. */
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), 2 * cb(MiB));
	fx_free(fx, p[4]);
	fake_advance_clock(&fx->fake, 1000000000ull);
	fx_free(fx, p[5]);
	assert_int_equal(gp_pool_release_bytes(fx->pool, 0, cb(MiB), GP_CAUSE_PRESSURE, &res), GP_OK);
	assert_int_equal(res.blocks, 1);
	assert_false(fake_holds(&fx->fake, p[2], NULL, NULL));
	assert_true(fake_holds(&fx->fake, p[3], NULL, NULL));
	assert_true(fake_holds(&fx->fake, p[4], NULL, NULL));
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), 3 * cb(MiB));

	memset(&res, 0xff, sizeof(res));
	assert_int_equal(gp_pool_release_bytes(fx->pool, 0, 0, GP_CAUSE_PRESSURE, &res), GP_OK);
	assert_int_equal(res.blocks + res.bytes, 0);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), 3 * cb(MiB));

	assert_int_equal(gp_pool_release_bytes(fx->pool, -1, 1ull << 40, GP_CAUSE_PRESSURE, &res),
			 GP_OK);
	assert_int_equal(res.blocks, 3);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), 0);
	assert_true(fake_holds(&fx->fake, p[6], NULL, NULL));
	gp_pool_release_counts(fx->pool, counts, bytes);
	assert_int_equal(counts[GP_CAUSE_PRESSURE], 3);
	assert_int_equal(bytes[GP_CAUSE_PRESSURE], 6 * cb(MiB));
	assert_int_equal(gp_pool_release_bytes(fx->pool, 0, MiB, GP_CAUSE_COUNT, NULL), GP_EINVAL);
	fx_free(fx, p[6]);
}

/* Proves: a release for one device gives back only that device's cache; others keep theirs and
 * backend free gets each block's own device. */
static void test_release_one_device(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	struct fake_counts fc;
	void *a0, *a1, *a2;

	a0 = fx_alloc(fx, 0, 6000);
	a1 = fx_alloc(fx, 1, 6000);
	a2 = fx_alloc(fx, 2, 6000);
	fx_free(fx, a0);
	fx_free(fx, a1);
	fx_free(fx, a2);
	assert_int_equal(gp_pool_release(fx->pool, 1, 0, GP_CAUSE_SIGNAL, &res), GP_OK);
	assert_int_equal(res.blocks, 1);
	assert_int_equal(res.bytes, cb(6000));
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.frees_by_dev[1], 1);
	assert_int_equal(fc.frees_by_dev[0] + fc.frees_by_dev[2], 0);
	assert_int_equal(fx_stats(fx, 1).idle_blocks, 0);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 1);
	assert_int_equal(fx_stats(fx, 2).idle_blocks, 1);
	assert_ptr_equal(fx_alloc(fx, 0, 6000), a0);
	assert_ptr_equal(fx_alloc(fx, 2, 6000), a2);
	fx_free(fx, a0);
	fx_free(fx, a2);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_SIGNAL, &res), GP_OK);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.frees_by_dev[0], 1);
	assert_int_equal(fc.frees_by_dev[2], 1);
	assert_int_equal(fake_blocks(&fx->fake), 0);
}

/* Proves: gp_pool_release_counts counts releases and released bytes per cause separately. */
static void test_release_counts_per_cause(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	uint64_t counts[GP_CAUSE_COUNT], bytes[GP_CAUSE_COUNT];
	enum gp_release_cause causes[3] = { GP_CAUSE_SIGNAL, GP_CAUSE_CAP, GP_CAUSE_SIGNAL };
	size_t sizes[3] = { 10000, 5 * MiB, 200000 };
	int i;

	for (i = 0; i < 3; i++) {
		fx_free(fx, fx_alloc(fx, 0, sizes[i]));
		assert_int_equal(gp_pool_release(fx->pool, -1, 0, causes[i], &res), GP_OK);
		assert_int_equal(res.bytes, cb(sizes[i]));
	}
	gp_pool_release_counts(fx->pool, counts, bytes);
	assert_int_equal(counts[GP_CAUSE_SIGNAL], 2);
	assert_int_equal(bytes[GP_CAUSE_SIGNAL], cb(sizes[0]) + cb(sizes[2]));
	assert_int_equal(counts[GP_CAUSE_CAP], 1);
	assert_int_equal(bytes[GP_CAUSE_CAP], cb(sizes[1]));
	for (i = 0; i < GP_CAUSE_COUNT; i++) {
		if (i != GP_CAUSE_SIGNAL && i != GP_CAUSE_CAP) {
			assert_int_equal(counts[i], 0);
			assert_int_equal(bytes[i], 0);
		}
	}
}

/* Proves: a backend free that fails is counted in errors and the block is forgotten, never freed
 * a second time by a later release. */
static void test_release_backend_error_forgets_block(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;

	fx_free(fx, fx_alloc(fx, 0, 4096));
	fx_free(fx, fx_alloc(fx, 0, 9 * MiB));
	fake_set_free_rc(&fx->fake, GP_EBACKEND);
	gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res); /* its rc is not specified here */
	assert_int_equal(res.errors, 2);
	fake_set_free_rc(&fx->fake, GP_OK);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 0);
	gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 2);
}

/* Proves: when the device is full, gp_pool_alloc releases that device's cache (not another
 * device's) and retries once, succeeding with *retried == 1 and counting an OOM release. */
static void test_oom_releases_cache_and_retries(void **state)
{
	struct fx *fx = *state;
	uint64_t counts[GP_CAUSE_COUNT], bytes[GP_CAUSE_COUNT];
	struct fake_counts fc;
	void *a, *b, *other, *p = NULL;
	int retried = -1;
	uint64_t cap;

	/* room for two 2 MiB blocks, or for one 3 MiB block, never for all three */
	cap = 2 * cb(2 * MiB) > cb(3 * MiB) ? 2 * cb(2 * MiB) : cb(3 * MiB);
	fake_set_capacity(&fx->fake, 0, cap);
	a = fx_alloc(fx, 0, 2 * MiB);
	b = fx_alloc(fx, 0, 2 * MiB);
	other = fx_alloc(fx, 1, 2 * MiB);
	fx_free(fx, a);
	fx_free(fx, b);
	fx_free(fx, other);
	assert_int_equal(gp_pool_alloc(fx->pool, 0, 3 * MiB, &p, &retried), GP_OK);
	assert_non_null(p);
	assert_int_equal(retried, 1);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.allocs_nomem, 1);
	assert_int_equal(fc.frees_by_dev[0], 2);
	assert_int_equal(fc.frees_by_dev[1], 0);
	assert_true(fake_holds(&fx->fake, p, NULL, NULL));
	assert_int_equal(fx_stats(fx, 1).idle_blocks, 1);
	assert_int_equal(fx_stats(fx, 0).failed_allocs, 0);
	assert_int_equal(fx_stats(fx, 0).live_bytes, cb(3 * MiB));
	gp_pool_release_counts(fx->pool, counts, bytes);
	assert_int_equal(counts[GP_CAUSE_OOM], 1);
	assert_int_equal(bytes[GP_CAUSE_OOM], 2 * cb(2 * MiB));
	fx_free(fx, p);
}

/* Proves: in unordered mode the OOM path gives back pending blocks too (backend free is safe for
 * them) and the retry succeeds. */
static void test_oom_releases_pending(void **state)
{
	struct fx *fx = *state;
	void *a, *p = NULL;
	int retried = -1;

	fake_set_capacity(&fx->fake, 0, cb(8 * MiB));
	a = fx_alloc(fx, 0, 8 * MiB);
	fx_free(fx, a);
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 1);
	assert_int_equal(gp_pool_alloc(fx->pool, 0, 6 * MiB, &p, &retried), GP_OK);
	assert_int_equal(retried, 1);
	/* the fake may hand a's host address out again: look for a in the free log instead */
	assert_true(fake_free_log_find(&fx->fake, a) >= 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 1);
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 0);
	fx_free(fx, p);
}

/* Proves: a release drives the fences first: blocks freed a moment ago on a GPU that is done
 * (quiet) are given back settled (the backend need not wait for the device); on a GPU that is
 * not, they are given back as still possibly in use. */
static void test_release_settles_when_quiet(void **state)
{
	struct fx *fx = *state;
	void *a = fx_alloc(fx, 0, 8 * MiB), *b;
	struct fake_counts fc;

	fx_free(fx, a);
	fake_set_quiet(&fx->fake, 1);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, NULL), GP_OK);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.frees_ok, 1);
	assert_int_equal(fc.frees_unsettled, 0);
	fake_set_quiet(&fx->fake, 0);
	b = fx_alloc(fx, 0, 8 * MiB);
	fx_free(fx, b);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, NULL), GP_OK);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.frees_ok, 2);
	assert_int_equal(fc.frees_unsettled, 1);
}

/* Proves: when even an empty cache does not make room, gp_pool_alloc returns GP_ENOMEM after one
 * retry, counts a failed alloc, has still released the cache, and leaves live blocks alone. */
static void test_oom_fails_when_still_full(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *live, *small, *p = NULL;
	int retried = -1;

	fake_set_capacity(&fx->fake, 0, cb(2 * MiB) + cb(MiB) + 4096);
	live = fx_alloc(fx, 0, 2 * MiB);
	small = fx_alloc(fx, 0, MiB);
	fx_free(fx, small);
	assert_int_equal(gp_pool_alloc(fx->pool, 0, 3 * MiB, &p, &retried), GP_ENOMEM);
	assert_int_equal(retried, 1);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 4); /* 2 fills, try, retry */
	assert_false(fake_holds(&fx->fake, small, NULL, NULL));
	assert_true(fake_holds(&fx->fake, live, NULL, NULL));
	s = fx_stats(fx, 0);
	assert_int_equal(s.failed_allocs, 1);
	assert_int_equal(s.allocs, 2);
	assert_int_equal(s.live_blocks, 1);
	assert_int_equal(s.live_bytes, cb(2 * MiB));
	assert_int_equal(s.idle_blocks + s.pending_blocks, 0);
	/* the pool still works */
	p = fx_alloc(fx, 0, 4000);
	fx_free(fx, p);
	fx_free(fx, live);
}

/* Proves: when the backend says real frees may not happen now (may_release answers 0, as during
 * a graph capture), the OOM path fails with GP_ENOMEM without releasing or retrying. */
static void test_oom_without_release_permission(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *a, *p = NULL;
	int retried = -1;

	assert_int_not_equal(gp_pool_class_of(4 * MiB), gp_pool_class_of(6 * MiB));
	fake_set_capacity(&fx->fake, 0, cb(6 * MiB));
	a = fx_alloc(fx, 0, 4 * MiB);
	fx_free(fx, a);
	fake_set_may_release(&fx->fake, 0);
	assert_int_equal(gp_pool_alloc(fx->pool, 0, 6 * MiB, &p, &retried), GP_ENOMEM);
	assert_int_equal(retried, 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	assert_true(fake_calls(&fx->fake, FAKE_OP_MAY_RELEASE) >= 1);
	s = fx_stats(fx, 0);
	assert_int_equal(s.idle_blocks, 1);
	assert_int_equal(s.failed_allocs, 1);
	fake_set_may_release(&fx->fake, 1);
	assert_int_equal(gp_pool_alloc(fx->pool, 0, 6 * MiB, &p, &retried), GP_OK);
	assert_int_equal(retried, 1);
	fx_free(fx, p);
}

/* Proves: forgetting a device drops its live, idle and pending blocks without any backend call,
 * its pointers are no longer the pool's, and other devices are untouched. */
static void test_forget_device(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	struct fake_counts before, after;
	struct gp_pool_dev_stats s;
	void *live1, *idle1, *pend1, *live0, *idle0, *p;
	int i;

	live1 = fx_alloc(fx, 1, 1000);
	idle1 = fx_alloc(fx, 1, 3 * MiB);
	pend1 = fx_alloc(fx, 1, 70000);
	live0 = fx_alloc(fx, 0, 1000);
	idle0 = fx_alloc(fx, 0, 3 * MiB);
	fx_free(fx, idle1);
	fx_free(fx, idle0);
	fx_settle(fx);
	fx_free(fx, pend1);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* a fence now covers pend1 */
	assert_int_equal(fx_stats(fx, 1).pending_blocks, 1);

	fake_get_counts(&fx->fake, &before);
	gp_pool_forget_device(fx->pool, 1);
	fake_get_counts(&fx->fake, &after);
	for (i = 0; i < FAKE_OP_COUNT; i++) {
		if (i != FAKE_OP_NOW && before.calls[i] != after.calls[i])
			fail_msg("gp_pool_forget_device made backend call %d", i);
	}
	s = fx_stats(fx, 1);
	assert_int_equal(s.live_blocks + s.idle_blocks + s.pending_blocks, 0);
	assert_int_equal(s.live_bytes + s.idle_bytes + s.pending_bytes, 0);
	assert_int_equal(gp_pool_block_size(fx->pool, live1, NULL), 0);
	assert_int_equal(gp_pool_free(fx->pool, live1), GP_ENOTOWNED);

	fake_complete_all_fences(&fx->fake);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);
	fake_get_counts(&fx->fake, &after);
	assert_int_equal(after.frees_by_dev[1], 0);
	assert_int_equal(after.frees_by_dev[0], 1);
	assert_int_equal(gp_pool_block_size(fx->pool, live0, NULL), cb(1000));
	p = fx_alloc(fx, 1, 3 * MiB);
	assert_ptr_not_equal(p, idle1);
	fx_free(fx, p);
	fx_free(fx, live0);
}

/* The staged race below: a second release to the same target runs while the first is inside
 * the backend's free of its first block (as the control thread's release and a miss's release to
 * the cap may, side by side). */
static struct fx *nested_fx;
static uint64_t nested_target;
static struct gp_release_result nested_res;
static int nested_rc = -1;

static void release_inside_free(void *arg, enum fake_op op)
{
	struct fx *fx = nested_fx;

	(void)arg;
	if (op != FAKE_OP_FREE || fx == NULL)
		return;
	nested_fx = NULL; /* once */
	nested_rc = gp_pool_release(fx->pool, 0, nested_target, GP_CAUSE_CAP, &nested_res);
}

/* Proves what pool.h says of releases side by side: none waits for the other, no block is given
 * back twice, each gives back at most what was over the target when it began, and the one that
 * began second counts the first one's block in flight as cached, so together they leave the cache
 * one block below the target. */
static void test_releases_side_by_side(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *p[4];

	for (int i = 0; i < 4; i++)
		p[i] = fx_alloc(fx, 0, MiB);
	for (int i = 0; i < 4; i++) {
		fx_free(fx, p[i]);
		fake_advance_clock(&fx->fake, 1000);
	}
	nested_fx = fx;
	nested_target = 2 * MiB;
	fake_set_hook(&fx->fake, release_inside_free, NULL);
	assert_int_equal(gp_pool_release(fx->pool, 0, 2 * MiB, GP_CAUSE_API, &res), GP_OK);
	fake_set_hook(&fx->fake, NULL, NULL);
	assert_int_equal(nested_rc, GP_OK);
	assert_int_equal(res.blocks, 1);          /* the oldest, p[0] */
	assert_int_equal(nested_res.blocks, 2);   /* p[1], p[2]: p[0] still counted as cached */
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 3);
	assert_int_equal(fake_misuse(&fx->fake), 0);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), MiB);
	assert_true(fake_holds(&fx->fake, p[3], NULL, NULL));
	assert_int_equal(fx_stats(fx, 0).real_frees, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_release_all_cached, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_target_oldest_first, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_bytes_oldest_first, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_one_device, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_counts_per_cause, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_backend_error_forgets_block,
						fx_setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_oom_releases_cache_and_retries, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_oom_releases_pending, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_oom_fails_when_still_full, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_oom_without_release_permission,
						fx_setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_forget_device, fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_releases_side_by_side, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_settles_when_quiet, fx_setup_unordered,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
