/* demo.c — what gpupool does, in one run: allocate, free (the memory stays cached), then wait
 * for the release signal and show the device memory coming back while the program runs on.
 * Links against whatever libcudart the build chose: the real one or the stand-in. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define BLOCKS 24
#define BLOCK_BYTES ((size_t)32 << 20)

static double used_mib(void)
{
	size_t free_b = 0, total_b = 0;
	cudaMemGetInfo(&free_b, &total_b);
	return (double)(total_b - free_b) / 1048576.0;
}

int main(void)
{
	void *p[BLOCKS];
	double base = used_mib(), held;

	printf("demo: pid %d, device memory in use at start: %.0f MiB\n", (int)getpid(), base);
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
	printf("demo: allocated and freed %d x %zu MiB three times; still held: %.0f MiB\n", BLOCKS,
	       BLOCK_BYTES >> 20, held);
	printf("demo: waiting up to 10 s for the release signal (kill -USR1 %d)\n", (int)getpid());
	fflush(stdout);
	for (int i = 0; i < 200; i++) {
		struct timespec ts = { 0, 50000000 };
		nanosleep(&ts, NULL);
		if (used_mib() - base < held / 2)
			break;
	}
	printf("demo: after the signal, held: %.0f MiB; the program is still running\n",
	       used_mib() - base);
	return 0;
}
