/* tracebench.c — what GPUPOOL_TRACE costs the allocating thread, on the stand-in (CPU only):
 * the median time of one cudaMalloc + cudaFree pair (a cache hit, 4 KiB) over N pairs, in
 * children run alternately without and with tracing (run it under LD_PRELOAD=libgpupool.so).
 *   e2e_tracebench [--pairs N] [--reps R] [--threads T] [--work W]
 * --work W: W iterations of a dummy loop after each pair, in both runs (a program that does
 * something between allocations: the control thread then writes the rows in the background). 
 * Each child also checks that the trace has exactly one row per call. A measuring tool first,
 * registered in ctest with a small N as a smoke test (no time bound: machines differ). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

#define MAX_REPS 31

static long pairs = 1000000, work;

static void *loop(void *arg)
{
	void *p;

	(void)arg;
	for (long i = 0; i < pairs; i++) {
		if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess)
			e2e_fail("cudaMalloc/cudaFree failed");
		for (volatile long w = 0; w < work; w++)
			;
	}
	return NULL;
}

/* Prints "ns_per_pair <x>" on stderr: wall time / pairs per thread. */
static int child(int threads)
{
	pthread_t t[64];
	uint64_t t0;
	void *p;

	for (int i = 0; i < 1000; i++) { /* warm: the block is cached, the ring exists */
		e2e_cuda(cudaMalloc(&p, 4096), "cudaMalloc");
		e2e_cuda(cudaFree(p), "cudaFree");
	}
	t0 = e2e_now_ns();
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, loop, NULL);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	fprintf(stderr, "ns_per_pair %.2f\n", (double)(e2e_now_ns() - t0) / (double)pairs);
	return 0;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static long count_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	long n = 0;
	int c;

	if (f == NULL)
		return -1;
	while ((c = getc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	char pairs_arg[32], threads_arg[16], work_arg[32], trace_env[128], trace[96], buf[128];
	const char *args[] = { "--child", pairs_arg, threads_arg, work_arg, NULL };
	const char *env_off[] = { "GPUPOOL_TRACE", NULL }, *env_on[] = { trace_env, NULL };
	double off[MAX_REPS], on[MAX_REPS];
	int reps = 5, threads = 1;
	struct e2e_child ch;

	if (argc > 4 && strcmp(argv[1], "--child") == 0) {
		pairs = atol(argv[2]);
		work = atol(argv[4]);
		return child(atoi(argv[3]));
	}
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--pairs") == 0)
			pairs = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--reps") == 0)
			reps = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--threads") == 0)
			threads = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--work") == 0)
			work = atol(argv[i + 1]);
	}
	if (reps < 1 || reps > MAX_REPS || threads < 1 || threads > 64 || pairs < 1)
		e2e_fail("usage: e2e_tracebench [--pairs N] [--reps 1..%d] [--threads 1..64] [--work W]",
			 MAX_REPS);
	e2e_start("e2e_tracebench");
	snprintf(pairs_arg, sizeof(pairs_arg), "%ld", pairs);
	snprintf(threads_arg, sizeof(threads_arg), "%d", threads);
	snprintf(work_arg, sizeof(work_arg), "%ld", work);
	snprintf(trace, sizeof(trace), "/tmp/gpupool-tracebench-%ld.csv", (long)getpid());
	snprintf(trace_env, sizeof(trace_env), "GPUPOOL_TRACE=%s", trace);
	for (int r = 0; r < reps; r++) {
		for (int traced = 0; traced < 2; traced++) {
			double *slot = traced ? &on[r] : &off[r];
			const char *p;

			if (e2e_run_self(args, traced ? env_on : env_off, 600000, &ch) != 0 ||
			    !WIFEXITED(ch.status) || WEXITSTATUS(ch.status) != 0 ||
			    (p = strstr(ch.err, "ns_per_pair ")) == NULL)
				e2e_fail("the child %s: %.500s", e2e_status_text(ch.status, buf, sizeof(buf)),
					 ch.err);
			*slot = atof(p + strlen("ns_per_pair "));
			if (traced && count_lines(trace) != 1 + 2 * (pairs * threads + 1000))
				e2e_fail("the trace has %ld lines; want %ld", count_lines(trace),
					 1 + 2 * (pairs * threads + 1000));
		}
		e2e_note("rep %d: %.1f ns per pair untraced, %.1f ns traced", r + 1, off[r], on[r]);
	}
	unlink(trace);
	snprintf(trace + strlen(trace) - 4, sizeof(trace) - strlen(trace) + 4, ".pool.csv");
	unlink(trace);
	qsort(off, (size_t)reps, sizeof(double), by_value);
	qsort(on, (size_t)reps, sizeof(double), by_value);
	printf("pairs %ld x %d thread(s), work %ld, median of %d: untraced %.1f ns, traced %.1f ns per "
	       "cudaMalloc+cudaFree; tracing adds %.1f ns (%.0f%%)\n", pairs, threads, work, reps,
	       off[reps / 2], on[reps / 2], on[reps / 2] - off[reps / 2],
	       100.0 * (on[reps / 2] - off[reps / 2]) / off[reps / 2]);
	e2e_note("every traced child wrote one row per call (each checked)");
	printf("PASS e2e_tracebench\n");
	return 0;
}
