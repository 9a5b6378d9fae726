/* test_pool_hold.c — blocks freed during a CUDA graph capture, held for the graph (gp_pool_hold)
 * until the shim gives them to the pool (gp_pool_unhold): in use meanwhile, on no list, never
 * handed out or given back, a second free of them a double free; an unhold caches the block as a
 * free would, and acts only on the allocation its ticket names. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"

/* Proves: a held block stays in use (live and held figures, its bytes and device reported), a
 * gp_pool_free or gp_pool_hold of it is a double free (GP_EINVAL, counted, nothing else changes)
 * and block_size says 0; its unhold caches it as a free would (pending until a fence completes,
 * counted a free), and a second unhold or a free afterwards is refused. Before holds, the pool
 * kept such a block live: the program's second free after the capture succeeded, and the graph's
 * block had two owners. */
static void test_hold_then_free_refused(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s, before;
	uint32_t ticket = 0;
	size_t bytes = 0;
	int device = -1;
	void *a = fx_alloc(fx, 0, 3000), *b;

	assert_int_equal(gp_pool_hold(fx->pool, a, &ticket, &bytes, &device), GP_OK);
	assert_int_equal(bytes, cb(3000));
	assert_int_equal(device, 0);
	s = fx_stats(fx, 0);
	assert_int_equal(s.live_blocks, 1);
	assert_int_equal(s.live_bytes, cb(3000));
	assert_int_equal(s.held_blocks, 1);
	assert_int_equal(s.held_bytes, cb(3000));
	assert_int_equal(s.frees, 0);
	assert_int_equal(gp_pool_block_size(fx->pool, a, NULL), 0);

	before = s;
	before.bad_frees = 2;
	assert_int_equal(gp_pool_free(fx->pool, a), GP_EINVAL);
	assert_int_equal(gp_pool_hold(fx->pool, a, NULL, NULL, NULL), GP_EINVAL);
	s = fx_stats(fx, 0);
	assert_int_equal(fx_stats_same("after a free and a hold of a held block", &s, &before), 0);
	b = fx_alloc(fx, 0, 3000); /* a is on no list: a new block */
	assert_ptr_not_equal(b, a);

	assert_int_equal(gp_pool_unhold(fx->pool, a, ticket), GP_OK);
	s = fx_stats(fx, 0);
	assert_int_equal(s.live_blocks, 1);
	assert_int_equal(s.held_blocks + s.held_bytes, 0);
	assert_int_equal(s.pending_blocks, 1);
	assert_int_equal(s.frees, 1);
	assert_int_equal(gp_pool_unhold(fx->pool, a, ticket), GP_EINVAL);
	assert_int_equal(gp_pool_free(fx->pool, a), GP_EINVAL);
	assert_int_equal(fx_stats(fx, 0).bad_frees, 3);
	fx_free(fx, b);
	fx_settle(fx);
	s = fx_stats(fx, 0);
	assert_int_equal(s.idle_blocks, 2);
	assert_int_equal(s.live_blocks, 0);
}

/* Proves: what the pool never handed out is GP_ENOTOWNED for both calls, and counts nothing. */
static void test_hold_not_owned(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats before, after;
	int x;

	(void)fx_alloc(fx, 0, 512);
	before = fx_stats(fx, 0);
	assert_int_equal(gp_pool_hold(fx->pool, NULL, NULL, NULL, NULL), GP_ENOTOWNED);
	assert_int_equal(gp_pool_hold(fx->pool, &x, NULL, NULL, NULL), GP_ENOTOWNED);
	assert_int_equal(gp_pool_unhold(fx->pool, &x, 0), GP_ENOTOWNED);
	assert_int_equal(gp_pool_unhold(fx->pool, NULL, 0), GP_ENOTOWNED);
	after = fx_stats(fx, 0);
	assert_int_equal(fx_stats_same("after foreign holds", &after, &before), 0);
}

/* Proves: an unhold fences the block as a free does: a request of its size right after gets
 * another block; once a fence recorded after the unhold completes, the held block is reused. */
static void test_unhold_fenced(void **state)
{
	struct fx *fx = *state;
	uint32_t ticket;
	void *a = fx_alloc(fx, 0, MiB), *b;

	assert_int_equal(gp_pool_hold(fx->pool, a, &ticket, NULL, NULL), GP_OK);
	fx_settle(fx); /* fences from before the unhold do not cover it */
	assert_int_equal(gp_pool_unhold(fx->pool, a, ticket), GP_OK);
	b = fx_alloc(fx, 0, MiB);
	assert_ptr_not_equal(b, a);
	fx_free(fx, b);
	fx_settle(fx);
	assert_ptr_equal(fx_alloc(fx, 0, MiB), a);
}

/* Proves: releases never see a held block (a full release leaves it with the backend, in use),
 * and after its unhold the next release gives it back. */
static void test_release_skips_held(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	uint32_t ticket;
	void *a = fx_alloc(fx, 0, 5 * MiB);

	assert_int_equal(gp_pool_hold(fx->pool, a, &ticket, NULL, NULL), GP_OK);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);
	assert_int_equal(res.blocks, 0);
	assert_true(fake_holds(&fx->fake, a, NULL, NULL));
	assert_int_equal(fx_stats(fx, 0).live_bytes, cb(5 * MiB));
	assert_int_equal(gp_pool_unhold(fx->pool, a, ticket), GP_OK);
	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, &res), GP_OK);
	assert_int_equal(res.blocks, 1);
	assert_false(fake_holds(&fx->fake, a, NULL, NULL));
}

/* Proves: the ticket names one allocation: after an unhold the block comes back from the cache
 * to a new owner (same record, same address), and the old ticket no longer unholds it once it is
 * held again (GP_EINVAL, still held); its own ticket does. */
static void test_ticket_names_one_allocation(void **state)
{
	struct fx *fx = *state;
	uint32_t t1, t2;
	void *a = fx_alloc(fx, 0, 4096), *b;

	assert_int_equal(gp_pool_hold(fx->pool, a, &t1, NULL, NULL), GP_OK);
	assert_int_equal(gp_pool_unhold(fx->pool, a, t1), GP_OK);
	b = fx_alloc(fx, 0, 4096);
	assert_ptr_equal(b, a);
	assert_int_equal(gp_pool_hold(fx->pool, b, &t2, NULL, NULL), GP_OK);
	assert_int_not_equal(t1, t2);
	assert_int_equal(gp_pool_unhold(fx->pool, b, t1), GP_EINVAL);
	assert_int_equal(fx_stats(fx, 0).held_blocks, 1);
	assert_int_equal(gp_pool_unhold(fx->pool, b, t2), GP_OK);
	assert_int_equal(fx_stats(fx, 0).held_blocks, 0);
}

/* Proves: a device reset forgets held blocks with the rest (figures 0, nothing given back), and a
 * late unhold of one acts on nothing: GP_ENOTOWNED, or GP_EINVAL when a new block has its address
 * by then, which stays in use. */
static void test_forget_device_forgets_held(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	uint32_t ticket;
	void *a = fx_alloc(fx, 1, 64 * KiB), *b;
	int rc;

	assert_int_equal(gp_pool_hold(fx->pool, a, &ticket, NULL, NULL), GP_OK);
	fake_reset_device(&fx->fake, 1);
	gp_pool_forget_device(fx->pool, 1);
	s = fx_stats(fx, 1);
	assert_int_equal(s.live_blocks + s.live_bytes + s.held_blocks + s.held_bytes, 0);
	b = fx_alloc(fx, 1, 64 * KiB); /* the held block's record, recycled */
	rc = gp_pool_unhold(fx->pool, a, ticket);
	assert_int_equal(rc, b == a ? GP_EINVAL : GP_ENOTOWNED);
	assert_int_equal(gp_pool_block_size(fx->pool, b, NULL), cb(64 * KiB));
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 0);
	fx_free(fx, b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hold_then_free_refused, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_hold_not_owned, fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_unhold_fenced, fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_release_skips_held, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_ticket_names_one_allocation, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_forget_device_forgets_held, fx_setup_ordered,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
