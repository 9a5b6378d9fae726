/* test_pool_free_race.c — a free finds its block without a lock, then changes the block's state
 * word with one compare-and-swap. Between the two, other threads may free the same pointer,
 * hand the block out again from the cache, or release it and recycle its record for a new
 * allocation. Built with the pool's test hook (GP_POOL_TEST_HOOKS), which stages exactly that
 * between the two steps of one call. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"
#include "hooks.h"

static struct fx *staged_fx;
static void *staged_new;
static size_t staged_size;

/* What another thread does while this free sits between its lookup and its state change: its
 * own free of the pointer wins, a release gives the block back, and an allocation of the same
 * size gets the block's record (recycled: a new generation), perhaps at the same address. */
static void stage_race(struct gp_pool *p, void *ptr)
{
	struct gp_release_result res;

	gp_pool_test_after_lookup = NULL; /* once */
	assert_int_equal(gp_pool_free(p, ptr), GP_OK);
	assert_int_equal(gp_pool_release(p, -1, 0, GP_CAUSE_API, &res), GP_OK);
	assert_int_equal(res.blocks, 1);
	staged_new = fx_alloc(staged_fx, 0, staged_size);
}

/* Proves: the late free of the stale lookup fails (GP_EINVAL when the new allocation got the same
 * address, GP_ENOTOWNED otherwise) and leaves the new allocation in use: its owner frees it
 * normally, and nothing is lost. Without the generation in the state word the late free would
 * free the new allocation under its owner. */
static void test_stale_lookup_after_recycle(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats st;
	int rc;

	for (size_t size = 512; size <= 64 * MiB; size *= 32) {
		void *a = fx_alloc(fx, 0, size);

		staged_fx = fx;
		staged_size = size;
		staged_new = NULL;
		gp_pool_test_after_lookup = stage_race;
		rc = gp_pool_free(fx->pool, a);
		assert_null(gp_pool_test_after_lookup); /* the race was staged */
		assert_non_null(staged_new);
		assert_int_equal(rc, staged_new == a ? GP_EINVAL : GP_ENOTOWNED);
		st = fx_stats(fx, 0);
		assert_int_equal(st.live_blocks, 1);
		assert_int_equal(gp_pool_block_size(fx->pool, staged_new, NULL), cb(size));
		fx_free(fx, staged_new);
		st = fx_stats(fx, 0);
		assert_int_equal(st.live_blocks, 0);
		assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, NULL), GP_OK);
	}
}

/* Proves: a stale lookup that meets a double free (the other thread's free won, nothing was
 * released) is refused as a double free: GP_EINVAL, one bad free counted, the block cached once. */
static void stage_free_only(struct gp_pool *p, void *ptr)
{
	gp_pool_test_after_lookup = NULL;
	assert_int_equal(gp_pool_free(p, ptr), GP_OK);
}

static void test_stale_lookup_after_free(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats st;
	void *a = fx_alloc(fx, 0, 4096), *b, *c;

	gp_pool_test_after_lookup = stage_free_only;
	assert_int_equal(gp_pool_free(fx->pool, a), GP_EINVAL);
	st = fx_stats(fx, 0);
	assert_int_equal(st.bad_frees, 1);
	assert_int_equal(st.live_blocks, 0);
	assert_int_equal(st.idle_blocks, 1);
	b = fx_alloc(fx, 0, 4096);
	c = fx_alloc(fx, 0, 4096);
	assert_ptr_equal(b, a);
	assert_ptr_not_equal(c, a);
	fx_free(fx, b);
	fx_free(fx, c);
}

/* What another thread does in this free's window when nothing is released: its free of the
 * pointer wins, and an allocation of the same size takes the block straight back from the cache
 * (same record, same address). */
static void stage_free_and_reuse(struct gp_pool *p, void *ptr)
{
	gp_pool_test_after_lookup = NULL;
	assert_int_equal(gp_pool_free(p, ptr), GP_OK);
	staged_new = fx_alloc(staged_fx, 0, staged_size);
}

/* Proves: a stale lookup whose block was freed and handed out again from the cache meanwhile is
 * refused (GP_EINVAL, one bad free): the new owner keeps its block (in use, freed normally later).
 * Without a new generation per hand-out the late free would cache the new owner's block. */
static void test_stale_lookup_after_reuse(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats st;
	void *a = fx_alloc(fx, 0, 4096);

	staged_fx = fx;
	staged_size = 4096;
	staged_new = NULL;
	gp_pool_test_after_lookup = stage_free_and_reuse;
	assert_int_equal(gp_pool_free(fx->pool, a), GP_EINVAL);
	assert_ptr_equal(staged_new, a); /* the same block came back */
	st = fx_stats(fx, 0);
	assert_int_equal(st.bad_frees, 1);
	assert_int_equal(st.live_blocks, 1);
	assert_int_equal(gp_pool_block_size(fx->pool, a, NULL), cb(4096));
	fx_free(fx, staged_new);
	st = fx_stats(fx, 0);
	assert_int_equal(st.live_blocks, 0);
	assert_int_equal(st.idle_blocks, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stale_lookup_after_recycle, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_stale_lookup_after_free, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_stale_lookup_after_reuse, fx_setup_ordered,
						fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
