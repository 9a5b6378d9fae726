/* test_pool_oversize.c — cfg.oversize_pct: above 1 MiB, a miss may take a reusable cached block
 * of a larger class of at most that percentage of the request, instead of a real allocation;
 * never at or below 1 MiB, never a block still fenced (a miss drives the fences to see whether it
 * still is), and off by default. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"

static int setup_oversize(void **state, int ordered, unsigned pct)
{
	struct gp_pool_config cfg = { .ordered = ordered, .oversize_pct = pct };

	return fx_setup_cfg(state, &cfg);
}

static int setup_200(void **state)
{
	return setup_oversize(state, 1, 200);
}

static int setup_400(void **state)
{
	return setup_oversize(state, 1, 400);
}

static int setup_200_unordered(void **state)
{
	return setup_oversize(state, 0, 200);
}

/* Proves: off by default: a 3 MiB request does not take an idle 6 MiB block. */
static void test_off_by_default(void **state)
{
	struct fx *fx = *state;
	void *big, *p;

	big = fx_alloc(fx, 0, 6 * MiB);
	fx_free(fx, big);
	p = fx_alloc(fx, 0, 3 * MiB);
	assert_ptr_not_equal(p, big);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fx_free(fx, p);
}

/* Proves: at 200%, a 3 MiB request takes the idle 6 MiB block (no real allocation, counted as a
 * hit, the block's size reported); freed, the block is back in its own class: a 6 MiB request
 * gets it, and a 2.5 MiB request (6 MiB > 200% of it) does not. */
static void test_takes_larger_within_limit(void **state)
{
	struct fx *fx = *state;
	size_t bytes = 0;
	void *big, *p, *q;
	int dev = -1;

	big = fx_alloc(fx, 0, 6 * MiB);
	fx_free(fx, big);
	p = fx_alloc(fx, 0, 3 * MiB);
	assert_ptr_equal(p, big);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	assert_int_equal(fx_stats(fx, 0).hits, 1);
	assert_int_equal(fx_stats(fx, 0).oversize_hits, 1);
	bytes = gp_pool_block_size(fx->pool, p, &dev);
	assert_int_equal(bytes, 6 * MiB);
	assert_int_equal(dev, 0);
	fx_free(fx, p);
	q = fx_alloc(fx, 0, 6 * MiB);
	assert_ptr_equal(q, big);
	fx_free(fx, q);
	p = fx_alloc(fx, 0, 5 * MiB / 2);
	assert_ptr_not_equal(p, big);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fx_free(fx, p);
}

/* Proves: of the larger classes within the limit, the smallest is taken first: a 4 MiB request
 * (limit 8 MiB) finds idle 8 MiB and 6 MiB blocks and takes the 6 MiB one. */
static void test_smallest_larger_first(void **state)
{
	struct fx *fx = *state;
	void *b8, *b6, *p;

	b8 = fx_alloc(fx, 0, 8 * MiB);
	b6 = fx_alloc(fx, 0, 6 * MiB);
	fx_free(fx, b8);
	fx_free(fx, b6);
	p = fx_alloc(fx, 0, 4 * MiB);
	assert_ptr_equal(p, b6);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fx_free(fx, p);
}

/* Proves: never at or below 1 MiB, whatever the percentage: the driver packs small requests
 * tightly, and a small block's class rounding is already the bound. */
static void test_never_small(void **state)
{
	struct fx *fx = *state;
	void *big, *p;

	big = fx_alloc(fx, 0, MiB);
	fx_free(fx, big);
	p = fx_alloc(fx, 0, 600 * KiB);
	assert_ptr_not_equal(p, big);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fx_free(fx, p);
}

/* Proves: a larger block still fenced is not taken: reuse stays as safe as native cudaFree. */
static void test_not_a_fenced_block(void **state)
{
	struct fx *fx = *state;
	void *big, *p, *q;

	big = fx_alloc(fx, 0, 6 * MiB);
	fx_free(fx, big);
	p = fx_alloc(fx, 0, 3 * MiB);
	assert_ptr_not_equal(p, big);
	fx_settle(fx);
	q = fx_alloc(fx, 0, 3 * MiB);
	assert_ptr_equal(q, big);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fx_free(fx, p);
	fx_free(fx, q);
}

/* Proves: a miss whose only candidate is a larger block still fenced drives the fences (one
 * recorded and polled) and takes it once they show it free, instead of a real allocation; the
 * GPU found idle does the same with no fence. */
static void test_fenced_larger_block_after_a_drive(void **state)
{
	struct fx *fx = *state;
	void *big, *p;

	fake_set_fence_auto(&fx->fake, 1); /* a fence is complete at its first poll */
	big = fx_alloc(fx, 0, 6 * MiB);
	fx_free(fx, big);
	p = fx_alloc(fx, 0, 3 * MiB);
	assert_ptr_equal(p, big);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	assert_int_equal(fake_fences_recorded(&fx->fake), 1);
	fx_free(fx, p);
}

static void test_fenced_larger_block_idle_gpu(void **state)
{
	struct fx *fx = *state;
	void *big, *p;

	fake_set_quiet(&fx->fake, 1);
	big = fx_alloc(fx, 0, 6 * MiB);
	fx_free(fx, big);
	p = fx_alloc(fx, 0, 3 * MiB);
	assert_ptr_equal(p, big);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 1);
	assert_int_equal(fake_fences_recorded(&fx->fake), 0);
	fx_free(fx, p);
}

/* Proves: a miss whose own class holds a fenced block drives the fences before it looks at the
 * larger classes: with the GPU found idle it reuses its own block, not the idle larger one, which
 * stays cached (no oversize hit, no real allocation) for a request of its own size. */
static void test_own_fenced_block_before_a_larger_one(void **state)
{
	struct fx *fx = *state;
	void *big, *own, *p;

	fake_set_quiet(&fx->fake, 1); /* every drive finds the GPU idle */
	big = fx_alloc(fx, 0, 6 * MiB);
	own = fx_alloc(fx, 0, 3 * MiB);
	fx_free(fx, big);
	fx_settle(fx); /* big: reusable */
	fx_free(fx, own); /* own: fenced until a drive covers it */
	p = fx_alloc(fx, 0, 3 * MiB);
	assert_ptr_equal(p, own);
	assert_int_equal(fx_stats(fx, 0).oversize_hits, 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	assert_ptr_equal(fx_alloc(fx, 0, 6 * MiB), big);
	fx_free(fx, p);
	fx_free(fx, big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_off_by_default, fx_setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_takes_larger_within_limit, setup_200,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_smallest_larger_first, setup_200, fx_teardown),
		cmocka_unit_test_setup_teardown(test_never_small, setup_400, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fenced_larger_block_after_a_drive,
						setup_200_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fenced_larger_block_idle_gpu,
						setup_200_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_not_a_fenced_block, setup_200_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_own_fenced_block_before_a_larger_one,
						setup_200_unordered, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
