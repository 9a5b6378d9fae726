/* bench_pool_release.c — the CPU cost of a release to a target (GPUPOOL_MAX_CACHED, pressure) on
 * the fake backend: 3000 blocks of random sizes (512 B – 4 MiB, many classes) cached, then
 * released down to half the cached bytes, oldest first; five rounds. Prints microseconds per
 * block given back (the backend's free costs nothing here: this is the pool's bookkeeping).
 * Built with the unit tests, not a test: `build/tests/unit/bench_pool_release`. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fake_backend.h"
#include "pool.h"

#define NBLOCKS 3000
#define ROUNDS 5

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void)
{
	static void *b[NBLOCKS];
	struct gp_pool_config cfg = { .ordered = 1 };
	struct gp_release_result r;
	unsigned long long blocks = 0;
	struct fake_backend f;
	struct gp_pool *p;
	unsigned seed = 1;
	double t0, total = 0;

	fake_init(&f);
	fake_set_capacity(&f, 0, 1ull << 50);
	if (gp_pool_create(&f.be, &cfg, &p) != GP_OK)
		return 1;
	for (int round = 0; round < ROUNDS; round++) {
		for (int i = 0; i < NBLOCKS; i++) {
			size_t sz = 512 + (size_t)(rand_r(&seed) % (4u << 20));
			if (gp_pool_alloc(p, 0, sz, &b[i], NULL) != GP_OK)
				return 2;
		}
		for (int i = 0; i < NBLOCKS; i++) {
			gp_pool_free(p, b[i]);
			fake_advance_clock(&f, 1000);
		}
		t0 = now_s();
		gp_pool_release(p, 0, gp_pool_cached_bytes(p, 0) / 2, GP_CAUSE_CAP, &r);
		total += now_s() - t0;
		blocks += r.blocks;
		gp_pool_release(p, 0, 0, GP_CAUSE_CAP, &r);
	}
	printf("release to half the cache: %llu blocks in %.1f ms, %.2f us per block\n", blocks,
	       total * 1e3, total * 1e6 / (double)blocks);
	gp_pool_destroy(p);
	fake_fini(&f);
	return 0;
}
