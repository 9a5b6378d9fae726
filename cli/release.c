/* release.c — `gpupool release PID|--all [--wait] [--timeout SECONDS]`: asks each process for a
 * release through its live view (a request its control thread looks at every tick), then sends
 * the release signal its view names, if any, so that it looks at once (GPUPOOL_SIGNAL=none, or a
 * program that installed its own handler for that signal, gets no signal: its view names none);
 * with --wait, watches the view until that release is reported and says what it gave back and
 * how long it took. */
#define _GNU_SOURCE
#include "cli.h"
#include "view.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_NS 10000000L /* 10 ms */

struct target {
	long pid;
	uint64_t before; /* releases reported before the signal */
	int rc;          /* enum gp_cli_exit; GP_CLI_OK while waiting */
	int done;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int gp_cli_ask_release(const char *cmd, long pid, const struct gp_stats_snapshot *s, int quiet)
{
	char path[64];
	int rc;

	gp_stats_view_path(pid, path, sizeof(path));
	rc = gp_stats_view_request(path);
	if (rc != GP_VIEW_OK) {
		fprintf(stderr, "%s: process %ld: cannot ask through %s: %s\n", cmd, pid, path,
			gp_stats_view_rc_text(rc));
		return rc == GP_VIEW_DENIED ? GP_CLI_DENIED : GP_CLI_ERROR;
	}
	if (s->signo == 0) {
		if (!quiet)
			printf("pid %ld: asked through its view (no release signal: it looks within a "
			       "fraction of a second)\n", pid);
		return GP_CLI_OK;
	}
	if (kill((pid_t)pid, (int)s->signo) != 0) {
		int err = errno;
		fprintf(stderr, "%s: %s: process %ld (signal %lld): %s\n", cmd,
			err == EPERM ? "permission denied" : "cannot signal", pid,
			(long long)s->signo, strerror(err));
		return err == EPERM ? GP_CLI_DENIED : err == ESRCH ? GP_CLI_NO_PROCESS : GP_CLI_ERROR;
	}
	if (!quiet)
		printf("pid %ld: sent signal %lld\n", pid, (long long)s->signo);
	return GP_CLI_OK;
}

static int send(struct target *t, int wait)
{
	struct gp_stats_snapshot s;
	int rc = gp_cli_read("gpupool release", t->pid, &s, 0);

	if (rc != GP_CLI_OK)
		return rc;
	/* Its CUDA calls wait for a resume, and so would the release: no use waiting for it. */
	if (s.suspended_since_ns != 0) {
		fprintf(stderr, "gpupool release: process %ld is suspended (its memory is parked in host "
				"memory; nothing is on the GPU to release); resume it first: gpupool "
				"resume %ld\n", t->pid, t->pid);
		return GP_CLI_STATE;
	}
	t->before = s.release_count;
	return gp_cli_ask_release("gpupool release", t->pid, &s, wait);
}

/* 1 when the release that followed our signal is in the view (and printed). */
static int check(struct target *t)
{
	struct gp_stats_snapshot s;
	char human[32];
	int rc = gp_cli_read("gpupool release", t->pid, &s, 1);

	if (rc == GP_CLI_NO_PROCESS || rc == GP_CLI_STALE) {
		fprintf(stderr, "gpupool release: process %ld exited before its release was reported "
				"(it was asked)\n", t->pid);
		t->rc = rc;
		return 1;
	}
	if (rc != GP_CLI_OK) {
		int again = gp_cli_read("gpupool release", t->pid, &s, 0); /* says why */

		t->rc = again != GP_CLI_OK ? again : rc;
		return 1;
	}
	if (s.release_count <= t->before ||
	    strcmp(gp_stats_cause_name(s.last_release_cause), "signal") != 0)
		return 0;
	printf("pid %ld: released %s (%llu bytes) in %llu blocks in %.3f ms (%s)\n", t->pid,
	       gp_stats_human_bytes(s.last_release_bytes, human, sizeof(human)),
	       (unsigned long long)s.last_release_bytes, (unsigned long long)s.last_release_blocks,
	       (double)s.last_release_duration_ns / 1e6, gp_stats_cause_name(s.last_release_cause));
	return 1;
}

static int usage(void)
{
	fprintf(stderr, "usage: gpupool release PID...|--all [--wait] [--timeout SECONDS]\n");
	return GP_CLI_ERROR;
}

static void help(void)
{
	printf("usage: gpupool release PID...|--all [--wait] [--timeout SECONDS]\n\n"
	       "Sends each process the release signal its live view names: it gives its idle\n"
	       "GPU memory back to the driver (PyTorch's and CuPy's caches first) and keeps\n"
	       "running.\n"
	       "  --all              every process with a live view (of this user)\n"
	       "  --wait             wait until each says what it released, and print it\n"
	       "  --timeout SECONDS  how long --wait waits (default 10)\n");
}

int gp_cli_release(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "all", no_argument, NULL, 'a' },    { "wait", no_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 't' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct target *t = NULL;
	long *pids = NULL;
	size_t n = 0, waiting = 0;
	int all = 0, wait = 0, worst = GP_CLI_OK, c, timed = 0;
	double timeout_s = 10;
	uint64_t end;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'a')
			all = 1;
		else if (c == 'w')
			wait = 1;
		else if (c == 't') {
			if (gp_cli_seconds("gpupool release", "--timeout", optarg, &timeout_s) != 0)
				return GP_CLI_ERROR;
			timed = 1;
		} else if (c == 'h') {
			help();
			return GP_CLI_OK;
		} else {
			gp_cli_bad_option("gpupool release", argv, c);
			return usage();
		}
	}
	if (timed && !wait) {
		fprintf(stderr, "gpupool release: --timeout needs --wait\n");
		return usage();
	}
	if (gp_cli_targets("gpupool release", argc, argv, all, &pids, &n) != GP_CLI_OK)
		return usage();
	t = calloc(n ? n : 1, sizeof(*t));
	if (t == NULL) {
		free(pids);
		return GP_CLI_ERROR;
	}
	for (size_t i = 0; i < n; i++)
		t[i].pid = pids[i];
	free(pids);
	if (all && n == 0)
		printf("no process has a live view\n");
	for (size_t i = 0; i < n; i++) {
		t[i].rc = send(&t[i], wait);
		t[i].done = t[i].rc != GP_CLI_OK || !wait;
		waiting += !t[i].done;
	}
	end = now_ms() + (uint64_t)(timeout_s * 1000);
	while (waiting > 0 && now_ms() < end) {
		struct timespec ts = { 0, POLL_NS };

		nanosleep(&ts, NULL);
		for (size_t i = 0; i < n; i++) {
			if (t[i].done || !check(&t[i]))
				continue;
			t[i].done = 1;
			waiting--;
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (!t[i].done) {
			fprintf(stderr, "gpupool release: process %ld reported no release within %.1f s "
					"(a CUDA graph capture may be holding it off)\n", t[i].pid, timeout_s);
			t[i].rc = GP_CLI_TIMEOUT;
		}
		/* --all: views that went stale meanwhile are not failures of the release. */
		if (t[i].rc != GP_CLI_OK && !(all && t[i].rc == GP_CLI_STALE) && worst == GP_CLI_OK)
			worst = t[i].rc;
	}
	free(t);
	return worst;
}
