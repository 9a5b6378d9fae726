/* pool_fixture.c — setup, teardown and asserting helpers shared by the pool unit tests.
 * Teardown destroys the pool (which never calls the backend) and fails the test if the fake saw
 * a backend contract breach during it, a backend call made with a pool lock held, or a list of
 * the pool's that breaks its invariants (gp_pool_test_check_lists). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pool_fixture.h"
#include "hooks.h"

int fx_setup_cfg(void **state, const struct gp_pool_config *cfg)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	fake_init(&fx->fake);
	if (gp_pool_create(&fx->fake.be, cfg, &fx->pool) != GP_OK || !fx->pool) {
		fake_fini(&fx->fake);
		free(fx);
		return -1;
	}
	*state = fx;
	return 0;
}

int fx_setup_movable(void **state, const struct gp_pool_config *cfg, size_t movable, int split)
{
	struct fx *fx;

	if (fx_setup_cfg(state, cfg) != 0)
		return -1;
	fx = *state;
	gp_pool_destroy(fx->pool);
	fake_set_movable(&fx->fake, movable);
	if (split)
		fake_set_split(&fx->fake, 1, GP_OK);
	return gp_pool_create(&fx->fake.be, cfg, &fx->pool) == GP_OK ? 0 : -1;
}

static int fx_setup(void **state, int ordered)
{
	struct gp_pool_config cfg = { .ordered = ordered };

	return fx_setup_cfg(state, &cfg);
}

int fx_setup_ordered(void **state)
{
	return fx_setup(state, 1);
}

int fx_setup_unordered(void **state)
{
	return fx_setup(state, 0);
}

int fx_teardown(void **state)
{
	struct fx *fx = *state;
	uint64_t misuse, locked;
	unsigned bad_lists = 0;
	int op;

	if (!fx)
		return 0;
	misuse = fake_misuse(&fx->fake);
	locked = fake_locked_calls(&fx->fake, &op);
	if (fx->pool) {
		bad_lists = gp_pool_test_check_lists(fx->pool);
		gp_pool_destroy(fx->pool);
	}
	fake_fini(&fx->fake);
	free(fx);
	*state = NULL;
	if (misuse)
		print_error("fake backend saw %llu contract breach(es)\n", (unsigned long long)misuse);
	if (locked)
		print_error("%llu backend call(s) made with a pool lock held (the first: op %d)\n",
			    (unsigned long long)locked, op);
	if (bad_lists)
		print_error("%u list(s) of the pool out of free order or miscounted\n", bad_lists);
	return misuse || locked || bad_lists ? -1 : 0;
}

size_t cb(size_t bytes)
{
	return gp_pool_class_bytes(gp_pool_class_of(bytes));
}

void *fx_alloc(struct fx *fx, int device, size_t bytes)
{
	void *p = NULL;
	int retried = -1;

	assert_int_equal(gp_pool_alloc(fx->pool, device, bytes, &p, &retried), GP_OK);
	assert_non_null(p);
	assert_int_equal(retried, 0);
	return p;
}

void fx_free(struct fx *fx, void *ptr)
{
	assert_int_equal(gp_pool_free(fx->pool, ptr), GP_OK);
}

struct gp_pool_dev_stats fx_stats(struct fx *fx, int device)
{
	struct gp_pool_dev_stats s;

	assert_int_equal(gp_pool_dev_stats(fx->pool, device, &s), GP_OK);
	return s;
}

void fx_settle(struct fx *fx)
{
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	fake_complete_all_fences(&fx->fake);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
}

struct gp_pool_dev_stats fx_stats_all(struct fx *fx)
{
	struct gp_pool_dev_stats sum = { 0 }, s;
	uint64_t mask = gp_pool_devices(fx->pool);
	int d;

	for (d = 0; d < GP_MAX_DEVICES; d++) {
		if (!(mask >> d & 1))
			continue;
		s = fx_stats(fx, d);
		sum.live_bytes += s.live_bytes;
		sum.live_blocks += s.live_blocks;
		sum.held_bytes += s.held_bytes;
		sum.held_blocks += s.held_blocks;
		sum.idle_bytes += s.idle_bytes;
		sum.idle_blocks += s.idle_blocks;
		sum.pending_bytes += s.pending_bytes;
		sum.pending_blocks += s.pending_blocks;
		sum.requested_bytes += s.requested_bytes;
		sum.peak_live_bytes += s.peak_live_bytes;
		sum.peak_reserved_bytes += s.peak_reserved_bytes;
		sum.allocs += s.allocs;
		sum.hits += s.hits;
		sum.real_allocs += s.real_allocs;
		sum.real_frees += s.real_frees;
		sum.failed_allocs += s.failed_allocs;
		sum.frees += s.frees;
		sum.bad_frees += s.bad_frees;
		sum.stale_evictions += s.stale_evictions;
	}
	return sum;
}

static int field(const char *where, const char *name, uint64_t got, uint64_t want, int any)
{
	if (any && want == FX_ANY)
		return 0;
	if (got == want)
		return 0;
	print_error("%s: %s is %llu, expected %llu\n", where, name, (unsigned long long)got,
		    (unsigned long long)want);
	return 1;
}

static int diff(const char *where, const struct gp_pool_dev_stats *g,
		const struct gp_pool_dev_stats *w, int any)
{
	int n = 0;

	n += field(where, "live_bytes", g->live_bytes, w->live_bytes, any);
	n += field(where, "live_blocks", g->live_blocks, w->live_blocks, any);
	n += field(where, "held_bytes", g->held_bytes, w->held_bytes, any);
	n += field(where, "held_blocks", g->held_blocks, w->held_blocks, any);
	n += field(where, "idle_bytes", g->idle_bytes, w->idle_bytes, any);
	n += field(where, "idle_blocks", g->idle_blocks, w->idle_blocks, any);
	n += field(where, "pending_bytes", g->pending_bytes, w->pending_bytes, any);
	n += field(where, "pending_blocks", g->pending_blocks, w->pending_blocks, any);
	n += field(where, "requested_bytes", g->requested_bytes, w->requested_bytes, any);
	n += field(where, "peak_live_bytes", g->peak_live_bytes, w->peak_live_bytes, any);
	n += field(where, "peak_reserved_bytes", g->peak_reserved_bytes, w->peak_reserved_bytes,
		   any);
	n += field(where, "allocs", g->allocs, w->allocs, any);
	n += field(where, "hits", g->hits, w->hits, any);
	n += field(where, "real_allocs", g->real_allocs, w->real_allocs, any);
	n += field(where, "real_frees", g->real_frees, w->real_frees, any);
	n += field(where, "failed_allocs", g->failed_allocs, w->failed_allocs, any);
	n += field(where, "frees", g->frees, w->frees, any);
	n += field(where, "bad_frees", g->bad_frees, w->bad_frees, any);
	n += field(where, "stale_evictions", g->stale_evictions, w->stale_evictions, any);
	return n;
}

int fx_stats_diff(const char *where, const struct gp_pool_dev_stats *got,
		  const struct gp_pool_dev_stats *want)
{
	return diff(where, got, want, 1);
}

int fx_stats_same(const char *where, const struct gp_pool_dev_stats *got,
		  const struct gp_pool_dev_stats *want)
{
	return diff(where, got, want, 0);
}

uint64_t fx_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
