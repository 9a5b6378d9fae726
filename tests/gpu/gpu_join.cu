/* gpu_join.cu — immediate reuse behind the legacy stream, on the GPU (run in takeover mode:
 * GPUPOOL_TORCH=takeover, as CMakeLists sets):
 *  - one stream order (no stream yet): a freed block comes straight back while its previous
 *    owner's kernel still reads it on the legacy stream; a non-blocking stream created then
 *    starts behind that kernel: a fill of the block on it does not clobber what the kernel reads;
 *  - the join: a non-blocking stream exists and is idle, a kernel on the legacy stream still reads
 *    a freed block; the next cudaMalloc of its size gets the block at once, and a fill of it on
 *    the non-blocking stream waits for the kernel;
 *  - joins while the GPU lags: with the legacy stream's kernel still running, a first join leaves
 *    the non-blocking stream waiting for its event; a second join still hands a freed block out
 *    at once (that stream holds no work of the program's, only the first join's wait). Then a
 *    kernel launched on the non-blocking stream (queued behind those waits) reads a block the
 *    program frees: whatever the next cudaMalloc of its size gets, a fill of it on the legacy
 *    stream does not clobber what that kernel reads (the doors saw the launch: no join then);
 *  - a join does not finish the work it orders: a block freed while a kernel on the legacy stream
 *    reads it and made reusable by a join is then given back (gpupool_release), or its memory
 *    asked for by a larger size (with GPUPOOL_VMM=on and GPUPOOL_VMM_AGE=0, gpu_join_vmm: its
 *    pages may move to a new block at once); the kernel still reads what it read, with no
 *    error (VMM memory is unmapped without waiting for the device).
 * Prints PASS/FAIL/INFO lines. */
#include "gpu_common.cuh"

#define BYTES (8 * GT_MIB)
#define SPIN_NS 300000000ull /* the reading kernel: 300 ms */

/* A kernel on the legacy stream reads p (filled with 7) for SPIN_NS; p is freed, the same size
 * asked for again, and `late` (NULL: a new non-blocking stream) fills what came back with 99.
 * Returns whether the block came back; *bad: the words the kernel saw clobbered. */
static int reuse_beside(cudaStream_t late, unsigned long long *bad, cudaStream_t *made)
{
	void *p = NULL, *q = NULL;
	int same;

	*bad = 0;
	gt_ok(cudaMalloc(&p, BYTES), "cudaMalloc");
	gt_fill(p, BYTES, 7, 0);
	slow_count_ne_kernel<<<GT_GRID, GT_BLOCK, 0, 0>>>((const uint32_t *)p, BYTES / 4, 7, SPIN_NS,
							   bad);
	gt_ok(cudaGetLastError(), "slow kernel launch");
	gt_ok(cudaFree(p), "cudaFree while the kernel on the legacy stream reads it");
	gt_ok(cudaMalloc(&q, BYTES), "cudaMalloc of its size");
	same = q == p;
	if (late == NULL) {
		gt_ok(cudaStreamCreateWithFlags(made, cudaStreamNonBlocking),
		      "cudaStreamCreateWithFlags");
		late = *made;
	}
	gt_fill(q, BYTES, 99, late);
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	gt_ok(cudaFree(q), "cudaFree");
	return same;
}

/* Joins while the legacy stream's kernel runs (nb idle at the start), then a kernel on nb reading
 * a block freed while it is queued. bad[0]: its count of clobbered words. */
static void rejoin(cudaStream_t nb, unsigned long long *bad)
{
	void *a = NULL, *b = NULL, *c = NULL, *a2 = NULL, *b2 = NULL, *c2 = NULL;

	*bad = 0;
	gt_ok(cudaMalloc(&a, BYTES), "cudaMalloc(a)");
	gt_ok(cudaMalloc(&b, BYTES), "cudaMalloc(b)");
	gt_ok(cudaMalloc(&c, BYTES), "cudaMalloc(c)");
	gt_fill(c, BYTES, 7, 0);
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	slow_count_ne_kernel<<<GT_GRID, GT_BLOCK, 0, 0>>>((const uint32_t *)a, BYTES / 4, 0, SPIN_NS,
							   bad + 1); /* keeps the legacy stream busy */
	gt_ok(cudaGetLastError(), "slow kernel launch (legacy stream)");
	gt_ok(cudaFree(a), "cudaFree(a) while the legacy stream's kernel reads it");
	gt_ok(cudaMalloc(&a2, BYTES), "cudaMalloc: the first join");
	gt_ok(cudaFree(b), "cudaFree(b)");
	gt_ok(cudaMalloc(&b2, BYTES), "cudaMalloc: the second join");
	gt_check(a2 == a && b2 == b, "joins while the GPU lags", "with the non-blocking stream "
		 "waiting only for a join's event, freed blocks %s handed out at once (first: %s, "
		 "second: %s)", a2 == a && b2 == b ? "were" : "were NOT", a2 == a ? "yes" : "no",
		 b2 == b ? "yes" : "no");
	slow_count_ne_kernel<<<GT_GRID, GT_BLOCK, 0, nb>>>((const uint32_t *)c, BYTES / 4, 7, SPIN_NS,
							    bad);
	gt_ok(cudaGetLastError(), "slow kernel launch (non-blocking stream)");
	gt_ok(cudaFree(c), "cudaFree(c) while a kernel queued on the non-blocking stream reads it");
	gt_ok(cudaMalloc(&c2, BYTES), "cudaMalloc of its size");
	gt_info("work on the stream", "the freed block %s straight back", c2 == c ? "came" : "did not come");
	gt_fill(c2, BYTES, 99, 0);
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	gt_check(*bad == 0, "no join over a stream's work", "the kernel on the non-blocking stream "
		 "read %llu clobbered words: a fill on the legacy stream ran beside it", *bad);
	gt_ok(cudaFree(a2), "cudaFree");
	gt_ok(cudaFree(b2), "cudaFree");
	gt_ok(cudaFree(c2), "cudaFree");
}

/* A kernel on the legacy stream reads a freed block, a miss of another size joins (the block is
 * reusable), then the block is given back (give_back) or a larger size asked for. */
static void after_join(unsigned long long *bad, const char *what, int give_back)
{
	void *p = NULL, *q = NULL, *r = NULL;
	unsigned long long bytes = 0;
	cudaError_t rc;

	*bad = 0;
	gt_ok(cudaMalloc(&p, BYTES), "cudaMalloc");
	gt_fill(p, BYTES, 7, 0);
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	slow_count_ne_kernel<<<GT_GRID, GT_BLOCK, 0, 0>>>((const uint32_t *)p, BYTES / 4, 7, SPIN_NS,
							   bad);
	gt_ok(cudaGetLastError(), "slow kernel launch (legacy stream)");
	gt_ok(cudaFree(p), "cudaFree while the legacy stream's kernel reads it");
	gt_ok(cudaMalloc(&q, BYTES / 2), "cudaMalloc of another size: a join");
	if (give_back) {
		int got = gt_shim_release()(0, &bytes);
		gt_check(got == 0, "gpupool_release", "returned %d (%llu bytes given back)", got, bytes);
	} else {
		gt_ok(cudaMalloc(&r, 3 * BYTES), "cudaMalloc of a larger size");
	}
	if (r != NULL)
		gt_fill(r, 3 * BYTES, 99, 0);
	rc = cudaDeviceSynchronize();
	gt_check(rc == cudaSuccess && *bad == 0, what, "the kernel that read the freed block: %s, "
		 "%llu clobbered words%s", cudaGetErrorString(rc), *bad,
		 give_back ? " (its block given back after a join)" :
			     " (a larger size asked for after a join)");
	if (rc != cudaSuccess)
		return; /* a sticky error: nothing more can run */
	gt_ok(cudaFree(q), "cudaFree");
	if (r != NULL)
		gt_ok(cudaFree(r), "cudaFree");
}

int main(void)
{
	unsigned long long *bad = NULL; /* [0] the checks' count, [1] a kernel's that is not checked */
	cudaStream_t nb = NULL;
	int same;

	gt_test = "gpu_join";
	if (!gt_require_shim() || !gt_context())
		return gt_finish();
	gt_ok(cudaMallocManaged(&bad, 2 * sizeof(*bad)), "cudaMallocManaged");
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

	same = reuse_beside(NULL, bad, &nb);
	gt_info("one stream order", "the freed block %s straight back", same ? "came" : "did not come");
	gt_check(*bad == 0, "stream created after reuse",
		 "the kernel read %llu clobbered words: a non-blocking stream created while it ran "
		 "filled its block beside it", *bad);

	same = reuse_beside(nb, bad, NULL);
	gt_check(same, "join reuses at once", "with the non-blocking stream idle, the freed block %s "
		 "handed out at once (takeover mode)", same ? "was" : "was NOT");
	gt_check(*bad == 0, "join orders the streams", "the kernel read %llu clobbered words: the "
		 "non-blocking stream's fill ran beside it", *bad);

	rejoin(nb, bad);
	after_join(bad, "release after a join", 1);
	after_join(bad, "larger size after a join", 0);
	gt_ok(cudaStreamDestroy(nb), "cudaStreamDestroy");
	gt_ok(cudaFree(bad), "cudaFree(bad)");
	return gt_finish();
}
