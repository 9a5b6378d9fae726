/* threads.cu — aggregate cudaMalloc+cudaFree pairs per second with 1, 2, 4, 8, 16 threads
 * allocating and freeing concurrently on one device. Shows whether the hit path scales (target:
 * 8 threads at least 4x one thread) or serializes on a lock.
 * Run twice, like hitpath: plain it measures "native" and "async" (cudaMallocAsync +
 * cudaFreeAsync, each thread on its own non-blocking stream, warm pool); with
 * LD_PRELOAD=libgpupool.so it measures "gpupool" (no stream created) and then "gpupool-fenced"
 * (after one exists; --fenced-only, --unfenced-only: one of them alone, for profiles and
 * counters). Two size patterns: "same" (every thread 64 KiB: one size class for all) and
 * "mixed" (each thread cycles 512 B, 4 KiB, 64 KiB, 1 MiB from its own starting point).
 * Each run: threads warm their sizes, meet at a barrier, loop for --seconds, and the pairs done
 * by all of them over the wall time from the barrier to the last join are its figure; a point is
 * the median of --reps such runs (default 3), printed with their lowest and highest.
 * Output: "BENCH bench=threads ..." lines (bench/bench_table.awk makes the table). */
#include "bench.cuh"

#include <atomic>
#include <pthread.h>
#include <unistd.h>

#define MAX_THREADS 64
#define CHECK_EVERY 8 /* pairs between looks at the stop flag */
#define MAX_REPS 15

static const size_t mixed_sizes[] = { 512, 4 << 10, 64 << 10, 1 << 20 };
#define NMIXED (sizeof(mixed_sizes) / sizeof(mixed_sizes[0]))
static const size_t same_size = 64 << 10;

struct worker {
	pthread_t tid;
	int id, mixed;
	enum bench_contender c;
	cudaStream_t stream; /* async only */
	unsigned long long pairs, errors;
	char pad[64]; /* keep the counters of neighbours off one cache line */
};

static std::atomic<int> stop_flag;
static pthread_barrier_t start_barrier;

static size_t size_of(const struct worker *w, unsigned long long i)
{
	return w->mixed ? mixed_sizes[(w->id + i) % NMIXED] : same_size;
}

static int pair(const struct worker *w, size_t size)
{
	void *p = NULL;
	int errors = 0;

	if (w->c == B_ASYNC) {
		errors += cudaMallocAsync(&p, size, w->stream) != cudaSuccess;
		errors += cudaFreeAsync(p, w->stream) != cudaSuccess;
	} else {
		errors += cudaMalloc(&p, size) != cudaSuccess;
		errors += cudaFree(p) != cudaSuccess;
	}
	return errors;
}

static void *work(void *arg)
{
	struct worker *w = (struct worker *)arg;
	unsigned long long i = 0, errors = 0;

	for (size_t k = 0; k < 4 * NMIXED; k++) /* warm: every size this thread uses has a block */
		errors += pair(w, size_of(w, k));
	if (w->c == B_ASYNC)
		cudaStreamSynchronize(w->stream);
	pthread_barrier_wait(&start_barrier);
	while (!stop_flag.load(std::memory_order_relaxed)) {
		for (int k = 0; k < CHECK_EVERY; k++, i++)
			errors += pair(w, size_of(w, i));
	}
	w->pairs = i;
	w->errors = errors;
	cudaGetLastError();
	return NULL;
}

/* One measurement: pairs per second (0 on failure); *err: the errors seen. */
static double run_once(enum bench_contender c, int nthreads, int mixed, double seconds,
		       unsigned long long *err)
{
	static struct worker w[MAX_THREADS];
	unsigned long long pairs = 0, errors = 0;
	uint64_t t0, t1;
	int started = 0;
	double rate;

	stop_flag.store(0);
	pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
	for (int i = 0; i < nthreads; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = i;
		w[i].mixed = mixed;
		w[i].c = c;
		if (c == B_ASYNC && cudaStreamCreateWithFlags(&w[i].stream, cudaStreamNonBlocking) != cudaSuccess) {
			fprintf(stderr, "threads: cannot create a stream\n");
			break;
		}
		if (pthread_create(&w[i].tid, NULL, work, &w[i]) != 0)
			break;
		started++;
	}
	if (started < nthreads) { /* cannot happen in practice; keep the barrier from hanging */
		fprintf(stderr, "threads: started %d of %d threads\n", started, nthreads);
		exit(1);
	}
	pthread_barrier_wait(&start_barrier);
	t0 = bench_now_ns();
	usleep((useconds_t)(seconds * 1e6));
	stop_flag.store(1);
	for (int i = 0; i < nthreads; i++) {
		pthread_join(w[i].tid, NULL);
		pairs += w[i].pairs;
		errors += w[i].errors;
	}
	t1 = bench_now_ns();
	for (int i = 0; i < nthreads; i++)
		if (w[i].stream) {
			cudaStreamSynchronize(w[i].stream);
			cudaStreamDestroy(w[i].stream);
		}
	pthread_barrier_destroy(&start_barrier);
	rate = (double)pairs / ((double)(t1 - t0) / 1e9);
	cudaGetLastError();
	*err = errors;
	return errors ? 0 : rate;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* `reps` measurements of one point, back to back; prints one BENCH line with their median (the
 * figure), lowest and highest. A machine's hiccup in one 0.3 s run then moves neither the point
 * nor a ratio built on it (one thread's figure moved 9.7-17.7 M pairs/s between single runs). */
static void run(enum bench_contender c, int nthreads, int mixed, double seconds, int reps)
{
	double rate[MAX_REPS];
	unsigned long long errors = 0, e;

	for (int r = 0; r < reps; r++) {
		rate[r] = run_once(c, nthreads, mixed, seconds, &e);
		errors += e;
	}
	qsort(rate, (size_t)reps, sizeof(rate[0]), cmp_double);
	printf("BENCH bench=threads contender=%s mode=%s threads=%d reps=%d seconds=%.3f "
	       "ops_per_s=%.0f ops_min=%.0f ops_max=%.0f errors=%llu\n",
	       bench_names[c], mixed ? "mixed" : "same", nthreads, reps, seconds, rate[reps / 2],
	       rate[0], rate[reps - 1], errors);
	fflush(stdout);
}

static void run_all(enum bench_contender c, const uint64_t *threads, int nthreads, double seconds,
		    int modes, int reps)
{
	for (int mixed = 0; mixed < 2; mixed++) {
		if (!(modes & (1 << mixed)))
			continue;
		for (int i = 0; i < nthreads; i++)
			run(c, (int)threads[i], mixed, seconds, reps);
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: threads [--threads 1,2,4,8,16] [--seconds 0.3] [--reps 3]"
			" [--mode same|mixed|both] [--fenced-only | --unfenced-only]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t threads[BENCH_MAX_LIST] = { 1, 2, 4, 8, 16 };
	int nthreads = 5, modes = 3, shim = bench_shim_loaded(), fenced_only = 0, unfenced_only = 0;
	double seconds = 0.3;
	int reps = 3;
	cudaStream_t s;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			nthreads = bench_parse_list(argv[++i], threads, BENCH_MAX_LIST);
		} else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
			seconds = atof(argv[++i]);
		} else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
			reps = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
			i++;
			modes = !strcmp(argv[i], "same") ? 1 : !strcmp(argv[i], "mixed") ? 2 : 3;
		} else if (!strcmp(argv[i], "--fenced-only")) {
			fenced_only = 1;
		} else if (!strcmp(argv[i], "--unfenced-only")) {
			unfenced_only = 1;
		} else {
			usage();
		}
	}
	for (int i = 0; i < nthreads; i++)
		if (threads[i] < 1 || threads[i] > MAX_THREADS)
			nthreads = 0;
	if (nthreads == 0 || seconds <= 0 || seconds > 60 || reps < 1 || reps > MAX_REPS)
		usage();
	if ((fenced_only || unfenced_only) && !shim) {
		fprintf(stderr, "threads: --fenced-only and --unfenced-only need LD_PRELOAD=libgpupool.so\n");
		return 2;
	}
	if (cudaDeviceSynchronize() != cudaSuccess) { /* creates the context */
		fprintf(stderr, "threads: no CUDA context\n");
		return 1;
	}
	printf("# threads: %s, %.2f s per run, the median of %d runs a point\n",
	       shim ? "libgpupool.so preloaded" : "native runtime", seconds, reps);
	if (shim) {
		if (!fenced_only)
			run_all(B_POOL, threads, nthreads, seconds, modes, reps);
		/* A created stream turns immediate reuse off for good: measure the fenced path. */
		if (!unfenced_only &&
		    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess) {
			run_all(B_POOL_FENCED, threads, nthreads, seconds, modes, reps);
			cudaStreamDestroy(s);
		}
	} else {
		run_all(B_NATIVE, threads, nthreads, seconds, modes, reps);
		if (bench_async_warm() == 0)
			run_all(B_ASYNC, threads, nthreads, seconds, modes, reps);
		else
			printf("# async: cannot set the default pool's release threshold; skipped\n");
	}
	return 0;
}
