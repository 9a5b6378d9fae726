/* test_pool_churn.c — releases while the program keeps freeing: a release down to a target
 * (cap, pressure) gives back what was over the target when it began and then returns, however
 * many frees land meanwhile; the next crossing of the cap asks again. Unbounded, a cap release
 * in a program that keeps freeing would run as long as the program does, while the signal and
 * idle policies wait behind it. A release of everything is bounded the same way. The frees
 * "meanwhile" come from a hook that runs inside each backend free of the release, in the
 * releasing thread, with no pool lock held. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"

#define BLOCKS 8
#define CHURN_MAX 200

struct churn {
	struct fx *fx;
	int same_class; /* the program's blocks are 1 MiB, else each of a new, larger class */
	int frees_seen; /* backend frees during the release */
	int added;      /* blocks the "program" freed into the cache meanwhile */
};

static struct churn churn;

static void on_backend(void *arg, enum fake_op op)
{
	struct churn *c = arg;
	void *p = NULL;

	if (op != FAKE_OP_FREE || c->added >= CHURN_MAX)
		return;
	c->frees_seen++;
	/* A program thread: a block used and freed while the release runs (a real allocation: its
	 * class is empty, or new). */
	if (gp_pool_alloc(c->fx->pool, 0, c->same_class ? MiB : 3 * MiB + 2 * MiB * (size_t)c->added,
			  &p, NULL) == GP_OK &&
	    gp_pool_free(c->fx->pool, p) == GP_OK)
		c->added++;
}

/* BLOCKS blocks of 1 MiB cached (p[] oldest first), and a program thread that allocates and
 * frees at every backend free from now on (in the class being released, or a new one). */
static void cache_then_churn(struct fx *fx, void **p, int same_class)
{
	int i;

	for (i = 0; i < BLOCKS; i++)
		p[i] = fx_alloc(fx, 0, MiB);
	for (i = 0; i < BLOCKS; i++)
		fx_free(fx, p[i]);
	churn.fx = fx;
	churn.same_class = same_class;
	churn.frees_seen = churn.added = 0;
	fake_set_hook(&fx->fake, on_backend, &churn);
}

/* Proves: gp_pool_release to a target makes exactly the backend frees needed to bring the cache
 * down by what was over the target at its start (oldest blocks first), although every one of
 * those frees lands a new cached block; the blocks that arrived meanwhile stay cached. */
static void test_release_to_target_is_bounded(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *p[BLOCKS];
	int i;

	cache_then_churn(fx, p, 0);
	assert_int_equal(gp_pool_release(fx->pool, 0, (BLOCKS / 2) * cb(MiB), GP_CAUSE_CAP, &res), GP_OK);
	fake_set_hook(&fx->fake, NULL, NULL);
	assert_int_equal(res.blocks, BLOCKS / 2);
	assert_int_equal(res.bytes, (BLOCKS / 2) * cb(MiB));
	assert_int_equal(churn.frees_seen, BLOCKS / 2);
	for (i = 0; i < BLOCKS / 2; i++)
		assert_ptr_equal(fake_free_log_at(&fx->fake, (size_t)i, NULL), p[i]); /* oldest first */
	assert_int_equal(fx_stats(fx, 0).idle_blocks, BLOCKS / 2 + (uint64_t)churn.added);
}

/* Proves: a release of everything (target 0, the signal's) visits each class once: blocks freed
 * into a class it has already emptied stay cached for the next release. */
static void test_release_all_is_one_pass(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *p[BLOCKS];

	cache_then_churn(fx, p, 1);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_SIGNAL, &res), GP_OK);
	fake_set_hook(&fx->fake, NULL, NULL);
	assert_int_equal(res.blocks, BLOCKS);
	assert_int_equal(churn.frees_seen, BLOCKS);
	assert_int_equal(churn.added, BLOCKS);
	/* the program reused its one block each time; freed into an emptied class, it stays */
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 1);
}

/* Proves: a release of everything gives back what was cached when it began, no more: blocks
 * freed meanwhile into classes it has not reached yet stay cached (each backend free lands one
 * in a new, larger class; a release that freed those too would land another with each of their
 * frees, and go on as long as the program frees). A pressure poll asks for 0
 * when the shortfall is larger than the cache (e2e_policy_pressure_churn). */
static void test_release_all_is_bounded(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *p[BLOCKS];

	cache_then_churn(fx, p, 0);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_PRESSURE, &res), GP_OK);
	fake_set_hook(&fx->fake, NULL, NULL);
	assert_int_equal(res.blocks, BLOCKS);
	assert_int_equal(res.bytes, BLOCKS * cb(MiB));
	assert_int_equal(churn.frees_seen, BLOCKS);
	assert_int_equal(churn.added, BLOCKS);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, BLOCKS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_release_to_target_is_bounded, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_all_is_one_pass, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_all_is_bounded, fx_setup_ordered,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
