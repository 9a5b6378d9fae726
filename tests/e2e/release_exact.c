/* release_exact.c — after every release the runtime holds exactly the program's live blocks:
 * nothing the pool cached survives a release, and no block is lost or counted twice, over many
 * rounds of random sizes (512 B .. 64 MiB, many classes, larger idle blocks serving smaller
 * requests with the default GPUPOOL_OVERSIZE), with a stream created (fenced reuse) and frees in
 * random order. The check runs after each round, not only at the end: memory that crept up
 * round by round would show here (what a long soak cannot tell from its device readings).
 *   --concurrent   a release asked for (gpupool_release) while the control thread's release,
 *                  woken by SIGUSR1, is still freeing the only cached block (the stand-in's
 *                  cudaFree slowed by STANDIN_FREE_DELAY_US): when it returns, the runtime holds
 *                  nothing. (It returned at once, with the block still being freed.) */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define NLIVE 48
#define ROUNDS 100
#define OPS 300

static int (*release)(int, unsigned long long *);

static void concurrent(void)
{
	unsigned long long bytes = 0;
	uint64_t t0, ms;
	void *a = NULL;

	e2e_cuda(cudaMalloc(&a, E2E_MIB), "cudaMalloc");
	e2e_cuda(cudaFree(a), "cudaFree"); /* cached: the control thread's release will free it */
	raise(SIGUSR1);
	e2e_sleep_ms(50); /* the control thread is inside the slow cudaFree by now, mostly */
	t0 = e2e_now_ms();
	if (release(-1, &bytes) != 0)
		e2e_fail("gpupool_release failed");
	ms = e2e_now_ms() - t0;
	e2e_check(e2e_counters().live_allocs == 0,
		  "when gpupool_release returned (%llu ms, %llu B given back by it, the rest by the "
		  "signal's release) the runtime held nothing", (unsigned long long)ms, bytes);
}

int main(int argc, char **argv)
{
	void *live[NLIVE] = { 0 };
	unsigned seed = 12345;
	cudaStream_t s;
	int r, i, k, bad = 0;

	e2e_start("e2e_release_exact");
	release = e2e_shim_release();
	if (argc > 1 && strcmp(argv[1], "--concurrent") == 0) {
		concurrent();
		printf("PASS e2e_release_exact\n");
		return 0;
	}
	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	for (r = 0; r < ROUNDS; r++) {
		struct standin_counters c;
		uint64_t mine = 0, n = 0;

		for (k = 0; k < OPS; k++) {
			i = rand_r(&seed) % NLIVE;
			if (live[i] != NULL) {
				e2e_cuda(cudaFree(live[i]), "cudaFree");
				live[i] = NULL;
			} else {
				/* Half small (up to 1 MiB), half up to 64 MiB. */
				size_t max = rand_r(&seed) % 2 ? E2E_MIB : 64 * E2E_MIB;
				size_t bytes = 1 + (size_t)rand_r(&seed) % max;
				e2e_cuda(cudaMalloc(&live[i], bytes), "cudaMalloc");
			}
		}
		if (release(-1, NULL) != 0)
			e2e_fail("round %d: gpupool_release failed", r);
		for (i = 0; i < NLIVE; i++) {
			if (live[i] != NULL) {
				mine += standin_charge(standin_size(live[i]));
				n++;
			}
		}
		c = e2e_counters();
		if (c.live_allocs != n || c.live_bytes != mine) {
			if (bad++ < 5)
				e2e_note("round %d: the runtime holds %llu allocations / %llu B, the program "
					 "%llu / %llu B", r, (unsigned long long)c.live_allocs,
					 (unsigned long long)c.live_bytes, (unsigned long long)n,
					 (unsigned long long)mine);
		}
	}
	e2e_check(bad == 0, "after each of %d releases the runtime held exactly the program's live "
		  "blocks (%d rounds differed)", ROUNDS, bad);
	for (i = 0; i < NLIVE; i++)
		if (live[i] != NULL)
			e2e_cuda(cudaFree(live[i]), "cudaFree");
	release(-1, NULL);
	e2e_check(e2e_counters().live_allocs == 0, "after the last frees and a release: nothing held");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	printf("PASS e2e_release_exact\n");
	return 0;
}
