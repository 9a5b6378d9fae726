/* fork.c — proves fork safety: after the parent has used the pool, a forked child's cudaMalloc and
 * cudaFree pass straight through to the runtime (its own copy of the counters grows by exactly
 * one per call) and it exits 0 without hanging; the parent keeps working with its cached block
 * and waitpid sees status 0. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

#define CHILD_CALLS 3

/* The child reports on stdout and exits non-zero on the first failure (e2e_fail). */
static void child(void *parent_block)
{
	struct standin_counters c0, c1;
	void *p[CHILD_CALLS];
	int i;

	e2e_start("e2e_fork (child)");
	for (i = 0; i < CHILD_CALLS; i++) {
		c0 = e2e_counters();
		e2e_cuda(cudaMalloc(&p[i], E2E_MIB), "child: cudaMalloc(1 MiB)");
		c1 = e2e_counters();
		if (c1.mallocs != c0.mallocs + 1)
			e2e_fail("child: cudaMalloc %d made %llu real allocations (want exactly 1: pass-through)",
				 i, (unsigned long long)(c1.mallocs - c0.mallocs));
		e2e_fill(p[i], E2E_MIB, 100 + (uint64_t)i);
	}
	for (i = 0; i < CHILD_CALLS; i++) {
		if (!e2e_verify(p[i], E2E_MIB, 100 + (uint64_t)i))
			e2e_fail("child: block %d lost its data", i);
		c0 = e2e_counters();
		e2e_cuda(cudaFree(p[i]), "child: cudaFree");
		c1 = e2e_counters();
		if (c1.frees != c0.frees + 1)
			e2e_fail("child: cudaFree %d made %llu real frees (want exactly 1: pass-through)", i,
				 (unsigned long long)(c1.frees - c0.frees));
	}
	if (!e2e_verify(parent_block, E2E_MIB, 7))
		e2e_fail("child: the parent's live block (copied by fork) lost its data");
	e2e_note("child: %d cudaMalloc and %d cudaFree passed straight through to the runtime (each "
		 "checked)", CHILD_CALLS, CHILD_CALLS);
	exit(0);
}

int main(void)
{
	struct standin_counters c0, c;
	void *keep = NULL, *p = NULL, *q = NULL;
	uint64_t end;
	char buf[128];
	int status = 0;
	pid_t pid, got = 0;

	e2e_start("e2e_fork");
	e2e_cuda(cudaMalloc(&keep, E2E_MIB), "cudaMalloc(keep)");
	e2e_fill(keep, E2E_MIB, 7);
	e2e_cuda(cudaMalloc(&p, E2E_MIB), "cudaMalloc(p)");
	e2e_cuda(cudaFree(p), "cudaFree(p)");
	c0 = e2e_counters();
	e2e_check(c0.mallocs == 2 && c0.frees == 0, "parent: the pool is in use (2 real allocations, "
		  "one block cached)");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		e2e_fail("fork failed");
	if (pid == 0)
		child(keep);

	/* The parent keeps working while the child runs: the cached block is reused. */
	e2e_cuda(cudaMalloc(&q, E2E_MIB), "parent: cudaMalloc after fork");
	e2e_fill(q, E2E_MIB, 8);
	e2e_cuda(cudaFree(q), "parent: cudaFree after fork");
	c = e2e_counters();
	e2e_check(c.mallocs == c0.mallocs && c.frees == 0,
		  "parent: after fork the pool still serves from its cache (real cudaMalloc %llu, want %llu)",
		  (unsigned long long)c.mallocs, (unsigned long long)c0.mallocs);
	e2e_check(e2e_verify(keep, E2E_MIB, 7), "parent: its live block kept its data");

	end = e2e_now_ms() + (uint64_t)e2e_scaled_ms(10000);
	while (got != pid && e2e_now_ms() < end) {
		got = waitpid(pid, &status, WNOHANG);
		if (got != pid)
			e2e_sleep_ms(5);
	}
	if (got != pid) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		e2e_fail("the child did not finish within 10 s (hang after fork)");
	}
	e2e_check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "waitpid: the child %s (want exit 0)",
		  e2e_status_text(status, buf, sizeof(buf)));
	e2e_cuda(cudaFree(keep), "parent: cudaFree(keep)");
	printf("PASS e2e_fork\n");
	return 0;
}
