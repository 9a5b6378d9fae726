/* faults.c — proves the shim under runtime faults injected by the stand-in (run with
 * STANDIN_DEVICES=2): whatever fails, the program gets the runtime's own error and no error it did
 * not cause, never gets a block that GPU work may still use, and its current device never
 * changes under it; afterwards the runtime holds exactly the program's live blocks (nothing
 * lost, nothing freed twice).
 *   --mode malloc     cudaMalloc fails: out of memory (cache released, one retry) or another error
 *   --mode free       cudaFree fails in a release (freed with an error, or refused)
 *   --mode events     cudaEventRecord / cudaEventQuery fail, events completed by hand
 *   --mode getdevice  cudaGetDevice fails (cudaMalloc, fences, releases, streams, cudaDeviceReset)
 *   --mode unloading  the runtime is unloading (cudaErrorCudartUnloading); the program exits 0
 *   --mode load       4 threads of random work on 2 devices with the faults set in the
 *                     environment (STANDIN_FAIL_*) and a release signal every 2 ms */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e.h"

static int (*release_fn)(int device, unsigned long long *bytes);

static void expect_rc(cudaError_t got, cudaError_t want, const char *what)
{
	e2e_check(got == want, "%s -> %s (want %s)", what, cudaGetErrorName(got), cudaGetErrorName(want));
}

static struct standin_counters all(void)
{
	struct standin_counters c;

	standin_get(-1, &c);
	return c;
}

/* What a live allocation costs in the runtime (the pool asks for its class size). */
static uint64_t charge_of(const void *p)
{
	return standin_charge(standin_size(p));
}

/* gpupool_release(-1): 0, or -1 when a real free failed. */
static int release(void)
{
	unsigned long long b = 0;

	return release_fn(-1, &b);
}

static void *must_malloc(size_t n)
{
	void *p = NULL;

	e2e_cuda(cudaMalloc(&p, n), "cudaMalloc");
	return p;
}

static int device_of(const void *p)
{
	struct cudaPointerAttributes a;

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeDevice)
		return -1;
	return a.device;
}

/* The current device, asked until cudaGetDevice answers (its faults fail single calls). */
static int current_device(void)
{
	int d = -1, tries;

	for (tries = 0; tries < 100; tries++)
		if (cudaGetDevice(&d) == cudaSuccess)
			return d;
	e2e_fail("cudaGetDevice failed 100 times in a row");
}

/* Release everything cached with the faults off: the runtime must then hold nothing. */
static void check_clean(const char *when)
{
	struct standin_counters c;
	int k;

	for (k = 0; k < STANDIN_FAULT_COUNT; k++)
		standin_set_fault((enum standin_fault)k, 0, 0);
	(void)cudaGetLastError();
	e2e_check(release() == 0, "%s: a release with the faults off reports no failed free", when);
	c = all();
	e2e_check(c.live_allocs == 0 && c.live_bytes == 0 && c.bad_frees == 0,
		  "%s: the runtime holds nothing (%llu allocations, %llu B) and saw no bad free", when,
		  (unsigned long long)c.live_allocs, (unsigned long long)c.live_bytes);
}

static void mode_malloc(void)
{
	struct standin_counters c0, c;
	void *cached[4], *live, *p = NULL;
	int i;

	live = must_malloc(E2E_MIB);
	for (i = 0; i < 4; i++)
		cached[i] = must_malloc(E2E_MIB / 2);
	for (i = 0; i < 4; i++)
		e2e_cuda(cudaFree(cached[i]), "cudaFree");
	c0 = all();

	standin_set_fault(STANDIN_FAULT_MALLOC, 1, 0);
	e2e_cuda(cudaMalloc(&p, E2E_MIB / 2), "a cache hit while every real cudaMalloc fails");
	e2e_cuda(cudaFree(p), "cudaFree");
	p = NULL;
	expect_rc(cudaMalloc(&p, 3 * E2E_MIB), cudaErrorMemoryAllocation,
		  "a miss while every real cudaMalloc fails (out of memory)");
	expect_rc(cudaGetLastError(), cudaErrorMemoryAllocation,
		  "the runtime's last error is the one a native failure leaves");
	c = all();
	e2e_check(c.frees == c0.frees + 4 && c.failed_mallocs == c0.failed_mallocs + 2 &&
		  c.live_allocs == 1 && c.live_bytes == charge_of(live),
		  "the 4 cached blocks went back before the one retry; only the live block remains");

	standin_set_fault(STANDIN_FAULT_MALLOC, 2, 0);
	e2e_cuda(cudaMalloc(&p, 3 * E2E_MIB), "the first real cudaMalloc fails, the retry succeeds");
	expect_rc(cudaGetLastError(), cudaSuccess, "after the successful retry no error is pending");
	e2e_check(standin_owns(p), "the block is a live allocation of the runtime");
	e2e_cuda(cudaFree(p), "cudaFree");

	standin_set_fault(STANDIN_FAULT_MALLOC, 1, cudaErrorUnknown);
	c0 = all();
	p = NULL;
	expect_rc(cudaMalloc(&p, 5 * E2E_MIB), cudaErrorUnknown,
		  "another error of the real cudaMalloc comes back as it is");
	expect_rc(cudaGetLastError(), cudaErrorUnknown, "and is the runtime's last error");
	c = all();
	e2e_check(c.frees == c0.frees && c.failed_mallocs == c0.failed_mallocs + 1,
		  "no release and no retry for an error that is not out of memory");
	standin_set_fault(STANDIN_FAULT_MALLOC, 0, 0);
	e2e_cuda(cudaFree(live), "cudaFree");
	check_clean("malloc");
}

/* The pool's own blocks are freed for real in releases; a pointer it does not own at once. */
static void mode_free(void)
{
	struct standin_counters c;
	void *b[6], *live, *foreign = NULL;
	uint64_t kept = 0;
	int i;

	live = must_malloc(E2E_MIB);
	for (i = 0; i < 6; i++)
		b[i] = must_malloc((size_t)(i + 1) * 256 * E2E_KIB);
	for (i = 0; i < 6; i++)
		e2e_cuda(cudaFree(b[i]), "cudaFree");
	standin_set_fault(STANDIN_FAULT_FREE, 2, 0);
	e2e_check(release() == -1, "gpupool_release reports that real frees failed");
	c = all();
	e2e_check(c.live_allocs == 1 && c.live_bytes == charge_of(live) && c.bad_frees == 0 &&
		  standin_faults(STANDIN_FAULT_FREE) == 3,
		  "3 of 6 real frees failed (freeing all the same, as with the error of an earlier "
		  "launch): only the live block remains");
	expect_rc(cudaGetLastError(), cudaErrorLaunchFailure,
		  "gpupool_release leaves the runtime's error as the last error, as a runtime call would");
	standin_set_fault(STANDIN_FAULT_FREE, 0, 0);
	e2e_check(release() == 0 && all().frees == c.frees, "a second release frees nothing twice");

	e2e_cuda(cudaMallocAsync(&foreign, E2E_MIB, 0), "cudaMallocAsync (not the pool's)");
	standin_set_fault(STANDIN_FAULT_FREE, 1, 0);
	expect_rc(cudaFree(foreign), cudaErrorLaunchFailure,
		  "cudaFree of a pointer the pool does not own returns the runtime's error");
	expect_rc(cudaGetLastError(), cudaErrorLaunchFailure, "and leaves it as the last error");

	/* Refused frees: the runtime keeps the memory. The pool forgets such a block rather than
	 * free an address twice (by then it may belong to another allocation). */
	standin_set_fault(STANDIN_FAULT_FREE, 0, 0);
	for (i = 0; i < 6; i++)
		b[i] = must_malloc((size_t)(i + 1) * 256 * E2E_KIB);
	for (i = 1; i < 6; i += 2)
		kept += charge_of(b[i]);
	for (i = 0; i < 6; i++)
		e2e_cuda(cudaFree(b[i]), "cudaFree");
	standin_set_free_keeps(1);
	standin_set_fault(STANDIN_FAULT_FREE, 2, 0);
	e2e_check(release() == -1, "refused frees: the release reports them");
	standin_set_fault(STANDIN_FAULT_FREE, 0, 0);
	standin_set_free_keeps(0);
	c = all();
	e2e_check(c.live_bytes == charge_of(live) + kept && standin_owns(b[1]) && standin_owns(b[3]) &&
		  standin_owns(b[5]) && !standin_owns(b[0]),
		  "the runtime holds the live block and exactly the 3 refused blocks");
	e2e_check(release() == 0 && all().frees == c.frees && all().bad_frees == 0,
		  "the pool forgot the refused blocks: no later release frees them again");
	for (i = 1; i < 6; i += 2)
		e2e_cuda(cudaFree(b[i]), "cudaFree of a forgotten block (passed to the runtime)");
	e2e_cuda(cudaFree(live), "cudaFree");
	check_clean("free");
}

/* Above 1 MiB: reuse follows each fence (smaller blocks wait for a batch of fenced frees). */
#define FENCED (2 * E2E_MIB)

static void mode_events(void)
{
	struct standin_counters c0;
	cudaStream_t s = NULL, s2 = NULL;
	void *p, *q, *r, *x, *oldest;

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate (reuse now waits for fences)");
	standin_set_manual_events(1);
	p = must_malloc(FENCED);
	e2e_cuda(cudaFree(p), "cudaFree");

	standin_set_fault(STANDIN_FAULT_EVENT_QUERY, 1, 0);
	q = must_malloc(FENCED);
	e2e_check(q != p, "every cudaEventQuery fails: the freed block is not reused (GPU work may "
		  "still use it)");
	standin_complete_events();
	r = must_malloc(FENCED);
	e2e_check(r != p, "nor after the work is done: a failed query says nothing");
	expect_rc(cudaGetLastError(), cudaSuccess, "the failed queries leave the program no error");
	standin_set_fault(STANDIN_FAULT_EVENT_QUERY, 0, 0);
	x = must_malloc(FENCED);
	e2e_check(x == p, "once queries work the fence completes and the block is reused");
	oldest = q;
	e2e_cuda(cudaFree(q), "cudaFree");
	e2e_cuda(cudaFree(r), "cudaFree");

	standin_set_fault(STANDIN_FAULT_EVENT_RECORD, 1, 0);
	e2e_cuda(cudaFree(x), "cudaFree");
	q = must_malloc(FENCED);
	r = must_malloc(FENCED);
	e2e_check(q != x && r != x && q != oldest && r != oldest,
		  "every cudaEventRecord fails: no fence, no freed block reused");
	expect_rc(cudaGetLastError(), cudaSuccess, "the failed records leave the program no error");

	/* A destroyed stream's last work must be waited for even if its event cannot be recorded. */
	e2e_cuda(cudaStreamCreate(&s2), "cudaStreamCreate");
	c0 = all();
	e2e_cuda(cudaStreamDestroy(s2), "cudaStreamDestroy while cudaEventRecord fails");
	e2e_check(all().syncs > c0.syncs,
		  "the shim synchronized the stream instead of recording its last event");
	expect_rc(cudaGetLastError(), cudaSuccess, "no error left for the program");

	standin_set_fault(STANDIN_FAULT_EVENT_RECORD, 0, 0);
	e2e_cuda(cudaFree(q), "cudaFree");
	x = must_malloc(FENCED);
	e2e_check(x != p && x != q && x != oldest,
		  "records work again: a fence is recorded, not yet complete");
	standin_complete_events();
	e2e_cuda(cudaFree(x), "cudaFree");
	e2e_cuda(cudaFree(r), "cudaFree");
	x = must_malloc(FENCED);
	e2e_check(x == oldest, "once the GPU is done, the oldest freed block is reused");
	e2e_cuda(cudaFree(x), "cudaFree");
	standin_set_manual_events(0);
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	check_clean("events");
}

#define GD_SLOTS 16

static void mode_getdevice(void)
{
	void *slot[GD_SLOTS] = { 0 };
	size_t size[GD_SLOTS] = { 0 };
	unsigned seed = 7;
	cudaStream_t s = NULL;
	struct standin_counters c;
	int i, k, dev, failed = 0, ok = 0;
	void *p = NULL, *keep0;

	e2e_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
	standin_set_fault(STANDIN_FAULT_GETDEVICE, 1, 0);
	expect_rc(cudaMalloc(&p, E2E_MIB), cudaErrorUnknown,
		  "cudaMalloc while cudaGetDevice fails returns the runtime's error");
	expect_rc(cudaGetLastError(), cudaErrorUnknown, "which is also its last error");
	standin_set_fault(STANDIN_FAULT_GETDEVICE, 0, 0);
	e2e_check(all().live_allocs == 0, "nothing was allocated");

	/* Random work on both devices with every n-th cudaGetDevice failing, here and in the shim,
	 * n from 3 to 6 (which call of the shim's fails moves with n). */
	for (i = 0; i < 3000; i++) {
		if (i % 750 == 0)
			standin_set_fault(STANDIN_FAULT_GETDEVICE, 3u + (unsigned)i / 750, 0);
		dev = (i / 7) % 2;
		e2e_cuda(cudaSetDevice(dev), "cudaSetDevice");
		if (i % 500 == 250)
			e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
		if (i % 500 == 400 && s != NULL) {
			e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
			s = NULL;
		}
		k = rand_r(&seed) % GD_SLOTS;
		if (slot[k] != NULL) {
			if (!e2e_verify(slot[k], size[k], (uint64_t)k))
				e2e_fail("op %d: a live block lost its pattern", i);
			e2e_cuda(cudaFree(slot[k]), "cudaFree");
			slot[k] = NULL;
		} else {
			cudaError_t rc;

			size[k] = (size_t)256 << (rand_r(&seed) % 13);
			rc = cudaMalloc(&slot[k], size[k]);
			if (rc == cudaSuccess) {
				if (device_of(slot[k]) != dev)
					e2e_fail("op %d: a block for device %d is on device %d", i, dev,
						 device_of(slot[k]));
				e2e_fill(slot[k], size[k], (uint64_t)k);
				ok++;
			} else if (rc == cudaErrorUnknown) {
				slot[k] = NULL;
				failed++;
				(void)cudaGetLastError();
			} else {
				e2e_fail("op %d: cudaMalloc returned %s", i, cudaGetErrorName(rc));
			}
		}
		if (i % 100 == 99 && release() != 0)
			e2e_fail("op %d: a release failed", i);
		if (current_device() != dev)
			e2e_fail("op %d: the current device changed under the program (%d, want %d)", i,
				 current_device(), dev);
	}
	e2e_check(ok > 0 && failed > 0, "3000 ops on 2 devices with every 3rd to 6th cudaGetDevice "
		  "failing: %d allocations, %d failed with the runtime's error (both paths taken), the "
		  "current device never changed", ok, failed);
	for (k = 0; k < GD_SLOTS; k++)
		if (slot[k] != NULL)
			e2e_cuda(cudaFree(slot[k]), "cudaFree");
	if (s != NULL)
		e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	e2e_check(release() == 0, "a release with cudaGetDevice failing gives everything back");
	c = all();
	e2e_check(c.live_allocs == 0 && c.bad_frees == 0,
		  "the runtime holds nothing (%llu allocations) and saw no bad free",
		  (unsigned long long)c.live_allocs);

	/* cudaDeviceReset when the shim cannot tell which device is reset. */
	standin_set_fault(STANDIN_FAULT_GETDEVICE, 0, 0);
	e2e_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
	keep0 = must_malloc(E2E_MIB);
	e2e_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
	p = must_malloc(2 * E2E_MIB);
	e2e_cuda(cudaFree(p), "cudaFree (cached on device 1)");
	standin_set_fault(STANDIN_FAULT_GETDEVICE, 1, 0);
	e2e_cuda(cudaDeviceReset(), "cudaDeviceReset of device 1 while cudaGetDevice fails");
	standin_set_fault(STANDIN_FAULT_GETDEVICE, 0, 0);
	(void)cudaGetLastError();
	e2e_check(!standin_owns(p), "the reset freed device 1's memory");
	p = must_malloc(2 * E2E_MIB);
	e2e_check(standin_owns(p), "the next cudaMalloc on device 1 is a live allocation, never a block "
		  "the reset freed");
	e2e_cuda(cudaFree(p), "cudaFree");
	e2e_cuda(cudaFree(keep0), "cudaFree of device 0's live block");
	check_clean("getdevice");
}

static void mode_unloading(void)
{
	struct standin_counters c0;
	void *live, *cached, *p = NULL;
	cudaError_t rc;

	live = must_malloc(E2E_MIB);
	cached = must_malloc(2 * E2E_MIB);
	e2e_cuda(cudaFree(cached), "cudaFree");
	c0 = all();
	standin_set_unloading(1);
	rc = cudaMalloc(&p, 2 * E2E_MIB);
	e2e_check(rc == cudaSuccess ? p == cached : rc == cudaErrorCudartUnloading,
		  "a cudaMalloc the cache could serve: the cached block, or the runtime's error (%s)",
		  cudaGetErrorName(rc));
	if (rc == cudaSuccess)
		e2e_cuda(cudaFree(p), "cudaFree");
	p = NULL;
	expect_rc(cudaMalloc(&p, 8 * E2E_MIB), cudaErrorCudartUnloading,
		  "a miss returns the runtime's cudaErrorCudartUnloading");
	e2e_check(release() == -1, "a release reports the failed frees and returns");
	kill(getpid(), SIGUSR1);
	e2e_sleep_ms(100);
	standin_set_unloading(0);
	e2e_check(all().frees == c0.frees && all().bad_frees == 0 && standin_owns(live),
		  "nothing was freed or freed twice while the runtime was unloading");
	standin_set_unloading(1);
	e2e_cuda(cudaFree(live), "cudaFree of a live block while unloading (kept in the cache)");
	kill(getpid(), SIGUSR1);
	e2e_sleep_ms(20);
	/* ends here, still unloading, with the control thread awake: the process must exit 0 */
}

/* ---- load: every fault at once ---- */

#define LOAD_THREADS 4
#define LOAD_SLOTS 24

static atomic_int load_stop;
static atomic_ulong load_errors[3]; /* out of memory, unknown, launch failure */

static void *load_worker(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
	int id = (int)(uintptr_t)arg, ops = 20000, i, k;
	void *slot[LOAD_SLOTS] = { 0 };
	size_t size[LOAD_SLOTS] = { 0 };
	uint64_t tag[LOAD_SLOTS] = { 0 };
	cudaStream_t s = NULL;

	if (getenv("FAULTS_OPS") != NULL)
		ops = atoi(getenv("FAULTS_OPS"));
	for (i = 0; i < ops; i++) {
		int dev = (i / 16 + id) % 2;
		cudaError_t rc;

		if (cudaSetDevice(dev) != cudaSuccess)
			e2e_fail("thread %d: cudaSetDevice failed", id);
		if (i % 1000 == 500 && s == NULL && cudaStreamCreate(&s) != cudaSuccess)
			s = NULL;
		if (i % 1000 == 900 && s != NULL) {
			(void)cudaStreamDestroy(s);
			s = NULL;
		}
		k = rand_r(&seed) % LOAD_SLOTS;
		if (slot[k] != NULL) {
			if (!e2e_verify(slot[k], size[k], tag[k]))
				e2e_fail("thread %d op %d: a %zu B block lost its owner's pattern", id, i, size[k]);
			rc = cudaFree(slot[k]);
			if (rc != cudaSuccess)
				e2e_fail("thread %d op %d: cudaFree of a pooled block returned %s", id, i,
					 cudaGetErrorName(rc));
			slot[k] = NULL;
			continue;
		}
		size[k] = (size_t)(rand_r(&seed) % 4096 + 1) << (rand_r(&seed) % 11);
		tag[k] = ((uint64_t)id << 40) | (uint64_t)i;
		rc = cudaMalloc(&slot[k], size[k]);
		if (rc == cudaSuccess) {
			e2e_fill(slot[k], size[k], tag[k]);
			continue;
		}
		slot[k] = NULL;
		if (rc == cudaErrorMemoryAllocation)
			atomic_fetch_add(&load_errors[0], 1);
		else if (rc == cudaErrorUnknown)
			atomic_fetch_add(&load_errors[1], 1);
		else
			e2e_fail("thread %d op %d: cudaMalloc returned %s, not an error the runtime gave",
				 id, i, cudaGetErrorName(rc));
		(void)cudaGetLastError();
	}
	for (k = 0; k < LOAD_SLOTS; k++) {
		if (slot[k] == NULL)
			continue;
		if (!e2e_verify(slot[k], size[k], tag[k]))
			e2e_fail("thread %d: a block lost its owner's pattern before the last free", id);
		if (cudaFree(slot[k]) != cudaSuccess)
			e2e_fail("thread %d: the last cudaFree failed", id);
	}
	if (s != NULL)
		(void)cudaStreamDestroy(s);
	return NULL;
}

static void *load_signaller(void *arg)
{
	unsigned long *sent = arg;

	while (!atomic_load(&load_stop)) {
		kill(getpid(), SIGUSR1);
		(*sent)++;
		e2e_sleep_ms(2);
	}
	return NULL;
}

static void mode_load(void)
{
	pthread_t t[LOAD_THREADS], sig;
	unsigned long sent = 0;
	uint64_t t0 = e2e_now_ms(), f[STANDIN_FAULT_COUNT];
	int i;

	if (pthread_create(&sig, NULL, load_signaller, &sent) != 0)
		e2e_fail("pthread_create");
	for (i = 0; i < LOAD_THREADS; i++)
		if (pthread_create(&t[i], NULL, load_worker, (void *)(uintptr_t)i) != 0)
			e2e_fail("pthread_create");
	for (i = 0; i < LOAD_THREADS; i++)
		pthread_join(t[i], NULL);
	atomic_store(&load_stop, 1);
	pthread_join(sig, NULL);
	for (i = 0; i < STANDIN_FAULT_COUNT; i++)
		f[i] = standin_faults((enum standin_fault)i);
	e2e_check(f[STANDIN_FAULT_MALLOC] > 0 && f[STANDIN_FAULT_FREE] > 0 &&
		  f[STANDIN_FAULT_EVENT_RECORD] > 0 && f[STANDIN_FAULT_EVENT_QUERY] > 0 &&
		  f[STANDIN_FAULT_GETDEVICE] > 0,
		  "faults injected: %llu cudaMalloc, %llu cudaFree, %llu cudaEventRecord, %llu "
		  "cudaEventQuery, %llu cudaGetDevice",
		  (unsigned long long)f[0], (unsigned long long)f[1], (unsigned long long)f[2],
		  (unsigned long long)f[3], (unsigned long long)f[4]);
	e2e_note("%d threads of random work, %lu signals, %.1f s: no owner pattern broken; the "
		 "program saw %lu out-of-memory and %lu runtime errors, only errors the runtime gave "
		 "(each checked as it came)", LOAD_THREADS, sent, (double)(e2e_now_ms() - t0) / 1000.0,
		 atomic_load(&load_errors[0]), atomic_load(&load_errors[1]));
	check_clean("load");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 && strcmp(argv[1], "--mode") == 0 ? argv[2] : "malloc";
	char name[64];

	snprintf(name, sizeof(name), "e2e_faults_%s", mode);
	e2e_start(name);
	release_fn = e2e_shim_release();
	if (strcmp(mode, "malloc") == 0)
		mode_malloc();
	else if (strcmp(mode, "free") == 0)
		mode_free();
	else if (strcmp(mode, "events") == 0)
		mode_events();
	else if (strcmp(mode, "getdevice") == 0)
		mode_getdevice();
	else if (strcmp(mode, "unloading") == 0)
		mode_unloading();
	else if (strcmp(mode, "load") == 0)
		mode_load();
	else
		e2e_fail("unknown mode %s", mode);
	printf("PASS %s\n", name);
	return 0;
}
