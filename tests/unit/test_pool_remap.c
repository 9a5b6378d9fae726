/* test_pool_remap.c — cfg.remap_min_bytes: a miss that would make a real allocation first moves
 * the physical memory of cached movable blocks of smaller classes into its new block (backend
 * remap), the largest first, then part of the smallest block that holds the rest (which stays
 * cached, smaller), and only what is still missing is new memory. Never a block still fenced, too
 * young (cfg.remap_age_ns), not movable, or of another device; at most cfg.remap_max_pieces
 * sources; a larger movable block is left to the remap, not taken whole (cfg.oversize_pct); a
 * failed remap leaves the sources cached or counts them given back; bytes stay exact through the
 * OOM retry and releases; frees say whether they are settled. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"

/* A pool with cfg (remap from 4 MiB) whose fake backend makes blocks of at least `movable` bytes
 * movable. */
static int setup_with(void **state, struct gp_pool_config cfg, size_t movable)
{
	cfg.remap_min_bytes = 4 * MiB;
	return fx_setup_movable(state, &cfg, movable, 0);
}

static int setup_remap(void **state, int ordered, size_t movable, uint64_t age, unsigned pieces)
{
	struct gp_pool_config cfg = { .ordered = ordered, .remap_age_ns = age,
				      .remap_max_pieces = pieces };

	return setup_with(state, cfg, movable);
}

static int setup_trim(void **state)
{
	struct gp_pool_config cfg = { .remap_trim = 1, .remap_max_pieces = 1 };

	return setup_with(state, cfg, 4 * MiB);
}

static int setup_trim_aged(void **state)
{
	struct gp_pool_config cfg = { .remap_trim = 1, .remap_max_pieces = 1,
				      .remap_age_ns = 100000000ull };

	return setup_with(state, cfg, 4 * MiB);
}

static int owed_calls, owed_device;

static void on_owed(void *arg, int device)
{
	(void)arg;
	owed_calls++;
	owed_device = device;
}

static int setup_trim_owed(void **state)
{
	struct gp_pool_config cfg = { .remap_trim = 1, .remap_max_pieces = 1,
				      .remap_age_ns = 100000000ull, .owed = on_owed };

	owed_calls = 0;
	owed_device = -1;
	return setup_with(state, cfg, 4 * MiB);
}

static int setup_default(void **state)
{
	return setup_remap(state, 0, 4 * MiB, 0, 0);
}

static int setup_ordered(void **state)
{
	return setup_remap(state, 1, 4 * MiB, 0, 0);
}

static int setup_aged(void **state)
{
	return setup_remap(state, 0, 4 * MiB, 1000000000ull, 0);
}

static int setup_two_pieces(void **state)
{
	return setup_remap(state, 0, 4 * MiB, 0, 2);
}

static int setup_movable_8(void **state)
{
	return setup_remap(state, 0, 8 * MiB, 0, 0);
}

/* Allocate and free one block of each size, then let the fences complete: all idle. */
static void cache_sizes(struct fx *fx, int device, const size_t *sizes, void **ptrs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ptrs[i] = fx_alloc(fx, device, sizes[i]);
	for (size_t i = 0; i < n; i++) {
		memset(ptrs[i], (int)(0x10 + i), sizes[i]);
		fx_free(fx, ptrs[i]);
	}
	fx_settle(fx);
}

/* Proves: a 16 MiB miss takes the idle 8 and 4 MiB blocks (12 MiB moved, their bytes at their
 * offsets) and only 4 MiB is new: the footprint is 16 MiB, not 28; three pieces; no real
 * allocation; the stats count one remap of 12 MiB and 16 movable bytes; a release gives it all
 * back, settled. */
static void test_remap_serves_miss(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 8 * MiB, 4 * MiB };
	void *ptrs[2], *p;
	struct gp_pool_dev_stats s;
	struct fake_counts fc;

	cache_sizes(fx, 0, sizes, ptrs, 2);
	p = fx_alloc(fx, 0, 15 * MiB);
	assert_int_equal(fake_used(&fx->fake, 0), 16 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 1);
	assert_int_equal(fake_pieces(&fx->fake, p), 3);
	assert_int_equal(((unsigned char *)p)[0], 0x10);
	assert_int_equal(((unsigned char *)p)[8 * MiB], 0x11);
	s = fx_stats(fx, 0);
	assert_int_equal(s.remaps, 1);
	assert_int_equal(s.remapped_bytes, 12 * MiB);
	assert_int_equal(s.live_bytes, 16 * MiB);
	assert_int_equal(s.requested_bytes, 15 * MiB);
	assert_int_equal(s.idle_bytes + s.pending_bytes, 0);
	assert_int_equal(s.movable_bytes, 16 * MiB);
	assert_int_equal(s.real_allocs, 2);
	assert_int_equal(s.peak_reserved_bytes, 16 * MiB);
	assert_int_equal(gp_pool_block_size(fx->pool, p, NULL), 16 * MiB);
	assert_int_equal(gp_pool_block_size(fx->pool, ptrs[0], NULL), 0);
	fx_free(fx, p);
	fx_settle(fx);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, NULL), GP_OK);
	s = fx_stats(fx, 0);
	assert_int_equal(s.movable_bytes, 0);
	assert_int_equal(fake_used(&fx->fake, 0), 0);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.frees_ok, 1);
	assert_int_equal(fc.frees_unsettled, 0);
}

/* Proves: blocks whose fence is not done do not move (a real allocation instead), and a release
 * of such a block tells the backend it may still be in use. */
static void test_fenced_not_moved(void **state)
{
	struct fx *fx = *state;
	void *a = fx_alloc(fx, 0, 8 * MiB), *p;
	struct fake_counts fc;

	fx_free(fx, a);
	p = fx_alloc(fx, 0, 16 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 0);
	assert_int_equal(fake_used(&fx->fake, 0), 24 * MiB);
	assert_int_equal(fx_stats(fx, 0).remaps, 0);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, NULL), GP_OK);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.frees_unsettled, 1);
	fx_free(fx, p);
}

/* Proves: with cfg.remap_trim, a 16 MiB miss that can move the idle 4 MiB block (one source at
 * most) but must still grow by 12 MiB first gives back the idle 32 MiB block (it cannot serve):
 * the device holds 16 MiB, not 48; the idle 2 MiB block (not movable, below the fake's 4 MiB)
 * stays. */
static void test_trim(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 32 * MiB, 4 * MiB, 2 * MiB };
	void *ptrs[3], *p;

	cache_sizes(fx, 0, sizes, ptrs, 3);
	p = fx_alloc(fx, 0, 16 * MiB);
	assert_int_equal(fx_stats(fx, 0).remapped_bytes, 4 * MiB);
	assert_int_equal(fake_used(&fx->fake, 0), 18 * MiB);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 2 * MiB);
	assert_int_equal(fx_stats(fx, 0).real_frees, 1);
	assert_int_equal(fx_stats(fx, 0).trims, 1);
	assert_int_equal(fx_stats(fx, 0).trimmed_bytes, 32 * MiB);
	assert_int_equal(fx_stats(fx, 0).movable_bytes, 16 * MiB);
	fx_free(fx, p);
}

/* Proves: with cfg.remap_trim, a miss of a class of at most 1 MiB that must make a real
 * allocation first gives back idle blocks of other such classes, the largest first, about as much
 * as it grows by, while the GPU is idle (quiet): with idle 1 MiB, 512 KiB and 32 KiB blocks a
 * 768 KiB miss gives back the 1 MiB block; the 512 KiB block stays (enough came back), and so does
 * the 32 KiB one (below 64 KiB, never given back). A block still fenced goes too: giving a block
 * of its own back waits for the device, which is idle. */
static void test_trim_small_when_idle(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 1 * MiB, 512 * KiB, 32 * KiB };
	void *ptrs[3], *p, *q;

	cache_sizes(fx, 0, sizes, ptrs, 3);
	q = fx_alloc(fx, 0, 100 * KiB); /* freed, still fenced: it may go as well */
	fx_free(fx, q);
	fake_set_quiet(&fx->fake, 1);
	p = fx_alloc(fx, 0, 768 * KiB);
	assert_int_equal(fx_stats(fx, 0).real_frees, 1);
	assert_int_equal(fake_used(&fx->fake, 0), 768 * KiB + 512 * KiB + 32 * KiB + cb(100 * KiB));
	assert_int_equal(fx_stats(fx, 0).idle_bytes + fx_stats(fx, 0).pending_bytes,
			 512 * KiB + 32 * KiB + cb(100 * KiB));
	fx_free(fx, p);
	/* Another class newly asked for: the 640 KiB it needs from the largest left, 768 KiB (just
	 * freed: no age rule for these) */
	p = fx_alloc(fx, 0, 640 * KiB);
	assert_int_equal(fx_stats(fx, 0).real_frees, 2);
	assert_int_equal(fx_stats(fx, 0).trims, 2);
	assert_int_equal(fx_stats(fx, 0).trimmed_bytes, 1 * MiB + 768 * KiB);
	assert_int_equal(fake_used(&fx->fake, 0), 640 * KiB + 512 * KiB + 32 * KiB + cb(100 * KiB));
	fx_free(fx, p);
}

/* Three sizes of 64 KiB to 1 MiB asked for in turn, `passes` times, on an idle GPU, 1 ms apart. */
static void sizes_in_turn(struct fx *fx, int passes)
{
	const size_t sizes[] = { 96 * KiB, 256 * KiB, 512 * KiB };

	fake_set_quiet(&fx->fake, 1);
	for (int pass = 0; pass < passes; pass++)
		for (int i = 0; i < 3; i++) {
			fx_free(fx, fx_alloc(fx, 0, sizes[i]));
			fake_advance_clock(&fx->fake, 1000000ull);
		}
}

/* Proves what the age below prevents: with no cfg.remap_age_ns, three sizes asked for in turn
 * trade their blocks back and forth, each miss giving back the block the next one needs: a real
 * allocation per size per pass, and the pool holds one block. */
static void test_trim_small_trades(void **state)
{
	struct fx *fx = *state;

	sizes_in_turn(fx, 10);
	assert_int_equal(fx_stats(fx, 0).real_allocs, 30);
	assert_int_equal(fx_stats(fx, 0).trims, 29);
	assert_int_equal(fake_used(&fx->fake, 0), cb(512 * KiB));
}

/* Proves: with cfg.remap_age_ns a trim gives back only blocks idle that long, small ones too: the
 * same three sizes in turn make each block once, and keep it, and so does a fourth size asked for
 * 1 ms later. Once they have all been idle that long, a new size gives back the largest (768 KiB
 * for 640 KiB); the next one, at once, the old ones (512, 256 and 96 KiB for 900 KiB), not the
 * 640 KiB block just freed. */
static void test_trim_small_aged(void **state)
{
	struct fx *fx = *state;
	void *p;

	sizes_in_turn(fx, 10);
	assert_int_equal(fx_stats(fx, 0).real_allocs, 3);
	fx_free(fx, fx_alloc(fx, 0, 768 * KiB));
	assert_int_equal(fx_stats(fx, 0).trims, 0);
	fake_advance_clock(&fx->fake, 100000000ull);
	fx_free(fx, fx_alloc(fx, 0, 640 * KiB));
	assert_int_equal(fx_stats(fx, 0).trims, 1);
	assert_int_equal(fx_stats(fx, 0).trimmed_bytes, cb(768 * KiB));
	p = fx_alloc(fx, 0, 900 * KiB);
	assert_int_equal(fx_stats(fx, 0).real_allocs, 6);
	assert_int_equal(fx_stats(fx, 0).trims, 4);
	assert_int_equal(fake_used(&fx->fake, 0), cb(900 * KiB) + cb(640 * KiB));
	fx_free(fx, p);
}

/* Proves: what the age keeps from a trim is owed. Growing from nothing owes nothing (the growth
 * is said: a window with something to settle once quiet; its excess is none, as all it holds was
 * in use at once). Idle 8 and 4 MiB blocks freed a moment ago stay when a 16 MiB miss grows (too
 * young to move or go): 12 MiB owed (what they hold, less than the 16 grown by), said once for
 * the window; a 24 MiB miss at once owes no more (the same 12 MiB are still all that is idle).
 * Taking the debt empties it; the window's excess is those 12 MiB too (52 held, at most 40 in use
 * at once since the last quiet). A miss then owes again and says so again (a new window). 100 ms
 * later, with the blocks old, a 40 MiB miss moves the 20 MiB one (one piece at most here) and
 * gives the 8 and 4 MiB ones back itself (the trim): it owes nothing. */
static void test_trim_owed(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 8 * MiB, 4 * MiB };
	void *ptrs[2], *p, *q, *r;

	cache_sizes(fx, 0, sizes, ptrs, 2);
	assert_int_equal(fx_stats(fx, 0).trim_owed, 0);
	assert_int_equal(owed_calls, 1);
	assert_int_equal(gp_pool_take_quiet_excess(fx->pool, 0), 0);
	p = fx_alloc(fx, 0, 16 * MiB);
	assert_int_equal(fx_stats(fx, 0).trims, 0);
	assert_int_equal(fx_stats(fx, 0).trim_owed, 12 * MiB);
	assert_int_equal(owed_calls, 2);
	assert_int_equal(owed_device, 0);
	q = fx_alloc(fx, 0, 24 * MiB);
	assert_int_equal(fx_stats(fx, 0).trim_owed, 12 * MiB);
	assert_int_equal(owed_calls, 2);
	assert_int_equal(fake_used(&fx->fake, 0), 52 * MiB);
	assert_int_equal(gp_pool_take_owed(fx->pool, 0), 12 * MiB);
	assert_int_equal(fx_stats(fx, 0).trim_owed, 0);
	assert_int_equal(gp_pool_take_owed(fx->pool, 1), 0); /* a device not seen */
	assert_int_equal(gp_pool_take_quiet_excess(fx->pool, 0), 12 * MiB);
	assert_int_equal(gp_pool_take_quiet_excess(fx->pool, 1), 0);
	fx_free(fx, fx_alloc(fx, 0, 20 * MiB));
	assert_int_equal(fx_stats(fx, 0).trim_owed, 12 * MiB);
	assert_int_equal(owed_calls, 3);
	gp_pool_take_owed(fx->pool, 0);
	fake_advance_clock(&fx->fake, 100000000ull);
	fx_settle(fx);
	r = fx_alloc(fx, 0, 40 * MiB);
	assert_int_equal(fx_stats(fx, 0).remapped_bytes, 20 * MiB);
	assert_int_equal(fx_stats(fx, 0).trims, 2);
	assert_int_equal(fx_stats(fx, 0).trimmed_bytes, 12 * MiB);
	assert_int_equal(fx_stats(fx, 0).trim_owed, 0);
	assert_int_equal(owed_calls, 3);
	fx_free(fx, p);
	fx_free(fx, q);
	fx_free(fx, r);
}

/* n blocks of `bytes` in use at once, then all freed. */
static void at_once(struct fx *fx, size_t bytes, int n)
{
	void *p[100];

	for (int i = 0; i < n; i++)
		p[i] = fx_alloc(fx, 0, bytes);
	for (int i = 0; i < n; i++)
		fx_free(fx, p[i]);
}

/* Proves: a window's excess is what the pool holds beyond the most in use at once in it and the
 * window before, and only after the pool grew. 100 blocks of 48 KiB in use at once, freed:
 * nothing beyond (all of it was in use at once). Then 100 of 32 KiB at once (below 64 KiB the
 * trim gives nothing back): beyond the 48 KiB window's peak, their bytes. Then 100 of 16 KiB:
 * beyond the 32 KiB window's peak (the 48 KiB one is two windows back), the 48 KiB and 16 KiB
 * blocks' bytes: a window that kept its first peak would say the 32 and 16 KiB ones', one that
 * forgot the window before the 48 and 32 KiB ones'. Taken again at once, nothing (no growth
 * since). The peak in use since the start survives the windows: the first's. */
static void test_quiet_excess(void **state)
{
	struct fx *fx = *state;

	at_once(fx, 48 * KiB, 100);
	assert_int_equal(gp_pool_take_quiet_excess(fx->pool, 0), 0);
	at_once(fx, 32 * KiB, 100);
	assert_int_equal(fx_stats(fx, 0).trims, 0);
	assert_int_equal(gp_pool_take_quiet_excess(fx->pool, 0), 100 * cb(32 * KiB));
	at_once(fx, 16 * KiB, 100);
	assert_int_equal(gp_pool_take_quiet_excess(fx->pool, 0),
			 100 * (cb(48 * KiB) + cb(16 * KiB)));
	assert_int_equal(gp_pool_take_quiet_excess(fx->pool, 0), 0);
	assert_int_equal(fx_stats(fx, 0).peak_live_bytes, 100 * cb(48 * KiB));
	assert_int_equal(owed_calls, 3); /* each window's first growth */
}

/* Proves: the excess is measured against what the program asked for, not the blocks' sizes. 20
 * requests of 3 MiB in use at once (blocks of a larger class: a multiple of the granule), freed:
 * the pool holds their blocks for a busiest moment of 60 MiB asked, and the difference is the
 * excess (a peak of the blocks' bytes would say none). The peak in use since the start stays the
 * blocks' bytes. */
static void test_quiet_excess_requested(void **state)
{
	struct fx *fx = *state;

	assert_true(cb(3 * MiB) > 3 * MiB);
	at_once(fx, 3 * MiB, 20);
	assert_int_equal(gp_pool_take_quiet_excess(fx->pool, 0), 20 * (cb(3 * MiB) - 3 * MiB));
	assert_int_equal(fx_stats(fx, 0).peak_live_bytes, 20 * cb(3 * MiB));
}

/* Proves: a busy GPU (not quiet) keeps the small blocks (giving one back would wait for all its
 * work); a small miss gives back no movable block (4 MiB for 768 KiB: more than it grows by, and
 * a move serves larger misses); a miss below 64 KiB gives back nothing. */
static void test_trim_small_kept(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 4 * MiB, 1 * MiB, 512 * KiB };
	void *ptrs[3], *p, *q;

	cache_sizes(fx, 0, sizes, ptrs, 3);
	p = fx_alloc(fx, 0, 768 * KiB); /* busy GPU */
	assert_int_equal(fx_stats(fx, 0).real_frees, 0);
	fx_free(fx, p);
	fx_settle(fx);
	fake_set_quiet(&fx->fake, 1);
	q = fx_alloc(fx, 0, 48 * KiB); /* below 64 KiB */
	assert_int_equal(fx_stats(fx, 0).real_frees, 0);
	p = fx_alloc(fx, 0, 300 * KiB); /* the 1 MiB block goes, the 4 MiB one stays */
	assert_int_equal(fx_stats(fx, 0).real_frees, 1);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 4 * MiB + 768 * KiB + 512 * KiB);
	fx_free(fx, p);
	fx_free(fx, q);
}

/* Proves: in ordered mode a free is reused at once, but a block moves only once a fence says the
 * GPU is done with it (the miss records one); an idle GPU (quiet) says so without a fence. */
static void test_ordered_needs_quiet(void **state)
{
	struct fx *fx = *state;
	void *a = fx_alloc(fx, 0, 8 * MiB), *b = fx_alloc(fx, 0, 4 * MiB), *p, *q;

	fx_free(fx, a);
	fx_free(fx, b);
	p = fx_alloc(fx, 0, 16 * MiB); /* a fence is recorded, not complete: no move */
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 0);
	assert_int_equal(fake_fences_recorded(&fx->fake), 1);
	fake_complete_all_fences(&fx->fake);
	q = fx_alloc(fx, 0, 14 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 1);
	assert_int_equal(fx_stats(fx, 0).remapped_bytes, 12 * MiB);
	fx_free(fx, p);
	fx_free(fx, q);
}

/* Proves: on an idle GPU (quiet) an ordered pool moves a block just freed, with no fence. */
static void test_ordered_idle_gpu(void **state)
{
	struct fx *fx = *state;
	void *a = fx_alloc(fx, 0, 8 * MiB), *p;

	fake_set_quiet(&fx->fake, 1);
	fx_free(fx, a);
	p = fx_alloc(fx, 0, 16 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 1);
	assert_int_equal(fake_fences_recorded(&fx->fake), 0);
	assert_int_equal(fake_used(&fx->fake, 0), 16 * MiB);
	fx_free(fx, p);
}

/* Proves: with cfg.remap_age_ns a block moves only once it has been idle that long. */
static void test_age(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 8 * MiB };
	void *ptrs[1], *p, *q;

	cache_sizes(fx, 0, sizes, ptrs, 1);
	p = fx_alloc(fx, 0, 16 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 0);
	fake_advance_clock(&fx->fake, 1000000000ull);
	q = fx_alloc(fx, 0, 16 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 1);
	assert_int_equal(fake_used(&fx->fake, 0), 32 * MiB);
	fx_free(fx, p);
	fx_free(fx, q);
}

/* Proves: only blocks that fit what is left move, the largest first: for 16 MiB, the idle 32 MiB
 * block stays (it does not fit), then 12 and 4 MiB move and 2 MiB does not (nothing left). */
static void test_largest_that_fit(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 32 * MiB, 12 * MiB, 4 * MiB, 2 * MiB };
	void *ptrs[4], *p;
	struct gp_pool_dev_stats s;

	cache_sizes(fx, 0, sizes, ptrs, 4);
	p = fx_alloc(fx, 0, 16 * MiB);
	s = fx_stats(fx, 0);
	assert_int_equal(s.remapped_bytes, 16 * MiB);
	assert_int_equal(s.idle_bytes, 34 * MiB);
	assert_int_equal(fake_pieces(&fx->fake, p), 2);
	assert_int_equal(fake_used(&fx->fake, 0), 50 * MiB);
	assert_int_equal(gp_pool_block_size(fx->pool, ptrs[0], NULL), 0);
	fx_free(fx, p);
	fx_settle(fx);
	/* The 32 MiB block is still the cached one of its class. */
	p = fx_alloc(fx, 0, 32 * MiB);
	assert_ptr_equal(p, ptrs[0]);
	fx_free(fx, p);
}

/* Proves: at most cfg.remap_max_pieces sources (2 of five idle 4 MiB blocks). */
static void test_max_pieces(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 4 * MiB, 4 * MiB, 4 * MiB, 4 * MiB, 4 * MiB };
	void *ptrs[5], *p;

	cache_sizes(fx, 0, sizes, ptrs, 5);
	p = fx_alloc(fx, 0, 32 * MiB);
	assert_int_equal(fx_stats(fx, 0).remapped_bytes, 8 * MiB);
	assert_int_equal(fx_stats(fx, 0).idle_blocks, 3);
	fx_free(fx, p);
}

/* Proves: a block the backend did not call movable stays (4 MiB, below the fake's 8 MiB), as do
 * the blocks of another device. */
static void test_not_movable_or_other_device(void **state)
{
	struct fx *fx = *state;
	size_t small[] = { 4 * MiB }, big[] = { 8 * MiB };
	void *ptrs[1], *others[1], *p;

	cache_sizes(fx, 0, small, ptrs, 1);
	cache_sizes(fx, 1, big, others, 1);
	p = fx_alloc(fx, 0, 16 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 0);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 4 * MiB);
	assert_int_equal(fx_stats(fx, 1).idle_bytes, 8 * MiB);
	assert_int_equal(fx_stats(fx, 0).movable_bytes, 16 * MiB);
	fx_free(fx, p);
}

/* Proves: a remap that fails and keeps its sources leaves them cached as they were (a real
 * allocation serves the miss, the next 8 MiB request is a hit on the old block); one that fails
 * and gives them back counts them freed. */
static void test_failed_remap(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 8 * MiB, 4 * MiB };
	void *ptrs[2], *p, *q, *r;
	struct gp_pool_dev_stats s;

	cache_sizes(fx, 0, sizes, ptrs, 2);
	fake_set_remap_rc(&fx->fake, GP_EBACKEND, 0);
	p = fx_alloc(fx, 0, 16 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 1);
	s = fx_stats(fx, 0);
	assert_int_equal(s.remaps, 0);
	assert_int_equal(s.idle_bytes, 12 * MiB);
	assert_int_equal(s.real_allocs, 3);
	q = fx_alloc(fx, 0, 8 * MiB);
	assert_ptr_equal(q, ptrs[0]);
	fx_free(fx, q);
	fx_settle(fx);
	fake_set_remap_rc(&fx->fake, GP_EBACKEND, 1);
	r = fx_alloc(fx, 0, 16 * MiB);
	s = fx_stats(fx, 0);
	assert_int_equal(s.idle_bytes, 0);
	assert_int_equal(s.real_frees, 2);
	assert_int_equal(s.live_bytes, 32 * MiB);
	assert_int_equal(fake_used(&fx->fake, 0), 32 * MiB);
	assert_int_equal(s.movable_bytes, 32 * MiB);
	fx_free(fx, p);
	fx_free(fx, r);
}

/* Proves: a remap whose new rest does not fit the device (beside an idle block that cannot move:
 * 2 MiB, below the fake's 4 MiB) leaves its sources; the OOM retry then gives the cache back and
 * allocates: the footprint is the new block's bytes exactly. */
static void test_oom_retry(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 8 * MiB, 2 * MiB };
	void *ptrs[2], *p;
	int retried = 0;

	cache_sizes(fx, 0, sizes, ptrs, 2);
	fake_set_capacity(&fx->fake, 0, 16 * MiB);
	assert_int_equal(gp_pool_alloc(fx->pool, 0, 16 * MiB, &p, &retried), GP_OK);
	assert_int_equal(retried, 1);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 1);
	assert_int_equal(fake_used(&fx->fake, 0), 16 * MiB);
	assert_int_equal(fx_stats(fx, 0).live_bytes, 16 * MiB);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 0);
	assert_int_equal(fx_stats(fx, 0).movable_bytes, 16 * MiB);
	fx_free(fx, p);
}

/* Proves: under a cap the footprint stays within live bytes plus the cap, and a remapped block
 * is released by age like any other. */
static void test_cap_and_age_release(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 8 * MiB, 8 * MiB, 6 * MiB };
	void *ptrs[3], *p;

	cache_sizes(fx, 0, sizes, ptrs, 3);
	gp_pool_set_cap(fx->pool, 0, 4 * MiB);
	p = fx_alloc(fx, 0, 16 * MiB);
	assert_true(fake_used(&fx->fake, 0) <= 16 * MiB + 4 * MiB);
	assert_int_equal(fx_stats(fx, 0).remapped_bytes, 16 * MiB);
	fx_free(fx, p);
	fx_settle(fx);
	fake_advance_clock(&fx->fake, 5000000000ull);
	assert_int_equal(gp_pool_release_idle(fx->pool, 0, fake_clock(&fx->fake), GP_CAUSE_IDLE, NULL),
			 GP_OK);
	assert_int_equal(fake_used(&fx->fake, 0), 0);
	assert_int_equal(fx_stats(fx, 0).movable_bytes, 0);
}

/* Proves: an 8 MiB miss with only an idle 32 MiB block takes 8 MiB of it (its last bytes, at
 * offset 0 of the new block): no new memory; the 32 MiB block stays cached at its address as a
 * 24 MiB block, which the next 24 MiB request gets (a hit, its first bytes kept); a release gives
 * both back. */
static void test_part_of_larger(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 32 * MiB };
	void *ptrs[1], *p, *q;
	struct gp_pool_dev_stats s;
	struct fake_counts fc;

	cache_sizes(fx, 0, sizes, ptrs, 1);
	memset((char *)ptrs[0] + 24 * MiB, 0x77, 8 * MiB);
	p = fx_alloc(fx, 0, 8 * MiB);
	assert_ptr_not_equal(p, ptrs[0]);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	assert_int_equal(fake_used(&fx->fake, 0), 32 * MiB);
	assert_int_equal(((unsigned char *)p)[0], 0x77);
	assert_int_equal(((unsigned char *)p)[8 * MiB - 1], 0x77);
	assert_int_equal(gp_pool_block_size(fx->pool, p, NULL), 8 * MiB);
	fake_get_counts(&fx->fake, &fc);
	assert_int_equal(fc.remap_partial, 1);
	s = fx_stats(fx, 0);
	assert_int_equal(s.remaps, 1);
	assert_int_equal(s.remapped_bytes, 8 * MiB);
	assert_int_equal(s.live_bytes, 8 * MiB);
	assert_int_equal(s.idle_bytes, 24 * MiB);
	assert_int_equal(s.idle_blocks, 1);
	assert_int_equal(s.movable_bytes, 32 * MiB);
	assert_int_equal(s.peak_reserved_bytes, 32 * MiB);
	q = fx_alloc(fx, 0, 24 * MiB);
	assert_ptr_equal(q, ptrs[0]);
	assert_int_equal(((unsigned char *)q)[0], 0x10);
	assert_int_equal(gp_pool_block_size(fx->pool, q, NULL), 24 * MiB);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_REMAP), 1);
	fx_free(fx, p);
	fx_free(fx, q);
	fx_settle(fx);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, NULL), GP_OK);
	assert_int_equal(fake_used(&fx->fake, 0), 0);
	assert_int_equal(fx_stats(fx, 0).movable_bytes, 0);
	assert_int_equal(fake_misuse(&fx->fake), 0);
}

/* Proves: whole smaller blocks go first, then part of the smallest block that holds the rest: a
 * 20 MiB miss beside idle 12, 64 and 32 MiB blocks takes the 12 and 8 MiB of the 32 (the 64 stays
 * whole), nothing new; the 32 becomes a cached 24 MiB block. */
static void test_smaller_then_part(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 12 * MiB, 64 * MiB, 32 * MiB };
	void *ptrs[3], *p;
	struct gp_pool_dev_stats s;

	cache_sizes(fx, 0, sizes, ptrs, 3);
	p = fx_alloc(fx, 0, 20 * MiB);
	s = fx_stats(fx, 0);
	assert_int_equal(s.remapped_bytes, 20 * MiB);
	assert_int_equal(fake_used(&fx->fake, 0), 108 * MiB);
	assert_int_equal(((unsigned char *)p)[0], 0x10);
	assert_int_equal(((unsigned char *)p)[12 * MiB], 0x12);
	assert_int_equal(gp_pool_block_size(fx->pool, ptrs[0], NULL), 0);
	assert_int_equal(s.idle_blocks, 2);
	assert_int_equal(s.idle_bytes, 88 * MiB);
	fx_free(fx, p);
	fx_settle(fx);
	p = fx_alloc(fx, 0, 64 * MiB);
	assert_ptr_equal(p, ptrs[1]);
	fx_free(fx, p);
	p = fx_alloc(fx, 0, 24 * MiB);
	assert_ptr_equal(p, ptrs[2]);
	fx_free(fx, p);
}

/* Proves: what the backend moves beyond the take (whole pieces: the fake's 6 MiB) stays with the
 * new block: a 4 MiB miss gets 6 MiB of an idle 48 MiB block, a 6 MiB block; the 42 MiB left is
 * cached in the largest class it serves (40 MiB) with all its bytes, and a 40 MiB request gets it. */
static void test_pieces_round_up(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 48 * MiB };
	void *ptrs[1], *p, *q;

	fake_set_remap_piece(&fx->fake, 6 * MiB);
	cache_sizes(fx, 0, sizes, ptrs, 1);
	p = fx_alloc(fx, 0, 4 * MiB);
	assert_int_equal(gp_pool_block_size(fx->pool, p, NULL), 6 * MiB);
	assert_int_equal(fx_stats(fx, 0).live_bytes, 6 * MiB);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 42 * MiB);
	assert_int_equal(fake_used(&fx->fake, 0), 48 * MiB);
	q = fx_alloc(fx, 0, 40 * MiB);
	assert_ptr_equal(q, ptrs[0]);
	assert_int_equal(gp_pool_block_size(fx->pool, q, NULL), 42 * MiB);
	fx_free(fx, p);
	fx_free(fx, q);
	fx_settle(fx);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, NULL), GP_OK);
	assert_int_equal(fake_used(&fx->fake, 0), 0);
	assert_int_equal(fake_misuse(&fx->fake), 0);
}

/* Proves: with cfg.oversize_pct a miss leaves a larger block that may move to the remap (part of
 * it serves, the rest stays cached), but still takes whole a larger block that may not (not
 * movable: the fake's threshold is 64 MiB here, so the 12 MiB block is taken whole). */
static void test_oversize_spares_movable(void **state)
{
	struct fx *fx = *state;
	size_t sizes[] = { 12 * MiB };
	void *ptrs[1], *p;

	cache_sizes(fx, 0, sizes, ptrs, 1);
	p = fx_alloc(fx, 0, 8 * MiB);
	assert_ptr_not_equal(p, ptrs[0]);
	assert_int_equal(gp_pool_block_size(fx->pool, p, NULL), 8 * MiB);
	assert_int_equal(fx_stats(fx, 0).oversize_hits, 0);
	assert_int_equal(fx_stats(fx, 0).idle_bytes, 4 * MiB);
	fx_free(fx, p);
	fx_settle(fx);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, NULL), GP_OK);
	fake_set_movable(&fx->fake, 64 * MiB);
	cache_sizes(fx, 0, sizes, ptrs, 1);
	p = fx_alloc(fx, 0, 8 * MiB);
	assert_ptr_equal(p, ptrs[0]);
	assert_int_equal(fx_stats(fx, 0).oversize_hits, 1);
	fx_free(fx, p);
}

static int setup_oversize(void **state)
{
	struct gp_pool_config cfg = { .oversize_pct = 200 };

	return setup_with(state, cfg, 4 * MiB);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_remap_serves_miss, setup_default, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fenced_not_moved, setup_default, fx_teardown),
		cmocka_unit_test_setup_teardown(test_trim, setup_trim, fx_teardown),
		cmocka_unit_test_setup_teardown(test_trim_small_when_idle, setup_trim, fx_teardown),
		cmocka_unit_test_setup_teardown(test_trim_small_kept, setup_trim, fx_teardown),
		cmocka_unit_test_setup_teardown(test_trim_small_trades, setup_trim, fx_teardown),
		cmocka_unit_test_setup_teardown(test_trim_small_aged, setup_trim_aged, fx_teardown),
		cmocka_unit_test_setup_teardown(test_quiet_excess, setup_trim_owed, fx_teardown),
		cmocka_unit_test_setup_teardown(test_quiet_excess_requested, setup_trim_owed,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_trim_owed, setup_trim_owed, fx_teardown),
		cmocka_unit_test_setup_teardown(test_ordered_needs_quiet, setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_ordered_idle_gpu, setup_ordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_age, setup_aged, fx_teardown),
		cmocka_unit_test_setup_teardown(test_largest_that_fit, setup_default, fx_teardown),
		cmocka_unit_test_setup_teardown(test_max_pieces, setup_two_pieces, fx_teardown),
		cmocka_unit_test_setup_teardown(test_not_movable_or_other_device, setup_movable_8,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_failed_remap, setup_default, fx_teardown),
		cmocka_unit_test_setup_teardown(test_oom_retry, setup_default, fx_teardown),
		cmocka_unit_test_setup_teardown(test_cap_and_age_release, setup_default, fx_teardown),
		cmocka_unit_test_setup_teardown(test_part_of_larger, setup_default, fx_teardown),
		cmocka_unit_test_setup_teardown(test_smaller_then_part, setup_default, fx_teardown),
		cmocka_unit_test_setup_teardown(test_pieces_round_up, setup_default, fx_teardown),
		cmocka_unit_test_setup_teardown(test_oversize_spares_movable, setup_oversize,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
