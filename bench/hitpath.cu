/* hitpath.cu — cost of one cudaMalloc + cudaFree pair on a warm cache, per size.
 * Sizes 512 B - 1 GiB. Run twice: without LD_PRELOAD it measures the native runtime ("native")
 * and cudaMallocAsync + cudaFreeAsync from a warm stream-ordered pool ("async"); with
 * LD_PRELOAD=libgpupool.so it measures the pool's hit path, first with no stream created
 * ("gpupool": immediate reuse), then after a stream exists ("gpupool-fenced": each reuse polls an
 * event fence). Built with the shared runtime, the preloaded run also measures the runtime's own
 * cudaMalloc reaching gpupool's driver entry point ("gpupool-via-runtime": the way every runtime
 * would come in without the exported cudaMalloc); built with the static runtime (hitpath_static,
 * -DHITPATH_STATIC) every contender is the driver door's and is named "static-...". Both builds
 * also measure cuMemAlloc_v2 + cuMemFree_v2 called directly, found as a driver-API program
 * (CuPy, numba, cuda-python) finds them ("gpupool-driver": the driver door alone, without a
 * runtime's own code in front of it), and glibc's malloc + free of the same sizes in the same
 * process ("glibc", for scale).
 * Usage: hitpath [SAMPLES [LARGEST_BYTES]] (50 samples, every size up to 1 GiB).
 * Each sample times a batch of pairs with CLOCK_MONOTONIC; per-pair ns = batch time / pairs.
 * Output: one "BENCH contender=... size=... median_ns=... p99_ns=..." line per (contender,size)
 * and a markdown table; bench/hitpath_table.awk merges the two runs into one table. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SAMPLES 1000

static const size_t sizes[] = { 512, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20,
				 (size_t)1 << 30 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

enum contender { NATIVE, ASYNC, POOL, POOL_VIA_RUNTIME, POOL_DRIVER, POOL_FENCED, GLIBC,
		 NCONTENDERS };
#ifdef HITPATH_STATIC
static const char *const names[NCONTENDERS] = { "static-native", "static-async", "static-gpupool",
						"-", "static-gpupool-driver",
						"static-gpupool-fenced", "static-glibc" };
#else
static const char *const names[NCONTENDERS] = { "native", "async", "gpupool",
						"gpupool-via-runtime", "gpupool-driver",
						"gpupool-fenced", "glibc" };
#endif

/* The runtime's own cudaMalloc/cudaFree, past the exported ones (gpupool-via-runtime). */
static cudaError_t (*rt_malloc)(void **, size_t);
static cudaError_t (*rt_free)(void *);
/* The driver's cuMemAlloc_v2/cuMemFree_v2 as the runtime's lookup hands them out (gpupool-driver). */
static CUresult (*drv_alloc)(CUdeviceptr *, size_t);
static CUresult (*drv_free)(CUdeviceptr);

struct result {
	int done;
	double median_ns, p99_ns;
	int pairs, errors;
};

static struct result results[NCONTENDERS][NSIZES];
static int samples = 50;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Where glibc's blocks go, so that the compiler keeps each malloc+free pair. */
static void *volatile glibc_sink;

/* One batch of `pairs` pairs; returns the number of failed calls. */
static int batch(enum contender c, size_t size, int pairs)
{
	int errors = 0;
	void *p = NULL;

	for (int i = 0; i < pairs; i++) {
		if (c == ASYNC) {
			errors += cudaMallocAsync(&p, size, 0) != cudaSuccess;
			errors += cudaFreeAsync(p, 0) != cudaSuccess;
		} else if (c == POOL_VIA_RUNTIME) {
			errors += rt_malloc(&p, size) != cudaSuccess;
			errors += rt_free(p) != cudaSuccess;
		} else if (c == GLIBC) {
			void *h = malloc(size); /* not touched: a pair, as cudaMalloc's */
			errors += h == NULL;
			glibc_sink = h;
			free(h);
		} else if (c == POOL_DRIVER) {
			CUdeviceptr d = 0;
			errors += drv_alloc(&d, size) != CUDA_SUCCESS;
			errors += drv_free(d) != CUDA_SUCCESS;
		} else {
			errors += cudaMalloc(&p, size) != cudaSuccess;
			errors += cudaFree(p) != cudaSuccess;
		}
	}
	return errors;
}

static void measure(enum contender c, size_t si, int pairs)
{
	double v[MAX_SAMPLES];
	struct result *r = &results[c][si];
	int errors;

	errors = batch(c, sizes[si], 10); /* warm: the block (or pool memory) exists */
	cudaDeviceSynchronize();
	for (int s = 0; s < samples; s++) {
		uint64_t t0 = now_ns();
		errors += batch(c, sizes[si], pairs);
		v[s] = (double)(now_ns() - t0) / pairs;
		if (c == ASYNC)
			cudaStreamSynchronize(0); /* outside the timed batch */
	}
	qsort(v, (size_t)samples, sizeof(v[0]), cmp_double);
	r->done = 1;
	r->pairs = pairs;
	r->errors = errors;
	r->median_ns = samples % 2 ? v[samples / 2] : (v[samples / 2 - 1] + v[samples / 2]) / 2;
	r->p99_ns = v[(samples * 99 + 99) / 100 - 1];
	printf("BENCH contender=%s size=%zu pairs=%d samples=%d median_ns=%.1f p99_ns=%.1f "
	       "errors=%d\n", names[c], sizes[si], pairs, samples, r->median_ns, r->p99_ns, errors);
	fflush(stdout);
	cudaGetLastError();
}

/* The largest size measured (argv[2]; all of them by default). */
static size_t max_bytes = SIZE_MAX;

static void run(enum contender c, int pairs)
{
	for (size_t i = 0; i < NSIZES && sizes[i] <= max_bytes; i++)
		measure(c, i, pairs);
}

static const char *size_name(size_t s, char *buf, size_t n)
{
	if (s >= (1u << 20))
		snprintf(buf, n, "%zu MiB", s >> 20);
	else if (s >= 1024)
		snprintf(buf, n, "%zu KiB", s >> 10);
	else
		snprintf(buf, n, "%zu B", s);
	return buf;
}

static void table(void)
{
	char buf[32];

	printf("\n| size |");
	for (int c = 0; c < NCONTENDERS; c++)
		if (results[c][0].done)
			printf(" %s median ns (p99) |", names[c]);
	printf("\n|---|");
	for (int c = 0; c < NCONTENDERS; c++)
		if (results[c][0].done)
			printf("---|");
	printf("\n");
	for (size_t i = 0; i < NSIZES && sizes[i] <= max_bytes; i++) {
		printf("| %s |", size_name(sizes[i], buf, sizeof(buf)));
		for (int c = 0; c < NCONTENDERS; c++)
			if (results[c][i].done)
				printf(" %.0f (%.0f) |", results[c][i].median_ns, results[c][i].p99_ns);
		printf("\n");
	}
}

/* cuMemAlloc_v2 and cuMemFree_v2 (CUDA 3.2's), as a driver-API program finds them. */
static int find_driver_pair(void)
{
	enum cudaDriverEntryPointQueryResult q1 = cudaDriverEntryPointSymbolNotFound, q2 = q1;
	void *a = NULL, *f = NULL;

	if (cudaGetDriverEntryPointByVersion("cuMemAlloc", &a, 3020, cudaEnableDefault, &q1) != cudaSuccess ||
	    cudaGetDriverEntryPointByVersion("cuMemFree", &f, 3020, cudaEnableDefault, &q2) != cudaSuccess ||
	    q1 != cudaDriverEntryPointSuccess || q2 != cudaDriverEntryPointSuccess || a == NULL || f == NULL) {
		cudaGetLastError();
		return -1;
	}
	memcpy(&drv_alloc, &a, sizeof(a));
	memcpy(&drv_free, &f, sizeof(f));
	return 0;
}

/* Keep memory freed by cudaFreeAsync in the stream-ordered pool across synchronizations. */
static int warm_async_pool(void)
{
	cudaMemPool_t pool;
	uint64_t keep = UINT64_MAX;
	int dev = 0;

	if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
	    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int pool_pairs = 1000, native_pairs = 20;
	int shim = dlsym(RTLD_DEFAULT, "gpupool_release") != NULL;
	cudaStream_t s;

	if (argc > 1)
		samples = atoi(argv[1]);
	if (argc > 2)
		max_bytes = strtoull(argv[2], NULL, 0);
	if (samples < 1 || samples > MAX_SAMPLES)
		samples = 50;
	if (cudaDeviceSynchronize() != cudaSuccess) { /* creates the context */
		fprintf(stderr, "hitpath: no CUDA context\n");
		return 1;
	}
	printf("# hitpath: %s, %d samples per size\n",
	       shim ? "libgpupool.so preloaded" : "native runtime", samples);
	if (shim) {
		void *h = dlopen("libcudart.so.13", RTLD_LAZY | RTLD_NOLOAD);
		run(POOL, pool_pairs);
		if (h != NULL) {
			void *m = dlsym(h, "cudaMalloc"), *f = dlsym(h, "cudaFree");
			memcpy(&rt_malloc, &m, sizeof(m));
			memcpy(&rt_free, &f, sizeof(f));
			if (rt_malloc != NULL && rt_free != NULL)
				run(POOL_VIA_RUNTIME, pool_pairs);
		}
		if (find_driver_pair() == 0)
			run(POOL_DRIVER, pool_pairs);
		else
			printf("# gpupool-driver: cuMemAlloc_v2/cuMemFree_v2 not found; skipped\n");
		/* glibc's malloc+free of the same sizes, in this process, for scale. */
		run(GLIBC, pool_pairs);
		/* A created stream turns immediate reuse off for good: measure the fenced path. */
		if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess) {
			run(POOL_FENCED, pool_pairs);
			cudaStreamDestroy(s);
		}
	} else {
		run(NATIVE, native_pairs);
		if (warm_async_pool() == 0)
			run(ASYNC, pool_pairs);
		else
			printf("# async: cannot set the default pool's release threshold; skipped\n");
	}
	table();
	return 0;
}
