/* capture.c — proves the shim respects CUDA graph capture (cudaStreamCaptureModeGlobal on a
 * created stream): cudaMalloc/cudaFree keep working during the capture, for a size cached before it
 * and one not (the first makes a real allocation too: reported, not asserted); SIGUSR1 during the
 * capture releases nothing until cudaStreamEndCapture, after which the release happens; the shim
 * records and queries no event while the capture is underway; and the capture is not invalidated
 * (the stand-in applies the runtime's capture rules: an illegal call from any thread would make
 * cudaStreamEndCapture fail). */
#define _GNU_SOURCE
#include <signal.h>
#include <unistd.h>

#include "e2e.h"

#define N 8
#define BYTES (2 * E2E_MIB)

int main(void)
{
	struct standin_counters c0, c;
	enum cudaStreamCaptureStatus status;
	cudaStream_t s = NULL;
	cudaGraph_t graph = NULL;
	void *p[N], *hit = NULL, *miss = NULL;
	uint64_t per_block, held;
	cudaError_t rc;
	int i, ok, broken = 0;

	e2e_start("e2e_capture");
	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	for (i = 0; i < N; i++) {
		e2e_cuda(cudaMalloc(&p[i], BYTES), "cudaMalloc");
		e2e_fill(p[i], BYTES, (uint64_t)i);
	}
	c = e2e_counters();
	per_block = c.live_bytes / N;
	for (i = N / 2; i < N; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	e2e_sleep_ms(100); /* let the shim settle its fences before the capture begins */

	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	c0 = e2e_counters();
	e2e_cuda(cudaMalloc(&hit, BYTES), "cudaMalloc during capture (a cached size)");
	e2e_cuda(cudaMalloc(&miss, 6 * E2E_MIB), "cudaMalloc during capture (a size not cached)");
	e2e_fill(hit, BYTES, 100);
	e2e_fill(miss, 6 * E2E_MIB, 101);
	e2e_cuda(cudaFree(miss), "cudaFree during capture");
	e2e_cuda(cudaFree(hit), "cudaFree during capture");
	c = e2e_counters();
	e2e_note("cudaMalloc/cudaFree work during the capture (each call checked): %llu real cudaMalloc "
		 "for the cached size and the other", (unsigned long long)(c.mallocs - c0.mallocs));

	kill(getpid(), SIGUSR1);
	e2e_sleep_ms(500);
	c = e2e_counters();
	e2e_check(c.frees == c0.frees && c.live_allocs >= c0.live_allocs,
		  "SIGUSR1 during the capture released nothing within 500 ms (real frees %llu -> %llu)",
		  (unsigned long long)c0.frees, (unsigned long long)c.frees);
	e2e_check(c.event_records == c0.event_records && c.event_queries == c0.event_queries,
		  "no event was recorded or queried during the capture (records +%llu, queries +%llu)",
		  (unsigned long long)(c.event_records - c0.event_records),
		  (unsigned long long)(c.event_queries - c0.event_queries));
	rc = cudaStreamIsCapturing(s, &status);
	e2e_check(rc == cudaSuccess && status == cudaStreamCaptureStatusActive,
		  "the capture is still active and valid (status %d)", (int)status);
	rc = cudaStreamEndCapture(s, &graph);
	e2e_check(rc == cudaSuccess && graph != NULL,
		  "cudaStreamEndCapture succeeds: nothing invalidated the capture (%s)",
		  cudaGetErrorName(rc));

	/* The release asked for during the capture happens now. The two blocks freed during the
	 * capture belong to the graph until it is destroyed (shim/graphs.c): they stay. (The graph
	 * is destroyed only after this: destroyed at once, whether the release saw its blocks
	 * would depend on timing.) */
	held = standin_charge(standin_size(hit)) + standin_charge(standin_size(miss));
	ok = e2e_wait_live(N / 2 + 2, N / 2 * per_block + held, 5000);
	c = e2e_counters();
	e2e_check(ok, "after cudaStreamEndCapture the pending release happened: the runtime holds %llu "
		  "allocations / %llu B, the %d live blocks and the graph's 2 (want %d / %llu B)",
		  (unsigned long long)c.live_allocs, (unsigned long long)c.live_bytes, N / 2, N / 2 + 2,
		  (unsigned long long)(N / 2 * per_block + held));
	e2e_cuda(cudaGraphDestroy(graph), "cudaGraphDestroy");
	kill(getpid(), SIGUSR1);
	ok = e2e_wait_live(N / 2, N / 2 * per_block, 5000);
	c = e2e_counters();
	e2e_check(ok, "once the graph is destroyed, its blocks go with the next release: the runtime "
		  "holds %llu allocations / %llu B (want %d / %llu B)", (unsigned long long)c.live_allocs,
		  (unsigned long long)c.live_bytes, N / 2, (unsigned long long)(N / 2 * per_block));
	for (i = 0; i < N / 2; i++)
		broken += !e2e_verify(p[i], BYTES, (uint64_t)i);
	e2e_check(broken == 0, "the live blocks kept their data (%d of %d broken)", broken, N / 2);
	for (i = 0; i < N / 2; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	printf("PASS e2e_capture\n");
	return 0;
}
