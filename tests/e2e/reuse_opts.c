/* reuse_opts.c — proves GPUPOOL_OVERSIZE and GPUPOOL_REUSE_WAIT reach the pool through the shim.
 *   --mode oversize N  a freed 6 MiB block serves a 3 MiB cudaMalloc (no real cudaMalloc) when
 *                      N = 1 (GPUPOOL_OVERSIZE=2 set), and does not when N = 0 (unset)
 *   --mode wait N      after a stream is created (fenced reuse) and two 64 MiB blocks are freed
 *                      while "the GPU" needs 20 ms to reach their fence (STANDIN_EVENT_LATENCY_US),
 *                      the next 64 MiB cudaMalloc waits and reuses one (N = 1, GPUPOOL_REUSE_WAIT
 *                      of 1 s) or makes a real cudaMalloc (N = 0, GPUPOOL_REUSE_WAIT=0)
 *   --mode age N       the same with one freed 64 MiB block (too few to wait for): the miss right
 *                      after its free grows the pool (its fence is just recorded); 300 ms later
 *                      another waits for that fence and reuses the block (N = 1, GPUPOOL_REUSE_AGE
 *                      of 100 ms) or makes a real cudaMalloc (N = 0, GPUPOOL_REUSE_AGE=0); "the
 *                      GPU" reaches the fence 1.5 s after it is recorded. The margins are wide so
 *                      that a busy machine's preemptions (milliseconds) cannot move a miss across
 *                      the age: the first miss has 100 ms, the second 1.2 s.
 *   --mode threads N   16 threads of cudaMalloc+cudaFree pairs of 1 MiB after a stream exists,
 *                      "the GPU" behind every fence (STANDIN_EVENT_LATENCY_US): with
 *                      GPUPOOL_REUSE_WAIT of 1 s (N = 1, 3000 pairs a thread) the pool stops
 *                      growing at about a fence batch (16 blocks) a thread, however long the loop
 *                      runs; with GPUPOOL_REUSE_WAIT=0 (N = 0, 100 pairs a thread) it grows by
 *                      about a block a pair */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "e2e.h"

static void mode_oversize(int want_reuse)
{
	struct standin_counters c0, c1;
	void *big = NULL, *p = NULL;

	e2e_cuda(cudaMalloc(&big, 6 * E2E_MIB), "cudaMalloc(6 MiB)");
	e2e_cuda(cudaFree(big), "cudaFree(6 MiB)");
	c0 = e2e_counters();
	e2e_cuda(cudaMalloc(&p, 3 * E2E_MIB), "cudaMalloc(3 MiB)");
	c1 = e2e_counters();
	e2e_fill(p, 3 * E2E_MIB, 3);
	if (want_reuse)
		e2e_check(p == big && c1.mallocs == c0.mallocs,
			  "GPUPOOL_OVERSIZE=2: the freed 6 MiB block served 3 MiB, no real cudaMalloc");
	else
		e2e_check(p != big && c1.mallocs == c0.mallocs + 1,
			  "default: 3 MiB got a block of its own class (one real cudaMalloc)");
	e2e_check(e2e_verify(p, 3 * E2E_MIB, 3), "the block holds its data");
	e2e_cuda(cudaFree(p), "cudaFree(3 MiB)");
}

static void mode_wait(int want_reuse)
{
	struct standin_counters c0, c1;
	cudaStream_t s;
	void *a = NULL, *b = NULL, *c = NULL;
	uint64_t t0, ms;

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate"); /* from here, reuse needs a fence */
	e2e_cuda(cudaMalloc(&a, 64 * E2E_MIB), "cudaMalloc(a)");
	e2e_cuda(cudaMalloc(&b, 64 * E2E_MIB), "cudaMalloc(b)");
	e2e_cuda(cudaFree(a), "cudaFree(a)");
	e2e_cuda(cudaFree(b), "cudaFree(b)");
	c0 = e2e_counters();
	t0 = e2e_now_ms();
	e2e_cuda(cudaMalloc(&c, 64 * E2E_MIB), "cudaMalloc(c)");
	ms = e2e_now_ms() - t0;
	c1 = e2e_counters();
	if (want_reuse)
		e2e_check((c == a || c == b) && c1.mallocs == c0.mallocs && ms >= 15,
			  "GPUPOOL_REUSE_WAIT=1s: the miss waited %llu ms for the fence and reused a "
			  "freed block (no real cudaMalloc)", (unsigned long long)ms);
	else
		e2e_check(c != a && c != b && c1.mallocs == c0.mallocs + 1,
			  "GPUPOOL_REUSE_WAIT=0: the miss made a real cudaMalloc at once (%llu ms)",
			  (unsigned long long)ms);
	e2e_cuda(cudaFree(c), "cudaFree(c)");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
}

static void mode_age(int want_reuse)
{
	struct standin_counters c0, c1;
	struct timespec pause = { 0, 300000000 }; /* past GPUPOOL_REUSE_AGE, well before the fence */
	cudaStream_t s;
	void *a = NULL, *b = NULL, *c = NULL;

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	e2e_cuda(cudaMalloc(&a, 64 * E2E_MIB), "cudaMalloc(a)");
	e2e_cuda(cudaFree(a), "cudaFree(a)");
	c0 = e2e_counters();
	e2e_cuda(cudaMalloc(&b, 64 * E2E_MIB), "cudaMalloc(b)");
	c1 = e2e_counters();
	e2e_check(b != a && c1.mallocs == c0.mallocs + 1,
		  "a miss right after the free grows the pool: the fence covering the freed block is "
		  "just recorded");
	nanosleep(&pause, NULL);
	c0 = e2e_counters();
	e2e_cuda(cudaMalloc(&c, 64 * E2E_MIB), "cudaMalloc(c)");
	c1 = e2e_counters();
	if (want_reuse)
		e2e_check(c == a && c1.mallocs == c0.mallocs,
			  "GPUPOOL_REUSE_AGE=100ms: 300 ms later the miss waited for that fence and "
			  "reused the block (no real cudaMalloc)");
	else
		e2e_check(c != a && c1.mallocs == c0.mallocs + 1,
			  "GPUPOOL_REUSE_AGE=0: 300 ms later the miss still made a real cudaMalloc");
	e2e_cuda(cudaFree(b), "cudaFree(b)");
	e2e_cuda(cudaFree(c), "cudaFree(c)");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
}

#define THREADS 16
#define BOUND (THREADS * 20) /* blocks: 16 a thread, 1 in use, and some room for races */

static pthread_barrier_t start;
static _Atomic int pair_errors;
static int pairs_per_thread;

static void *pairs(void *arg)
{
	void *p;

	(void)arg;
	pthread_barrier_wait(&start);
	for (int i = 0; i < pairs_per_thread; i++) {
		if (cudaMalloc(&p, E2E_MIB) != cudaSuccess || cudaFree(p) != cudaSuccess)
			pair_errors++;
	}
	return NULL;
}

static void mode_threads(int want_bound)
{
	struct standin_counters c0, c1;
	pthread_t th[THREADS];
	cudaStream_t s;
	uint64_t grown, t0, ms;

	/* Long enough that a pool that only bounded each thread's own list grows well past BOUND
	 * (threads taking each other's blocks rob lists below a batch, and those grow again);
	 * without the wait 100 pairs suffice. */
	pairs_per_thread = want_bound ? 3000 : 100;
	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate"); /* from here, reuse needs a fence */
	pthread_barrier_init(&start, NULL, THREADS);
	c0 = e2e_counters();
	t0 = e2e_now_ms();
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&th[i], NULL, pairs, NULL) != 0)
			e2e_fail("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	ms = e2e_now_ms() - t0;
	c1 = e2e_counters();
	grown = c1.mallocs - c0.mallocs;
	e2e_check(pair_errors == 0, "%d threads x %d pairs of 1 MiB: no CUDA error", THREADS,
		  pairs_per_thread);
	if (want_bound)
		e2e_check(grown <= BOUND,
			  "GPUPOOL_REUSE_WAIT=1s: the pool stopped growing at %llu blocks (at most %d: "
			  "a fence batch a thread), in %llu ms", (unsigned long long)grown, BOUND,
			  (unsigned long long)ms);
	else
		e2e_check(grown > BOUND,
			  "GPUPOOL_REUSE_WAIT=0: without the wait the pool grew to %llu blocks (more than "
			  "%d), in %llu ms", (unsigned long long)grown, BOUND, (unsigned long long)ms);
	pthread_barrier_destroy(&start);
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 && strcmp(argv[1], "--mode") == 0 ? argv[2] : "";
	int want = argc > 3 ? atoi(argv[3]) : 0;

	const char *name = strcmp(mode, "oversize") == 0 ? "e2e_reuse_oversize"
			   : strcmp(mode, "age") == 0	 ? "e2e_reuse_age"
			   : strcmp(mode, "threads") == 0 ? "e2e_reuse_threads"
							 : "e2e_reuse_wait";

	e2e_start(name);
	if (strcmp(mode, "oversize") == 0)
		mode_oversize(want);
	else if (strcmp(mode, "wait") == 0)
		mode_wait(want);
	else if (strcmp(mode, "age") == 0)
		mode_age(want);
	else if (strcmp(mode, "threads") == 0)
		mode_threads(want);
	else
		e2e_fail("usage: e2e_reuse_opts --mode oversize|wait|age|threads 0|1");
	printf("PASS %s\n", name);
	return 0;
}
