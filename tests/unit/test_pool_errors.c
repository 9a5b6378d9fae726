/* test_pool_errors.c — bad input gets a clear answer and loses nothing: foreign pointers, double
 * frees (of idle and of pending blocks), NULL, bad devices. After each, the pool's figures are
 * unchanged except the bad-free counter, and it goes on working. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"

/* Proves: freeing a pointer the pool never handed out answers GP_ENOTOWNED, makes no backend call
 * and changes no figure (a foreign pointer has no device to count against). */
static void test_free_foreign_pointer(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats before, after;
	static char foreign[64];
	void *a;

	a = fx_alloc(fx, 0, 2048);
	before = fx_stats(fx, 0);
	assert_int_equal(gp_pool_free(fx->pool, foreign), GP_ENOTOWNED);
	assert_int_equal(gp_pool_free(fx->pool, (char *)a + 512), GP_ENOTOWNED);
	after = fx_stats(fx, 0);
	assert_int_equal(fx_stats_same("after foreign free", &after, &before), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 0);
	assert_int_equal(gp_pool_block_size(fx->pool, foreign, NULL), 0);
	fx_free(fx, a);
}

/* A 50000 B block allocated, freed, and freed again: the second free answers GP_EINVAL and
 * changes nothing but one more bad free. Returns the block. */
static void *freed_then_freed_again(struct fx *fx)
{
	struct gp_pool_dev_stats before, after;
	void *a = fx_alloc(fx, 0, 50000);

	fx_free(fx, a);
	before = fx_stats(fx, 0);
	assert_int_equal(gp_pool_free(fx->pool, a), GP_EINVAL);
	after = fx_stats(fx, 0);
	assert_int_equal(after.bad_frees, before.bad_frees + 1);
	before.bad_frees++;
	assert_int_equal(fx_stats_same("after double free", &after, &before), 0);
	return a;
}

/* Proves: a double free of an idle block answers GP_EINVAL, counts one bad free, changes nothing
 * else, and the block is still handed out exactly once afterwards. */
static void test_double_free_idle(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *c;

	a = freed_then_freed_again(fx);
	b = fx_alloc(fx, 0, 50000);
	c = fx_alloc(fx, 0, 50000);
	assert_ptr_equal(b, a);
	assert_ptr_not_equal(c, a); /* the double free did not put the block in the cache twice */
	fx_free(fx, b);
	fx_free(fx, c);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 0);
}

/* Proves: a double free of a pending block (unordered mode) answers GP_EINVAL, counts one bad free,
 * and the block still becomes reusable once, after its fence. */
static void test_double_free_pending(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *c;

	a = freed_then_freed_again(fx);
	fx_settle(fx);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 1);
	b = fx_alloc(fx, 0, 50000);
	c = fx_alloc(fx, 0, 50000);
	assert_ptr_equal(b, a);
	assert_ptr_not_equal(c, a);
	fx_free(fx, b);
	fx_free(fx, c);
}

/* Proves: after a release gave a block back, freeing it again is not the pool's pointer any more
 * (GP_ENOTOWNED) and does not reach the backend. */
static void test_free_after_release(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *a;

	a = fx_alloc(fx, 0, 70000);
	fx_free(fx, a);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);
	assert_int_equal(gp_pool_free(fx->pool, a), GP_ENOTOWNED);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 1);
}

/* Proves (and prints, to document the answer): gp_pool_free(NULL) makes no backend call, changes
 * no figure and answers GP_OK, GP_ENOTOWNED or GP_EINVAL; the shim handles NULL itself.
 * gp_pool_block_size(NULL) is 0. */
static void test_free_null(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats before, after;
	void *a;
	int rc;

	a = fx_alloc(fx, 0, 100);
	before = fx_stats(fx, 0);
	rc = gp_pool_free(fx->pool, NULL);
	print_message("gp_pool_free(NULL) = %d\n", rc);
	assert_true(rc == GP_OK || rc == GP_ENOTOWNED || rc == GP_EINVAL);
	after = fx_stats(fx, 0);
	assert_int_equal(fx_stats_same("after free(NULL)", &after, &before), 0);
	assert_int_equal(gp_pool_block_size(fx->pool, NULL, NULL), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 0);
	fx_free(fx, a);
}

/* Proves: a device outside [0, GP_MAX_DEVICES) is refused with GP_EINVAL by alloc and stats,
 * without a backend call. */
static void test_bad_device(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *p = NULL;
	int retried = 0;

	assert_int_equal(gp_pool_alloc(fx->pool, -1, 100, &p, &retried), GP_EINVAL);
	assert_int_equal(gp_pool_alloc(fx->pool, GP_MAX_DEVICES, 100, &p, &retried), GP_EINVAL);
	assert_int_equal(gp_pool_dev_stats(fx->pool, -1, &s), GP_EINVAL);
	assert_int_equal(gp_pool_dev_stats(fx->pool, GP_MAX_DEVICES, &s), GP_EINVAL);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 0);
}

/* Documents what a zero-byte request does; proves only that the answer is consistent: GP_OK comes
 * with a block that frees cleanly, anything else with no live block. */
static void test_zero_bytes(void **state)
{
	struct fx *fx = *state;
	void *p = NULL;
	int retried = 0, rc;

	rc = gp_pool_alloc(fx->pool, 0, 0, &p, &retried);
	print_message("gp_pool_alloc(0 bytes) = %d, ptr %s\n", rc, p ? "non-NULL" : "NULL");
	if (rc == GP_OK && p) {
		assert_int_equal(fx_stats(fx, 0).live_blocks, 1);
		fx_free(fx, p);
	} else {
		assert_int_equal(fx_stats(fx, 0).live_blocks, 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_free_foreign_pointer, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_double_free_idle, fx_setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_double_free_pending, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_free_after_release, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_free_null, fx_setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_bad_device, fx_setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_zero_bytes, fx_setup_ordered, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
