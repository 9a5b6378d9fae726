/* test_pool_stale.c — a block freed behind the pool's back whose address the driver hands out
 * again (fake_free_behind): the new block takes the map's entry, and the old record leaves the
 * pool's figures, is counted (stale_evictions) and told to cfg.stale once with no lock held,
 * wherever the old block was: in use, held, cached in its list, between a free and its list, or
 * out of its list for a release. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"
#include "hooks.h"

/* What cfg.stale was told. */
static struct {
	unsigned calls, locked;
	int device;
	void *ptr;
	size_t bytes;
} told;

static void on_stale(void *arg, int device, void *ptr, size_t bytes)
{
	(void)arg;
	told.calls++;
	told.locked += gp_pool_test_locks_held() != 0;
	told.device = device;
	told.ptr = ptr;
	told.bytes = bytes;
}

static int setup_with(void **state, int ordered)
{
	struct gp_pool_config cfg = { .ordered = ordered, .stale = on_stale };

	told.calls = told.locked = 0;
	return fx_setup_cfg(state, &cfg);
}

static int setup_ordered(void **state)
{
	return setup_with(state, 1);
}

static int setup_unordered(void **state)
{
	return setup_with(state, 0);
}

/* cfg.stale was told once, with no lock held, of ptr's block of `bytes` on device 0. */
static void expect_told(void *ptr, size_t bytes)
{
	assert_int_equal(told.calls, 1);
	assert_int_equal(told.locked, 0);
	assert_int_equal(told.device, 0);
	assert_ptr_equal(told.ptr, ptr);
	assert_int_equal(told.bytes, bytes);
}

/* Everything freed and released: the fake holds nothing, every figure of device 0 is back to 0. */
static void expect_all_given_back(struct fx *fx)
{
	struct gp_pool_dev_stats s;

	assert_int_equal(gp_pool_release(fx->pool, -1, 0, GP_CAUSE_API, NULL), GP_OK);
	assert_int_equal(fake_blocks(&fx->fake), 0);
	s = fx_stats(fx, 0);
	assert_int_equal(s.live_blocks + s.live_bytes + s.idle_blocks + s.idle_bytes, 0);
	assert_int_equal(s.pending_blocks + s.pending_bytes + s.held_blocks + s.held_bytes, 0);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), 0);
}

/* Proves: a block in use whose address the driver hands out again leaves the figures: one block in
 * use, not two; counted and told once; the new block is the one the map knows (its size, its free
 * caches it); a release gives back only it, once. Were both entries kept for the address, the
 * old block would stay in use for ever and the free would find the old record. */
static void test_stale_live(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *a = fx_alloc(fx, 0, MiB), *b;

	assert_int_equal(fake_free_behind(&fx->fake, a), 0);
	b = fx_alloc(fx, 0, MiB);
	assert_ptr_equal(b, a);
	assert_int_equal(fake_reissued(&fx->fake), 1);
	s = fx_stats(fx, 0);
	assert_int_equal(s.live_blocks, 1);
	assert_int_equal(s.live_bytes, cb(MiB));
	assert_int_equal(s.requested_bytes, MiB);
	assert_int_equal(s.stale_evictions, 1);
	assert_int_equal(gp_pool_cached_bytes(fx->pool, 0), 0);
	expect_told(a, cb(MiB));
	assert_int_equal(gp_pool_block_size(fx->pool, b, NULL), cb(MiB));
	fx_free(fx, b);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 1);
	expect_all_given_back(fx);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 1);
}

/* Proves: a cached block whose address the driver hands out again (to a request of another size)
 * leaves its list: never handed out again (a request of its size gets a new block), not given
 * back by a release (its memory is the new block's). */
static void test_stale_cached(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *a = fx_alloc(fx, 0, 2 * MiB), *b, *c;

	fx_free(fx, a);
	assert_int_equal(fake_free_behind(&fx->fake, a), 0);
	b = fx_alloc(fx, 0, MiB);
	assert_ptr_equal(b, a);
	s = fx_stats(fx, 0);
	assert_int_equal(s.idle_blocks + s.pending_blocks, 0);
	assert_int_equal(s.live_blocks, 1);
	assert_int_equal(s.live_bytes, cb(MiB));
	assert_int_equal(s.stale_evictions, 1);
	expect_told(a, cb(2 * MiB));
	c = fx_alloc(fx, 0, 2 * MiB);
	assert_ptr_not_equal(c, a);
	fx_free(fx, c);
	fx_free(fx, b);
	expect_all_given_back(fx);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FREE), 2);
}

/* Proves: a held block whose address the driver hands out again leaves the figures (held ones
 * too), and its late unhold is refused, leaving the new block in use. */
static void test_stale_held(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	uint32_t ticket;
	void *a = fx_alloc(fx, 0, 8 * KiB), *b;

	assert_int_equal(gp_pool_hold(fx->pool, a, &ticket, NULL, NULL), GP_OK);
	assert_int_equal(fake_free_behind(&fx->fake, a), 0);
	b = fx_alloc(fx, 0, 8 * KiB);
	assert_ptr_equal(b, a);
	s = fx_stats(fx, 0);
	assert_int_equal(s.held_blocks + s.held_bytes, 0);
	assert_int_equal(s.live_blocks, 1);
	assert_int_equal(s.stale_evictions, 1);
	expect_told(a, cb(8 * KiB));
	assert_int_equal(gp_pool_unhold(fx->pool, a, ticket), GP_EINVAL);
	assert_int_equal(gp_pool_block_size(fx->pool, b, NULL), cb(8 * KiB));
	fx_free(fx, b);
	expect_all_given_back(fx);
}

/* The staged race below: another thread's allocation gets the address of the block being freed,
 * while that free is between its state change and its list (the pool's test hook there). */
static struct fx *staged_fx;
static void *staged_ptr, *staged_new;

static void reissue_in_free(struct gp_pool *p, void *ptr)
{
	(void)p;
	gp_pool_test_before_list = NULL; /* once */
	assert_ptr_equal(ptr, staged_ptr);
	assert_int_equal(fake_free_behind(&staged_fx->fake, staged_ptr), 0);
	staged_new = fx_alloc(staged_fx, 0, 64 * KiB);
}

/* Proves: a block whose address is handed out again while its free is between the state change
 * and its list is not cached (it is gone: the free finds it marked and drops it), and the new
 * block stays in use; the free still succeeds. */
static void test_stale_between_free_and_list(void **state)
{
	struct fx *fx = *state;
	struct gp_pool_dev_stats s;
	void *a = fx_alloc(fx, 0, 64 * KiB);

	staged_fx = fx;
	staged_ptr = a;
	staged_new = NULL;
	gp_pool_test_before_list = reissue_in_free;
	fx_free(fx, a);
	assert_null(gp_pool_test_before_list); /* the race was staged */
	assert_ptr_equal(staged_new, a);
	s = fx_stats(fx, 0);
	assert_int_equal(s.live_blocks, 1);
	assert_int_equal(s.idle_blocks + s.pending_blocks, 0);
	assert_int_equal(s.stale_evictions, 1);
	expect_told(a, cb(64 * KiB));
	assert_int_equal(gp_pool_block_size(fx->pool, a, NULL), cb(64 * KiB));
	fx_free(fx, staged_new);
	expect_all_given_back(fx);
}

/* The staged race below: while a release gives back the first of two blocks of a list it took
 * out, the second one's address is handed out again. */
static void reissue_in_release(void *arg, enum fake_op op)
{
	(void)arg;
	if (op != FAKE_OP_FREE || staged_ptr == NULL)
		return;
	fake_set_hook(&staged_fx->fake, NULL, NULL);
	assert_int_equal(fake_free_behind(&staged_fx->fake, staged_ptr), 0);
	staged_ptr = NULL;
	staged_new = fx_alloc(staged_fx, 0, 256 * KiB);
}

/* Proves: a release that took a block out of its list does not give it back once its address was
 * handed out again meanwhile (the new block's memory is there): it drops it, and gives back the
 * rest. */
static void test_stale_in_release(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *a = fx_alloc(fx, 0, 256 * KiB), *c = fx_alloc(fx, 0, 256 * KiB);

	fx_free(fx, a);
	fx_free(fx, c);
	staged_fx = fx;
	staged_ptr = c;
	staged_new = NULL;
	fake_set_hook(&fx->fake, reissue_in_release, NULL);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, &res), GP_OK);
	fake_set_hook(&fx->fake, NULL, NULL);
	assert_ptr_equal(staged_new, c);
	assert_int_equal(res.blocks, 1);
	assert_false(fake_holds(&fx->fake, a, NULL, NULL));
	assert_true(fake_holds(&fx->fake, c, NULL, NULL));
	assert_int_equal(fx_stats(fx, 0).stale_evictions, 1);
	assert_int_equal(fx_stats(fx, 0).live_blocks, 1);
	expect_told(c, cb(256 * KiB));
	fx_free(fx, staged_new);
	expect_all_given_back(fx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stale_live, setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_stale_cached, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_stale_held, setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_stale_between_free_and_list, setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_stale_in_release, setup_ordered, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
