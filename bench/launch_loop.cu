/* launch_loop.cu — what a launch-heavy program pays per kernel: --launches empty kernels on one
 * stream, a stream synchronisation every --batch, timed as a whole (ns per launch, the median of
 * --reps repetitions after a warm-up). Run plain, under LD_PRELOAD=libgpupool.so, and under it
 * with GPUPOOL_AUTO_SUSPEND set: the gate in front of every driver entry point costs a load and a
 * branch per call while open, and auto-suspend arms it (one slow pass) at most once per tick.
 * Output: one "BENCH bench=launch_loop ..." line. */
#include "bench.cuh"

#include <algorithm>
#include <vector>

__global__ void empty_kernel(int *p)
{
	if (p != nullptr && threadIdx.x == 1024)
		*p = 1; /* never: keeps the kernel from being optimised away */
}

int main(int argc, char **argv)
{
	long launches = 200000, batch = 1000;
	int reps = 5;
	const char *label = getenv("BENCH_LABEL");
	cudaStream_t s;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--launches") == 0)
			launches = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--batch") == 0)
			batch = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--reps") == 0)
			reps = atoi(argv[i + 1]);
	}
	if (launches <= 0 || batch <= 0 || reps <= 0) {
		fprintf(stderr, "usage: launch_loop [--launches N] [--batch N] [--reps N]\n");
		return 2;
	}
	if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
		fprintf(stderr, "launch_loop: no CUDA device\n");
		return 1;
	}
	std::vector<double> ns;
	for (int r = -1; r < reps; r++) {
		uint64_t t0 = bench_now_ns();

		for (long i = 0; i < launches; i++) {
			empty_kernel<<<1, 32, 0, s>>>(nullptr);
			if ((i + 1) % batch == 0)
				cudaStreamSynchronize(s);
		}
		cudaStreamSynchronize(s);
		if (r >= 0)
			ns.push_back((double)(bench_now_ns() - t0) / (double)launches);
	}
	if (cudaGetLastError() != cudaSuccess) {
		fprintf(stderr, "launch_loop: a launch failed\n");
		return 1;
	}
	std::sort(ns.begin(), ns.end());
	printf("BENCH bench=launch_loop label=%s launches=%ld batch=%ld ns_per_launch=%.1f "
	       "min=%.1f max=%.1f\n", label != nullptr ? label : "-", launches, batch,
	       ns[ns.size() / 2], ns.front(), ns.back());
	return 0;
}
