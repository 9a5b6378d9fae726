/* signal.c — proves the release signal: after 64 blocks are allocated and 48 freed, the signal
 * makes the runtime's live bytes drop (within 5 s) to exactly what the 16 live blocks occupy,
 * the live blocks keep their data and the program keeps running (and can release again).
 * --signal USR2 (with GPUPOOL_SIGNAL=USR2): SIGUSR2 does it. --signal none (with
 * GPUPOOL_SIGNAL=none): no handler is installed, SIGUSR1 keeps its default action.
 * --signal kept: a process started with SIGUSR1 ignored by its parent keeps it ignored (no
 * release on it) and says so at info. --signal bad: GPUPOOL_SIGNAL=15, =11 and =HUP are refused with
 * one line naming the variable; SIGTERM, SIGSEGV and SIGHUP keep their default action, USR1 is used. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

#define BLOCKS 64
#define KEEP 16
#define BLOCK_BYTES (3 * E2E_MIB)

static void *blocks[BLOCKS];

static void check_kept(const char *when)
{
	int i;

	for (i = 0; i < KEEP; i++)
		if (!e2e_verify(blocks[i], BLOCK_BYTES, (uint64_t)i))
			e2e_fail("live block %d lost its data %s", i, when);
}

static int default_action(int sig)
{
	struct sigaction sa;

	if (sigaction(sig, NULL, &sa) != 0)
		return 0;
	return !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL;
}

/* GPUPOOL_SIGNAL=none: after CUDA is in use, SIGUSR1 and SIGUSR2 still have their default action,
 * and a forked child that raises SIGUSR1 dies of it. */
static void run_none(void)
{
	char buf[128];
	void *p = NULL;
	int status = 0;
	pid_t pid;

	e2e_cuda(cudaMalloc(&p, E2E_MIB), "cudaMalloc");
	e2e_cuda(cudaFree(p), "cudaFree");
	e2e_sleep_ms(100);
	e2e_check(default_action(SIGUSR1), "GPUPOOL_SIGNAL=none: SIGUSR1 keeps its default action");
	e2e_check(default_action(SIGUSR2), "GPUPOOL_SIGNAL=none: SIGUSR2 keeps its default action");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		e2e_fail("fork failed");
	if (pid == 0) {
		raise(SIGUSR1);
		e2e_sleep_ms(200);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) != pid)
		e2e_fail("waitpid failed");
	e2e_check(WIFSIGNALED(status) && WTERMSIG(status) == SIGUSR1,
		  "GPUPOOL_SIGNAL=none: a process that raises SIGUSR1 dies of it (%s)",
		  e2e_status_text(status, buf, sizeof(buf)));
	printf("PASS e2e_signal_none\n");
}

/* In a child started with SIGUSR1 ignored: still ignored once CUDA is in use, and a SIGUSR1
 * releases nothing. */
static void run_kept_child(void)
{
	struct sigaction sa;
	struct standin_counters c;
	void *p = NULL, *q = NULL;

	e2e_cuda(cudaMalloc(&p, E2E_MIB), "cudaMalloc");
	e2e_cuda(cudaMalloc(&q, E2E_MIB), "cudaMalloc");
	e2e_cuda(cudaFree(p), "cudaFree");
	if (sigaction(SIGUSR1, NULL, &sa) != 0)
		e2e_fail("sigaction failed");
	e2e_check(!(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_IGN,
		  "SIGUSR1, ignored by the parent, is still ignored once CUDA is in use");
	raise(SIGUSR1);
	e2e_sleep_ms(300);
	c = e2e_counters();
	e2e_check(c.live_allocs == 2 && c.frees == 0,
		  "an ignored SIGUSR1 released nothing (%llu real allocations live, %llu real frees)",
		  (unsigned long long)c.live_allocs, (unsigned long long)c.frees);
	e2e_cuda(cudaFree(q), "cudaFree");
	printf("PASS e2e_signal_kept (child)\n");
}

/* Whether the handler of `sig` lies in libgpupool.so (a sanitizer's runtime has handlers of its
 * own for some signals: only gpupool's matter here). */
static int gpupool_handles(int sig)
{
	struct sigaction sa;
	Dl_info where;
	void *h;

	if (sigaction(sig, NULL, &sa) != 0)
		return 0;
	if (sa.sa_flags & SA_SIGINFO)
		memcpy(&h, &sa.sa_sigaction, sizeof(h));
	else if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN)
		return 0;
	else
		memcpy(&h, &sa.sa_handler, sizeof(h));
	return dladdr(h, &where) != 0 && where.dli_fname != NULL &&
	       strstr(where.dli_fname, "libgpupool") != NULL;
}

/* With GPUPOOL_SIGNAL refused: the default's handler (SIGUSR1) is gpupool's, and `sig` has none
 * of gpupool's. */
static void run_bad_child(int sig)
{
	void *p = NULL;

	e2e_cuda(cudaMalloc(&p, E2E_MIB), "cudaMalloc");
	e2e_cuda(cudaFree(p), "cudaFree");
	e2e_check(!gpupool_handles(sig), "signal %d has no handler of gpupool's", sig);
	e2e_check(gpupool_handles(SIGUSR1), "the default, SIGUSR1, has the release handler");
	printf("PASS e2e_signal_bad (child, signal %d)\n", sig);
}

static int count_lines(const char *text, const char *needle)
{
	int n = 0;

	for (const char *at = text; (at = strstr(at, needle)) != NULL; at += strlen(needle))
		n++;
	return n;
}

/* Parent of run_kept_child: starts it with SIGUSR1 ignored, as nohup or a supervisor would. */
static void run_kept(void)
{
	static const char *const args[] = { "--signal", "kept-child", NULL };
	static const char *const env[] = { "GPUPOOL_LOG=info", NULL };
	struct e2e_child child;
	char buf[128];

	signal(SIGUSR1, SIG_IGN);
	if (e2e_run_self(args, env, 20000, &child) != 0)
		e2e_fail("cannot start the child");
	signal(SIGUSR1, SIG_DFL);
	if (!WIFEXITED(child.status) || WEXITSTATUS(child.status) != 0)
		e2e_fail("the child failed (%s): %s",
			 e2e_status_text(child.status, buf, sizeof(buf)), child.err);
	e2e_check(strstr(child.err, "SIGUSR1 was ignored") != NULL,
		  "the child said at info that SIGUSR1 was ignored and kept");
	printf("PASS e2e_signal_kept\n");
}

static void run_bad(void)
{
	static const char *const values[] = { "15", "11", "HUP" };
	static const int sigs[] = { SIGTERM, SIGSEGV, SIGHUP };

	for (int i = 0; i < 3; i++) {
		char var[64], arg[16], buf[128];
		const char *args[] = { "--signal", "bad-child", arg, NULL };
		const char *env[] = { var, NULL };
		struct e2e_child child;

		snprintf(var, sizeof(var), "GPUPOOL_SIGNAL=%s", values[i]);
		snprintf(arg, sizeof(arg), "%d", sigs[i]);
		if (e2e_run_self(args, env, 20000, &child) != 0)
			e2e_fail("cannot start the child");
		if (!WIFEXITED(child.status) || WEXITSTATUS(child.status) != 0)
			e2e_fail("%s: the child failed (%s): %s", var,
				 e2e_status_text(child.status, buf, sizeof(buf)), child.err);
		e2e_check(count_lines(child.err, "GPUPOOL_SIGNAL") == 1 &&
				  strstr(child.err, "USR2") != NULL,
			  "%s: one line on stderr names the variable and the accepted values", var);
	}
	printf("PASS e2e_signal_bad\n");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 && strcmp(argv[1], "--signal") == 0 ? argv[2] : "USR1";
	int sig = strcmp(mode, "USR2") == 0 ? SIGUSR2 : SIGUSR1;
	struct standin_counters c;
	uint64_t per_block, t0;
	void *p = NULL;
	int i;

	if (strcmp(mode, "none") == 0) {
		e2e_start("e2e_signal_none");
		run_none();
		return 0;
	}
	if (strcmp(mode, "kept") == 0 || strcmp(mode, "kept-child") == 0) {
		e2e_start("e2e_signal_kept");
		if (strcmp(mode, "kept") == 0)
			run_kept();
		else
			run_kept_child();
		return 0;
	}
	if (strcmp(mode, "bad") == 0 || strcmp(mode, "bad-child") == 0) {
		e2e_start("e2e_signal_bad");
		if (strcmp(mode, "bad") == 0)
			run_bad();
		else
			run_bad_child(argc > 3 ? atoi(argv[3]) : SIGTERM);
		return 0;
	}
	e2e_start(sig == SIGUSR2 ? "e2e_signal_usr2" : "e2e_signal");
	for (i = 0; i < BLOCKS; i++) {
		e2e_cuda(cudaMalloc(&blocks[i], BLOCK_BYTES), "cudaMalloc");
		e2e_fill(blocks[i], BLOCK_BYTES, (uint64_t)i);
	}
	c = e2e_counters();
	e2e_check(c.live_allocs == BLOCKS && c.live_bytes % BLOCKS == 0,
		  "%d blocks of %zu B are %d real allocations of %llu B in all", BLOCKS, BLOCK_BYTES,
		  BLOCKS, (unsigned long long)c.live_bytes);
	per_block = c.live_bytes / BLOCKS;
	for (i = KEEP; i < BLOCKS; i++)
		e2e_cuda(cudaFree(blocks[i]), "cudaFree");
	c = e2e_counters();
	e2e_check(c.live_bytes == BLOCKS * per_block && c.frees == 0,
		  "after %d frees the runtime still holds all %d blocks (cached, no real cudaFree)",
		  BLOCKS - KEEP, BLOCKS);

	t0 = e2e_now_ms();
	kill(getpid(), sig);
	if (!e2e_wait_live(KEEP, KEEP * per_block, 5000)) {
		c = e2e_counters();
		e2e_fail("5 s after SIG%s the runtime holds %llu allocations / %llu B; want %d / %llu B",
			 mode, (unsigned long long)c.live_allocs, (unsigned long long)c.live_bytes, KEEP,
			 (unsigned long long)(KEEP * per_block));
	}
	e2e_note("SIG%s released the %d cached blocks in %llu ms: %d live blocks (%llu B) remain",
		 mode, BLOCKS - KEEP, (unsigned long long)(e2e_now_ms() - t0), KEEP,
		 (unsigned long long)(KEEP * per_block));
	c = e2e_counters();
	e2e_check(c.frees == BLOCKS - KEEP, "exactly the %d freed blocks went back (real cudaFree: %llu)",
		  BLOCKS - KEEP, (unsigned long long)c.frees);
	check_kept("after the release");

	/* The program keeps running: allocate again, and a second signal releases again. */
	e2e_cuda(cudaMalloc(&p, BLOCK_BYTES), "cudaMalloc after release");
	e2e_fill(p, BLOCK_BYTES, 999);
	e2e_cuda(cudaFree(p), "cudaFree after release");
	for (i = 0; i < KEEP; i++)
		e2e_cuda(cudaFree(blocks[i]), "cudaFree");
	kill(getpid(), sig);
	if (!e2e_wait_live(0, 0, 5000)) {
		c = e2e_counters();
		e2e_fail("5 s after a second SIG%s the runtime still holds %llu allocations / %llu B",
			 mode, (unsigned long long)c.live_allocs, (unsigned long long)c.live_bytes);
	}
	e2e_note("the program kept running; a second SIG%s released everything", mode);
	printf("PASS %s\n", sig == SIGUSR2 ? "e2e_signal_usr2" : "e2e_signal");
	return 0;
}
