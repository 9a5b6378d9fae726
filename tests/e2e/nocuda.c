/* nocuda.c — proves that a process which never calls CUDA is left alone by the shim, except that
 * the release signal no longer kills it: it receives SIGUSR1, is not killed, writes nothing on
 * stderr and has as many threads as without the shim (exactly one, outside sanitizer builds).
 * The program runs itself as a child to watch that from outside. Built twice: without the
 * runtime, and linked to it (E2E_LINKED) but never calling CUDA. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

#ifdef E2E_LINKED
#define NAME "e2e_nocuda_linked"
#else
#define NAME "e2e_nocuda"
#endif

/* Exits with 10 + its thread count, or 3 if the runtime is not the stand-in. */
static int child(int send_signal)
{
	int threads;

#ifdef E2E_LINKED
	/* a reference into the runtime that is not a CUDA call, so the library stays loaded */
	if (standin_charge(1) != 512)
		return 3;
#endif
	if (send_signal)
		kill(getpid(), SIGUSR1);
	e2e_sleep_ms(300);
	threads = e2e_threads();
	return 10 + (threads < 0 ? 0 : threads > 100 ? 100 : threads);
}

int main(int argc, char **argv)
{
	static const char *const args[] = { "--child", NULL };
	static const char *const base_args[] = { "--baseline", NULL };
	static const char *const env[] = { "GPUPOOL_LOG", NULL };
	static const char *const base_env[] = { "LD_PRELOAD", NULL };
	struct e2e_child ch;
	char buf[128];
	int want;

	if (argc > 1 && strcmp(argv[1], "--child") == 0)
		return child(1);
	if (argc > 1 && strcmp(argv[1], "--baseline") == 0)
		return child(0);
	e2e_start(NAME);
	{
		extern char **environ;
		int n = 0;

		for (char **e = environ; *e != NULL; e++)
			n += strncmp(*e, "GPUPOOL_", 8) == 0 && strncmp(*e, "GPUPOOL_LOG=", 12) != 0;
		/* ctest clears them: the shim's load then reads no setting at all (shim.c) */
		e2e_note("%d GPUPOOL_ variable(s) in the child's environment%s", n,
			 n == 0 ? ": the shim's load-time fast path" : "");
	}
	if (e2e_run_self(base_args, base_env, 10000, &ch) != 0)
		e2e_fail("could not start the baseline child");
	if (ch.timed_out || !WIFEXITED(ch.status) || WEXITSTATUS(ch.status) < 11)
		e2e_fail("the baseline child (without the shim) %s", e2e_status_text(ch.status, buf, sizeof(buf)));
	want = WEXITSTATUS(ch.status) - 10;
	e2e_note("without the shim the child has %d thread(s)", want);

	if (e2e_run_self(args, env, 10000, &ch) != 0)
		e2e_fail("could not start the child");
	e2e_check(!ch.timed_out, "the child finished (no hang)");
	e2e_check(WIFEXITED(ch.status), "SIGUSR1 did not kill a process that never called CUDA (%s)",
		  e2e_status_text(ch.status, buf, sizeof(buf)));
	e2e_check(WEXITSTATUS(ch.status) >= 10, "the child ran to its end (%s)",
		  e2e_status_text(ch.status, buf, sizeof(buf)));
	e2e_check(WEXITSTATUS(ch.status) - 10 == want, "with the shim and after SIGUSR1 it has %d thread(s), "
		  "as without the shim (no control thread without CUDA use)", WEXITSTATUS(ch.status) - 10);
	e2e_check(ch.err_len == 0, "nothing was written on stderr (got %zu bytes: \"%.300s\")",
		  ch.err_len, ch.err);
	printf("PASS %s\n", NAME);
	return 0;
}
