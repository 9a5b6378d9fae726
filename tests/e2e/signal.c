/* signal.c — proves the release signal: after 64 blocks are allocated and 48 freed, the signal
 * makes the runtime's live bytes drop (within 5 s) to exactly what the 16 live blocks occupy,
 * the live blocks keep their data and the program keeps running (and can release again).
 * --signal USR2 (with GPUPOOL_SIGNAL=USR2): SIGUSR2 does it. --signal none (with
 * GPUPOOL_SIGNAL=none): no handler is installed, SIGUSR1 keeps its default action. */
#define _GNU_SOURCE
#include <signal.h>
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
	e2e_check(1, "SIG%s released the %d cached blocks in %llu ms: %d live blocks (%llu B) remain",
		  mode, BLOCKS - KEEP, (unsigned long long)(e2e_now_ms() - t0), KEEP,
		  (unsigned long long)(KEEP * per_block));
	c = e2e_counters();
	e2e_check(c.frees == BLOCKS - KEEP, "exactly the %d freed blocks went back (real cudaFree: %llu)",
		  BLOCKS - KEEP, (unsigned long long)c.frees);
	check_kept("after the release");
	e2e_check(1, "the %d live blocks kept their data", KEEP);

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
	e2e_check(1, "the program kept running; a second SIG%s released everything", mode);
	printf("PASS %s\n", sig == SIGUSR2 ? "e2e_signal_usr2" : "e2e_signal");
	return 0;
}
