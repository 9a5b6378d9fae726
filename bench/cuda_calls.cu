/* cuda_calls.cu — what each CUDA call the pool makes on its fenced path costs, GPU idle, one
 * thread: the runtime calls of shim/fence.c (the idle check gp_fence_quiet, a fence's record and
 * query) one by one and as the sequences the shim makes, and the driver API's equivalents found
 * in the libcuda the runtime loaded. Run plain (no LD_PRELOAD): it measures the runtime, not us.
 * Output: one "CALL name=... median_ns=... p99_ns=..." line per call and a markdown table.
 *     cuda_calls [samples]        (default 31 samples of 2000 calls each) */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CALLS 2000
#define MAX_SAMPLES 201

typedef int (*cu_stream_query_t)(cudaStream_t);
typedef int (*cu_ctx_get_current_t)(void **);
typedef int (*cu_ctx_get_device_t)(int *);
typedef int (*cu_event_query_t)(cudaEvent_t);
typedef int (*cu_event_record_t)(cudaEvent_t, cudaStream_t);

static cudaStream_t stream;
static cudaEvent_t done_event, rec_event;
static cu_stream_query_t cu_stream_query;
static cu_ctx_get_current_t cu_ctx_get_current;
static cu_ctx_get_device_t cu_ctx_get_device;
static cu_event_query_t cu_event_query;
static cu_event_record_t cu_event_record;
static volatile int sink;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The calls: each returns nonzero when the call did not answer what an idle GPU answers. */
static int c_get_device(void)
{
	int d = -1;
	return cudaGetDevice(&d) != cudaSuccess || d < 0;
}
static int c_peek(void) { return cudaPeekAtLastError() != cudaSuccess; }
static int c_get_last(void) { return cudaGetLastError() != cudaSuccess; }
static int c_set_device_same(void) { return cudaSetDevice(0) != cudaSuccess; }
static int c_query_legacy(void) { return cudaStreamQuery(cudaStreamLegacy) != cudaSuccess; }
static int c_query_stream(void) { return cudaStreamQuery(stream) != cudaSuccess; }
static int c_event_query(void) { return cudaEventQuery(done_event) != cudaSuccess; }
static int c_event_record_legacy(void)
{
	return cudaEventRecord(rec_event, cudaStreamLegacy) != cudaSuccess;
}
static int c_event_record_stream(void) { return cudaEventRecord(rec_event, stream) != cudaSuccess; }
/* gp_fence_quiet with one device and one non-blocking stream, the GPU idle */
static int c_quiet_sequence(void)
{
	int d = -1;
	if (cudaPeekAtLastError() != cudaSuccess || cudaGetDevice(&d) != cudaSuccess)
		return 1;
	return cudaStreamQuery(cudaStreamLegacy) != cudaSuccess ||
	       cudaStreamQuery(stream) != cudaSuccess;
}
/* gp_fence_record then gp_fence_query on the same setup: two records, two queries */
static int c_fence_sequence(void)
{
	int d = -1;
	if (cudaPeekAtLastError() != cudaSuccess || cudaGetDevice(&d) != cudaSuccess)
		return 1;
	if (cudaEventRecord(rec_event, cudaStreamLegacy) != cudaSuccess ||
	    cudaEventRecord(done_event, stream) != cudaSuccess)
		return 1;
	if (cudaPeekAtLastError() != cudaSuccess)
		return 1;
	return cudaEventQuery(rec_event) != cudaSuccess || cudaEventQuery(done_event) != cudaSuccess;
}
static int c_cu_ctx_get_current(void)
{
	void *ctx = NULL;
	return cu_ctx_get_current(&ctx) != 0 || ctx == NULL;
}
/* CU_STREAM_LEGACY is ((CUstream)0x1), the same value as cudaStreamLegacy */
static int c_cu_query_legacy(void) { return cu_stream_query(cudaStreamLegacy) != 0; }
static int c_cu_query_stream(void) { return cu_stream_query(stream) != 0; }
static int c_cu_event_query(void) { return cu_event_query(done_event) != 0; }
static int c_cu_event_record_legacy(void) { return cu_event_record(rec_event, cudaStreamLegacy) != 0; }
static int c_cu_event_record_stream(void) { return cu_event_record(rec_event, stream) != 0; }
static int c_cu_quiet_sequence(void)
{
	void *ctx = NULL;
	if (cu_ctx_get_current(&ctx) != 0 || ctx == NULL)
		return 1;
	return cu_stream_query(cudaStreamLegacy) != 0 || cu_stream_query(stream) != 0;
}
static int c_cu_ctx_get_device(void)
{
	int d = -1;
	return cu_ctx_get_device(&d) != 0 || d < 0;
}
/* gp_fence_record then gp_fence_query through the driver (shim/fence.c) */
static int c_cu_fence_sequence(void)
{
	void *ctx = NULL;
	int d = -1;
	if (cu_ctx_get_current(&ctx) != 0 || ctx == NULL || cu_ctx_get_device(&d) != 0)
		return 1;
	if (cu_event_record(rec_event, cudaStreamLegacy) != 0 ||
	    cu_event_record(done_event, stream) != 0)
		return 1;
	if (cu_ctx_get_current(&ctx) != 0 || ctx == NULL || cu_ctx_get_device(&d) != 0)
		return 1;
	return cu_event_query(rec_event) != 0 || cu_event_query(done_event) != 0;
}
static int c_clock(void)
{
	sink = (int)now_ns();
	return 0;
}

struct call {
	const char *name;
	int (*fn)(void);
	int driver; /* needs the driver API's symbols */
};

static const struct call calls[] = {
	{ "clock_gettime (reference)", c_clock, 0 },
	{ "cudaGetDevice", c_get_device, 0 },
	{ "cudaPeekAtLastError", c_peek, 0 },
	{ "cudaGetLastError", c_get_last, 0 },
	{ "cudaSetDevice (current one)", c_set_device_same, 0 },
	{ "cudaStreamQuery(legacy)", c_query_legacy, 0 },
	{ "cudaStreamQuery(non-blocking stream)", c_query_stream, 0 },
	{ "cudaEventQuery (complete)", c_event_query, 0 },
	{ "cudaEventRecord(legacy)", c_event_record_legacy, 0 },
	{ "cudaEventRecord(stream)", c_event_record_stream, 0 },
	{ "quiet: Peek+GetDevice+2 StreamQuery", c_quiet_sequence, 0 },
	{ "fence: Peek+GetDevice+2 Record+Peek+2 EventQuery", c_fence_sequence, 0 },
	{ "cuCtxGetCurrent", c_cu_ctx_get_current, 1 },
	{ "cuCtxGetDevice", c_cu_ctx_get_device, 1 },
	{ "cuStreamQuery(legacy)", c_cu_query_legacy, 1 },
	{ "cuStreamQuery(non-blocking stream)", c_cu_query_stream, 1 },
	{ "cuEventQuery (complete)", c_cu_event_query, 1 },
	{ "cuEventRecord(legacy)", c_cu_event_record_legacy, 1 },
	{ "cuEventRecord(stream)", c_cu_event_record_stream, 1 },
	{ "cu quiet: cuCtxGetCurrent+2 cuStreamQuery", c_cu_quiet_sequence, 1 },
	{ "cu fence: 2x(cuCtxGetCurrent+cuCtxGetDevice)+2 cuEventRecord+2 cuEventQuery",
	  c_cu_fence_sequence, 1 },
};
#define NCALLS (sizeof(calls) / sizeof(calls[0]))

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	static double ns[NCALLS][MAX_SAMPLES], med[NCALLS], p99[NCALLS];
	int samples = argc > 1 ? atoi(argv[1]) : 31, bad[NCALLS] = { 0 };
	void *cuda;
	int driver;

	if (samples < 1 || samples > MAX_SAMPLES)
		samples = 31;
	if (cudaDeviceSynchronize() != cudaSuccess ||
	    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaEventCreateWithFlags(&done_event, cudaEventDisableTiming) != cudaSuccess ||
	    cudaEventCreateWithFlags(&rec_event, cudaEventDisableTiming) != cudaSuccess ||
	    cudaEventRecord(done_event, stream) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess) {
		fprintf(stderr, "cuda_calls: no CUDA context, stream or event\n");
		return 1;
	}
	cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (cuda != NULL) {
		cu_stream_query = (cu_stream_query_t)dlsym(cuda, "cuStreamQuery");
		cu_ctx_get_current = (cu_ctx_get_current_t)dlsym(cuda, "cuCtxGetCurrent");
		cu_ctx_get_device = (cu_ctx_get_device_t)dlsym(cuda, "cuCtxGetDevice");
		cu_event_query = (cu_event_query_t)dlsym(cuda, "cuEventQuery");
		cu_event_record = (cu_event_record_t)dlsym(cuda, "cuEventRecord");
	}
	if (cu_stream_query == NULL || cu_ctx_get_current == NULL || cu_ctx_get_device == NULL ||
	    cu_event_query == NULL || cu_event_record == NULL)
		printf("# the driver API's symbols were not found: cu* rows skipped\n");
	driver = cu_stream_query != NULL && cu_ctx_get_current != NULL && cu_ctx_get_device != NULL &&
		 cu_event_query != NULL && cu_event_record != NULL;

	/* Samples interleave the calls, so a slow phase of the machine hits all of them alike. */
	for (int s = 0; s < samples; s++) {
		for (unsigned c = 0; c < NCALLS; c++) {
			uint64_t t0;
			if (calls[c].driver && !driver)
				continue;
			t0 = now_ns();
			for (int i = 0; i < CALLS; i++) {
				if (calls[c].fn()) {
					bad[c]++;
					cudaGetLastError(); /* cudaErrorNotReady */
				}
			}
			ns[c][s] = (double)(now_ns() - t0) / CALLS;
			cudaStreamSynchronize(stream); /* the records of the last batch */
		}
	}
	printf("| call (GPU idle, one thread) | median ns | p99 ns |\n|---|---|---|\n");
	for (unsigned c = 0; c < NCALLS; c++) {
		if (calls[c].driver && !driver)
			continue;
		qsort(ns[c], (size_t)samples, sizeof(double), cmp_double);
		med[c] = ns[c][samples / 2];
		p99[c] = ns[c][samples - 1 - samples / 100];
		printf("| %s | %.0f | %.0f |\n", calls[c].name, med[c], p99[c]);
	}
	for (unsigned c = 0; c < NCALLS; c++) {
		if (calls[c].driver && !driver)
			continue;
		printf("CALL name=\"%s\" median_ns=%.1f p99_ns=%.1f unexpected=%d\n", calls[c].name,
		       med[c], p99[c], bad[c]);
	}
	printf("# %d samples of %d calls each; per-call ns = batch time / calls; p99 = the slowest "
	       "but 1%%\n",
	       samples, CALLS);
	return 0;
}
