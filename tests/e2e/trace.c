/* trace.c — proves GPUPOOL_TRACE on a child whose two threads each allocate and free 6,000
 * blocks (more than a thread's ring holds, so rings are flushed while they run) and keep 3, and
 * whose main thread has one allocation fail: the file (named with %p) is RMM's CSV — the header
 * Thread,Time,Action,Pointer,Size,Stream, then one row per event with a decimal thread id,
 * HH:MM:SS.microseconds, allocate / free / allocate failure, a 0x pointer, the size and 0x0 —
 * with exactly the child's events; every free follows its allocation and carries its size; and
 * the pool samples file beside it has rows ending with the exit sample. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

#define PER_THREAD 6000
#define KEEP 3
#define THREADS 2

static void *worker(void *arg)
{
	size_t base = (size_t)(uintptr_t)arg;
	void *kept[KEEP];

	for (int i = 0; i < PER_THREAD; i++) {
		void *p = NULL;
		size_t bytes = base + (size_t)(i % 7) * 1000;

		e2e_cuda(cudaMalloc(&p, bytes), "cudaMalloc");
		if (i >= PER_THREAD - KEEP)
			kept[i - (PER_THREAD - KEEP)] = p;
		else
			e2e_cuda(cudaFree(p), "cudaFree");
	}
	(void)kept;
	return NULL;
}

static int child(void)
{
	pthread_t t[THREADS];
	void *p = NULL;

	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(1000 + 100000 * (size_t)i));
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	/* More than the stand-in's capacity (STANDIN_CAPACITY): fails even after the retry. */
	if (cudaMalloc(&p, 96 * E2E_MIB) == cudaSuccess)
		return 4;
	cudaGetLastError();
	return 0;
}

struct live {
	unsigned long long ptr, size;
};

static int is_time(const char *t)
{
	static const char shape[] = "99:99:99.999999";

	for (size_t i = 0; i < sizeof(shape) - 1; i++)
		if (shape[i] == '9' ? (t[i] < '0' || t[i] > '9') : t[i] != shape[i])
			return 0;
	return t[sizeof(shape) - 1] == ',';
}

/* Check every row; returns how many of each action were seen. */
static void check_rows(FILE *f, int counts[3], int *threads)
{
	static struct live live[64];
	unsigned long long tids[8] = { 0 };
	char line[512];
	int nlive = 0, row = 1;

	if (fgets(line, sizeof(line), f) == NULL ||
	    strcmp(line, "Thread,Time,Action,Pointer,Size,Stream\n") != 0)
		e2e_fail("the trace does not start with RMM's header: %s", line);
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long long tid, ptr, size;
		char action[32], stream[8];
		const char *t = strchr(line, ',');
		int a, k;

		row++;
		if (t == NULL || !is_time(t + 1) ||
		    sscanf(line, "%llu,%*[^,],%31[^,],0x%llx,%llu,%7s", &tid, action, &ptr, &size, stream) != 5 ||
		    strcmp(stream, "0x0") != 0)
			e2e_fail("row %d is not Thread,HH:MM:SS.us,Action,0xPointer,Size,0x0: %s", row, line);
		a = strcmp(action, "allocate") == 0 ? 0 : strcmp(action, "free") == 0 ? 1
		    : strcmp(action, "allocate failure") == 0 ? 2 : -1;
		if (a < 0)
			e2e_fail("row %d: unknown action \"%s\"", row, action);
		counts[a]++;
		for (k = 0; k < 8 && tids[k] != 0 && tids[k] != tid; k++)
			;
		if (k < 8 && tids[k] == 0)
			tids[k] = tid, (*threads)++;
		if (a == 2 && (ptr != 0 || size != 96 * E2E_MIB))
			e2e_fail("row %d: the failure has pointer 0x%llx, size %llu", row, ptr, size);
		if (a == 0) {
			if (nlive == 64)
				e2e_fail("row %d: more than 64 allocations live at once", row);
			live[nlive++] = (struct live){ ptr, size };
		}
		if (a == 1) {
			for (k = 0; k < nlive && live[k].ptr != ptr; k++)
				;
			if (k == nlive)
				e2e_fail("row %d: free of 0x%llx before (or without) its allocation", row, ptr);
			if (live[k].size != size)
				e2e_fail("row %d: free of 0x%llx says %llu B, its allocation %llu B", row, ptr,
					 size, live[k].size);
			live[k] = live[--nlive];
		}
	}
	e2e_check(nlive == THREADS * KEEP, "%d allocations are live at the end of the trace (kept: %d)",
		  nlive, THREADS * KEEP);
}

static void check_samples(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[256], last[256] = "";
	int rows = 0;

	if (f == NULL)
		e2e_fail("no pool samples file %s", path);
	if (fgets(line, sizeof(line), f) == NULL ||
	    strcmp(line, "Time,Device,InUse,Idle,Pending,Event\n") != 0)
		e2e_fail("%s has no header", path);
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long long dev, in_use, idle, pending;
		if (!is_time(line) ||
		    sscanf(strchr(line, ',') + 1, "%llu,%llu,%llu,%llu,", &dev, &in_use, &idle, &pending) != 4)
			e2e_fail("bad sample row: %s", line);
		rows++;
		snprintf(last, sizeof(last), "%s", line);
	}
	fclose(f);
	e2e_check(rows >= 1 && strstr(last, ",exit\n") != NULL,
		  "the pool samples (%d rows) end with the exit sample: %s", rows, last);
}

int main(int argc, char **argv)
{
	static const char *const args[] = { "--child", NULL };
	char dir[] = "/tmp/gpupool-e2e-trace-XXXXXX", env_trace[300], path[300], samples[320];
	const char *env[] = { env_trace, "STANDIN_CAPACITY=64M", NULL };
	int counts[3] = { 0 }, threads = 0;
	struct e2e_child ch;
	struct dirent *e;
	char buf[128];
	long pid = -1;
	DIR *d;
	FILE *f;

	if (argc > 1 && strcmp(argv[1], "--child") == 0)
		return child();
	e2e_start("e2e_trace");
	if (mkdtemp(dir) == NULL)
		e2e_fail("mkdtemp failed");
	snprintf(env_trace, sizeof(env_trace), "GPUPOOL_TRACE=%s/trace-%%p.csv", dir);
	if (e2e_run_self(args, env, 30000, &ch) != 0 || ch.timed_out || !WIFEXITED(ch.status) ||
	    WEXITSTATUS(ch.status) != 0)
		e2e_fail("the child %s: %.2000s", e2e_status_text(ch.status, buf, sizeof(buf)), ch.err);
	e2e_check(ch.err_len == 0, "tracing said nothing on stderr (\"%.300s\")", ch.err);
	d = opendir(dir);
	while (d != NULL && (e = readdir(d)) != NULL)
		if (sscanf(e->d_name, "trace-%ld.csv", &pid) == 1 && strstr(e->d_name, ".pool.") == NULL)
			break;
	if (d != NULL)
		closedir(d);
	if (pid <= 0)
		e2e_fail("no trace-<pid>.csv in %s", dir);
	snprintf(path, sizeof(path), "%s/trace-%ld.csv", dir, pid);
	snprintf(samples, sizeof(samples), "%s/trace-%ld.pool.csv", dir, pid);
	f = fopen(path, "r");
	if (f == NULL)
		e2e_fail("cannot open %s", path);
	check_rows(f, counts, &threads);
	fclose(f);
	e2e_check(counts[0] == THREADS * PER_THREAD && counts[1] == THREADS * (PER_THREAD - KEEP) &&
			  counts[2] == 1,
		  "%d allocate, %d free, %d allocate failure rows: exactly the child's calls", counts[0],
		  counts[1], counts[2]);
	e2e_check(threads == THREADS + 1, "rows come from %d threads", threads);
	check_samples(samples);
	unlink(path);
	unlink(samples);
	rmdir(dir);
	printf("PASS e2e_trace\n");
	return 0;
}
