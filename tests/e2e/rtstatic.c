/* rtstatic.c — a program with the runtime linked in, as nvcc builds one by default (the stand-in's
 * static flavour, libcudart_standin_static.a, whose cudaMalloc and cudaFree begin as the real
 * static runtime's do). Proves the static runtime door (shim/door/static.c):
 *   --door (preloaded): after a thread's first call, a cudaMalloc+cudaFree pair never enters the
 *     runtime's own functions, and the pairs are the pool's (one real allocation); a second
 *     thread's first call enters it once; cudaFree(NULL), a size of 0, a pointer the pool does not
 *     own and an allocation the device cannot hold (its error the runtime's last error too) go
 *     to the runtime's own, with its answers; a double free is cudaErrorInvalidValue and does
 *     not enter the runtime's cudaFree (whose trip to the driver door would count it again).
 *   --no-door (preloaded, GPUPOOL_STATIC_RUNTIME=0): every call enters the runtime's own
 *     functions, and the pairs are still the pool's (through the driver door).
 *   --native (no shim): every call enters them, every pair reaches the driver.
 *   --late LIB (no shim at the start): once a thread has run, libgpupool.so loaded with dlopen
 *     leaves the runtime's code as it was (another thread could be in it), and the pairs still
 *     enter the runtime's own functions.
 *   --too-old (preloaded, STANDIN_DRIVER_TOO_OLD=1): the runtime unloads the driver it found too
 *     old; every call is its own, answered cudaErrorInsufficientDriver, and gpupool never calls
 *     the driver that is gone.
 * Under the shim the door is also seen in the code: cudaMalloc and cudaFree begin with its jump
 * (jmp *0(%rip)), and nowhere else do.
 * Usage: e2e_rtstatic --door | --no-door | --native | --late LIB | --too-old */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "e2e.h"

#define PAIRS 200
#define SIZE (E2E_MIB)

enum mode { DOOR, NO_DOOR, NATIVE, LATE };

static void *second_thread(void *arg);
static void pairs(int n, uint64_t seed);
static unsigned long runtime_mallocs(void);
static unsigned long runtime_frees(void);

static const unsigned char jump[] = { 0xff, 0x25, 0, 0, 0, 0 };

/* The first bytes of the runtime's cudaMalloc and cudaFree, as they are now. */
static void entry_bytes(unsigned char *m, unsigned char *f, size_t n)
{
	cudaError_t (*mf)(void **, size_t) = cudaMalloc;
	cudaError_t (*ff)(void *) = cudaFree;
	const unsigned char *mp, *fp;

	memcpy(&mp, &mf, sizeof(mp));
	memcpy(&fp, &ff, sizeof(fp));
	memcpy(m, mp, n);
	memcpy(f, fp, n);
}

static int begins_with_jump(void)
{
	unsigned char m[sizeof(jump)], f[sizeof(jump)];

	entry_bytes(m, f, sizeof(jump));
	return memcmp(m, jump, sizeof(jump)) == 0 && memcmp(f, jump, sizeof(jump)) == 0;
}

/* The runtime cannot start: each call is its own, with its answer, on every thread. */
static void too_old(void)
{
	void *p = NULL;
	cudaError_t rc[4];

	for (int i = 0; i < 4; i++)
		rc[i] = i % 2 ? cudaFree(p) : cudaMalloc(&p, SIZE);
	e2e_check(rc[0] == cudaErrorInsufficientDriver && rc[1] == cudaErrorInsufficientDriver &&
			  rc[2] == cudaErrorInsufficientDriver && rc[3] == cudaErrorInsufficientDriver &&
			  runtime_mallocs() == 2 && runtime_frees() == 2,
		  "a runtime that unloaded a driver too old answers every call itself (%s), "
		  "gpupool calling nothing of the driver gone", cudaGetErrorName(rc[2]));
}

/* Not preloaded: a thread runs first, then gpupool is loaded into the process. */
static void late(const char *lib)
{
	unsigned char m0[16], f0[16], m1[16], f1[16];
	unsigned long before;
	pthread_t t;

	if (pthread_create(&t, NULL, second_thread, NULL) != 0)
		e2e_fail("pthread_create");
	pthread_join(t, NULL);
	entry_bytes(m0, f0, sizeof(m0));
	if (dlopen(lib, RTLD_NOW | RTLD_GLOBAL) == NULL)
		e2e_fail("dlopen(%s): %s", lib, dlerror());
	entry_bytes(m1, f1, sizeof(m1));
	e2e_check(memcmp(m0, m1, sizeof(m0)) == 0 && memcmp(f0, f1, sizeof(f0)) == 0,
		  "gpupool loaded after a thread ran leaves cudaMalloc and cudaFree as they were");
	before = runtime_mallocs();
	pairs(10, 7);
	e2e_check(runtime_mallocs() - before == 10,
		  "and 10 pairs still enter the runtime's cudaMalloc (%lu)", runtime_mallocs() - before);
}

static unsigned long runtime_mallocs(void)
{
	unsigned long m, f;

	standin_static_calls(&m, &f);
	return m;
}

static unsigned long runtime_frees(void)
{
	unsigned long m, f;

	standin_static_calls(&m, &f);
	return f;
}

static void pairs(int n, uint64_t seed)
{
	void *p = NULL;

	for (int i = 0; i < n; i++) {
		e2e_cuda(cudaMalloc(&p, SIZE), "cudaMalloc");
		e2e_fill(p, SIZE, seed + (uint64_t)i);
		if (!e2e_verify(p, SIZE, seed + (uint64_t)i))
			e2e_fail("a block did not keep its data");
		e2e_cuda(cudaFree(p), "cudaFree");
	}
}

static void *second_thread(void *arg)
{
	(void)arg;
	pairs(PAIRS, 1000);
	return NULL;
}

/* What the door sends to the runtime's own functions, with their answers. */
static void runtime_answers(void)
{
	unsigned long m = runtime_mallocs(), f = runtime_frees();
	struct standin_counters c;
	void *p = (void *)1, *async = NULL;
	cudaError_t rc;

	rc = cudaFree(NULL);
	e2e_check(rc == cudaSuccess && runtime_frees() == f + 1,
		  "cudaFree(NULL) is the runtime's own (%s)", cudaGetErrorName(rc));
	rc = cudaMalloc(&p, 0);
	e2e_check(rc == cudaSuccess && p == NULL && runtime_mallocs() == m + 1,
		  "cudaMalloc of 0 bytes is the runtime's own: NULL (%s)", cudaGetErrorName(rc));

	e2e_cuda(cudaMalloc(&p, SIZE), "cudaMalloc");
	e2e_cuda(cudaFree(p), "cudaFree");
	rc = cudaFree(p);
	e2e_check(rc == cudaErrorInvalidValue && runtime_frees() == f + 1,
		  "a double free is cudaErrorInvalidValue, the runtime's own free not entered (%s)",
		  cudaGetErrorName(rc));

	e2e_cuda(cudaMallocAsync(&async, 4 * E2E_MIB, 0), "cudaMallocAsync");
	c = e2e_counters();
	rc = cudaFree(async);
	e2e_check(rc == cudaSuccess && e2e_counters().frees == c.frees + 1 &&
			  runtime_frees() == f + 2,
		  "a pointer the pool does not own is freed by the runtime's own cudaFree (%s)",
		  cudaGetErrorName(rc));

	c = e2e_counters();
	rc = cudaMalloc(&p, (size_t)8 << 30);
	e2e_check(rc == cudaErrorMemoryAllocation &&
			  cudaGetLastError() == cudaErrorMemoryAllocation &&
			  runtime_mallocs() == m + 2 && e2e_counters().mallocs == c.mallocs,
		  "8 GiB on a 1 GiB device: cudaErrorMemoryAllocation, also the runtime's last error, "
		  "after the runtime's own try (%s)", cudaGetErrorName(rc));
}

int main(int argc, char **argv)
{
	enum mode mode = DOOR;
	unsigned long m, f, expect_m, expect_f;
	struct standin_counters c;
	pthread_t t;

	e2e_start("e2e_rtstatic");
	if (argc > 1 && strcmp(argv[1], "--no-door") == 0)
		mode = NO_DOOR;
	else if (argc > 1 && strcmp(argv[1], "--native") == 0)
		mode = NATIVE;
	else if (argc > 2 && strcmp(argv[1], "--late") == 0)
		mode = LATE;
	else if (argc > 1 && strcmp(argv[1], "--door") != 0 && strcmp(argv[1], "--too-old") != 0)
		e2e_fail("usage: e2e_rtstatic --door | --no-door | --native | --late LIB | --too-old");
	if (mode == LATE) {
		late(argv[2]);
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "--too-old") == 0) {
		too_old();
		return 0;
	}
	e2e_check(begins_with_jump() == (mode == DOOR),
		  "the runtime's cudaMalloc and cudaFree begin with gpupool's jump: %s",
		  begins_with_jump() ? "yes" : "no");

	pairs(PAIRS, 1);
	m = runtime_mallocs();
	f = runtime_frees();
	c = e2e_counters();
	expect_m = mode == DOOR ? 1 : PAIRS;
	expect_f = mode == DOOR ? 0 : PAIRS;
	e2e_check(m == expect_m && f == expect_f,
		  "%d pairs on one thread entered the runtime's cudaMalloc %lu times, its cudaFree "
		  "%lu (expected %lu, %lu)", PAIRS, m, f, expect_m, expect_f);
	e2e_check(c.mallocs == (mode == NATIVE ? PAIRS : 1),
		  "and reached the driver's cuMemAlloc %llu times", (unsigned long long)c.mallocs);

	if (pthread_create(&t, NULL, second_thread, NULL) != 0)
		e2e_fail("pthread_create");
	pthread_join(t, NULL);
	e2e_check(runtime_mallocs() - m == (mode == DOOR ? 1 : PAIRS),
		  "a second thread's %d pairs entered the runtime's cudaMalloc %lu times", PAIRS,
		  runtime_mallocs() - m);
	if (mode == DOOR)
		runtime_answers();
	return 0;
}
