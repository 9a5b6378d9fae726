/* test_pool_lifecycle.c — creating and destroying a pool: bad arguments are refused, and destroy
 * frees host memory only, never calling the backend, whatever the pool still holds (live, idle,
 * pending blocks and fences in flight): at exit the driver may be gone. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>

#include "pool_fixture.h"

/* Proves: gp_pool_create refuses a missing backend, a backend without alloc or free, or no out
 * pointer, with GP_EINVAL. */
static void test_create_refuses_bad_arguments(void **state)
{
	struct fake_backend fake;
	struct gp_pool_config cfg = { .ordered = 0 };
	struct gp_backend be;
	struct gp_pool *pool = NULL;
	(void)state;

	fake_init(&fake);
	assert_int_equal(gp_pool_create(NULL, &cfg, &pool), GP_EINVAL);
	assert_int_equal(gp_pool_create(&fake.be, &cfg, NULL), GP_EINVAL);
	be = fake.be;
	be.alloc = NULL;
	assert_int_equal(gp_pool_create(&be, &cfg, &pool), GP_EINVAL);
	be = fake.be;
	be.free = NULL;
	assert_int_equal(gp_pool_create(&be, &cfg, &pool), GP_EINVAL);
	fake_fini(&fake);
}

/* Proves: gp_pool_destroy makes no backend call (no free, no fence_destroy, nothing) even with
 * live, idle and pending blocks on two devices and fences recorded but not complete. */
static void test_destroy_makes_no_backend_call(void **state)
{
	struct fx *fx = *state;
	uint64_t before[FAKE_OP_COUNT];
	void *live, *idle, *pending, *other;
	int op;

	live = fx_alloc(fx, 0, 1000);
	idle = fx_alloc(fx, 0, 2 * MiB);
	pending = fx_alloc(fx, 0, 30000);
	other = fx_alloc(fx, 1, 30000);
	fx_free(fx, idle);
	fx_settle(fx);
	fx_free(fx, pending);
	fx_free(fx, other);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* a fence in flight */
	assert_true(fake_fences_recorded(&fx->fake) >= 2);
	(void)live;

	for (op = 0; op < FAKE_OP_COUNT; op++)
		before[op] = fake_calls(&fx->fake, (enum fake_op)op);
	gp_pool_destroy(fx->pool);
	fx->pool = NULL;
	for (op = 0; op < FAKE_OP_COUNT; op++) {
		if (fake_calls(&fx->fake, (enum fake_op)op) != before[op])
			fail_msg("gp_pool_destroy made %llu backend call(s) of kind %d",
				 (unsigned long long)(fake_calls(&fx->fake, (enum fake_op)op) -
						      before[op]), op);
	}
	assert_int_equal(fake_blocks(&fx->fake), 4); /* the fake still holds every block */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_refuses_bad_arguments),
		cmocka_unit_test_setup_teardown(test_destroy_makes_no_backend_call,
						fx_setup_unordered, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
