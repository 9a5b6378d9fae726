/* log.c — proves the logging contract on stderr, watching a child that releases memory through
 * SIGUSR1: with GPUPOOL_LOG=info the release is reported in lines that all start with
 * "gpupool: "; by default nothing at all is written; with a bad GPUPOOL_SIGNAL value exactly one
 * line names the variable, and the default (SIGUSR1) is used; in takeover mode with
 * TORCHINDUCTOR_CUDAGRAPHS=1 exactly one line, at the default level, says they need PyTorch's own
 * cache; at debug, each real allocation the pool makes is named with its size (the child's four
 * misses; a hit makes none). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

#define MARKER "e2e-marker: SIGUSR1 now\n"

/* With `marker`, the child writes MARKER on stderr just before the signal, so the parent can
 * tell the lines about the release from those written at start-up. */
static int child(int marker)
{
	void *p[4];
	ssize_t w;
	int i;

	for (i = 0; i < 4; i++)
		e2e_cuda(cudaMalloc(&p[i], 4 * E2E_MIB), "cudaMalloc");
	for (i = 0; i < 4; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	for (i = 0; i < 4; i++) /* hits: no real allocation */
		e2e_cuda(cudaMalloc(&p[i], 4 * E2E_MIB), "cudaMalloc");
	for (i = 0; i < 4; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	if (marker) {
		w = write(2, MARKER, strlen(MARKER));
		(void)w;
	}
	kill(getpid(), SIGUSR1);
	if (!e2e_wait_live(0, 0, 5000))
		e2e_fail("child: SIGUSR1 released nothing within 5 s");
	e2e_sleep_ms(200); /* the log line may follow the release by a moment */
	return 0;
}

/* Number of lines of `text`; *bad is set to the first line that does not start with `prefix`. */
static int count_lines(const char *text, const char *prefix, const char **bad)
{
	const char *line = text;
	int n = 0;

	*bad = NULL;
	while (*line != '\0') {
		const char *nl = strchr(line, '\n');

		if (strncmp(line, prefix, strlen(prefix)) != 0 && *bad == NULL)
			*bad = line;
		n++;
		if (nl == NULL)
			break;
		line = nl + 1;
	}
	return n;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 && strcmp(argv[1], "--expect") == 0 ? argv[2] : "silent";
	static const char *const args[] = { "--child", NULL };
	static const char *const marker_args[] = { "--child", "--marker", NULL };
	static const char *const env_info[] = { "GPUPOOL_LOG=info", "GPUPOOL_SIGNAL", NULL };
	static const char *const env_debug[] = { "GPUPOOL_LOG=debug", "GPUPOOL_SIGNAL", NULL };
	static const char *const env_silent[] = { "GPUPOOL_LOG", "GPUPOOL_SIGNAL", NULL };
	static const char *const env_bad[] = { "GPUPOOL_LOG", "GPUPOOL_SIGNAL=SIGBOGUS", NULL };
	static const char *const env_graphs[] = { "GPUPOOL_LOG", "GPUPOOL_SIGNAL",
						  "GPUPOOL_TORCH=takeover",
						  "TORCHINDUCTOR_CUDAGRAPHS=1", NULL };
	const char *const *env = env_silent;
	struct e2e_child ch;
	const char *bad;
	char name[64], buf[128];
	int lines;

	if (argc > 1 && strcmp(argv[1], "--child") == 0)
		return child(argc > 2 && strcmp(argv[2], "--marker") == 0);
	if (strcmp(mode, "info") == 0)
		env = env_info;
	else if (strcmp(mode, "badopt") == 0)
		env = env_bad;
	else if (strcmp(mode, "cudagraphs") == 0)
		env = env_graphs;
	else if (strcmp(mode, "debug") == 0)
		env = env_debug;
	snprintf(name, sizeof(name), "e2e_log_%s", mode);
	e2e_start(name);
	if (e2e_run_self(env == env_info ? marker_args : args, env, 15000, &ch) != 0)
		e2e_fail("could not start the child");
	if (ch.timed_out || !WIFEXITED(ch.status) || WEXITSTATUS(ch.status) != 0)
		fprintf(stderr, "the child's stderr: \"%.2000s\"\n", ch.err);
	e2e_check(!ch.timed_out && WIFEXITED(ch.status) && WEXITSTATUS(ch.status) == 0,
		  "the child released memory on SIGUSR1 (it checks) and exited 0 (it %s%s)",
		  ch.timed_out ? "timed out and " : "", e2e_status_text(ch.status, buf, sizeof(buf)));
	lines = count_lines(ch.err, "gpupool: ", &bad);
	if (strcmp(mode, "silent") == 0) {
		e2e_check(ch.err_len == 0, "GPUPOOL_LOG unset: nothing on stderr (got \"%.500s\")", ch.err);
	} else if (strcmp(mode, "info") == 0) {
		char *after = strstr(ch.err, MARKER);
		const char *bad_after;
		int lines_after;

		if (after == NULL)
			e2e_fail("the child's marker is missing from its stderr: \"%.500s\"", ch.err);
		lines_after = count_lines(after + strlen(MARKER), "gpupool: ", &bad_after);
		*after = '\0';
		count_lines(ch.err, "gpupool: ", &bad);
		printf("     stderr before the signal: %s", ch.err);
		printf("     stderr after the signal: %s", after + strlen(MARKER));
		e2e_check(lines_after >= 1, "GPUPOOL_LOG=info: the release is reported on stderr (%d line(s) "
			  "after the signal)", lines_after);
		e2e_check(bad == NULL && bad_after == NULL,
			  "every line starts with \"gpupool: \" (first bad line: \"%.200s\")",
			  bad != NULL ? bad : bad_after != NULL ? bad_after : "");
	} else if (strcmp(mode, "debug") == 0) {
		int real = 0;

		for (const char *q = ch.err; (q = strstr(q, "a real allocation of ")) != NULL; q++)
			real += strncmp(q + strlen("a real allocation of "), "4194304 bytes", 13) == 0;
		e2e_check(real == 4 && bad == NULL,
			  "GPUPOOL_LOG=debug: one \"gpupool: \" line for each of the four real allocations "
			  "of 4 MiB, none for the four hits after them (got %d: \"%.800s\")", real, ch.err);
	} else if (strcmp(mode, "cudagraphs") == 0) {
		e2e_check(lines == 1 && bad == NULL && strstr(ch.err, "TORCHINDUCTOR_CUDAGRAPHS") != NULL,
			  "takeover mode with inductor's CUDA graphs: exactly one \"gpupool: \" line, at "
			  "the default level, naming them (got %d lines: \"%.500s\")", lines, ch.err);
	} else {
		e2e_check(lines == 1 && bad == NULL && strstr(ch.err, "GPUPOOL_SIGNAL") != NULL,
			  "GPUPOOL_SIGNAL=SIGBOGUS: exactly one \"gpupool: \" line naming GPUPOOL_SIGNAL "
			  "(got %d lines: \"%.500s\")", lines, ch.err);
		e2e_note("and the default signal (SIGUSR1) still released memory (the child's check)");
	}
	printf("PASS %s\n", name);
	return 0;
}
