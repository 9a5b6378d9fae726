/* test_pool_locks.c — the pool never holds a lock across a backend call. From inside each backend
 * callback the fake's hook starts another thread that uses the same pool (stats, free, alloc) and
 * waits for it with a timeout: if a pool lock were held, that thread would block, the wait would
 * time out and the test fails instead of hanging. alarm() backs this up. Every other unit test
 * checks the same more directly: the pool built for them counts the locks each thread holds, and
 * the fake counts a call made while the count is not 0 (fake_locked_calls; teardown fails). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool_fixture.h"
#include "hooks.h"

#define MAX_PROBES 128
#define OP_OVER_CAP FAKE_OP_COUNT /* the pool's over_cap callback, probed like a backend call */
#define NOPS (FAKE_OP_COUNT + 1)
#define PHASE_PROBES_PER_OP 4 /* per step of the scenario: each path gets probed, and a release
			       * of many blocks does not use the probes up */
#define PROBE_TIMEOUT_S 3
#define NCANARIES 256

struct probe;

struct job {
	struct probe *pr;
	pthread_t thread;
	void *victim; /* a live block the helper frees, or NULL */
	int done;     /* under probe.lock */
	int error;
};

struct probe {
	struct fx *fx;
	pthread_t owner;                /* only backend calls made by this thread are probed */
	int armed[NOPS];
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct job jobs[MAX_PROBES];
	size_t njobs;
	void *victims[MAX_PROBES];
	size_t nvictims;
	void *canaries[NCANARIES];      /* live blocks the helper looks up, never frees */
	unsigned probes[NOPS];
	unsigned phase_probes[NOPS]; /* since the scenario's current step began */
	unsigned timeouts[NOPS];
	int stop;                       /* after one timeout: probing further only costs time */
};

static const char *op_name[NOPS] = {
	"backend alloc", "backend free", "backend fence_record", "backend fence_query",
	"backend fence_wait", "backend fence_destroy", "backend now_ns", "backend may_release",
	"backend quiet", "backend remap", "backend split", "backend merge", "backend joinable",
	"backend join", "over_cap callback",
};
_Static_assert(sizeof(op_name) / sizeof(op_name[0]) == NOPS && FAKE_OP_JOIN + 2 == NOPS,
	       "a name for every backend call the fake counts");

/* Sizes the helper allocates and frees: the classes the owner's calls work on, so a class lock
 * held across a backend call would block it. */
static const size_t helper_sizes[] = { 1024, 4096, 3 << 20, 5 << 20, 2 << 20, 1 << 20 };

static void *helper(void *arg)
{
	struct job *job = arg;
	struct probe *pr = job->pr;
	struct gp_pool *pool = pr->fx->pool;
	struct gp_pool_dev_stats s;
	size_t i;
	int retried = 0, err = 0;

	err |= gp_pool_dev_stats(pool, 0, &s) != GP_OK;
	err |= gp_pool_dev_stats(pool, 1, &s) != GP_OK;
	if (job->victim)
		err |= gp_pool_free(pool, job->victim) != GP_OK;
	/* touch the pointer map all over: a map lock held across a backend call would block */
	for (i = 0; i < NCANARIES; i++)
		err |= gp_pool_block_size(pool, pr->canaries[i], NULL) == 0;
	for (i = 0; i < sizeof(helper_sizes) / sizeof(helper_sizes[0]); i++) {
		void *p = NULL;

		err |= gp_pool_alloc(pool, 0, helper_sizes[i], &p, &retried) != GP_OK;
		if (p) {
			err |= gp_pool_block_size(pool, p, NULL) < helper_sizes[i];
			err |= gp_pool_free(pool, p) != GP_OK;
		}
	}
	pthread_mutex_lock(&pr->lock);
	job->error = err;
	job->done = 1;
	pthread_cond_broadcast(&pr->cv);
	pthread_mutex_unlock(&pr->lock);
	return NULL;
}

static void probe_call(struct probe *pr, int op)
{
	struct timespec deadline;
	struct job *job;
	int rc = 0;

	if (!pthread_equal(pthread_self(), pr->owner) || !pr->armed[op] || pr->stop ||
	    pr->njobs == MAX_PROBES || pr->phase_probes[op] == PHASE_PROBES_PER_OP)
		return;
	job = &pr->jobs[pr->njobs];
	memset(job, 0, sizeof(*job));
	job->pr = pr;
	if (pr->nvictims)
		job->victim = pr->victims[--pr->nvictims];
	if (pthread_create(&job->thread, NULL, helper, job) != 0)
		return;
	pr->njobs++;
	pr->probes[op]++;
	pr->phase_probes[op]++;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += PROBE_TIMEOUT_S;
	pthread_mutex_lock(&pr->lock);
	while (!job->done && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&pr->cv, &pr->lock, &deadline);
	if (!job->done) {
		pr->timeouts[op]++;
		pr->stop = 1;
	}
	pthread_mutex_unlock(&pr->lock);
}

static void hook(void *arg, enum fake_op op)
{
	probe_call(arg, (int)op);
}

/* The pool's over_cap callback; the probe is set once the test has one. */
static struct probe *over_cap_probe;

static void on_over_cap(void *arg, int device)
{
	(void)arg;
	(void)device;
	if (over_cap_probe)
		probe_call(over_cap_probe, OP_OVER_CAP);
}

static int setup_capped(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .over_cap = on_over_cap, .arg = NULL };

	over_cap_probe = NULL;
	return fx_setup_cfg(state, &cfg);
}

static void probe_init(struct probe *pr, struct fx *fx)
{
	size_t i;

	memset(pr, 0, sizeof(*pr));
	pr->fx = fx;
	pr->owner = pthread_self();
	pthread_mutex_init(&pr->lock, NULL);
	pthread_cond_init(&pr->cv, NULL);
	for (i = 0; i < MAX_PROBES; i++)
		pr->victims[i] = fx_alloc(fx, 0, 1024);
	pr->nvictims = MAX_PROBES;
	for (i = 0; i < NCANARIES; i++)
		pr->canaries[i] = fx_alloc(fx, 0, 512);
}

/* Joins every helper (they finish once the owner has left the pool) and reports the results. */
static int probe_finish(struct probe *pr)
{
	size_t i;
	int bad = 0, op;

	fake_set_hook(&pr->fx->fake, NULL, NULL);
	for (i = 0; i < pr->njobs; i++) {
		pthread_join(pr->jobs[i].thread, NULL);
		if (pr->jobs[i].error) {
			print_error("a pool call made from inside a backend call failed\n");
			bad++;
		}
	}
	for (op = 0; op < NOPS; op++) {
		print_message("%s: %u probe(s), %u blocked\n", op_name[op], pr->probes[op],
			      pr->timeouts[op]);
		if (pr->timeouts[op]) {
			print_error("a pool call from another thread blocked while the pool was inside "
				    "%s: a pool lock is held across it\n", op_name[op]);
			bad++;
		}
	}
	pthread_cond_destroy(&pr->cv);
	pthread_mutex_destroy(&pr->lock);
	return bad;
}

static void next_step(struct probe *pr)
{
	memset(pr->phase_probes, 0, sizeof(pr->phase_probes));
}

/* Drives the pool through every path that calls the backend: a miss, fences (record, query,
 * destroy, wait), a release, and the OOM release-and-retry. */
static void drive_backend_paths(struct fx *fx, struct probe *pr)
{
	struct gp_release_result res;
	void *p, *q, *r = NULL;
	int retried = 0;

	p = fx_alloc(fx, 0, 3 * MiB);
	fx_free(fx, p);
	next_step(pr);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	fake_complete_all_fences(&fx->fake);
	next_step(pr);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	next_step(pr);
	p = fx_alloc(fx, 0, 5 * MiB);
	fx_free(fx, p);
	next_step(pr);
	assert_int_equal(gp_pool_advance(fx->pool, 1), GP_OK);
	next_step(pr);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);

	next_step(pr);
	q = fx_alloc(fx, 1, 2 * MiB);
	fx_free(fx, q);
	fake_set_capacity(&fx->fake, 1, cb(2 * MiB));
	next_step(pr);
	assert_int_equal(gp_pool_alloc(fx->pool, 1, MiB, &r, &retried), GP_OK);
	assert_int_equal(retried, 1);
	fx_free(fx, r);

	/* quiet: asked with no fence in flight, then less often after each "no" (at most one
	 * fence in 65 skips it); helpers may have asked in between. */
	next_step(pr);
	fake_set_fence_auto(&fx->fake, 1);
	for (int i = 0; i < 130 && pr->probes[FAKE_OP_QUIET] == 0; i++) {
		p = fx_alloc(fx, 0, 3 * MiB);
		fx_free(fx, p);
		assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	}
	fake_set_fence_auto(&fx->fake, 0);
}

/* Proves: no pool lock is held across backend alloc, free, fence_record, fence_query,
 * fence_wait, fence_destroy, may_release or quiet: another thread's stats, free and alloc go
 * through. */
static void test_no_lock_across_backend_calls(void **state)
{
	struct fx *fx = *state;
	struct probe pr;
	int op;

	alarm(60);
	probe_init(&pr, fx);
	for (op = 0; op < FAKE_OP_COUNT; op++)
		pr.armed[op] = op != FAKE_OP_NOW;
	fake_set_hook(&fx->fake, hook, &pr);
	drive_backend_paths(fx, &pr);
	assert_int_equal(probe_finish(&pr), 0);
	assert_true(pr.probes[FAKE_OP_ALLOC] >= 1);
	assert_true(pr.probes[FAKE_OP_FREE] >= 1);
	assert_true(pr.probes[FAKE_OP_FENCE_RECORD] >= 1);
	assert_true(pr.probes[FAKE_OP_FENCE_QUERY] >= 1);
	assert_true(pr.probes[FAKE_OP_FENCE_WAIT] >= 1);
	assert_true(pr.probes[FAKE_OP_FENCE_DESTROY] >= 1);
	assert_true(pr.probes[FAKE_OP_MAY_RELEASE] >= 1);
	assert_true(pr.probes[FAKE_OP_QUIET] >= 1);
	alarm(0);
}

/* A pool whose fake backend has VMM's calls (blocks of 4 MiB and more movable, split, merge,
 * remap from 4 MiB). */
static int setup_vmm(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .remap_min_bytes = 4 * MiB };

	return fx_setup_movable(state, &cfg, 4 * MiB, 1);
}

/* Proves: no pool lock is held across backend split, merge, joinable and remap: an idle 32 MiB
 * block split for 8 MiB (its rest a hit), the parts merged again for 32 MiB, idle 8 and 4 MiB
 * blocks moved into a 12 MiB one. */
static void test_no_lock_across_vmm_calls(void **state)
{
	struct fx *fx = *state;
	struct probe pr;
	void *a, *b, *c;

	alarm(60);
	probe_init(&pr, fx);
	pr.armed[FAKE_OP_SPLIT] = pr.armed[FAKE_OP_MERGE] = pr.armed[FAKE_OP_REMAP] = 1;
	pr.armed[FAKE_OP_JOINABLE] = 1;
	fake_set_hook(&fx->fake, hook, &pr);
	a = fx_alloc(fx, 0, 32 * MiB);
	fx_free(fx, a);
	fx_settle(fx);
	next_step(&pr);
	b = fx_alloc(fx, 0, 8 * MiB);
	c = fx_alloc(fx, 0, 24 * MiB);
	fx_free(fx, b);
	fx_free(fx, c);
	fx_settle(fx);
	next_step(&pr);
	a = fx_alloc(fx, 0, 32 * MiB);
	b = fx_alloc(fx, 0, 8 * MiB);
	c = fx_alloc(fx, 0, 4 * MiB);
	fx_free(fx, b);
	fx_free(fx, c);
	fx_settle(fx);
	next_step(&pr);
	b = fx_alloc(fx, 0, 12 * MiB);
	fx_free(fx, b);
	fx_free(fx, a);
	assert_int_equal(probe_finish(&pr), 0);
	assert_true(pr.probes[FAKE_OP_SPLIT] >= 1);
	assert_true(pr.probes[FAKE_OP_MERGE] >= 1);
	assert_true(pr.probes[FAKE_OP_REMAP] >= 1);
	assert_true(pr.probes[FAKE_OP_JOINABLE] >= 1);
	alarm(0);
}

/* Proves: the clock (now_ns) is not read under a pool lock either (the header says no backend
 * function is); kept apart so a failure here is told from the one above. */
static void test_no_lock_across_clock(void **state)
{
	struct fx *fx = *state;
	struct probe pr;

	alarm(60);
	probe_init(&pr, fx);
	pr.armed[FAKE_OP_NOW] = 1;
	fake_set_hook(&fx->fake, hook, &pr);
	drive_backend_paths(fx, &pr);
	assert_int_equal(probe_finish(&pr), 0);
	alarm(0);
}

/* Proves: the over_cap callback runs with no pool lock held: another thread's stats, free and
 * alloc go through while it runs (the shim's callback wakes the control thread). */
static void test_no_lock_across_over_cap(void **state)
{
	struct fx *fx = *state;
	struct probe pr;
	void *a, *b;

	alarm(60);
	probe_init(&pr, fx);
	pr.armed[OP_OVER_CAP] = 1;
	over_cap_probe = &pr;
	gp_pool_set_cap(fx->pool, 0, MiB);
	a = fx_alloc(fx, 0, 2 * MiB);
	b = fx_alloc(fx, 0, 3 * MiB);
	fx_free(fx, a);
	fx_free(fx, b);
	over_cap_probe = NULL;
	assert_int_equal(probe_finish(&pr), 0);
	/* Once for a's free; b's may report again: the probe's alloc is a miss that finds the
	 * cache over the cap and releases down to it, which re-arms the notice. */
	assert_true(pr.probes[OP_OVER_CAP] >= 1);
	alarm(0);
}

/* Proves: the check every unit test relies on works: a backend call made while this thread holds
 * a pool lock (a list's, taken through the test hook) is counted, and one made after it is given
 * back is not. */
static void test_locked_call_caught(void **state)
{
	struct fx *fx = *state;
	int op = -1;

	assert_int_equal(gp_pool_test_locks_held(), 0);
	assert_int_equal(gp_pool_test_list_lock(fx->pool, 0, 4096, 1), GP_OK);
	assert_int_equal(gp_pool_test_locks_held(), 1);
	(void)fx->fake.be.now_ns(fx->fake.be.ctx);
	assert_int_equal(gp_pool_test_list_lock(fx->pool, 0, 4096, 0), GP_OK);
	assert_int_equal(gp_pool_test_locks_held(), 0);
	(void)fx->fake.be.now_ns(fx->fake.be.ctx);
	assert_int_equal(fake_locked_calls(&fx->fake, &op), 1);
	assert_int_equal(op, FAKE_OP_NOW);
	fx->fake.counts.locked_calls = 0; /* caught on purpose: teardown must not fail for it */
}

/* A pool that remaps from 4 MiB (blocks of 4 MiB and more movable) without split, and takes a
 * larger class's block up to twice the request. */
static int setup_remap_oversize(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .remap_min_bytes = 4 * MiB, .oversize_pct = 200 };

	return fx_setup_movable(state, &cfg, 4 * MiB, 0);
}

/* Proves: a miss that looks at a larger class's cached block, where a remap could take part of
 * it instead (no backend split: whether it may move depends on its age), reads the clock before
 * it takes that list's lock, not under it (miss.c read now_ns under the lock). */
static void test_no_clock_under_list_lock(void **state)
{
	struct fx *fx = *state;
	uint64_t clock_calls;
	void *a, *b;

	a = fx_alloc(fx, 0, 12 * MiB);
	fx_free(fx, a);
	fx_settle(fx);
	clock_calls = fake_calls(&fx->fake, FAKE_OP_NOW);
	b = fx_alloc(fx, 0, 8 * MiB); /* the 12 MiB block may move: a remap serves the miss */
	assert_true(fake_calls(&fx->fake, FAKE_OP_NOW) > clock_calls);
	assert_int_equal(fake_locked_calls(&fx->fake, NULL), 0);
	fx_free(fx, b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_no_lock_across_backend_calls, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_no_lock_across_clock, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_no_lock_across_over_cap, setup_capped,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_no_lock_across_vmm_calls, setup_vmm, fx_teardown),
		cmocka_unit_test_setup_teardown(test_locked_call_caught, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_no_clock_under_list_lock, setup_remap_oversize,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
