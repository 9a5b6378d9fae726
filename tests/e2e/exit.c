/* exit.c — proves a clean exit: a program that ends with live and cached blocks makes no real
 * cudaFree at exit and does not hang, whether main returns (--mode return), a thread calls exit()
 * while main waits in pthread_join (--mode thread), or a thread calls exit() while main keeps
 * allocating and freeing (--mode busy). The program runs itself as a child with STANDIN_REPORT
 * set; the stand-in writes its counters there from its destructor (and again after any later
 * call), and the parent reads them. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

#define EXIT_CODE 7

/* 4 blocks live, 4 cached. With a stream (which stays) the freed blocks may still be waiting for
 * their fence at exit. */
static void make_blocks(int with_stream)
{
	void *p[8];
	cudaStream_t s = NULL;
	int i;

	if (with_stream)
		e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	for (i = 0; i < 8; i++)
		e2e_cuda(cudaMalloc(&p[i], (size_t)(i + 1) * E2E_MIB), "cudaMalloc");
	for (i = 0; i < 8; i += 2)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
}

static void *exit_now(void *arg)
{
	(void)arg;
	e2e_sleep_ms(50);
	printf("     child: a thread calls exit(%d)\n", EXIT_CODE);
	exit(EXIT_CODE);
}

static int child(const char *mode)
{
	pthread_t tid;
	void *p = NULL;

	/* busy: no stream, so the loop below is served from the cache at once (with a stream it could
	 * outrun the fences and push the device into a legitimate release) */
	make_blocks(strcmp(mode, "busy") != 0);
	if (strcmp(mode, "return") == 0) {
		printf("     child: main returns 0\n");
		return 0;
	}
	if (pthread_create(&tid, NULL, exit_now, NULL) != 0)
		return 2;
	if (strcmp(mode, "thread") == 0) {
		pthread_join(tid, NULL);
		return 3;
	}
	for (;;) {
		/* served from the cache: no real call is needed */
		if (cudaMalloc(&p, 2 * E2E_MIB) != cudaSuccess || cudaFree(p) != cudaSuccess)
			return 4;
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 && strcmp(argv[1], "--mode") == 0 ? argv[2] : "return";
	char name[64], report[256], env_report[300], buf[128];
	const char *args[] = { "--child", mode, NULL };
	const char *env[] = { env_report, NULL };
	int want = strcmp(mode, "return") == 0 ? 0 : EXIT_CODE;
	struct e2e_child ch;
	long frees, mallocs, live;

	if (argc > 2 && strcmp(argv[1], "--child") == 0)
		return child(argv[2]);
	snprintf(name, sizeof(name), "e2e_exit_%s", mode);
	e2e_start(name);
	snprintf(report, sizeof(report), "/tmp/gpupool-e2e-exit-%s-%d.txt", mode, (int)getpid());
	snprintf(env_report, sizeof(env_report), "STANDIN_REPORT=%s", report);
	unlink(report);
	if (e2e_run_self(args, env, 10000, &ch) != 0)
		e2e_fail("could not start the child");
	if (ch.err_len > 0)
		fprintf(stderr, "%s", ch.err);
	e2e_check(!ch.timed_out, "the child finished within 10 s (no hang at exit)");
	e2e_check(WIFEXITED(ch.status) && WEXITSTATUS(ch.status) == want, "the child %s (want exit %d)",
		  e2e_status_text(ch.status, buf, sizeof(buf)), want);
	mallocs = e2e_report_value(report, "mallocs");
	frees = e2e_report_value(report, "frees");
	live = e2e_report_value(report, "live_allocs");
	unlink(report);
	e2e_check(mallocs >= 8, "the stand-in wrote its counters at exit (%ld real allocations)", mallocs);
	e2e_check(frees == 0, "no real cudaFree at exit (the runtime saw %ld)", frees);
	e2e_check(live == mallocs, "every real allocation was still live when the runtime's destructor ran "
		  "(%ld of %ld)", live, mallocs);
	printf("PASS %s\n", name);
	return 0;
}
