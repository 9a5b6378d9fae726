/* test_pool_split.c — backend split and merge (GPUPOOL_VMM): a miss of a remap-capable class with
 * no block of its own class takes the end of the smallest larger movable block that may be reused
 * now, where it lies: no real allocation, no remap, no new memory, counted a hit and a split; the
 * rest stays cached at its address, in the largest class it serves. It may be reused as a hit
 * would be (ordered mode: at once; else once its fence is done); a block the backend will not
 * split stays as it was; the oversize rule leaves such blocks to it. When no block is large
 * enough, the fewest cached neighbours that hold the miss become one block again (merge), which
 * serves it. Bytes stay exact through frees, splits of splits, merges and releases. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"

/* A pool (remap from 4 MiB, ordered or not, cfg.oversize_pct) whose fake backend makes blocks of
 * 4 MiB and more movable and splits and merges them. */
static int setup_split(void **state, int ordered, unsigned oversize_pct)
{
	struct gp_pool_config cfg = { .ordered = ordered, .oversize_pct = oversize_pct,
				      .remap_min_bytes = 4 * MiB };

	return fx_setup_movable(state, &cfg, 4 * MiB, 1);
}

static int setup_unordered(void **state)
{
	return setup_split(state, 0, 0);
}

static int setup_ordered(void **state)
{
	return setup_split(state, 1, 0);
}

static int setup_oversize(void **state)
{
	return setup_split(state, 0, 200);
}

/* Allocate, fill, free one block of `bytes`; let its fence complete. */
static void *cached(struct fx *fx, size_t bytes, int fill)
{
	void *p = fx_alloc(fx, 0, bytes);

	memset(p, fill, bytes);
	fx_free(fx, p);
	fx_settle(fx);
	return p;
}

/* Proves: an 8 MiB miss beside an idle 32 MiB block gets its last 8 MiB, bytes and all, with no
 * backend alloc or remap and no new memory; a hit and a split; the 32 MiB block stays cached as
 * 24 MiB at its address, which a 24 MiB request then gets. A release after both are freed gives
 * all 32 MiB back (two blocks). */
static void test_split_serves_miss(void **state)
{
	struct fx *fx = *state;
	void *a = cached(fx, 32 * MiB, 0x5a), *p, *q;
	struct gp_pool_dev_stats s;
	struct gp_release_result r;
	struct fake_counts fc;

	p = fx_alloc(fx, 0, 8 * MiB);
	assert_ptr_equal(p, (char *)a + 24 * MiB);
	assert_int_equal(((unsigned char *)p)[0], 0x5a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_SPLIT), 1);
	assert_int_equal(fake_used(&fx->fake, 0), 32 * MiB);
	assert_int_equal(gp_pool_block_size(fx->pool, p, NULL), 8 * MiB);
	s = fx_stats(fx, 0);
	assert_int_equal(s.splits, 1);
	assert_int_equal(s.hits, 1);
	assert_int_equal(s.allocs, 2);
	assert_int_equal(s.real_allocs, 1);
	assert_int_equal(s.live_bytes, 8 * MiB);
	assert_int_equal(s.idle_bytes, 24 * MiB);
	assert_int_equal(s.idle_blocks, 1);
	assert_int_equal(s.movable_bytes, 32 * MiB);
	assert_int_equal(s.peak_reserved_bytes, 32 * MiB);
	q = fx_alloc(fx, 0, 24 * MiB);
	assert_ptr_equal(q, a);
	assert_int_equal(gp_pool_block_size(fx->pool, q, NULL), 24 * MiB);
	fx_free(fx, p);
	fx_free(fx, q);
	fx_settle(fx);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, &r), GP_OK);
	assert_int_equal(r.bytes, 32 * MiB);
	assert_int_equal(r.blocks, 2);
	assert_int_equal(fake_used(&fx->fake, 0), 0);
	assert_int_equal(fx_stats(fx, 0).movable_bytes, 0);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.splits_ok, 1);
	assert_int_equal(fake_misuse(&fx->fake), 0);
}

/* Proves: the smallest larger block gives (64 MiB and 16 MiB idle: an 8 MiB miss splits the 16),
 * and a split block splits again (a 6 MiB miss takes 6 MiB of the 8 left, at +2 MiB), each a hit
 * with no new memory. */
static void test_smallest_and_again(void **state)
{
	struct fx *fx = *state;
	void *big = fx_alloc(fx, 0, 64 * MiB), *mid = fx_alloc(fx, 0, 16 * MiB), *p, *q;

	fx_free(fx, big);
	fx_free(fx, mid);
	fx_settle(fx);
	p = fx_alloc(fx, 0, 8 * MiB);
	assert_ptr_equal(p, (char *)mid + 8 * MiB);
	q = fx_alloc(fx, 0, 6 * MiB);
	assert_ptr_equal(q, (char *)mid + 2 * MiB);
	assert_int_equal(fx_stats(fx, 0).splits, 2);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 66 * MiB);
	assert_int_equal(fake_used(&fx->fake, 0), 80 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fx_free(fx, q);
	fx_free(fx, p);
	fx_settle(fx);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, NULL), GP_OK);
	assert_int_equal(fake_used(&fx->fake, 0), 0);
}

/* Proves: without ordered mode a block whose fence is not done is not split (a real allocation);
 * once it is done, it is. */
static void test_fenced_not_split(void **state)
{
	struct fx *fx = *state;
	void *a = fx_alloc(fx, 0, 32 * MiB), *p, *q;

	fx_free(fx, a);
	p = fx_alloc(fx, 0, 8 * MiB);
	assert_true(p < (void *)a || p >= (void *)((char *)a + 32 * MiB));
	assert_int_equal(fx_stats(fx, 0).splits, 0);
	fx_settle(fx);
	q = fx_alloc(fx, 0, 8 * MiB);
	assert_ptr_equal(q, (char *)a + 24 * MiB);
	fx_free(fx, p);
	fx_free(fx, q);
}

/* Proves: without ordered mode, a block of another size freed a moment ago splits once the miss
 * has driven the fences: on an idle GPU (quiet) at once. */
static void test_idle_gpu_splits(void **state)
{
	struct fx *fx = *state;
	void *a = fx_alloc(fx, 0, 32 * MiB), *p;

	fx_free(fx, a);
	fake_set_quiet(&fx->fake, 1);
	p = fx_alloc(fx, 0, 8 * MiB);
	assert_ptr_equal(p, (char *)a + 24 * MiB);
	assert_int_equal(fx_stats(fx, 0).splits, 1);
	fx_free(fx, p);
}

/* Proves: in ordered mode a block freed a moment ago splits at once (as it would be reused at
 * once), with no fence recorded. */
static void test_ordered_at_once(void **state)
{
	struct fx *fx = *state;
	void *a = fx_alloc(fx, 0, 32 * MiB), *p;

	fx_free(fx, a);
	p = fx_alloc(fx, 0, 8 * MiB);
	assert_ptr_equal(p, (char *)a + 24 * MiB);
	assert_int_equal(fake_fences_recorded(&fx->fake), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	fx_free(fx, p);
}

/* Proves: a block the backend will not split goes back cached as it was, and the miss falls to
 * the remap, which moves 8 MiB of it into a new range (no new memory); the 24 MiB left stays at
 * its address. */
static void test_refused(void **state)
{
	struct fx *fx = *state;
	void *a = cached(fx, 32 * MiB, 1), *p, *q;

	fake_set_split(&fx->fake, 1, GP_EINVAL);
	p = fx_alloc(fx, 0, 8 * MiB);
	assert_true(p < (void *)a || p >= (void *)((char *)a + 32 * MiB));
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_SPLIT), 1);
	assert_int_equal(fx_stats(fx, 0).splits, 0);
	assert_int_equal(fx_stats(fx, 0).remaps, 1);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 24 * MiB);
	assert_int_equal(fake_used(&fx->fake, 0), 32 * MiB);
	q = fx_alloc(fx, 0, 24 * MiB);
	assert_ptr_equal(q, a);
	fx_free(fx, p);
	fx_free(fx, q);
}

/* Proves: with cfg.oversize_pct a 10 MiB miss does not take an idle 16 MiB movable block whole:
 * it takes 10 MiB of it (a split), and the 6 MiB left serves a 6 MiB request. */
static void test_oversize_leaves_it(void **state)
{
	struct fx *fx = *state;
	void *a = cached(fx, 16 * MiB, 2), *p, *q;

	p = fx_alloc(fx, 0, 10 * MiB);
	assert_ptr_equal(p, (char *)a + 6 * MiB);
	assert_int_equal(gp_pool_block_size(fx->pool, p, NULL), 10 * MiB);
	assert_int_equal(fx_stats(fx, 0).oversize_hits, 0);
	q = fx_alloc(fx, 0, 6 * MiB);
	assert_ptr_equal(q, a);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	fx_free(fx, p);
	fx_free(fx, q);
}

/* Proves: a block the backend will not split for the request (its pieces, the fake's 16 MiB, too
 * large: a 10 MiB part of a 16 MiB block would be all of it) is passed over for the next larger
 * one, which splits (16 MiB of the 32 at +16); with cfg.oversize_pct it is handed out whole
 * instead (16 MiB for 10, an oversize hit), as without VMM. */
static void test_unsplittable_next(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *p;

	fake_set_remap_piece(&fx->fake, 16 * MiB);
	a = fx_alloc(fx, 0, 16 * MiB);
	b = fx_alloc(fx, 0, 32 * MiB);
	fx_free(fx, a);
	fx_free(fx, b);
	fx_settle(fx);
	p = fx_alloc(fx, 0, 10 * MiB);
	assert_ptr_equal(p, (char *)b + 16 * MiB);
	assert_int_equal(gp_pool_block_size(fx->pool, p, NULL), 16 * MiB);
	assert_int_equal(fx_stats(fx, 0).splits, 1);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 32 * MiB);
	fx_free(fx, p);
}

static void test_unsplittable_whole(void **state)
{
	struct fx *fx = *state;
	void *a = fx_alloc(fx, 0, 16 * MiB), *p;

	fake_set_remap_piece(&fx->fake, 16 * MiB);
	fx_free(fx, a);
	fx_settle(fx);
	p = fx_alloc(fx, 0, 10 * MiB);
	assert_ptr_equal(p, a);
	assert_int_equal(gp_pool_block_size(fx->pool, p, NULL), 16 * MiB);
	assert_int_equal(fx_stats(fx, 0).splits, 0);
	assert_int_equal(fx_stats(fx, 0).oversize_hits, 1);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	fx_free(fx, p);
}

/* Three parts of an idle 32 MiB block (8 MiB at +0, 16 at +8, 8 at +24), all cached. */
static void *three_parts(struct fx *fx, void **parts)
{
	void *a = cached(fx, 32 * MiB, 3);

	parts[2] = fx_alloc(fx, 0, 8 * MiB);  /* +24 */
	parts[1] = fx_alloc(fx, 0, 16 * MiB); /* +8 */
	parts[0] = fx_alloc(fx, 0, 8 * MiB);  /* the 8 MiB left: a hit on the block itself */
	assert_ptr_equal(parts[2], (char *)a + 24 * MiB);
	assert_ptr_equal(parts[1], (char *)a + 8 * MiB);
	assert_ptr_equal(parts[0], a);
	for (int i = 0; i < 3; i++)
		fx_free(fx, parts[i]);
	fx_settle(fx);
	return a;
}

/* Proves: a 32 MiB miss with the three idle parts of a 32 MiB block makes them one block again
 * (backend merge) and gets it, at the block's address: no real allocation, no remap, no new
 * memory; one merge; a release gives the 32 MiB back as one block. */
static void test_merge_all(void **state)
{
	struct fx *fx = *state;
	void *parts[3], *a = three_parts(fx, parts), *p;
	struct gp_release_result r;

	p = fx_alloc(fx, 0, 32 * MiB);
	assert_ptr_equal(p, a);
	assert_int_equal(gp_pool_block_size(fx->pool, p, NULL), 32 * MiB);
	assert_int_equal(fx_stats(fx, 0).merges, 1);
	assert_int_equal(fx_stats(fx, 0).remaps, 0);
	assert_int_equal(fx_stats(fx, 0).real_allocs, 1);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 0);
	assert_int_equal(fake_used(&fx->fake, 0), 32 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_MERGE), 1);
	fx_free(fx, p);
	fx_settle(fx);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, &r), GP_OK);
	assert_int_equal(r.blocks, 1);
	assert_int_equal(r.bytes, 32 * MiB);
	assert_int_equal(fake_used(&fx->fake, 0), 0);
}

/* Proves: the fewest neighbours that hold the miss merge (24 MiB: two of the three parts, the
 * 16 MiB one and one of the 8s), and the merged block serves it whole; the other 8 MiB part stays
 * cached. */
static void test_merge_fewest(void **state)
{
	struct fx *fx = *state;
	void *parts[3], *a = three_parts(fx, parts), *p;

	p = fx_alloc(fx, 0, 24 * MiB);
	assert_true(p == a || p == (char *)a + 8 * MiB);
	assert_int_equal(gp_pool_block_size(fx->pool, p, NULL), 24 * MiB);
	assert_int_equal(fx_stats(fx, 0).merges, 1);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 8 * MiB);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 1);
	assert_int_equal(fake_used(&fx->fake, 0), 32 * MiB);
	fx_free(fx, p);
}

/* Proves: a neighbour whose fence is not done is not merged (nor moved): the 32 MiB miss moves the
 * two idle 8 MiB parts into a new block with 16 MiB new (a remap), and the fenced 16 MiB part
 * stays where it is, which a 16 MiB request gets once its fence is done. */
static void test_merge_needs_reuse(void **state)
{
	struct fx *fx = *state;
	void *parts[3], *a = three_parts(fx, parts), *p, *q;

	q = fx_alloc(fx, 0, 16 * MiB);
	assert_ptr_equal(q, (char *)a + 8 * MiB);
	fx_free(fx, q); /* fenced again */
	p = fx_alloc(fx, 0, 32 * MiB);
	assert_true(p != a);
	assert_int_equal(fx_stats(fx, 0).merges, 0);
	assert_int_equal(fx_stats(fx, 0).remaps, 1);
	assert_int_equal(fx_stats(fx, 0).remapped_bytes, 16 * MiB);
	fx_settle(fx);
	q = fx_alloc(fx, 0, 16 * MiB);
	assert_ptr_equal(q, (char *)a + 8 * MiB);
	fx_free(fx, q);
	fx_free(fx, p);
}

/* Proves: neighbours freed a moment ago (fenced) are made one block once the miss has driven
 * the fences, on an idle GPU at once: merged where they lie, not moved (no remap). */
static void test_idle_gpu_merges(void **state)
{
	struct fx *fx = *state;
	void *parts[3], *a = three_parts(fx, parts), *p;

	for (int i = 0; i < 3; i++) /* the same three parts again, freed and fenced */
		assert_ptr_equal(fx_alloc(fx, 0, i == 1 ? 16 * MiB : 8 * MiB), parts[i]);
	for (int i = 0; i < 3; i++)
		fx_free(fx, parts[i]);
	fake_set_quiet(&fx->fake, 1);
	p = fx_alloc(fx, 0, 32 * MiB);
	assert_ptr_equal(p, a);
	assert_int_equal(fx_stats(fx, 0).merges, 1);
	assert_int_equal(fx_stats(fx, 0).remaps, 0);
	fx_free(fx, p);
}

/* Proves: a miss that would split asks the GPU whether it is idle even while the question is
 * backed off (a busy GPU said no to it): once the GPU is idle, a block freed a moment ago splits
 * at once, where a fence recorded then would still be in flight. */
static void test_split_asks_while_backing_off(void **state)
{
	struct fx *fx = *state;
	void *a, *p, *x = fx_alloc(fx, 0, 4 * MiB);
	uint64_t asked;

	fake_set_fence_auto(&fx->fake, 1); /* busy, but each fence done at its first poll */
	for (int i = 0; i < 40; i++) {
		fx_free(fx, x);
		assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
		x = fx_alloc(fx, 0, 4 * MiB);
	}
	asked = fake_calls(&fx->fake, FAKE_OP_QUIET);
	assert_true(asked < 20); /* backing off */
	fake_set_fence_auto(&fx->fake, 0);
	fake_set_quiet(&fx->fake, 1);
	a = fx_alloc(fx, 0, 32 * MiB);
	fx_free(fx, a);
	p = fx_alloc(fx, 0, 8 * MiB);
	assert_ptr_equal(p, (char *)a + 24 * MiB);
	assert_int_equal(fx_stats(fx, 0).splits, 1);
	fx_free(fx, p);
	fx_free(fx, x);
}

/* Proves: the rest of a split block goes into its list in free order, not at its head: a 4 MiB
 * block freed at 1 s stays ahead of the 4 MiB rest of a 32 MiB block freed at 5 s, so an idle-age
 * release of what was freed before 3 s gives back the old block and keeps the rest (at the head,
 * the rest would stop that release, which assumes the oldest block heads each list), and the next
 * 4 MiB hit takes the older block. */
static void test_split_rest_in_free_order(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result res;
	void *old, *big, *part;

	fake_set_clock(&fx->fake, 1000000000ull);
	old = fx_alloc(fx, 0, 4 * MiB);
	big = fx_alloc(fx, 0, 32 * MiB);
	fx_free(fx, old);
	fake_set_clock(&fx->fake, 5000000000ull);
	fx_free(fx, big);
	fake_set_clock(&fx->fake, 6000000000ull);
	part = fx_alloc(fx, 0, 28 * MiB); /* the end of big: big stays, 4 MiB, freed at 5 s */
	assert_ptr_equal(part, (char *)big + 4 * MiB);
	assert_int_equal(fx_stats(fx, 0).splits, 1);
	assert_int_equal(gp_pool_release_idle(fx->pool, 0, 3000000000ull, GP_CAUSE_IDLE, &res),
			 GP_OK);
	assert_int_equal(res.blocks, 1);
	assert_int_equal(res.bytes, 4 * MiB);
	assert_false(fake_holds(&fx->fake, old, NULL, NULL));
	assert_true(fake_holds(&fx->fake, big, NULL, NULL));
	fx_free(fx, part);
	assert_ptr_equal(fx_alloc(fx, 0, 4 * MiB), big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_split_serves_miss, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_smallest_and_again, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fenced_not_split, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_idle_gpu_splits, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_split_asks_while_backing_off, setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_idle_gpu_merges, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_ordered_at_once, setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_refused, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_oversize_leaves_it, setup_oversize, fx_teardown),
		cmocka_unit_test_setup_teardown(test_unsplittable_next, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_unsplittable_whole, setup_oversize, fx_teardown),
		cmocka_unit_test_setup_teardown(test_merge_all, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_merge_fewest, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_merge_needs_reuse, setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_split_rest_in_free_order, setup_ordered,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
