/* test_pool_stats.c — the pool's per-device figures through a scripted sequence, and devices kept
 * apart: a block of one device is never handed out for another and goes back to the backend with
 * its own device. */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"

static void expect_stats(struct fx *fx, int dev, const char *where,
			 const struct gp_pool_dev_stats *want)
{
	struct gp_pool_dev_stats got = fx_stats(fx, dev);

	if (fx_stats_same(where, &got, want))
		fail_msg("device %d figures differ %s", dev, where);
}

/* Proves: every figure (live/idle/pending bytes and blocks, requested bytes, both peaks, allocs,
 * hits, real allocs and frees, failed allocs, frees, bad frees) follows a scripted sequence of
 * allocs, frees, fences, a double free, a release and a failed alloc; the other device stays 0. */
static void test_stats_scripted_sequence(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	struct gp_pool_dev_stats e = { 0 }, zero = { 0 };
	const size_t s1 = 1000, s2 = 3 * MiB;
	const uint64_t c1 = cb(s1), c2 = cb(s2);
	void *a, *b, *c, *d, *p = NULL;
	int retried = 0;

	a = fx_alloc(fx, 0, s1);
	e.live_bytes = c1;
	e.live_blocks = 1;
	e.requested_bytes = s1;
	e.peak_live_bytes = c1;
	e.peak_reserved_bytes = c1;
	e.allocs = 1;
	e.real_allocs = 1;
	expect_stats(fx, 0, "after alloc a", &e);

	b = fx_alloc(fx, 0, s2);
	e.live_bytes = c1 + c2;
	e.live_blocks = 2;
	e.requested_bytes = s1 + s2;
	e.peak_live_bytes = c1 + c2;
	e.peak_reserved_bytes = c1 + c2;
	e.allocs = 2;
	e.real_allocs = 2;
	expect_stats(fx, 0, "after alloc b", &e);

	fx_free(fx, a);
	e.live_bytes = c2;
	e.live_blocks = 1;
	e.pending_bytes = c1;
	e.pending_blocks = 1;
	e.requested_bytes = s2;
	e.frees = 1;
	expect_stats(fx, 0, "after free a (pending)", &e);

	fx_settle(fx);
	e.pending_bytes = 0;
	e.pending_blocks = 0;
	e.idle_bytes = c1;
	e.idle_blocks = 1;
	expect_stats(fx, 0, "after the fence (idle)", &e);

	c = fx_alloc(fx, 0, c1); /* another size of the same class */
	assert_ptr_equal(c, a);
	e.live_bytes = c1 + c2;
	e.live_blocks = 2;
	e.idle_bytes = 0;
	e.idle_blocks = 0;
	e.requested_bytes = c1 + s2;
	e.allocs = 3;
	e.hits = 1;
	expect_stats(fx, 0, "after the hit", &e);

	fx_free(fx, b);
	fx_free(fx, c);
	e.live_bytes = 0;
	e.live_blocks = 0;
	e.pending_bytes = c1 + c2;
	e.pending_blocks = 2;
	e.requested_bytes = 0;
	e.frees = 3;
	expect_stats(fx, 0, "after freeing both", &e);

	assert_int_equal(gp_pool_free(fx->pool, c), GP_EINVAL);
	e.bad_frees = 1;
	expect_stats(fx, 0, "after a double free", &e);

	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, &res), GP_OK);
	e.pending_bytes = 0;
	e.pending_blocks = 0;
	e.real_frees = 2;
	expect_stats(fx, 0, "after release", &e);

	d = fx_alloc(fx, 0, s2);
	e.live_bytes = c2;
	e.live_blocks = 1;
	e.requested_bytes = s2;
	e.allocs = 4;
	e.real_allocs = 3;
	expect_stats(fx, 0, "after alloc d", &e);

	fake_set_capacity(&fx->fake, 0, c2);
	assert_int_equal(gp_pool_alloc(fx->pool, 0, s1, &p, &retried), GP_ENOMEM);
	e.failed_allocs = 1;
	expect_stats(fx, 0, "after a failed alloc", &e);

	fx_free(fx, d);
	e.live_bytes = 0;
	e.live_blocks = 0;
	e.pending_bytes = c2;
	e.pending_blocks = 1;
	e.requested_bytes = 0;
	e.frees = 4;
	expect_stats(fx, 0, "at the end", &e);
	expect_stats(fx, 1, "on the untouched device", &zero);
	assert_int_equal(gp_pool_devices(fx->pool), 1);
}

/* Proves: a block freed on device 1 is never handed out for device 0 (which gets its own backend
 * allocation on device 0), figures are kept per device, and each block goes back to the backend
 * with its own device. */
static void test_devices_kept_apart(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	struct gp_pool_dev_stats s0, s1;
	struct fake_counts fc;
	void *a1, *p0, *p1, *p63;
	int dev = -1;

	a1 = fx_alloc(fx, 1, 40000);
	fx_free(fx, a1);
	assert_int_equal(gp_pool_block_size(fx->pool, a1, NULL), 0); /* idle is not live */
	p0 = fx_alloc(fx, 0, 40000);
	assert_ptr_not_equal(p0, a1);
	fake_last_alloc_bytes(&fx->fake, &dev);
	assert_int_equal(dev, 0);
	assert_int_equal(gp_pool_block_size(fx->pool, p0, &dev), cb(40000));
	assert_int_equal(dev, 0);

	s0 = fx_stats(fx, 0);
	s1 = fx_stats(fx, 1);
	assert_int_equal(s0.live_blocks, 1);
	assert_int_equal(s0.idle_blocks, 0);
	assert_int_equal(s0.hits, 0);
	assert_int_equal(s0.real_allocs, 1);
	assert_int_equal(s1.live_blocks, 0);
	assert_int_equal(s1.idle_blocks, 1);
	assert_int_equal(s1.idle_bytes, cb(40000));
	assert_int_equal(s1.frees, 1);
	assert_int_equal(s1.real_allocs, 1);

	p1 = fx_alloc(fx, 1, 40000);
	assert_ptr_equal(p1, a1);
	assert_int_equal(gp_pool_block_size(fx->pool, p1, &dev), cb(40000));
	assert_int_equal(dev, 1);
	p63 = fx_alloc(fx, GP_MAX_DEVICES - 1, 40000);
	assert_int_equal(gp_pool_devices(fx->pool), 3ull | 1ull << (GP_MAX_DEVICES - 1));

	fx_free(fx, p0);
	fx_free(fx, p1);
	fx_free(fx, p63);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);
	assert_int_equal(res.blocks, 3);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.frees_by_dev[0], 1);
	assert_int_equal(fc.frees_by_dev[1], 1);
	assert_int_equal(fc.frees_by_dev[GP_MAX_DEVICES - 1], 1);
	assert_int_equal(fake_blocks(&fx->fake), 0);
}

/* Proves: the peak of reserved bytes counts cached blocks too (live + idle + pending), and peaks
 * never go down on free or release. */
static void test_peaks(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	struct gp_pool_dev_stats s;
	void *a, *b;

	a = fx_alloc(fx, 0, 5 * MiB);
	fx_free(fx, a);
	b = fx_alloc(fx, 0, 9 * MiB); /* reserved: 5 MiB cached + 9 MiB live */
	s = fx_stats(fx, 0);
	assert_int_equal(s.peak_live_bytes, cb(9 * MiB));
	assert_int_equal(s.peak_reserved_bytes, cb(5 * MiB) + cb(9 * MiB));
	fx_free(fx, b);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);
	s = fx_stats(fx, 0);
	assert_int_equal(s.peak_live_bytes, cb(9 * MiB));
	assert_int_equal(s.peak_reserved_bytes, cb(5 * MiB) + cb(9 * MiB));
}

struct alloc_free_arg {
	struct fx *fx;
	size_t bytes;
};

static void *alloc_free(void *arg)
{
	struct alloc_free_arg *a = arg;

	fx_free(a->fx, fx_alloc(a->fx, 0, a->bytes));
	return NULL;
}

/* Proves: the peak in use never exceeds the reserved peak when threads on different stripes
 * each peak at another time. One block of 8 MiB is used by this thread, then (cached) by a
 * second thread on its own stripe: each stripe's peak is 8 MiB, but never were 16 MiB in use. */
static void test_peak_live_across_threads(void **state)
{
	struct fx *fx = *state;
	struct alloc_free_arg arg = { fx, 8 * MiB };
	pthread_t th;
	struct gp_pool_dev_stats s;

	alloc_free(&arg);
	assert_int_equal(pthread_create(&th, NULL, alloc_free, &arg), 0);
	pthread_join(th, NULL);
	s = fx_stats(fx, 0);
	assert_int_equal(s.real_allocs, 1);
	assert_int_equal(s.hits, 1);
	assert_int_equal(s.peak_reserved_bytes, cb(8 * MiB));
	assert_int_equal(s.peak_live_bytes, cb(8 * MiB));
}

#define SHARERS (GP_STRIPES + 4) /* more threads than stripes: some share one */
#define ROUNDS 2000

struct churn_arg {
	struct fx *fx;
	void *keep; /* allocated by this thread, freed by the main thread afterwards */
};

static void *churn(void *arg)
{
	struct churn_arg *a = arg;

	for (int i = 0; i < ROUNDS; i++)
		fx_free(a->fx, fx_alloc(a->fx, 0, (size_t)(1 + i % 4) * MiB));
	a->keep = fx_alloc(a->fx, 0, 3 * MiB);
	return NULL;
}

/* Proves: the in-use count (cached = reserved - in use, what GPUPOOL_MAX_CACHED and
 * cudaMemGetInfo go by) stays exact when more threads than stripes allocate and free at once
 * (stripes' owners count without a locked add, the others atomically) and when blocks are freed
 * by a thread other than the one that allocated them. */
static void test_live_counts_across_threads(void **state)
{
	struct fx *fx = *state;
	struct churn_arg args[SHARERS];
	pthread_t th[SHARERS];

	for (int i = 0; i < SHARERS; i++) {
		args[i] = (struct churn_arg){ fx, NULL };
		assert_int_equal(pthread_create(&th[i], NULL, churn, &args[i]), 0);
	}
	for (int i = 0; i < SHARERS; i++)
		pthread_join(th[i], NULL);
	{
		struct gp_pool_dev_stats st = fx_stats(fx, 0);
		uint64_t held = st.live_bytes + st.idle_bytes + st.pending_bytes;

		assert_int_equal(st.live_bytes, (uint64_t)SHARERS * cb(3 * MiB));
		assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), held - st.live_bytes);
	}
	for (int i = 0; i < SHARERS; i++) /* frees by a thread that allocated none of them */
		fx_free(fx, args[i].keep);
	{
		struct gp_pool_dev_stats st = fx_stats(fx, 0);

		assert_int_equal(st.live_bytes, 0);
		assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), st.idle_bytes + st.pending_bytes);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stats_scripted_sequence, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_devices_kept_apart, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_peaks, fx_setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_peak_live_across_threads, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_live_counts_across_threads, fx_setup_ordered,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
