/* test_pool_cap.c — the policies the control thread builds on: a per-device cap on cached bytes
 * whose crossing is reported once through over_cap until a release runs, a miss that brings the
 * cache down to the cap itself, the cheap cached-bytes figure, and release by idle age on the
 * backend clock. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "pool_fixture.h"

#define SEC 1000000000ull

struct cap_calls {
	unsigned n[GP_MAX_DEVICES];
	unsigned total;
	int last_device;
};

static struct cap_calls calls;

static void on_over_cap(void *arg, int device)
{
	struct cap_calls *c = arg;

	if (device >= 0 && device < GP_MAX_DEVICES)
		c->n[device]++;
	c->total++;
	c->last_device = device;
}

static int setup_capped(void **state)
{
	struct gp_pool_config cfg = { .ordered = 1, .over_cap = on_over_cap, .arg = &calls };

	memset(&calls, 0, sizeof(calls));
	return fx_setup_cfg(state, &cfg);
}

static uint64_t cached(struct fx *fx, int dev)
{
	struct gp_pool_dev_stats s = fx_stats(fx, dev);

	return s.idle_bytes + s.pending_bytes;
}

/* Proves: over_cap is called, with the device, by the free that takes that device's cached bytes
 * above its cap; not again by further frees until a release runs for the device; then again on
 * the next crossing. A device without a cap never triggers it. gp_pool_cap reads the cap back. */
static void test_over_cap_once_until_release(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *a, *b, *c, *d1, *e;

	gp_pool_set_cap(fx->pool, 0, 3 * MiB);
	assert_int_equal(gp_pool_cap(fx->pool, 0), 3 * MiB);
	assert_int_equal(gp_pool_cap(fx->pool, 1), 0);
	a = fx_alloc(fx, 0, 2 * MiB);
	b = fx_alloc(fx, 0, 2 * MiB);
	c = fx_alloc(fx, 0, MiB);
	d1 = fx_alloc(fx, 1, 64 * MiB);
	fx_free(fx, d1);
	assert_int_equal(calls.total, 0);
	fx_free(fx, a); /* 2 MiB cached: under the cap */
	assert_int_equal(calls.total, 0);
	fx_free(fx, b); /* 4 MiB cached: over */
	assert_int_equal(calls.total, 1);
	assert_int_equal(calls.n[0], 1);
	assert_int_equal(calls.last_device, 0);
	fx_free(fx, c); /* still over: already reported */
	assert_int_equal(calls.total, 1);

	assert_int_equal(gp_pool_release(fx->pool, 0, 3 * MiB, GP_CAUSE_CAP, &res), GP_OK);
	assert_true(cached(fx, 0) <= 3 * MiB);
	e = fx_alloc(fx, 0, 5 * MiB);
	fx_free(fx, e); /* over again after a release: reported again */
	assert_int_equal(calls.n[0], 2);
	assert_int_equal(calls.n[1], 0);
}

/* Proves: a miss that finds the device's cache over its cap releases down to the cap (oldest
 * first, counted under the cap's cause) before its real allocation, so the backend never holds
 * more than the live bytes plus the cap; a miss under the cap, a hit, and a miss while releases
 * are not allowed (may_release 0) release nothing. Fails without trim_to_cap: nothing is freed
 * until the control thread acts on the notice, which this test never does. */
static void test_miss_trims_to_cap(void **state)
{
	struct fx *fx = *state;
	uint64_t counts[GP_CAUSE_COUNT], bytes[GP_CAUSE_COUNT], frees;
	void *a, *b, *c, *big, *big2, *hit, *oldest;

	fake_set_tick(&fx->fake, 1000); /* every free a later time: "oldest" is well defined */
	gp_pool_set_cap(fx->pool, 0, 3 * MiB);
	a = fx_alloc(fx, 0, 2 * MiB);
	b = fx_alloc(fx, 0, 2 * MiB);
	c = fx_alloc(fx, 0, 2 * MiB);
	fx_free(fx, a);
	big = fx_alloc(fx, 0, 8 * MiB); /* a miss under the cap: 2 MiB cached */
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 0);
	fx_free(fx, b); /* 4 MiB cached: over the cap, reported, not released */
	assert_int_equal(calls.n[0], 1);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 0);
	hit = fx_alloc(fx, 0, 2 * MiB); /* a hit: no release */
	assert_true(hit == a || hit == b);
	oldest = hit == a ? b : a;
	fx_free(fx, hit);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 0);

	fake_set_may_release(&fx->fake, 0); /* a graph capture, say */
	big2 = fx_alloc(fx, 0, 8 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 0);
	fx_free(fx, big2); /* 12 MiB cached */
	fake_set_may_release(&fx->fake, 1);

	frees = fake_calls(&fx->fake, FAKE_OP_FREE);
	fx_free(fx, c);
	c = fx_alloc(fx, 0, 64 * MiB); /* a miss over the cap */
	assert_true(fake_calls(&fx->fake, FAKE_OP_FREE) > frees);
	assert_true(cached(fx, 0) <= 3 * MiB);
	assert_false(fake_holds(&fx->fake, oldest, NULL, NULL)); /* the oldest went first */
	assert_true(fake_used(&fx->fake, 0) <= cb(8 * MiB) + cb(64 * MiB) + 3 * MiB);
	gp_pool_release_counts(fx->pool, counts, bytes);
	assert_int_equal(counts[GP_CAUSE_CAP], 1);
	assert_true(bytes[GP_CAUSE_CAP] >= cb(2 * MiB) + cb(8 * MiB));
	fx_free(fx, c);
	fx_free(fx, big);
}

/* Proves: gp_pool_cached_bytes equals idle + pending bytes of the device's stats as blocks move
 * between live, pending, idle and released. */
static void test_cached_bytes_matches_stats(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *a, *b, *c;

	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), 0);
	a = fx_alloc(fx, 0, 3000);
	b = fx_alloc(fx, 0, 3 * MiB);
	c = fx_alloc(fx, 1, 3 * MiB);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), 0);
	fx_free(fx, a);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), cb(3000));
	fx_settle(fx);
	fx_free(fx, b);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), cb(3000) + cb(3 * MiB));
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), cached(fx, 0));
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 1), 0);
	a = fx_alloc(fx, 0, 3000);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), cb(3 * MiB));
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, &res), GP_OK);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), 0);
	assert_int_equal(cached(fx, 0), 0);
	fx_free(fx, a);
	fx_free(fx, c);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 1), cb(3 * MiB));
}

/* Proves: gp_pool_release_idle gives back exactly the cached blocks freed before the given time
 * (backend clock), across classes, only on the asked device, and counts under its cause. */
static void test_release_idle_by_age(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	uint64_t counts[GP_CAUSE_COUNT], bytes[GP_CAUSE_COUNT];
	void *a, *b, *c, *d;

	a = fx_alloc(fx, 0, MiB);
	b = fx_alloc(fx, 0, 2 * MiB);
	c = fx_alloc(fx, 0, MiB);
	d = fx_alloc(fx, 1, MiB);
	fake_set_clock(&fx->fake, 5 * SEC);
	fx_free(fx, d);
	fake_set_clock(&fx->fake, 10 * SEC);
	fx_free(fx, a);
	fake_set_clock(&fx->fake, 20 * SEC);
	fx_free(fx, b);
	fake_set_clock(&fx->fake, 30 * SEC);
	fx_free(fx, c);
	fake_set_clock(&fx->fake, 40 * SEC);

	assert_int_equal(gp_pool_release_idle(fx->pool, 0, 25 * SEC, GP_CAUSE_IDLE, &res), GP_OK);
	assert_int_equal(res.blocks, 2);
	assert_int_equal(res.bytes, cb(MiB) + cb(2 * MiB));
	assert_false(fake_holds(&fx->fake, a, NULL, NULL));
	assert_false(fake_holds(&fx->fake, b, NULL, NULL));
	assert_true(fake_holds(&fx->fake, c, NULL, NULL));
	assert_true(fake_holds(&fx->fake, d, NULL, NULL)); /* older, but on device 1 */
	assert_int_equal(fx_stats(fx, 0).idle_bytes, cb(MiB));
	gp_pool_release_counts(fx->pool, counts, bytes);
	assert_int_equal(counts[GP_CAUSE_IDLE], 1);
	assert_int_equal(bytes[GP_CAUSE_IDLE], cb(MiB) + cb(2 * MiB));

	assert_int_equal(gp_pool_release_idle(fx->pool, -1, 25 * SEC, GP_CAUSE_IDLE, &res), GP_OK);
	assert_int_equal(res.blocks, 1);
	assert_false(fake_holds(&fx->fake, d, NULL, NULL));
	assert_ptr_equal(fx_alloc(fx, 0, MiB), c);
	fx_free(fx, c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_over_cap_once_until_release, setup_capped,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_miss_trims_to_cap, setup_capped, fx_teardown),
		cmocka_unit_test_setup_teardown(test_cached_bytes_matches_stats, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_idle_by_age, fx_setup_ordered,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
