/* gpu_graphs.cu — CUDA graphs under the pool, with the runtime in either form (the static build
 * reaches gpupool only through the driver door): a block freed during a capture is used by every
 * replay and is therefore neither handed out again nor released while the graph exists, even
 * when another thread allocates, frees and asks for releases during the capture (which must not
 * be invalidated); once the graph and its executable are destroyed the block goes back to the
 * pool. Prints PASS/FAIL/INFO lines. */
#include <pthread.h>
#include <unistd.h>

#include "gpu_common.cuh"

#define BYTES (8 * GT_MIB)

static volatile int capturing;

/* Another thread of the program: allocates (misses and hits), frees and asks for releases while
 * the capture is underway. None of it may touch the capture. */
static void *busy(void *arg)
{
	gt_release_fn release = gt_shim_release();
	int *calls = (int *)arg;

	while (capturing) {
		void *p = NULL;
		if (cudaMalloc(&p, BYTES) == cudaSuccess)
			cudaFree(p);
		if (release != NULL && release(-1, NULL) != 0)
			(*calls)++; /* deferred: a capture is underway */
	}
	return NULL;
}

int main(void)
{
	cudaStream_t s;
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	unsigned long long *bad;
	uint32_t *held = NULL, *scratch = NULL;
	pthread_t t;
	int deferred = 0, reused = 0, rounds = 20;

	gt_test = "gpu_graphs";
	if (!gt_require_shim() || !gt_context())
		return gt_finish();
	gt_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	gt_ok(cudaMallocManaged(&bad, sizeof(*bad)), "cudaMallocManaged");
	gt_ok(cudaMalloc(&held, BYTES), "cudaMalloc(held)");

	capturing = 1;
	pthread_create(&t, NULL, busy, &deferred);
	usleep(20000);
	gt_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	/* A temporary of the captured work, freed during the capture: every replay writes it. */
	gt_fill_kernel<<<GT_GRID, GT_BLOCK, 0, s>>>(held, BYTES / 4, 7);
	gt_count_ne_kernel<<<GT_GRID, GT_BLOCK, 0, s>>>(held, BYTES / 4, 7, bad);
	gt_ok(cudaFree(held), "cudaFree during the capture");
	usleep(50000); /* the other thread allocates, frees and asks for releases meanwhile */
	gt_check(gt_ok(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture") && graph != NULL,
		 "capture intact", "the capture ended valid with another thread allocating, freeing "
		 "and releasing (%d releases deferred)", deferred);
	capturing = 0;
	pthread_join(t, NULL);
	gt_check(deferred > 0, "release deferred", "gpupool_release during the capture returned -1 "
		 "(left to the control thread) %d times", deferred);
	gt_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

	*bad = 0;
	for (int i = 0; i < rounds; i++) {
		void *p[4];
		gt_ok(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
		for (int k = 0; k < 4; k++) {
			gt_ok(cudaMalloc(&p[k], BYTES), "cudaMalloc during the replays");
			reused += p[k] == (void *)held;
			gt_fill(p[k], BYTES, 1000 + k, s); /* would clobber the graph's block */
		}
		gt_release_fn rel = gt_shim_release();
		if (rel != NULL)
			rel(-1, NULL);
		for (int k = 0; k < 4; k++)
			cudaFree(p[k]);
	}
	gt_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	gt_check(reused == 0 && *bad == 0, "held for the graph",
		 "%d replays: the block freed during the capture was handed out %d times, its data "
		 "wrong in %llu words", rounds, reused, (unsigned long long)*bad);

	gt_ok(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
	gt_ok(cudaGraphDestroy(graph), "cudaGraphDestroy");
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	for (int i = 0; i < 16 && scratch != held; i++) {
		void *p = NULL;
		gt_ok(cudaMalloc(&p, BYTES), "cudaMalloc after the graph");
		scratch = (uint32_t *)p;
		if (scratch != held)
			cudaFree(p);
	}
	gt_check(scratch == held, "back to the pool",
		 "with the graph gone, its block is handed out again");
	cudaFree(scratch);
	cudaFree(bad);
	cudaStreamDestroy(s);
	return gt_finish();
}
