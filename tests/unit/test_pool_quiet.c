/* test_pool_quiet.c — the backend's `quiet` (the GPU is idle: every operation issued so far is
 * done) stands in for a fence: asked only with no fence in flight, less and less often while it
 * answers no, and an answer of yes covers exactly the frees made before it was asked. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"

#define SIZE (2 * MiB) /* above the batching limit: every fenced miss drives the fences */

/* Free the block, allocate one of its size again; returns the new block. */
static void *cycle(struct fx *fx, void *p)
{
	fx_free(fx, p);
	return fx_alloc(fx, 0, SIZE);
}

/* Proves: on an idle GPU a miss reuses the just-freed block with no fence recorded, one question
 * asked, and no new backend allocation. */
static void test_idle_gpu_needs_no_fence(void **state)
{
	struct fx *fx = *state;
	void *a, *b;

	fake_set_quiet(&fx->fake, 1);
	a = fx_alloc(fx, 0, SIZE);
	b = cycle(fx, a);
	assert_ptr_equal(a, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 1);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	for (int i = 0; i < 100; i++)
		b = cycle(fx, b);
	assert_ptr_equal(a, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 101);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 0);
	fx_free(fx, b);
}

/* Proves: a block freed after the GPU was found idle is not covered by that answer: with the
 * GPU busy since, it waits for a fence of its own. */
static void test_answer_covers_earlier_frees_only(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *c, *d;

	fake_set_quiet(&fx->fake, 1);
	a = fx_alloc(fx, 0, SIZE);
	b = fx_alloc(fx, 0, SIZE);
	fx_free(fx, a);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* idle: covers a */
	fake_set_quiet(&fx->fake, 0);
	fx_free(fx, b);
	c = fx_alloc(fx, 0, SIZE);
	assert_ptr_equal(c, a);
	d = fx_alloc(fx, 0, SIZE); /* b is fenced: the GPU was busy when asked */
	assert_ptr_not_equal(d, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 1);
	fake_complete_all_fences(&fx->fake);
	fx_free(fx, c);
	fx_free(fx, d);
	fx_settle(fx);
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 0);
}

/* Proves: while the GPU stays busy the question is asked less and less often (at most about
 * log2 of the fences, then one in 65), every fence is recorded as before, and once the GPU is
 * idle again the answer is taken within 65 fences and fences stop. */
static void test_busy_gpu_backs_off(void **state)
{
	struct fx *fx = *state;
	uint64_t asked, recorded;
	void *p;

	fake_set_fence_auto(&fx->fake, 1); /* each fence complete at its first poll */
	p = fx_alloc(fx, 0, SIZE);
	for (int i = 0; i < 200; i++)
		p = cycle(fx, p);
	asked = fake_calls(&fx->fake, FAKE_OP_QUIET);
	recorded = fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD);
	assert_int_equal(recorded, 200);
	assert_true(asked >= 3 && asked <= 10);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);

	fake_set_quiet(&fx->fake, 1);
	for (int i = 0; i < 65; i++)
		p = cycle(fx, p);
	recorded = fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD);
	asked = fake_calls(&fx->fake, FAKE_OP_QUIET);
	assert_true(recorded < 200 + 65);
	for (int i = 0; i < 50; i++)
		p = cycle(fx, p);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), recorded);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), asked + 50);
	fx_free(fx, p);
}

/* Proves: with a fence in flight (the GPU is behind) the question is not asked, and that does
 * not use up the back-off: once the fence completes it is asked again after one skipped fence. */
static void test_not_asked_with_fence_in_flight(void **state)
{
	struct fx *fx = *state;
	void *p[5];

	for (int i = 0; i < 5; i++)
		p[i] = fx_alloc(fx, 0, SIZE);
	fx_free(fx, p[0]);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* asked (no), fence 1 */
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 1);
	assert_int_equal(fake_fences_recorded(&fx->fake), 1);
	fake_set_quiet(&fx->fake, 1);
	for (int i = 1; i < 4; i++) {
		fx_free(fx, p[i]);
		assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	}
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 1);
	assert_int_equal(fake_fences_recorded(&fx->fake), 4);
	fake_complete_all_fences(&fx->fake);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* all reaped, nothing dirty */
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 0);
	fx_free(fx, p[4]);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* skipped once: fence 5 */
	assert_int_equal(fake_fences_recorded(&fx->fake), 5);
	fake_complete_all_fences(&fx->fake);
	p[4] = fx_alloc(fx, 0, SIZE);
	fx_free(fx, p[4]);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* asked: idle, no fence */
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 2);
	assert_int_equal(fake_fences_recorded(&fx->fake), 5);
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 0);
}

/* Proves: in ordered mode (no stream) nothing is asked: blocks come straight back. */
static void test_ordered_asks_nothing(void **state)
{
	struct fx *fx = *state;
	void *p = fx_alloc(fx, 0, SIZE);

	fake_set_quiet(&fx->fake, 1);
	for (int i = 0; i < 10; i++)
		p = cycle(fx, p);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 0);
	fx_free(fx, p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_idle_gpu_needs_no_fence, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_answer_covers_earlier_frees_only,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_busy_gpu_backs_off, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_not_asked_with_fence_in_flight,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_ordered_asks_nothing, fx_setup_ordered,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
