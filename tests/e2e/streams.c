/* streams.c — proves reuse is as safe as native cudaFree (run with STANDIN_MANUAL_EVENTS=1, so
 * the stand-in's events complete only when told). --stream: once the program has created a
 * stream, a freed block is not handed out again while the runtime's events are incomplete (a
 * second request of that size gets a new real allocation); after standin_complete_events() the
 * next request of that size is served from the cache. --nostream: with no stream created all
 * work is in one stream order, and a freed block comes straight back (same pointer, 1 malloc).
 * --blocking: with blocking streams busy and no work on the legacy stream, a fence records one
 * event per stream and none on the legacy stream (an event there would join the blocking
 * streams: shim/fence.h); one more per non-blocking stream; one on the legacy stream once work
 * was queued there since the last.
 * --quiet (without STANDIN_MANUAL_EVENTS): while every stream is idle (cudaStreamQuery) a freed
 * block is reused with no event recorded; once the "GPU" is busy (manual events: the stand-in's
 * streams are never idle) a fence is recorded and the block waits for it. The shim asks the
 * driver API (cuStreamQuery, cuEventRecord, cuEventQuery) when this thread has a context current,
 * else the runtime, whose calls reach the same driver functions: the stand-in counts what reached
 * the driver, so the counters do not tell the two paths apart; a new thread's context and the
 * fences recorded while the program has an error pending still do. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define BYTES (4 * E2E_MIB)

static uint64_t records_before;

static int fence_recorded(void *arg)
{
	(void)arg;
	return e2e_counters().event_records > records_before;
}

static void run_nostream(void)
{
	struct standin_counters c;
	void *p = NULL, *q = NULL;

	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	e2e_fill(p, BYTES, 1);
	e2e_cuda(cudaFree(p), "cudaFree");
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc again");
	c = e2e_counters();
	e2e_check(q == p && c.mallocs == 1,
		  "no stream created, events incomplete: a freed block comes straight back (same pointer: %s, "
		  "real cudaMalloc: %llu)", q == p ? "yes" : "no", (unsigned long long)c.mallocs);
	e2e_cuda(cudaFree(q), "cudaFree");
	printf("PASS e2e_nostream\n");
}

static void run_stream(void)
{
	struct standin_counters c;
	cudaStream_t s = NULL;
	void *p = NULL, *q = NULL, *r = NULL;

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc(p)");
	e2e_fill(p, BYTES, 1);
	records_before = e2e_counters().event_records;
	e2e_cuda(cudaFree(p), "cudaFree(p)");
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc(q) while events are incomplete");
	c = e2e_counters();
	e2e_check(q != p && c.mallocs == 2,
		  "a stream exists and the runtime's events are incomplete: the freed block is not handed out "
		  "again (q %s p, real cudaMalloc: %llu, want 2)", q == p ? "==" : "!=",
		  (unsigned long long)c.mallocs);
	e2e_fill(q, BYTES, 2);
	e2e_cuda(cudaFree(q), "cudaFree(q)");
	/* Give a shim that records its fences from another thread the chance to do so. */
	if (!e2e_poll(fence_recorded, NULL, 1000))
		e2e_note("no event was recorded within 1 s of the frees");
	c = e2e_counters();
	e2e_note("events recorded since the first free: %llu, queried in all: %llu",
		 (unsigned long long)(c.event_records - records_before),
		 (unsigned long long)c.event_queries);
	standin_complete_events();
	e2e_cuda(cudaMalloc(&r, BYTES), "cudaMalloc(r) after the events completed");
	c = e2e_counters();
	e2e_check(c.mallocs == 2 && (r == p || r == q),
		  "after the events completed the next request of that size is served from the cache "
		  "(real cudaMalloc: %llu, want 2)", (unsigned long long)c.mallocs);
	e2e_cuda(cudaFree(r), "cudaFree(r)");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	e2e_check(e2e_counters().frees == 0, "no real cudaFree was needed");
	printf("PASS e2e_streams\n");
}

/* Free a 4 MiB block and ask for one again while the events are incomplete: the miss records a
 * fence (the freed block cannot be reused yet). Returns the events that fence recorded. */
static uint64_t events_per_fence(void **p)
{
	uint64_t before;
	void *q = NULL;

	e2e_cuda(cudaFree(*p), "cudaFree");
	before = e2e_counters().event_records;
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc while the events are incomplete");
	e2e_check(q != *p, "the freed block is not handed out again before its fence completes");
	*p = q;
	return e2e_counters().event_records - before;
}

static void run_blocking(void)
{
	cudaStream_t b1 = NULL, b2 = NULL, nb = NULL;
	uint64_t n;
	void *p = NULL;

	e2e_cuda(cudaStreamCreate(&b1), "cudaStreamCreate");
	e2e_cuda(cudaStreamCreateWithPriority(&b2, cudaStreamDefault, 0), "cudaStreamCreateWithPriority");
	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	n = events_per_fence(&p);
	e2e_check(n == 2, "two busy blocking streams, nothing on the legacy stream: a fence records "
		  "%llu event(s) (want 2: one per stream, none joining them on the legacy stream)",
		  (unsigned long long)n);
	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	n = events_per_fence(&p);
	e2e_check(n == 3, "and a non-blocking stream: %llu event(s) (want 3)", (unsigned long long)n);
	e2e_cuda(cudaMemset(p, 0, 256), "cudaMemset on the legacy stream");
	n = events_per_fence(&p);
	e2e_check(n == 4, "after work on the legacy stream: %llu event(s) (want 4: its own too)",
		  (unsigned long long)n);
	n = events_per_fence(&p);
	e2e_check(n == 3, "and none there again until more work is queued there: %llu (want 3)",
		  (unsigned long long)n);
	standin_complete_events();
	e2e_cuda(cudaFree(p), "cudaFree");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(b2), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(b1), "cudaStreamDestroy");
	printf("PASS e2e_streams_blocking\n");
}

/* This thread's current context, through the driver the runtime loaded (cuGetProcAddress, as
 * any library would find it); -1 when it cannot be asked. */
static int context_current(void)
{
	CUresult (*get_proc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
	CUresult (*ctx_get_current)(CUcontext *);
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD), *sym, *fn = NULL;
	CUcontext ctx = NULL;

	if (h == NULL)
		return -1;
	sym = dlsym(h, "cuGetProcAddress_v2");
	dlclose(h); /* NOLOAD took a reference; the runtime keeps the driver loaded */
	if (sym == NULL)
		return -1;
	memcpy(&get_proc, &sym, sizeof(sym));
	if (get_proc("cuCtxGetCurrent", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, NULL) != CUDA_SUCCESS)
		return -1;
	memcpy(&ctx_get_current, &fn, sizeof(fn));
	if (ctx_get_current(&ctx) != CUDA_SUCCESS)
		return -1;
	return ctx != NULL;
}

/* A thread whose first CUDA calls are a pooled cudaFree and cudaMalloc: it has no context current
 * yet (the runtime did no work for it), so the shim's first idle check cannot use the driver and
 * asks the runtime (cudaStreamQuery), which makes the context current; the next one may ask the
 * driver directly. Both reach the driver's cuStreamQuery, which is what the counters count. */
static void *fresh_thread(void *arg)
{
	void **p = arg;
	struct standin_counters c0 = e2e_counters(), c1, c2;

	e2e_check(context_current() == 0, "a new thread has no context current");
	e2e_cuda(cudaFree(*p), "cudaFree (new thread)");
	e2e_cuda(cudaMalloc(p, BYTES), "cudaMalloc (new thread)");
	c1 = e2e_counters();
	e2e_check(c1.stream_queries - c0.stream_queries >= 2 && context_current() == 1,
		  "its first pooled pair asked whether the streams are idle (%llu cuStreamQuery) "
		  "through the runtime, which made its context current",
		  (unsigned long long)(c1.stream_queries - c0.stream_queries));
	e2e_cuda(cudaFree(*p), "cudaFree (new thread, again)");
	e2e_cuda(cudaMalloc(p, BYTES), "cudaMalloc (new thread, again)");
	c2 = e2e_counters();
	e2e_check(c2.stream_queries - c1.stream_queries >= 2,
		  "... and so does the next, its context current (%llu cuStreamQuery)",
		  (unsigned long long)(c2.stream_queries - c1.stream_queries));
	return NULL;
}

static void run_quiet(void)
{
	struct standin_counters c0, c;
	cudaStream_t nb = NULL;
	void *p = NULL, *q = NULL, *first;
	pthread_t t;

	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	first = p;
	c0 = e2e_counters();
	for (int i = 0; i < 10; i++) {
		e2e_cuda(cudaFree(p), "cudaFree");
		e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	}
	c = e2e_counters();
	e2e_check(p == first && c.mallocs == 1,
		  "idle streams: 10 frees and allocations reuse one block (real cudaMalloc: %llu)",
		  (unsigned long long)c.mallocs);
	e2e_check(c.event_records == c0.event_records && c.stream_queries - c0.stream_queries >= 20,
		  "... with no event recorded (%llu) and the legacy stream and the stream queried "
		  "each time (%llu cuStreamQuery, want >= 20)",
		  (unsigned long long)(c.event_records - c0.event_records),
		  (unsigned long long)(c.stream_queries - c0.stream_queries));
	e2e_check(pthread_create(&t, NULL, fresh_thread, &p) == 0, "pthread_create");
	pthread_join(t, NULL);
	e2e_check(e2e_counters().mallocs == 1, "the new thread's pairs reused the block too");

	standin_set_manual_events(1); /* the "GPU" is busy from now on */
	e2e_cuda(cudaFree(p), "cudaFree");
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc while busy");
	c = e2e_counters();
	e2e_check(q != p && c.mallocs == 2 && c.event_records > c0.event_records,
		  "busy streams: the freed block waits for a fence (a new block: %s, events recorded: "
		  "%llu)", q != p ? "yes" : "no",
		  (unsigned long long)(c.event_records - c0.event_records));
	standin_complete_events();
	e2e_cuda(cudaFree(q), "cudaFree");
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc after the events completed");
	c = e2e_counters();
	e2e_check(c.mallocs == 2, "after the fence completed the cache serves again");
	e2e_check(c.event_queries > c0.event_queries, "... its events queried (cuEventQuery: %llu)",
		  (unsigned long long)(c.event_queries - c0.event_queries));
	/* Once the fences in flight complete, their events are spares: the next fence records
	 * them (through the driver, with no new event to make). */
	standin_complete_events();
	c0 = c;
	e2e_cuda(cudaFree(q), "cudaFree");
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc while busy, again");
	c = e2e_counters();
	e2e_check(c.event_records > c0.event_records, "busy again: a fence recorded (%llu events)",
		  (unsigned long long)(c.event_records - c0.event_records));
	/* An error the program has not read yet stays its own. The runtime's calls could replace
	 * it, so the runtime path records no fence while one is pending; the driver's calls leave
	 * it alone, so fences go on: events recorded now went through the driver. */
	standin_complete_events();
	c0 = e2e_counters();
	e2e_check(cudaSetDevice(9999) == cudaErrorInvalidDevice, "cudaSetDevice(9999) fails");
	e2e_cuda(cudaFree(q), "cudaFree with an error pending");
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc with an error pending");
	c = e2e_counters();
	e2e_check(c.event_records > c0.event_records,
		  "with the program's error pending: %llu event(s) recorded (through the driver: want "
		  "some)", (unsigned long long)(c.event_records - c0.event_records));
	e2e_check(cudaGetLastError() == cudaErrorInvalidDevice,
		  "... and the program's error is still its last error");
	standin_complete_events();
	e2e_cuda(cudaFree(q), "cudaFree");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	printf("PASS e2e_streams_quiet\n");
}

int main(int argc, char **argv)
{
	int nostream = argc > 1 && strcmp(argv[1], "--nostream") == 0;
	int blocking = argc > 1 && strcmp(argv[1], "--blocking") == 0;
	int quiet = argc > 1 && strcmp(argv[1], "--quiet") == 0;
	const char *manual = getenv("STANDIN_MANUAL_EVENTS");

	e2e_start(nostream   ? "e2e_nostream"
		  : blocking ? "e2e_streams_blocking"
		  : quiet    ? "e2e_streams_quiet"
			     : "e2e_streams");
	if (quiet && manual != NULL)
		e2e_fail("run me without STANDIN_MANUAL_EVENTS");
	if (!quiet && (manual == NULL || strcmp(manual, "1") != 0))
		e2e_fail("run me with STANDIN_MANUAL_EVENTS=1");
	if (nostream)
		run_nostream();
	else if (blocking)
		run_blocking();
	else if (quiet)
		run_quiet();
	else
		run_stream();
	return 0;
}
