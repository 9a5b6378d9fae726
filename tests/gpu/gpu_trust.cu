/* gpu_trust.cu — what a review found on the stand-in, checked on the GPU, with the runtime in either
 * form (the static build reaches gpupool only through the driver door):
 *  - a block freed during a capture and freed again after it: the second cudaFree returns
 *    cudaErrorInvalidValue (as natively), and the block is not handed out while the graph lives;
 *  - a stream destroyed during a capture while its kernel still runs: the block that kernel reads
 *    is not handed out (and overwritten) before the kernel is done;
 *  - cudaFreeAsync of a pooled block is a pool free: a cudaFree of it afterwards is a double free
 *    (cudaErrorInvalidValue, as natively), and new blocks of its size do not pile up beside it.
 * Prints PASS/FAIL/INFO lines. */
#include <unistd.h>

#include "gpu_common.cuh"

#define BYTES (8 * GT_MIB)
#define SPIN_NS 300000000ull /* the running kernel: 300 ms */

static void capture_double_free(void)
{
	cudaStream_t s;
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	void *p = NULL, *q[4];
	cudaError_t rc;
	int handed = 0;

	gt_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	gt_ok(cudaMalloc(&p, BYTES), "cudaMalloc");
	gt_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	gt_fill(p, BYTES, 5, s);
	gt_ok(cudaFree(p), "cudaFree during the capture");
	gt_ok(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
	gt_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
	rc = cudaFree(p);
	cudaGetLastError();
	gt_check(rc == cudaErrorInvalidValue, "capture double free",
		 "a second cudaFree of a block freed during the capture returns %d (%s); want "
		 "cudaErrorInvalidValue", (int)rc, cudaGetErrorName(rc));
	for (int i = 0; i < 4; i++) {
		gt_ok(cudaMalloc(&q[i], BYTES), "cudaMalloc while the graph lives");
		handed += q[i] == p;
	}
	gt_check(handed == 0, "graph's block kept", "%d of 4 new blocks of its size were the "
		 "graph's block", handed);
	gt_ok(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
	gt_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	for (int i = 0; i < 4; i++)
		gt_ok(cudaFree(q[i]), "cudaFree");
	gt_ok(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
	gt_ok(cudaGraphDestroy(graph), "cudaGraphDestroy");
	gt_ok(cudaStreamDestroy(s), "cudaStreamDestroy");
}

static void destroyed_during_capture(void)
{
	cudaStream_t a, b, c;
	cudaGraph_t graph = NULL;
	unsigned long long *bad = NULL;
	void *p = NULL, *q[8], *scratch = NULL;
	int reused = 0;

	gt_ok(cudaMallocManaged(&bad, sizeof(*bad)), "cudaMallocManaged");
	*bad = 0;
	gt_ok(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "cudaStreamCreateWithFlags(a)");
	gt_ok(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "cudaStreamCreateWithFlags(b)");
	gt_ok(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking), "cudaStreamCreateWithFlags(c)");
	gt_ok(cudaMalloc(&scratch, 4096), "cudaMalloc(scratch)");
	gt_ok(cudaMalloc(&p, BYTES), "cudaMalloc");
	gt_fill(p, BYTES, 7, a);
	slow_count_ne_kernel<<<GT_GRID, GT_BLOCK, 0, a>>>((const uint32_t *)p, BYTES / 4, 7,
							   SPIN_NS, bad);
	gt_ok(cudaGetLastError(), "slow kernel launch");
	gt_ok(cudaFree(p), "cudaFree while a kernel on a reads it");
	gt_ok(cudaStreamBeginCapture(b, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
	gt_fill(scratch, 4096, 1, b); /* the captured work */
	gt_ok(cudaStreamDestroy(a), "cudaStreamDestroy(a) during the capture");
	gt_ok(cudaStreamEndCapture(b, &graph), "cudaStreamEndCapture");
	for (int i = 0; i < 8; i++) { /* would overwrite p while the kernel on a still reads it */
		gt_ok(cudaMalloc(&q[i], BYTES), "cudaMalloc after the capture");
		reused += q[i] == p;
		gt_fill(q[i], BYTES, 99, c);
	}
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	gt_check(*bad == 0, "destroyed stream fenced", "the kernel of a stream destroyed during a "
		 "capture read %llu clobbered words (its block was handed out %d times before it was "
		 "done)", *bad, reused);
	gt_info("destroyed stream reuse", "%d of 8 later blocks were its block", reused);
	for (int i = 0; i < 8; i++)
		gt_ok(cudaFree(q[i]), "cudaFree");
	if (graph != NULL)
		gt_ok(cudaGraphDestroy(graph), "cudaGraphDestroy");
	gt_ok(cudaFree(scratch), "cudaFree(scratch)");
	gt_ok(cudaStreamDestroy(b), "cudaStreamDestroy(b)");
	gt_ok(cudaStreamDestroy(c), "cudaStreamDestroy(c)");
	gt_ok(cudaFree(bad), "cudaFree(managed)");
}

static void free_async(void)
{
	cudaStream_t s;
	void *p = NULL, *q[2];
	cudaError_t rc;
	size_t before, after, total;

	gt_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	gt_ok(cudaMalloc(&p, GT_MIB), "cudaMalloc(1 MiB)");
	gt_fill(p, GT_MIB, 3, s);
	gt_ok(cudaFreeAsync(p, s), "cudaFreeAsync of a pooled block");
	gt_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	rc = cudaFree(p);
	cudaGetLastError();
	gt_check(rc == cudaErrorInvalidValue, "free async reaches the pool",
		 "cudaFree after cudaFreeAsync of the same block returns %d (%s); want "
		 "cudaErrorInvalidValue", (int)rc, cudaGetErrorName(rc));
	before = gt_nvml_free(&total);
	for (int i = 0; i < 2; i++)
		gt_ok(cudaMalloc(&q[i], GT_MIB), "cudaMalloc(1 MiB)");
	after = gt_nvml_free(&total);
	gt_info("free async", "two new 1 MiB blocks took %.1f MiB of device memory",
		gt_mib(before > after ? before - after : 0));
	for (int i = 0; i < 2; i++)
		gt_ok(cudaFree(q[i]), "cudaFree");
	gt_ok(cudaStreamDestroy(s), "cudaStreamDestroy");
}

int main(void)
{
	gt_test = "gpu_trust";
	if (!gt_require_shim() || !gt_context())
		return gt_finish();
	capture_double_free();
	destroyed_during_capture();
	free_async();
	return gt_finish();
}
