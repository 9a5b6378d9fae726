/* holes_capture.c — gpupool_release called by the program while a global-mode capture is
 * underway on its own thread makes no real free (that would invalidate the capture): it returns
 * -1, and the control thread releases once the capture has ended, which it did validly. */
#define _GNU_SOURCE

#include "e2e.h"

#define BYTES (2 * E2E_MIB)

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

int main(void)
{
	e2e_start("e2e_holes_capture");
	release_in_capture();
	return 0;
}
