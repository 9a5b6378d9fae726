/* policy.c — the automatic releases and cudaMemGetInfo, observed through the stand-in's
 * device counters. One mode per run (the settings are environment variables):
 *   --mode cap        GPUPOOL_MAX_CACHED=16MiB: the cache is cut to the cap, oldest first
 *   --mode cap-burst  the same cap: a miss right after the frees releases down to the cap first
 *   --mode idle       GPUPOOL_IDLE_TIMEOUT=200ms: an idle program's cache goes by itself
 *   --mode pressure   STANDIN_CAPACITY=256MiB GPUPOOL_MIN_FREE=50%: released until 50% free
 *   --mode pressure-churn  the same, STANDIN_FREE_DELAY_US=100000: frees during a slow release
 *   --mode meminfo    cached bytes count as free in cudaMemGetInfo (default)
 *   --mode meminfo-off  GPUPOOL_REPORT_CACHED_AS_FREE=0: the driver's figure unchanged
 *   --mode disable    GPUPOOL_DISABLE=1: every call passes through
 *   --mode takeover   GPUPOOL_TORCH=takeover sets PYTORCH_NO_CUDA_MEMORY_CACHING=1 at load
 *   --mode takeover-kept  ... unless the user set it (to 0 here) */
#include "e2e.h"

#include <stdlib.h>
#include <string.h>

#define MIB E2E_MIB

static uint64_t live_bytes(void)
{
	return e2e_counters().live_bytes;
}

static int live_at_most(void *arg)
{
	return live_bytes() <= *(uint64_t *)arg;
}

static void alloc_free(void **p, int n, size_t bytes, int nfree)
{
	for (int i = 0; i < n; i++)
		e2e_cuda(cudaMalloc(&p[i], bytes), "cudaMalloc");
	for (int i = 0; i < nfree; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
}

static void mode_cap(void)
{
	void *p[8], *q;
	uint64_t cap = 16 * MIB;
	struct standin_counters c;

	alloc_free(p, 8, 4 * MIB, 8);
	e2e_check(e2e_poll(live_at_most, &cap, 5000),
		  "8 x 4 MiB freed with a 16 MiB cap: the device holds %llu B (<= 16 MiB) within 5 s",
		  (unsigned long long)live_bytes());
	e2e_sleep_ms(100);
	e2e_check(live_bytes() == cap, "exactly the cap stays cached (%llu B), not less",
		  (unsigned long long)live_bytes());
	/* The newest four stay: allocating four more makes no real cudaMalloc and returns them. */
	c = e2e_counters();
	for (int i = 0; i < 4; i++) {
		e2e_cuda(cudaMalloc(&q, 4 * MIB), "cudaMalloc after the cap release");
		e2e_check(q == p[4] || q == p[5] || q == p[6] || q == p[7],
			  "block %d handed out again is one of the last freed (oldest went first)", i);
	}
	e2e_check(e2e_counters().mallocs == c.mallocs, "no real cudaMalloc for the four");
}

/* Frees that take the cache over the cap, then at once a burst of misses of another size: each
 * miss brings the cache down to the cap before asking the driver, so the device never holds more
 * than the live bytes plus the cap, even before the control thread wakes. */
static void mode_cap_burst(void)
{
	void *p[8], *q[4];
	uint64_t cap = 16 * MIB, held;

	alloc_free(p, 8, 4 * MIB, 8); /* 32 MiB cached: over the cap */
	for (int i = 0; i < 4; i++) {
		e2e_cuda(cudaMalloc(&q[i], 8 * MIB), "cudaMalloc(8 MiB) in the burst");
		held = live_bytes();
		e2e_check(held <= (uint64_t)(i + 1) * 8 * MIB + cap,
			  "miss %d: the device holds %llu B <= %d x 8 MiB live + the 16 MiB cap", i,
			  (unsigned long long)held, i + 1);
	}
	for (int i = 0; i < 4; i++)
		e2e_cuda(cudaFree(q[i]), "cudaFree");
}

static void mode_idle(void)
{
	void *p[4];
	uint64_t zero = 0;

	alloc_free(p, 4, 2 * MIB, 4);
	e2e_check(live_bytes() == 8 * MIB, "right after the frees, 8 MiB are cached");
	e2e_check(e2e_poll(live_at_most, &zero, 3000),
		  "with GPUPOOL_IDLE_TIMEOUT=200ms and the program idle, the cache is gone within 3 s");
}

static void mode_pressure(void)
{
	void *p[24];
	uint64_t target = 128 * MIB;

	for (int i = 0; i < 24; i++) {
		e2e_cuda(cudaMalloc(&p[i], 8 * MIB), "cudaMalloc");
		e2e_fill(p[i], 8 * MIB, (uint64_t)i);
	}
	for (int i = 0; i < 20; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	e2e_check(e2e_poll(live_at_most, &target, 5000),
		  "256 MiB device, 192 MiB held of which 160 MiB cached, MIN_FREE=50%%: held drops to "
		  "<= 128 MiB within 5 s (%llu B)", (unsigned long long)live_bytes());
	e2e_sleep_ms(200);
	e2e_check(live_bytes() == 128 * MIB,
		  "only what was needed went: exactly 128 MiB still held (%llu B)",
		  (unsigned long long)live_bytes());
	for (int i = 20; i < 24; i++)
		e2e_check(e2e_verify(p[i], 8 * MIB, (uint64_t)i), "live block %d kept its data", i);
}

/* A pressure release that begins while less is cached than the deficit gives back the deficit,
 * out of what was cached then and what the program frees while it runs (each real cudaFree
 * takes 100 ms here), and no more: the device ends at the threshold, not below it. A release to
 * 0 cached instead would give back every block it finds, new ones included, and leave the
 * device below the threshold. */
static void mode_pressure_churn(void)
{
	void *small, *p[24];
	uint64_t target = 128 * MIB;

	e2e_cuda(cudaMalloc(&small, 4 * MIB), "cudaMalloc");
	for (int i = 0; i < 24; i++)
		e2e_cuda(cudaMalloc(&p[i], 8 * MIB), "cudaMalloc");
	/* 196 MiB held, 60 free: 68 MiB short of 128. 20 MiB cached: less than that. */
	e2e_cuda(cudaFree(small), "cudaFree");
	for (int i = 0; i < 2; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	e2e_sleep_ms(40); /* a poll (every 20 ms) has begun a release: its first free takes 100 ms */
	for (int i = 2; i < 12; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	e2e_check(e2e_poll(live_at_most, &target, 10000),
		  "196 MiB held, 100 MiB freed during a slow pressure release: held drops to <= 128 MiB "
		  "within 10 s");
	e2e_sleep_ms(400);
	e2e_check(live_bytes() == 128 * MIB,
		  "only what was needed went: exactly 128 MiB still held (%llu B)",
		  (unsigned long long)live_bytes());
	for (int i = 12; i < 24; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
}

static void mode_meminfo(int cached_as_free)
{
	void *p;
	size_t free_b, total_b;

	alloc_free(&p, 1, 64 * MIB, 1);
	e2e_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
	if (cached_as_free)
		e2e_check(free_b == total_b,
			  "64 MiB cached on an empty device: cudaMemGetInfo reports it free (%zu of %zu)",
			  free_b, total_b);
	else
		e2e_check(free_b == total_b - 64 * MIB,
			  "GPUPOOL_REPORT_CACHED_AS_FREE=0: cudaMemGetInfo reports the driver's %zu of %zu",
			  free_b, total_b);
	e2e_cuda(cudaMalloc(&p, 32 * MIB), "cudaMalloc(32 MiB)");
	e2e_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
	e2e_check(free_b <= total_b, "free never exceeds total (%zu <= %zu)", free_b, total_b);
}

static void mode_disable(void)
{
	void *p;
	struct standin_counters c0 = e2e_counters(), c;

	for (int i = 0; i < 100; i++) {
		e2e_cuda(cudaMalloc(&p, MIB), "cudaMalloc");
		e2e_cuda(cudaFree(p), "cudaFree");
	}
	c = e2e_counters();
	e2e_check(c.mallocs - c0.mallocs == 100 && c.frees - c0.frees == 100,
		  "GPUPOOL_DISABLE=1: 100 pairs reach the runtime as 100 cudaMalloc + 100 cudaFree");
}

static void mode_takeover(const char *expect)
{
	const char *v = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");

	e2e_check(v != NULL && strcmp(v, expect) == 0,
		  "PYTORCH_NO_CUDA_MEMORY_CACHING is %s at main(), before any CUDA call (want %s)",
		  v ? v : "(unset)", expect);
}

int main(int argc, char **argv)
{
	const char *mode = argc == 3 && strcmp(argv[1], "--mode") == 0 ? argv[2] : "";

	e2e_start("e2e_policy");
	if (strcmp(mode, "cap") == 0)
		mode_cap();
	else if (strcmp(mode, "cap-burst") == 0)
		mode_cap_burst();
	else if (strcmp(mode, "idle") == 0)
		mode_idle();
	else if (strcmp(mode, "pressure") == 0)
		mode_pressure();
	else if (strcmp(mode, "pressure-churn") == 0)
		mode_pressure_churn();
	else if (strcmp(mode, "meminfo") == 0)
		mode_meminfo(1);
	else if (strcmp(mode, "meminfo-off") == 0)
		mode_meminfo(0);
	else if (strcmp(mode, "disable") == 0)
		mode_disable();
	else if (strcmp(mode, "takeover") == 0)
		mode_takeover("1");
	else if (strcmp(mode, "takeover-kept") == 0)
		mode_takeover("0");
	else
		e2e_fail("usage: e2e_policy --mode cap|idle|pressure|pressure-churn|meminfo|meminfo-off|disable|takeover|takeover-kept");
	printf("PASS e2e_policy %s\n", mode);
	return 0;
}
