/* threads.c — proves the pool and the release path under contention: 8 threads each make 20,000
 * random allocations and frees of 512 B to 4 MiB (THREADS_OPS: fewer under the sanitizers),
 * writing a per-thread pattern into every block and checking it before the free, while another
 * thread sends SIGUSR1 to the process every 1 ms. No crash, no pattern mismatch; at the end
 * everything is freed, one more SIGUSR1 is sent and the runtime's live bytes must reach 0.
 * THREADS_HANDOFF=1: every other free swaps the block for the one in a shared exchange slot and
 * frees that one instead, mostly a block another thread allocated (its pattern checked first):
 * with GPUPOOL_THREAD_CACHE, frees of blocks that other threads' caches handed out. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "e2e.h"

#define THREADS 8
#define OPS 20000 /* unless THREADS_OPS says */
#define SLOTS 32

struct worker {
	pthread_t tid;
	int index;
	unsigned seed;
	uint64_t allocs;
};

static atomic_int stop_signals;
static atomic_ulong signals_sent;
static int ops = OPS;
static int handoff;

/* THREADS_HANDOFF's exchange: a block one thread put there, for another to free. */
struct held {
	void *ptr;
	size_t size;
	uint64_t seed;
};
static pthread_mutex_t exchange_lock = PTHREAD_MUTEX_INITIALIZER;
static struct held exchange[SLOTS];
static atomic_ulong handed_over;

/* The block at slot k of a thread swapped for the one in the exchange's slot k. */
static void swap_with_exchange(int k, void **ptr, size_t *size, uint64_t *seed)
{
	struct held mine = { *ptr, *size, *seed };

	pthread_mutex_lock(&exchange_lock);
	*ptr = exchange[k].ptr;
	*size = exchange[k].size;
	*seed = exchange[k].seed;
	exchange[k] = mine;
	pthread_mutex_unlock(&exchange_lock);
	if (*ptr != NULL && (*seed >> 32) != (mine.seed >> 32))
		atomic_fetch_add(&handed_over, 1);
}

static size_t random_size(unsigned *seed)
{
	/* about log-uniform from 512 B to 4 MiB */
	size_t base = (size_t)512 << (rand_r(seed) % 13);

	return base + (size_t)rand_r(seed) % base;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	void *ptr[SLOTS] = { 0 };
	size_t size[SLOTS] = { 0 };
	uint64_t seed[SLOTS] = { 0 };
	cudaError_t rc;
	int op, k;

	for (op = 0; op < ops; op++) {
		k = rand_r(&w->seed) % SLOTS;
		if (ptr[k] != NULL && handoff && (op & 1)) {
			swap_with_exchange(k, &ptr[k], &size[k], &seed[k]);
			if (ptr[k] == NULL)
				continue; /* the slot was empty: ours waits there */
		}
		if (ptr[k] != NULL) {
			if (!e2e_verify(ptr[k], size[k], seed[k]))
				e2e_fail("thread %d op %d: a %zu B block lost its pattern before its free",
					 w->index, op, size[k]);
			rc = cudaFree(ptr[k]);
			if (rc != cudaSuccess)
				e2e_fail("thread %d op %d: cudaFree returned %s", w->index, op,
					 cudaGetErrorName(rc));
			ptr[k] = NULL;
			continue;
		}
		size[k] = random_size(&w->seed);
		seed[k] = ((uint64_t)w->index << 32) | (uint64_t)op;
		rc = cudaMalloc(&ptr[k], size[k]);
		if (rc != cudaSuccess)
			e2e_fail("thread %d op %d: cudaMalloc(%zu) returned %s", w->index, op, size[k],
				 cudaGetErrorName(rc));
		e2e_fill(ptr[k], size[k], seed[k]);
		w->allocs++;
	}
	for (k = 0; k < SLOTS; k++) {
		if (ptr[k] == NULL)
			continue;
		if (!e2e_verify(ptr[k], size[k], seed[k]))
			e2e_fail("thread %d: a %zu B block lost its pattern before the final free", w->index,
				 size[k]);
		rc = cudaFree(ptr[k]);
		if (rc != cudaSuccess)
			e2e_fail("thread %d: final cudaFree returned %s", w->index, cudaGetErrorName(rc));
	}
	return NULL;
}

static void *signaller(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_signals)) {
		kill(getpid(), SIGUSR1);
		atomic_fetch_add(&signals_sent, 1);
		e2e_sleep_ms(1);
	}
	return NULL;
}

int main(void)
{
	struct worker w[THREADS];
	struct standin_counters c;
	pthread_t sig_tid;
	uint64_t allocs = 0, t0 = e2e_now_ms();
	int i;

	e2e_start("e2e_threads");
	if (getenv("THREADS_OPS") != NULL && atoi(getenv("THREADS_OPS")) > 0)
		ops = atoi(getenv("THREADS_OPS"));
	handoff = getenv("THREADS_HANDOFF") != NULL && atoi(getenv("THREADS_HANDOFF")) == 1;
	/* CUDA in use before the signals start */
	{
		void *p = NULL;

		e2e_cuda(cudaMalloc(&p, 512), "cudaMalloc(512)");
		e2e_cuda(cudaFree(p), "cudaFree(512)");
	}
	if (pthread_create(&sig_tid, NULL, signaller, NULL) != 0)
		e2e_fail("pthread_create");
	for (i = 0; i < THREADS; i++) {
		w[i].index = i;
		w[i].seed = 1000u + (unsigned)i;
		w[i].allocs = 0;
		if (pthread_create(&w[i].tid, NULL, work, &w[i]) != 0)
			e2e_fail("pthread_create");
	}
	for (i = 0; i < THREADS; i++) {
		pthread_join(w[i].tid, NULL);
		allocs += w[i].allocs;
	}
	for (i = 0; i < SLOTS; i++) {
		if (exchange[i].ptr == NULL)
			continue;
		if (!e2e_verify(exchange[i].ptr, exchange[i].size, exchange[i].seed))
			e2e_fail("a %zu B block in the exchange lost its pattern", exchange[i].size);
		e2e_cuda(cudaFree(exchange[i].ptr), "cudaFree(a block left in the exchange)");
	}
	if (handoff)
		e2e_check(atomic_load(&handed_over) > 0,
			  "%lu blocks freed by a thread that did not allocate them",
			  atomic_load(&handed_over));
	atomic_store(&stop_signals, 1);
	pthread_join(sig_tid, NULL);
	c = e2e_counters();
	e2e_note("%d threads x %d random ops (%llu allocations) with %lu SIGUSR1 sent: no crash, "
		 "no pattern mismatch (each checked before its free), %.1f s", THREADS, ops,
		 (unsigned long long)allocs, atomic_load(&signals_sent),
		 (double)(e2e_now_ms() - t0) / 1000.0);
	e2e_note("the runtime saw %llu real cudaMalloc and %llu real cudaFree",
		 (unsigned long long)c.mallocs, (unsigned long long)c.frees);
	kill(getpid(), SIGUSR1);
	if (!e2e_wait_live(0, 0, 5000)) {
		c = e2e_counters();
		e2e_fail("5 s after the final SIGUSR1 the runtime still holds %llu allocations / %llu B",
			 (unsigned long long)c.live_allocs, (unsigned long long)c.live_bytes);
	}
	c = e2e_counters();
	e2e_check(c.mallocs == c.frees && c.bad_frees == 0,
		  "everything freed and released: live bytes 0, %llu real allocations all given back, no bad frees",
		  (unsigned long long)c.mallocs);
	printf("PASS e2e_threads\n");
	return 0;
}
