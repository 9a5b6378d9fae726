/* fence_overlap.cu — whether what a third thread does stops two blocking streams from running at
 * once. Two host threads each feed a stream created with cudaStreamCreate (blocking: it orders
 * with the legacy stream) with kernels of --kernel-us, two in flight at a time, for --kernels each;
 * meanwhile a third thread does one of:
 *   none     nothing: the streams' kernels overlap (the figure to compare with);
 *   legacy   records an event on the legacy stream every --gap-us, as a fence that covers
 *            blocking streams through the legacy stream does: each such event waits for both
 *            streams' earlier work, and each stream's later work waits for it (a join);
 *   streams  records an event on each of the two streams every --gap-us, as a fence with an event
 *            per stream does: no join;
 *   allocs   cudaMalloc and cudaFree of 64 KiB to 8 MiB in turn (a third stream exists, so under
 *            gpupool freed blocks wait for fences, recorded on misses): what the allocator that
 *            is loaded does to the streams.
 * Output: one "BENCH bench=fence_overlap mode=... wall_ms=... overlap=..." line per mode and
 * repetition; overlap = the two streams' kernel time together over the wall time (2.0: fully
 * overlapped, 1.0: serialised). Run plain for none, legacy and streams, and under
 * LD_PRELOAD=libgpupool.so with --modes allocs (and plain with --modes allocs for cudaMalloc's
 * own figure). */
#include "bench.cuh"

#include <atomic>
#include <pthread.h>

static int kernels = 200, kernel_us = 2000, gap_us = 200, reps = 3;
static std::atomic<int> running;

__global__ void spin_kernel(uint64_t ns)
{
	uint64_t t0, t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while (t - t0 < ns);
}

static void *feed(void *arg)
{
	cudaStream_t s = *(cudaStream_t *)arg;
	cudaEvent_t ev[2];

	cudaEventCreateWithFlags(&ev[0], cudaEventDisableTiming);
	cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming);
	for (int i = 0; i < kernels; i++) {
		spin_kernel<<<1, 32, 0, s>>>((uint64_t)kernel_us * 1000u);
		cudaEventRecord(ev[i % 2], s);
		if (i > 0)
			cudaEventSynchronize(ev[(i - 1) % 2]);
	}
	cudaStreamSynchronize(s);
	cudaEventDestroy(ev[0]);
	cudaEventDestroy(ev[1]);
	return NULL;
}

struct third {
	const char *mode;
	cudaStream_t *streams;
	unsigned long long ops;
};

static void *disturb(void *arg)
{
	struct third *t = (struct third *)arg;
	static const size_t sizes[] = { 64 << 10, 1 << 20, 3 << 20, 8 << 20 };
	cudaEvent_t ev;
	cudaStream_t own;
	unsigned i = 0;

	cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
	while (running.load()) {
		if (strcmp(t->mode, "legacy") == 0) {
			cudaEventRecord(ev, 0);
			usleep((useconds_t)gap_us);
		} else if (strcmp(t->mode, "streams") == 0) {
			cudaEventRecord(ev, t->streams[0]);
			cudaEventRecord(ev, t->streams[1]);
			usleep((useconds_t)gap_us);
		} else if (strcmp(t->mode, "allocs") == 0) {
			void *p = NULL;
			if (cudaMalloc(&p, sizes[i++ % 4]) == cudaSuccess) {
				cudaMemsetAsync(p, 0, 256, own);
				cudaFree(p);
			}
		} else {
			usleep((useconds_t)gap_us);
		}
		t->ops++;
	}
	cudaStreamSynchronize(own);
	cudaStreamDestroy(own);
	cudaEventDestroy(ev);
	return NULL;
}

static void run(const char *mode, int rep)
{
	cudaStream_t s[2];
	pthread_t feeders[2], other;
	struct third t = { mode, s, 0 };
	uint64_t t0, wall;

	cudaStreamCreate(&s[0]);
	cudaStreamCreate(&s[1]);
	cudaDeviceSynchronize();
	running.store(1);
	pthread_create(&other, NULL, disturb, &t);
	t0 = bench_now_ns();
	pthread_create(&feeders[0], NULL, feed, &s[0]);
	pthread_create(&feeders[1], NULL, feed, &s[1]);
	pthread_join(feeders[0], NULL);
	pthread_join(feeders[1], NULL);
	wall = bench_now_ns() - t0;
	running.store(0);
	pthread_join(other, NULL);
	printf("BENCH bench=fence_overlap mode=%s rep=%d shim=%d kernels=%d kernel_us=%d wall_ms=%.1f "
	       "overlap=%.2f third_ops=%llu\n",
	       mode, rep, bench_shim_loaded(), kernels, kernel_us, (double)wall / 1e6,
	       2.0 * kernels * kernel_us * 1000.0 / (double)wall, t.ops);
	fflush(stdout);
	cudaStreamDestroy(s[0]);
	cudaStreamDestroy(s[1]);
}

int main(int argc, char **argv)
{
	const char *modes = "none,legacy,streams,allocs";
	char buf[256], *m, *save = NULL;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--modes") == 0)
			modes = argv[i + 1];
		else if (strcmp(argv[i], "--kernels") == 0)
			kernels = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--kernel-us") == 0)
			kernel_us = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--gap-us") == 0)
			gap_us = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--reps") == 0)
			reps = atoi(argv[i + 1]);
		else {
			fprintf(stderr, "usage: fence_overlap [--modes none,legacy,streams,allocs] "
					"[--kernels N] [--kernel-us N] [--gap-us N] [--reps N]\n");
			return 2;
		}
	}
	if (cudaFree(0) != cudaSuccess) {
		fprintf(stderr, "fence_overlap: no CUDA device\n");
		return 1;
	}
	for (int r = 0; r < reps; r++) {
		snprintf(buf, sizeof(buf), "%s", modes);
		for (m = strtok_r(buf, ",", &save); m != NULL; m = strtok_r(NULL, ",", &save))
			run(m, r);
	}
	return 0;
}
