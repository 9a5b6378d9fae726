/* test_pool_concurrency.c — many threads allocating and freeing at once while other threads
 * release and drive fences. Each block carries its owner's pattern (the fake's memory is host
 * memory), so a block handed to two owners at once is caught; at the end everything is freed and
 * released and the fake must hold nothing. Worker threads never call cmocka: they count errors.
 * UNIT_STRESS_OPS overrides the operations per worker (sanitizer builds use fewer). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool_fixture.h"

#define NWORKERS 8
#define NSLOTS 24
/* Operations per worker. ThreadSanitizer (an unoptimised build: GPUPOOL_SANITIZE sets no -O)
 * runs them many times slower, and the program must still end within its ctest time limit;
 * AddressSanitizer some 15 times (50000 took 106 s of CI's ASan run, the longest test there). */
#ifdef __SANITIZE_THREAD__
#define DEFAULT_OPS 5000
#elif defined(__SANITIZE_ADDRESS__)
#define DEFAULT_OPS 10000
#else
#define DEFAULT_OPS 50000
#endif
#define TAG_SPAN 64 /* bytes of pattern written at each end of a block */

struct shared {
	struct fx *fx;
	unsigned max_bits;  /* requests up to 2^max_bits bytes (random_size) */
	int nomem_ok;       /* the device may run out of memory: GP_ENOMEM is an answer, not an error */
	atomic_ulong nomem; /* allocations answered GP_ENOMEM */
	atomic_int stop;
	atomic_ulong dev0_releases; /* gp_pool_release calls that covered device 0 */
	atomic_ulong errors;
	pthread_mutex_t msg_lock;
	char first_error[256];
};

struct slot {
	void *ptr;
	size_t size;
	int device;
	uint64_t tag;
};

struct worker {
	struct shared *sh;
	pthread_t thread;
	int id;
	unsigned ops;
	uint64_t rng;
	uint64_t allocs, frees;
	struct slot slots[NSLOTS];
};

static uint64_t next_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void report(struct shared *sh, const char *what, int id, int rc)
{
	if (atomic_fetch_add(&sh->errors, 1) == 0) {
		pthread_mutex_lock(&sh->msg_lock);
		snprintf(sh->first_error, sizeof(sh->first_error), "thread %d: %s (rc %d)", id, what,
			 rc);
		pthread_mutex_unlock(&sh->msg_lock);
	}
}

/* The byte at offset j of a block is byte j % 8 of its tag: the head and tail spans may overlap
 * in small blocks and still agree. */
static unsigned char tag_byte(const struct slot *s, size_t j)
{
	return (unsigned char)(s->tag >> (j % 8 * 8));
}

static void write_tag(const struct slot *s)
{
	unsigned char *p = s->ptr;
	size_t n = s->size < TAG_SPAN ? s->size : TAG_SPAN, i;

	for (i = 0; i < n; i++) {
		p[i] = tag_byte(s, i);
		p[s->size - 1 - i] = tag_byte(s, s->size - 1 - i);
	}
}

static int tag_intact(const struct slot *s)
{
	const unsigned char *p = s->ptr;
	size_t n = s->size < TAG_SPAN ? s->size : TAG_SPAN, i;

	for (i = 0; i < n; i++) {
		if (p[i] != tag_byte(s, i) || p[s->size - 1 - i] != tag_byte(s, s->size - 1 - i))
			return 0;
	}
	return 1;
}

/* Request sizes from 1 B to 2^max_bits, spread over many classes, skewed to small like real
 * programs. */
static size_t random_size(uint64_t r, unsigned max_bits)
{
	unsigned bits = (unsigned)(r >> 58) % (max_bits + 1);

	return (size_t)(r % ((uint64_t)1 << bits)) + 1;
}

static void free_slot(struct worker *w, struct slot *s)
{
	struct gp_pool *pool = w->sh->fx->pool;
	int dev = -1, rc;

	if (!tag_intact(s))
		report(w->sh, "a live block was overwritten: handed to two owners", w->id, 0);
	if (gp_pool_block_size(pool, s->ptr, &dev) < s->size || dev != s->device)
		report(w->sh, "block_size or device of a live block is wrong", w->id, 0);
	rc = gp_pool_free(pool, s->ptr);
	if (rc != GP_OK)
		report(w->sh, "free of a live block failed", w->id, rc);
	s->ptr = NULL;
	w->frees++;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct gp_pool *pool = w->sh->fx->pool;
	unsigned i;
	int k;

	for (i = 0; i < w->ops; i++) {
		uint64_t r = next_rand(&w->rng);
		struct slot *s = &w->slots[r % NSLOTS];
		int retried = 0, rc;

		if (s->ptr) {
			free_slot(w, s);
			continue;
		}
		s->size = random_size(next_rand(&w->rng), w->sh->max_bits);
		s->device = (int)(r >> 40) % 2;
		s->tag = (uint64_t)w->id << 56 | i;
		rc = gp_pool_alloc(pool, s->device, s->size, &s->ptr, &retried);
		if (rc == GP_ENOMEM && w->sh->nomem_ok) {
			atomic_fetch_add(&w->sh->nomem, 1);
			s->ptr = NULL;
			continue;
		}
		if (rc != GP_OK || !s->ptr) {
			report(w->sh, "alloc failed", w->id, rc);
			s->ptr = NULL;
			continue;
		}
		w->allocs++;
		write_tag(s);
	}
	for (k = 0; k < NSLOTS; k++) {
		if (w->slots[k].ptr)
			free_slot(w, &w->slots[k]);
	}
	return NULL;
}

static void nap(long ns)
{
	struct timespec ts = { 0, ns };

	nanosleep(&ts, NULL);
}

/* Calls of the pool's over_cap callback, per device (the pool is created with it). */
static atomic_ulong over_cap_calls[2];

static void on_over_cap(void *arg, int device)
{
	(void)arg;
	if (device >= 0 && device < 2)
		atomic_fetch_add(&over_cap_calls[device], 1);
}

/* Releases now one device, now all, to a random target or by idle age, for random causes. */
static void *releaser_main(void *arg)
{
	struct shared *sh = arg;
	struct gp_release_result res;
	uint64_t x = 0x2545F4914F6CDD1Dull;
	int rc;

	while (!atomic_load(&sh->stop)) {
		uint64_t r = next_rand(&x);
		int dev = (int)(r % 3) - 1;
		uint64_t target = r >> 8 & 1 ? 0 : (r >> 16) % (64 * MiB);
		enum gp_release_cause cause = (enum gp_release_cause)((r >> 32) % GP_CAUSE_COUNT);

		if (r >> 12 & 1) {
			rc = gp_pool_release_idle(sh->fx->pool, dev,
						  fake_clock(&sh->fx->fake) - (r >> 20) % 100000, cause,
						  &res);
		} else {
			rc = gp_pool_release(sh->fx->pool, dev, target, cause, &res);
			if (dev <= 0)
				atomic_fetch_add(&sh->dev0_releases, 1);
		}
		if (rc != GP_OK)
			report(sh, "release failed", -1, rc);
		nap(200000);
	}
	return NULL;
}

/* Polls fences (now and then waiting for them) and reads figures while the workers run. */
static void *advancer_main(void *arg)
{
	struct shared *sh = arg;
	struct gp_pool_dev_stats s;
	unsigned n = 0;
	int rc;

	while (!atomic_load(&sh->stop)) {
		rc = gp_pool_advance(sh->fx->pool, ++n % 64 == 0);
		if (rc != GP_OK && rc != GP_EAGAIN) /* EAGAIN: another thread drives fences now */
			report(sh, "advance failed", -2, rc);
		if (gp_pool_dev_stats(sh->fx->pool, (int)(n % 2), &s) != GP_OK)
			report(sh, "stats failed", -2, 0);
		(void)gp_pool_devices(sh->fx->pool);
		nap(50000);
	}
	return NULL;
}

static unsigned ops_per_worker(void)
{
	const char *v = getenv("UNIT_STRESS_OPS");
	long n = v ? strtol(v, NULL, 10) : 0;

	return n > 0 ? (unsigned)n : DEFAULT_OPS;
}

static void run_stress(struct fx *fx, int switch_to_unordered)
{
	static struct worker w[NWORKERS];
	struct shared sh;
	pthread_t releaser, advancer;
	struct gp_release_result res;
	struct gp_pool_dev_stats all;
	struct fake_counts fc;
	uint64_t allocs = 0, frees = 0, counts[GP_CAUSE_COUNT], bytes[GP_CAUSE_COUNT];
	unsigned ops = ops_per_worker();
	int i;

	memset(&sh, 0, sizeof(sh));
	sh.fx = fx;
	sh.max_bits = 22;
	pthread_mutex_init(&sh.msg_lock, NULL);
	fake_set_fence_auto(&fx->fake, 2);
	fake_set_tick(&fx->fake, 1000);
	atomic_store(&over_cap_calls[0], 0);
	atomic_store(&over_cap_calls[1], 0);
	gp_pool_set_cap(fx->pool, 0, MiB);
	memset(w, 0, sizeof(w));
	for (i = 0; i < NWORKERS; i++) {
		w[i].sh = &sh;
		w[i].id = i;
		w[i].ops = ops;
		w[i].rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
		assert_int_equal(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
	}
	assert_int_equal(pthread_create(&releaser, NULL, releaser_main, &sh), 0);
	assert_int_equal(pthread_create(&advancer, NULL, advancer_main, &sh), 0);
	if (switch_to_unordered) {
		nap(20000000);
		gp_pool_set_ordered(fx->pool, 0);
	}
	for (i = 0; i < NWORKERS; i++) {
		pthread_join(w[i].thread, NULL);
		allocs += w[i].allocs;
		frees += w[i].frees;
	}
	atomic_store(&sh.stop, 1);
	pthread_join(releaser, NULL);
	pthread_join(advancer, NULL);
	pthread_mutex_destroy(&sh.msg_lock);
	if (atomic_load(&sh.errors))
		fail_msg("%lu error(s); first: %s", (unsigned long)atomic_load(&sh.errors),
			 sh.first_error);

	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);
	assert_int_equal(res.errors, 0);
	assert_int_equal(fake_used_total(&fx->fake), 0);
	assert_int_equal(fake_blocks(&fx->fake), 0);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.allocs_ok, fc.frees_ok);
	assert_int_equal(fc.misuse, 0);
	all = fx_stats_all(fx);
	assert_int_equal(all.live_blocks + all.idle_blocks + all.pending_blocks, 0);
	assert_int_equal(all.live_bytes + all.idle_bytes + all.pending_bytes, 0);
	assert_int_equal(all.requested_bytes, 0);
	assert_int_equal(all.allocs, allocs);
	assert_int_equal(all.frees, frees);
	assert_int_equal(all.allocs, frees);
	assert_int_equal(all.hits + all.real_allocs, all.allocs);
	assert_int_equal(all.real_allocs, fc.allocs_ok);
	assert_int_equal(all.real_frees, fc.frees_ok);
	assert_int_equal(all.failed_allocs + all.bad_frees, 0);
	/* over_cap: only for the capped device, at least once, at most once per release of it
	 * (the releaser's, and the workers' misses that found the cache over the cap) */
	gp_pool_release_counts(fx->pool, counts, bytes);
	assert_true(atomic_load(&over_cap_calls[0]) >= 1);
	assert_true(atomic_load(&over_cap_calls[0]) <=
		    1 + atomic_load(&sh.dev0_releases) + counts[GP_CAUSE_CAP]);
	assert_int_equal(atomic_load(&over_cap_calls[1]), 0);
	print_message("%u workers x %u ops: %llu allocs, %llu hits, %llu backend allocs\n",
		      NWORKERS, ops, (unsigned long long)all.allocs, (unsigned long long)all.hits,
		      (unsigned long long)all.real_allocs);
}

static int setup_unordered_capped(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .over_cap = on_over_cap };

	return fx_setup_cfg(state, &cfg);
}

static int setup_ordered_capped(void **state)
{
	struct gp_pool_config cfg = { .ordered = 1, .over_cap = on_over_cap };

	return fx_setup_cfg(state, &cfg);
}

/* Proves: in unordered mode 8 threads of random alloc/free over many sizes and 2 devices, beside a
 * thread releasing (by target and by idle age) and a fence-driving thread, never hand one block
 * to two owners, never fail, keep consistent figures, report a cap crossing at most once per
 * release, and after freeing and releasing everything leave the fake empty with as many backend
 * frees as allocs. */
static void test_stress_unordered(void **state)
{
	alarm(120);
	run_stress(*state, 0);
	alarm(0);
}

/* Proves: the same holds when the pool starts ordered and is switched to unordered mid-run. */
static void test_stress_switch_to_unordered(void **state)
{
	alarm(120);
	run_stress(*state, 1);
	alarm(0);
}

/* A pool that moves, splits, merges and trims blocks of 4 MiB and more (GPUPOOL_VMM and
 * GPUPOOL_VMM_TRIM's settings), with the over_cap notice. */
static int setup_vmm_trim(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .over_cap = on_over_cap,
				      .remap_min_bytes = 4 * MiB, .remap_trim = 1 };

	return fx_setup_movable(state, &cfg, 4 * MiB, 1);
}

/* One round of test_releases_side_by_side: 8 workers of `ops` operations each beside two
 * releasers and the fence driver; adds the workers' allocations and frees to *allocs, *frees. */
static void releases_round(struct fx *fx, unsigned ops, uint64_t *allocs, uint64_t *frees)
{
	static struct worker w[NWORKERS];
	static unsigned round;
	struct shared sh;
	pthread_t releaser[2], advancer;
	int i;

	memset(&sh, 0, sizeof(sh));
	sh.fx = fx;
	sh.max_bits = 23;
	sh.nomem_ok = 1;
	pthread_mutex_init(&sh.msg_lock, NULL);
	memset(w, 0, sizeof(w));
	round++;
	for (i = 0; i < NWORKERS; i++) {
		w[i].sh = &sh;
		w[i].id = i;
		w[i].ops = ops;
		w[i].rng = 0xD1B54A32D192ED03ull * (uint64_t)(i + 1) + round;
		assert_int_equal(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
	}
	for (i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&releaser[i], NULL, releaser_main, &sh), 0);
	assert_int_equal(pthread_create(&advancer, NULL, advancer_main, &sh), 0);
	for (i = 0; i < NWORKERS; i++) {
		pthread_join(w[i].thread, NULL);
		*allocs += w[i].allocs;
		*frees += w[i].frees;
	}
	atomic_store(&sh.stop, 1);
	for (i = 0; i < 2; i++)
		pthread_join(releaser[i], NULL);
	pthread_join(advancer, NULL);
	pthread_mutex_destroy(&sh.msg_lock);
	if (atomic_load(&sh.errors))
		fail_msg("%lu error(s); first: %s", (unsigned long)atomic_load(&sh.errors),
			 sh.first_error);
}

/* Proves what pool.h says of releases side by side: with device 0 short of memory (out-of-memory
 * releases in allocating threads), capped (misses release to the cap), trimming (cfg.remap_trim,
 * the GPU idle: small blocks go too) and two threads releasing by target and by age besides, while
 * 8 threads allocate and free up to 8 MiB: no block is given back twice or lost (the fake saw no double or unknown free, and holds
 * nothing once everything is freed and released), and the figures add up at the end. Rounds
 * repeat (at most 20) until every kind of release has run at least once: how often each runs
 * depends on the machine's load. */
static void test_releases_side_by_side(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	struct gp_pool_dev_stats all, d0;
	struct fake_counts fc;
	uint64_t allocs = 0, frees = 0, counts[GP_CAUSE_COUNT];
	unsigned ops = ops_per_worker() / 8 + 1, rounds = 0;

	alarm(120);
	fake_set_fence_auto(&fx->fake, 2);
	fake_set_tick(&fx->fake, 1000);
	fake_set_capacity(&fx->fake, 0, 96 * MiB);
	gp_pool_set_cap(fx->pool, 0, 32 * MiB);
	fake_set_quiet(&fx->fake, 1); /* an idle GPU: misses of 64 KiB to 1 MiB trim too */
	do {
		releases_round(fx, ops, &allocs, &frees);
		rounds++;
		d0 = fx_stats(fx, 0);
		gp_pool_release_counts(fx->pool, counts, NULL);
	} while ((counts[GP_CAUSE_OOM] == 0 || counts[GP_CAUSE_CAP] == 0 || d0.trims == 0) &&
		 rounds < 20);
	print_message("%u round(s), %llu allocs; releases: %llu OOM, %llu cap, %llu trims\n", rounds,
		      (unsigned long long)allocs, (unsigned long long)counts[GP_CAUSE_OOM],
		      (unsigned long long)counts[GP_CAUSE_CAP], (unsigned long long)d0.trims);
	assert_true(counts[GP_CAUSE_OOM] > 0);
	assert_true(counts[GP_CAUSE_CAP] > 0);
	assert_true(d0.trims > 0);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);
	assert_int_equal(res.errors, 0);
	assert_int_equal(fake_used_total(&fx->fake), 0);
	assert_int_equal(fake_blocks(&fx->fake), 0);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.misuse, 0);
	all = fx_stats_all(fx);
	assert_int_equal(all.live_blocks + all.idle_blocks + all.pending_blocks, 0);
	assert_int_equal(all.live_bytes + all.idle_bytes + all.pending_bytes, 0);
	assert_int_equal(all.allocs, allocs);
	assert_int_equal(all.frees, frees);
	assert_int_equal(all.bad_frees, 0);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0) + gp_pool_cached_bytes(fx->pool, 1), 0);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stress_unordered, setup_unordered_capped,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_stress_switch_to_unordered,
						setup_ordered_capped, fx_teardown),
		cmocka_unit_test_setup_teardown(test_releases_side_by_side, setup_vmm_trim,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
