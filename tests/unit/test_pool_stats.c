/* test_pool_stats.c — the pool's per-device figures through a scripted sequence, and devices kept
 * apart: a block of one device is never handed out for another and goes back to the backend with
 * its own device. The figures come from counters with no lock taken (the shim samples them beside
 * allocating threads); idle and pending bytes from each list's fence marks: exact with up to three
 * fences in flight, more pending (never less) beyond. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"
#include "hooks.h"

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

/* A thread that caches a block on its own list and holds that list's lock until told. */
struct holder {
	struct fx *fx;
	pthread_mutex_t m;
	pthread_cond_t cv;
	int locked, release;
};

static void *hold_list(void *arg)
{
	struct holder *h = arg;
	void *p = NULL;

	if (gp_pool_alloc(h->fx->pool, 0, 4096, &p, NULL) == GP_OK)
		gp_pool_free(h->fx->pool, p);
	gp_pool_test_list_lock(h->fx->pool, 0, 4096, 1);
	pthread_mutex_lock(&h->m);
	h->locked = 1;
	pthread_cond_broadcast(&h->cv);
	while (!h->release)
		pthread_cond_wait(&h->cv, &h->m);
	pthread_mutex_unlock(&h->m);
	gp_pool_test_list_lock(h->fx->pool, 0, 4096, 0);
	return NULL;
}

struct sampler {
	struct fx *fx;
	struct gp_pool_dev_stats s;
	unsigned long locks;
	int done, rc;
	pthread_mutex_t *m;
	pthread_cond_t *cv;
};

static void *sample(void *arg)
{
	struct sampler *sa = arg;
	unsigned long before = gp_pool_test_locks_taken();
	int rc = gp_pool_dev_stats(sa->fx->pool, 0, &sa->s);

	pthread_mutex_lock(sa->m);
	sa->locks = gp_pool_test_locks_taken() - before;
	sa->rc = rc;
	sa->done = 1;
	pthread_cond_broadcast(sa->cv);
	pthread_mutex_unlock(sa->m);
	return NULL;
}

/* Proves: gp_pool_dev_stats takes no pool lock and returns while another thread holds the lock of
 * a list with a cached block (an allocating thread in the middle of a hit), counting that block.
 * It walked every list holding blocks under its lock, the hit path's spinlock. */
static void test_stats_take_no_lock(void **state)
{
	struct fx *fx = *state;
	struct holder h = { .fx = fx };
	struct sampler sa = { .fx = fx };
	pthread_t holder, sampler;
	struct timespec deadline;
	int rc = 0, done;

	pthread_mutex_init(&h.m, NULL);
	pthread_cond_init(&h.cv, NULL);
	sa.m = &h.m;
	sa.cv = &h.cv;
	assert_int_equal(pthread_create(&holder, NULL, hold_list, &h), 0);
	pthread_mutex_lock(&h.m);
	while (!h.locked)
		pthread_cond_wait(&h.cv, &h.m);
	pthread_mutex_unlock(&h.m);
	assert_int_equal(pthread_create(&sampler, NULL, sample, &sa), 0);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 3;
	pthread_mutex_lock(&h.m);
	while (!sa.done && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&h.cv, &h.m, &deadline);
	done = sa.done;
	h.release = 1; /* either way, so that both threads end */
	pthread_cond_broadcast(&h.cv);
	pthread_mutex_unlock(&h.m);
	pthread_join(holder, NULL);
	pthread_join(sampler, NULL);
	pthread_cond_destroy(&h.cv);
	pthread_mutex_destroy(&h.m);
	assert_true(done); /* else it waited for the held list lock */
	assert_int_equal(sa.rc, GP_OK);
	assert_int_equal(sa.locks, 0);
	assert_int_equal(sa.s.idle_blocks + sa.s.pending_blocks, 1);
	assert_int_equal(sa.s.idle_bytes + sa.s.pending_bytes, 4096);
}

/* The stats' pending and idle figures of device 0 equal what a walk of the lists finds. */
static void expect_exact(struct fx *fx, const char *where)
{
	struct gp_pool_dev_stats s = fx_stats(fx, 0);
	uint64_t bytes, blocks;

	assert_int_equal(gp_pool_test_fenced(fx->pool, 0, &bytes, &blocks), GP_OK);
	if (s.pending_bytes != bytes || s.pending_blocks != blocks)
		fail_msg("%s: pending %llu bytes in %llu blocks, the lists hold %llu in %llu", where,
			 (unsigned long long)s.pending_bytes, (unsigned long long)s.pending_blocks,
			 (unsigned long long)bytes, (unsigned long long)blocks);
	assert_int_equal(s.idle_bytes + s.pending_bytes, gp_pool_cached_bytes(fx->pool, 0));
}

/* The same, or more pending (never less), the cached total split between them all the same. */
static void expect_conservative(struct fx *fx, const char *where)
{
	struct gp_pool_dev_stats s = fx_stats(fx, 0);
	uint64_t bytes, blocks;

	assert_int_equal(gp_pool_test_fenced(fx->pool, 0, &bytes, &blocks), GP_OK);
	if (s.pending_bytes < bytes || s.pending_blocks < blocks)
		fail_msg("%s: pending %llu bytes in %llu blocks, fewer than the lists hold: %llu in %llu",
			 where, (unsigned long long)s.pending_bytes,
			 (unsigned long long)s.pending_blocks, (unsigned long long)bytes,
			 (unsigned long long)blocks);
	assert_int_equal(s.idle_bytes + s.pending_bytes, gp_pool_cached_bytes(fx->pool, 0));
}

/* Fence what is freed so far (a new fence: the next epoch). */
static void fence(struct fx *fx)
{
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
}

/* Complete fence number seq and let the pool see it. */
static void complete(struct fx *fx, size_t seq)
{
	fake_complete_fence(&fx->fake, seq);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
}

/* Proves: with one and then two fences in flight, blocks of one size freed in three epochs on one
 * list are split exactly into idle and pending as each fence completes, hits on the idle ones
 * included. */
static void test_pending_exact_two_fences(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *a[6];

	for (int i = 0; i < 6; i++)
		a[i] = fx_alloc(fx, 0, 64 * KiB);
	fx_free(fx, a[0]);
	fx_free(fx, a[1]);
	fence(fx); /* fence 1 covers a0, a1 */
	fx_free(fx, a[2]);
	expect_exact(fx, "one fence in flight");
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 3);
	fence(fx); /* fence 2 covers a2 */
	fx_free(fx, a[3]);
	fx_free(fx, a[4]);
	expect_exact(fx, "two fences in flight");
	complete(fx, 1);
	s = fx_stats(fx, 0);
	assert_int_equal(s.idle_blocks, 2);
	assert_int_equal(s.pending_blocks, 3);
	assert_int_equal(s.pending_bytes, 3 * cb(64 * KiB));
	expect_exact(fx, "fence 1 done");
	assert_ptr_equal(fx_alloc(fx, 0, 64 * KiB), a[0]); /* a hit on the idle head */
	expect_exact(fx, "after a hit");
	complete(fx, 2);
	s = fx_stats(fx, 0);
	assert_int_equal(s.idle_blocks, 2);   /* a1, a2 */
	assert_int_equal(s.pending_blocks, 2); /* a3, a4: freed after fence 2 */
	expect_exact(fx, "fence 2 done");
	fx_free(fx, a[5]);
	fx_settle(fx);
	s = fx_stats(fx, 0);
	assert_int_equal(s.pending_blocks + s.pending_bytes, 0);
	assert_int_equal(s.idle_blocks, 5);
}

/* Proves: blocks of one list freed in more epochs than it keeps marks for count as pending (more
 * than they are, never fewer) while any of the epochs it lost track of may still be fenced, and
 * exactly again once those fences are done. */
static void test_pending_conservative_beyond_marks(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *a[7];

	for (int i = 0; i < 7; i++)
		a[i] = fx_alloc(fx, 0, 64 * KiB);
	for (int i = 0; i < 6; i++) {
		fx_free(fx, a[i]);
		fence(fx); /* six fences, each covering one block */
	}
	expect_exact(fx, "all six fenced");
	complete(fx, 1);
	expect_conservative(fx, "one of six fences done");
	s = fx_stats(fx, 0);
	assert_int_equal(s.pending_blocks, 6); /* a0 is idle, but the marks of a0 and a1 are lost */
	assert_int_equal(s.idle_blocks, 0);
	complete(fx, 2);
	expect_exact(fx, "the lost epochs done");
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 4);
	complete(fx, 3);
	expect_exact(fx, "fence 3 done");
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 3);
	fx_free(fx, a[6]);
	fx_settle(fx);
	expect_exact(fx, "settled");
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 7);
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Proves: over a random run of allocations, frees (of a few sizes, into few lists), fences and
 * their completions, the pending figures equal a walk of the lists whenever no more than three
 * fences have been in flight (one or two, the usual), are never fewer with up to eight, and are
 * exact again once every fence is done. */
static void test_pending_random(void **state)
{
	struct fx *fx = *state;
	static const size_t sizes[] = { 512, 4096, 64 * KiB, 3 * MiB };
	void *live[64] = { 0 };
	uint64_t x = 0x9E3779B97F4A7C15ull;
	size_t done = 0;

	for (int phase = 0; phase < 3; phase++) {
		size_t limit = phase == 0 ? 3 : 8;

		for (int i = 0; i < 1500; i++) {
			uint64_t r = rnd(&x);
			unsigned k = (unsigned)(r % 64);

			if (phase == 2) { /* drain: every fence done, then only frees */
				if (live[k] != NULL) {
					fx_free(fx, live[k]);
					live[k] = NULL;
				}
			} else if (r >> 8 & 1) {
				if (live[k] != NULL) {
					fx_free(fx, live[k]);
					live[k] = NULL;
				} else {
					live[k] = fx_alloc(fx, 0, sizes[r >> 16 & 3]);
				}
			} else if (r >> 9 & 1) {
				fence(fx);
			} else if (done < fake_fences_recorded(&fx->fake)) {
				complete(fx, ++done);
			}
			while (fake_fences_recorded(&fx->fake) - done > limit)
				complete(fx, ++done);
			if (phase == 0)
				expect_exact(fx, "at most three fences in flight");
			else
				expect_conservative(fx, "up to eight fences in flight");
		}
		if (phase == 1) {
			fake_complete_all_fences(&fx->fake);
			done = fake_fences_recorded(&fx->fake);
			assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
		}
	}
	fx_settle(fx);
	done = fake_fences_recorded(&fx->fake);
	expect_exact(fx, "every fence done");
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 0);
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
		cmocka_unit_test_setup_teardown(test_stats_take_no_lock, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_pending_exact_two_fences, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_pending_conservative_beyond_marks,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_pending_random, fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_live_counts_across_threads, fx_setup_ordered,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
