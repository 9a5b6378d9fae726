/* pool_fixture.h — what every pool unit test shares: a pool on a fake backend built in setup,
 * checked and torn down in teardown (the fake must have seen no contract breach), and short
 * helpers that assert as they go. Include after <cmocka.h>. */
#ifndef GPUPOOL_POOL_FIXTURE_H
#define GPUPOOL_POOL_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "fake_backend.h"
#include "pool.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

#ifndef GP_STRIPES /* the pool's lists per size class (pool/CMakeLists.txt passes it on) */
#define GP_STRIPES 16
#endif

struct fx {
	struct fake_backend fake;
	struct gp_pool *pool;
};

/* cmocka setup/teardown: *state becomes a struct fx with a pool in that mode. Teardown fails the
 * test if the fake saw a backend contract breach or a backend call made with a pool lock held, or
 * a list of the pool's breaks its invariants; a test that destroys the pool itself sets fx->pool
 * to NULL. */
int fx_setup_ordered(void **state);
int fx_setup_unordered(void **state);
/* For a setup of a test's own: a pool created with that configuration. */
int fx_setup_cfg(void **state, const struct gp_pool_config *cfg);
/* The same, the fake making blocks of at least `movable` bytes movable (with remap), and with
 * split and merge when `split` (the backend's table is copied at create: the fake is told
 * first). */
int fx_setup_movable(void **state, const struct gp_pool_config *cfg, size_t movable, int split);
int fx_teardown(void **state);

/* Real size of a block serving a request of `bytes`. */
size_t cb(size_t bytes);

/* gp_pool_alloc that must succeed without an OOM retry. */
void *fx_alloc(struct fx *fx, int device, size_t bytes);
/* gp_pool_free that must return GP_OK. */
void fx_free(struct fx *fx, void *ptr);
struct gp_pool_dev_stats fx_stats(struct fx *fx, int device);
/* Unordered mode: fence what is pending, complete every fence, poll: pending becomes idle. */
void fx_settle(struct fx *fx);
/* Sum of the pool's stats over every device it has seen. */
struct gp_pool_dev_stats fx_stats_all(struct fx *fx);
/* The real monotonic clock, ns (for bounds on how long a call blocked; the fake's is another). */
uint64_t fx_mono_ns(void);

/* Field-by-field comparison that names each field that differs; returns the number differing.
 * Fields set to FX_ANY in `want` are not compared. */
#define FX_ANY UINT64_MAX
int fx_stats_diff(const char *where, const struct gp_pool_dev_stats *got,
		  const struct gp_pool_dev_stats *want);
/* Same, every field compared, for "nothing changed" checks. */
int fx_stats_same(const char *where, const struct gp_pool_dev_stats *got,
		  const struct gp_pool_dev_stats *want);

#endif
