/* demo.c — what gpupool does, in one run: allocate, free (the memory stays cached), then wait
 * for a release and show the device memory coming back while the program runs on. It says what
 * it does however it is started: by scripts/demo, under `gpupool run`, or on its own.
 * Links against whatever libcudart the build chose: the real one or the stand-in. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define BLOCKS 24
#define BLOCK_BYTES ((size_t)32 << 20)
#define DEFAULT_WAIT_S 60

/* Device memory in use as other processes see it (GPUPOOL_REPORT_CACHED_AS_FREE=0, see main). */
static double used_mib(void)
{
	size_t free_b = 0, total_b = 0;
	cudaMemGetInfo(&free_b, &total_b);
	return (double)(total_b - free_b) / 1048576.0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	void *p[BLOCKS];
	int pid = (int)getpid(), wait_s = argc > 1 ? atoi(argv[1]) : DEFAULT_WAIT_S;
	double base, held, start;

	/* gpupool reads its settings at the first CUDA call: by default this process's
	 * cudaMemGetInfo would count its cached blocks as free, and the demo could not see them. */
	setenv("GPUPOOL_REPORT_CACHED_AS_FREE", "0", 0);
	if (wait_s <= 0)
		wait_s = DEFAULT_WAIT_S;
	base = used_mib();
	printf("demo: pid %d; device memory in use at start: %.0f MiB\n", pid, base);
	if (dlsym(RTLD_DEFAULT, "gpupool_release") == NULL)
		printf("demo: gpupool is not loaded (run me under `gpupool run` or with "
		       "LD_PRELOAD=libgpupool.so)\n");
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < BLOCKS; i++)
			if (cudaMalloc(&p[i], BLOCK_BYTES) != cudaSuccess) {
				fprintf(stderr, "demo: cudaMalloc failed\n");
				return 1;
			}
		for (int i = 0; i < BLOCKS; i++)
			cudaFree(p[i]);
	}
	held = used_mib() - base;
	printf("demo: allocated %d x %zu MiB and freed them all, three times; the process still "
	       "holds %.0f MiB of device memory\n", BLOCKS, BLOCK_BYTES >> 20, held);
	if (held < BLOCK_BYTES >> 20) {
		printf("demo: nothing cached to give back (no gpupool, GPUPOOL_DISABLE, or "
		       "GPUPOOL_REPORT_CACHED_AS_FREE=1 set by you); exiting\n");
		return 0;
	}
	printf("demo: that is gpupool's cache of idle blocks; waiting up to %d s for a release\n"
	       "demo:   kill -USR1 %d, or from another terminal: gpupool top, gpupool stats %d,\n"
	       "demo:   gpupool release %d --wait\n", wait_s, pid, pid, pid);
	fflush(stdout);
	start = now_s();
	while (now_s() - start < wait_s) {
		struct timespec ts = { 0, 50000000 };
		double now_held;

		nanosleep(&ts, NULL);
		now_held = used_mib() - base;
		if (now_held < held / 2) {
			struct timespec linger = { 1, 0 };

			printf("demo: released after %.1f s: %.0f MiB went back to the driver, %.0f MiB "
			       "held now; the program kept running and exits in a second\n",
			       now_s() - start, held - now_held, now_held);
			fflush(stdout);
			nanosleep(&linger, NULL); /* a `gpupool release --wait` still reads its report */
			return 0;
		}
	}
	printf("demo: no release in %d s: still holding %.0f MiB; exiting (the memory goes back "
	       "with the process)\n", wait_s, used_mib() - base);
	return 0;
}
