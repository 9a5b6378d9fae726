/* graph_hold.c — a block freed while a CUDA graph is being captured is used again by every
 * replay of that graph, so the shim must neither hand it out nor release it until every graph
 * made from the capture is gone (shim/graphs.h). Here: blocks freed during a capture (one
 * allocated during it, one before it) survive a release and are not reused while an executable
 * graph made from the capture exists, and go back once it is destroyed; a clone keeps them as
 * long as it lives, and so do a parent graph holding it as a child and an executable graph
 * updated from it; a capture that fails gives its blocks back at once; a double free during a
 * capture, or after it of a block freed during it, is an error and changes nothing; after cudaDeviceReset the held blocks are forgotten, not freed. The stand-in counts the real allocations. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "e2e.h"

#define BYTES (2 * E2E_MIB)
#define PROBES 4

static void release_and_expect(uint64_t live, uint64_t per_block, const char *what)
{
	struct standin_counters c;
	int ok;

	kill(getpid(), SIGUSR1);
	ok = e2e_wait_live(live, live * per_block, 5000);
	c = e2e_counters();
	e2e_check(ok, "%s: after a release the runtime holds %llu allocations / %llu B (want %llu / "
		  "%llu B)", what, (unsigned long long)c.live_allocs, (unsigned long long)c.live_bytes,
		  (unsigned long long)live, (unsigned long long)(live * per_block));
}

/* New blocks of the same size must not be the held ones; they are freed again. */
static void probe_not(void *a, void *b, const char *what)
{
	void *p[PROBES];
	int i, clash = 0;

	for (i = 0; i < PROBES; i++) {
		e2e_cuda(cudaMalloc(&p[i], BYTES), "cudaMalloc (probe)");
		clash += p[i] == a || p[i] == b;
	}
	for (i = 0; i < PROBES; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree (probe)");
	e2e_check(clash == 0, "%s: %d new blocks of the same size, %d of them a held block", what,
		  PROBES, clash);
}

/* A block of BYTES allocated, then freed during a capture of its own on `s`: the graph, with
 * *freed the block's (now held) address. */
static cudaGraph_t capture_a_free(cudaStream_t s, void **freed)
{
	cudaGraph_t g = NULL;

	e2e_cuda(cudaMalloc(freed, BYTES), "cudaMalloc");
	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	e2e_cuda(cudaFree(*freed), "cudaFree during capture");
	e2e_cuda(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
	return g;
}

int main(void)
{
	cudaStream_t s;
	cudaGraph_t g = NULL, g2 = NULL, g3 = NULL;
	cudaGraphExec_t exec = NULL;
	void *before, *during, *t2, *t3;
	uint64_t per_block;
	cudaError_t rc;

	e2e_start("e2e_graph_hold");
	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	e2e_cuda(cudaMalloc(&before, BYTES), "cudaMalloc");
	per_block = e2e_counters().live_bytes;
	e2e_fill(before, BYTES, 1);

	/* 1. An executable graph keeps what its capture freed. */
	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	e2e_cuda(cudaMalloc(&during, BYTES), "cudaMalloc during capture");
	e2e_cuda(cudaFree(during), "cudaFree during capture");
	e2e_cuda(cudaFree(before), "cudaFree during capture (allocated before it)");
	rc = cudaFree(during);
	e2e_check(rc == cudaErrorInvalidValue, "double free during a capture is refused (%s)",
		  cudaGetErrorName(rc));
	cudaGetLastError();
	e2e_cuda(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
	/* After the capture a second free is a double free too: the block has one owner, the graph
	 * (handed out again, it would be freed by the graph's end under its new owner). */
	rc = cudaFree(during);
	e2e_check(rc == cudaErrorInvalidValue, "a second free after the capture is refused (%s)",
		  cudaGetErrorName(rc));
	rc = cudaFree(before);
	e2e_check(rc == cudaErrorInvalidValue, "... of the block allocated before it too (%s)",
		  cudaGetErrorName(rc));
	e2e_check(cudaGetLastError() == cudaSuccess, "a double free leaves no sticky error");
	e2e_cuda(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
	e2e_cuda(cudaGraphDestroy(g), "cudaGraphDestroy (the executable graph lives on)");
	probe_not(before, during, "executable graph alive");
	release_and_expect(2, per_block, "executable graph alive");
	e2e_cuda(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
	release_and_expect(0, per_block, "executable graph destroyed");

	/* 2. A clone keeps them after the original is gone. */
	g2 = capture_a_free(s, &t2);
	e2e_cuda(cudaGraphClone(&g3, g2), "cudaGraphClone");
	e2e_cuda(cudaGraphDestroy(g2), "cudaGraphDestroy (the original)");
	probe_not(t2, NULL, "clone alive");
	release_and_expect(1, per_block, "clone alive");
	e2e_cuda(cudaGraphDestroy(g3), "cudaGraphDestroy (the clone)");
	release_and_expect(0, per_block, "clone destroyed");

	/* 3. A parent graph holds a copy of its child graph, and so its blocks. */
	{
		cudaGraph_t child, parent = NULL;
		cudaGraphNode_t node;
		void *t4;

		child = capture_a_free(s, &t4);
		e2e_cuda(cudaGraphCreate(&parent, 0), "cudaGraphCreate");
		e2e_cuda(cudaGraphAddChildGraphNode(&node, parent, NULL, 0, child),
			 "cudaGraphAddChildGraphNode");
		e2e_cuda(cudaGraphDestroy(child), "cudaGraphDestroy (the child)");
		release_and_expect(1, per_block, "parent of the captured graph alive");
		e2e_cuda(cudaGraphDestroy(parent), "cudaGraphDestroy (the parent)");
		release_and_expect(0, per_block, "parent destroyed");
	}

	/* 4. cudaGraphExecUpdate: the executable graph now uses the captured graph's blocks. */
	{
		cudaGraph_t with = NULL, without = NULL;
		cudaGraphExec_t ex = NULL;
		cudaGraphExecUpdateResultInfo info;
		void *t5;

		with = capture_a_free(s, &t5);
		e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
		e2e_cuda(cudaStreamEndCapture(s, &without), "cudaStreamEndCapture (nothing freed)");
		e2e_cuda(cudaGraphInstantiate(&ex, without, 0), "cudaGraphInstantiate");
		e2e_cuda(cudaGraphExecUpdate(ex, with, &info), "cudaGraphExecUpdate");
		e2e_cuda(cudaGraphDestroy(with), "cudaGraphDestroy (the update's source)");
		e2e_cuda(cudaGraphDestroy(without), "cudaGraphDestroy");
		release_and_expect(1, per_block, "updated executable graph alive");
		e2e_cuda(cudaGraphExecDestroy(ex), "cudaGraphExecDestroy");
		release_and_expect(0, per_block, "updated executable graph destroyed");
	}

	/* 5. A capture that produced no graph holds nothing. */
	e2e_cuda(cudaMalloc(&t3, BYTES), "cudaMalloc");
	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	e2e_cuda(cudaFree(t3), "cudaFree during capture");
	rc = cudaDeviceSynchronize(); /* illegal while capturing: invalidates the capture */
	e2e_check(rc != cudaSuccess, "cudaDeviceSynchronize during the capture fails (%s)",
		  cudaGetErrorName(rc));
	g = NULL;
	rc = cudaStreamEndCapture(s, &g);
	e2e_check(rc != cudaSuccess && g == NULL, "the invalidated capture ends without a graph (%s)",
		  cudaGetErrorName(rc));
	cudaGetLastError();
	release_and_expect(0, per_block, "failed capture");

	/* 6. cudaDeviceReset frees the held blocks with everything else: destroying the graph
	 * afterwards must not give their addresses to the pool, where new blocks may have them. */
	{
		void *t7, *x[PROBES];
		int i, same = 0, bad = 0;

		g = capture_a_free(s, &t7);
		e2e_cuda(cudaDeviceReset(), "cudaDeviceReset");
		for (i = 0; i < PROBES; i++) {
			e2e_cuda(cudaMalloc(&x[i], BYTES), "cudaMalloc after the reset");
			e2e_fill(x[i], BYTES, 70u + (unsigned)i);
			same += x[i] == t7;
		}
		if (getenv("STANDIN_MMAP") != NULL) /* mmap gives a freed address back next */
			e2e_check(same > 0, "the case is exercised: %d of %d new blocks have the held "
				  "block's address", same, PROBES);
		else
			e2e_note("%d of %d new blocks have the held block's address", same, PROBES);
		e2e_cuda(cudaGraphDestroy(g), "cudaGraphDestroy after the reset");
		probe_not(t7, NULL, "graph destroyed after a reset");
		for (i = 0; i < PROBES; i++) {
			bad += !e2e_verify(x[i], BYTES, 70u + (unsigned)i);
			bad += cudaFree(x[i]) != cudaSuccess; /* a double free if the pool had it */
		}
		e2e_check(bad == 0, "the %d blocks allocated after the reset kept their data and were "
			  "still live (%d problems)", PROBES, bad);
		release_and_expect(0, per_block, "after the reset");
	}
	printf("PASS e2e_graph_hold\n");
	return 0;
}
