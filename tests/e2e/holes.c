/* holes.c — the shim stays safe where it once was not (one mode a run):
 *   release-in-capture  gpupool_release called by the program while a global-mode capture is
 *                       underway on its own thread makes no real free (that would invalidate the
 *                       capture): it returns -1 and the control thread releases once the capture
 *                       has ended, which it did validly.
 *   register-fails      a stream that cannot be registered for the fences (no host memory) is
 *                       missing from every fence: from then on a freed block is never handed out
 *                       again on the strength of a fence (a new allocation is made instead).
 * The program's own realloc stands in front of libc's to fail on demand (register-fails). */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define BYTES (2 * E2E_MIB)

static _Atomic int fail_realloc;

extern void *__libc_realloc(void *, size_t);

void *realloc(void *p, size_t n)
{
	if (atomic_load(&fail_realloc))
		return NULL;
	return __libc_realloc(p, n);
}

static void release_in_capture(void)
{
	e2e_release_fn release = e2e_shim_release();
	struct standin_counters c0, c;
	unsigned long long bytes = 1;
	cudaStream_t s;
	cudaGraph_t g = NULL;
	void *p[4];

	e2e_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	for (int i = 0; i < 4; i++)
		e2e_cuda(cudaMalloc(&p[i], BYTES), "cudaMalloc");
	for (int i = 0; i < 4; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	c0 = e2e_counters();
	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	e2e_check(release(-1, &bytes) == -1 && bytes == 0,
		  "gpupool_release during the capture returns -1 and frees nothing now");
	c = e2e_counters();
	e2e_check(c.frees == c0.frees, "no real free during the capture (%llu)",
		  (unsigned long long)(c.frees - c0.frees));
	e2e_check(cudaStreamEndCapture(s, &g) == cudaSuccess && g != NULL,
		  "the capture ended valid");
	e2e_check(e2e_wait_live(0, 0, 3000), "after it, the control thread gave the cache back");
	cudaGraphDestroy(g);
	cudaStreamDestroy(s);
}

static void register_fails(void)
{
	struct standin_counters c0, c;
	cudaStream_t s;
	void *p, *q;
	int reused = 0;

	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	e2e_cuda(cudaFree(p), "cudaFree");
	atomic_store(&fail_realloc, 1);
	e2e_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
		 "cudaStreamCreateWithFlags (its registration fails)");
	atomic_store(&fail_realloc, 0);
	c0 = e2e_counters();
	for (int i = 0; i < 20; i++) {
		e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc");
		reused += q == p;
		p = q;
		e2e_cuda(cudaFree(q), "cudaFree");
	}
	c = e2e_counters();
	e2e_check(c.mallocs - c0.mallocs >= 19 && reused <= 1,
		  "no fence is trusted any more: 20 allocations made %llu real ones (reused %d)",
		  (unsigned long long)(c.mallocs - c0.mallocs), reused);
	cudaStreamDestroy(s);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	e2e_start(strcmp(mode, "register-fails") == 0 ? "e2e_holes_register" : "e2e_holes_capture");
	if (strcmp(mode, "release-in-capture") == 0)
		release_in_capture();
	else if (strcmp(mode, "register-fails") == 0)
		register_fails();
	else
		e2e_fail("usage: e2e_holes release-in-capture|register-fails");
	return 0;
}
