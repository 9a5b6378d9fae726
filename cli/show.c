/* show.c — `gpupool stats PID|--all [--json|--prometheus]` (one process's figures, or every
 * one's) and `gpupool top` (every process with a live view, one row per device, refreshed like
 * top). Stale views met on the way are removed. Reads only: never signals or writes a view. */
#define _GNU_SOURCE
#include "cli.h"

#include <getopt.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OLD_VIEW_NS 5000000000ULL /* a view not refreshed for this long is noted */

enum format { TEXT, JSON, PROMETHEUS };

typedef size_t (*render_fn)(const struct gp_stats_snapshot *s, size_t n, char *buf, size_t len);

static uint64_t unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t text_many(const struct gp_stats_snapshot *s, size_t n, char *buf, size_t len)
{
	size_t total = 0;

	for (size_t i = 0; i < n; i++) {
		size_t off = total < len ? total : len;
		total += gp_stats_text(&s[i], buf + off, len - off);
		if (total + 1 < len)
			memcpy(buf + total, "\n", 2);
		total++;
		off = total < len ? total : len;
		total += gp_stats_account_text(&s[i], buf + off, len - off);
		if (i + 1 < n) {
			if (total + 1 < len)
				memcpy(buf + total, "\n", 2);
			total++;
		}
	}
	return total;
}

static size_t json_one_or_many(const struct gp_stats_snapshot *s, size_t n, char *buf, size_t len)
{
	return n == 1 ? gp_stats_json(s, buf, len) : gp_stats_json_many(s, n, buf, len);
}

/* With the container each process runs in (gpupool_process_info's container label). */
static size_t prometheus_many(const struct gp_stats_snapshot *s, size_t n, char *buf, size_t len)
{
	const char **containers = gp_cli_containers(s, n);
	size_t need = gp_stats_prometheus(s, n, containers, buf, len);

	free(containers);
	return need;
}

static int print(render_fn fn, const struct gp_stats_snapshot *s, size_t n)
{
	size_t cap = 65536, need;
	char *buf = malloc(cap);

	if (buf == NULL)
		return GP_CLI_ERROR;
	need = fn(s, n, buf, cap);
	if (need >= cap) {
		char *bigger = realloc(buf, need + 1);
		if (bigger == NULL) {
			free(buf);
			return GP_CLI_ERROR;
		}
		buf = bigger;
		fn(s, n, buf, need + 1);
	}
	fputs(buf, stdout);
	free(buf);
	return GP_CLI_OK;
}

static void note_old(const struct gp_stats_snapshot *s)
{
	uint64_t now = unix_ns();

	if (s->taken_ns != 0 && s->suspended_since_ns == 0 && now > s->taken_ns + OLD_VIEW_NS)
		fprintf(stderr, "gpupool stats: note: process %lld last updated its view %.0f s ago "
				"(stopped, or busy in a CUDA call)\n",
			(long long)s->pid, (double)(now - s->taken_ns) / 1e9);
}

static int stats_usage(void)
{
	fprintf(stderr, "usage: gpupool stats PID...|--all [--json|--prometheus]\n");
	return GP_CLI_ERROR;
}

static void stats_help(void)
{
	printf("usage: gpupool stats PID...|--all [--json|--prometheus]\n\n"
	       "The statistics of running gpupool processes, read from their live views\n"
	       "(/dev/shm/gpupool.<pid>): per device what is in use, cached and pending, the\n"
	       "counters, and the last release; then every byte the process holds on each\n"
	       "device, line by line, adding up to NVML's figure for it (what nvidia-smi\n"
	       "shows): the rest is the CUDA context and the libraries' own memory.\n"
	       "  --all         every process with a live view (of this user)\n"
	       "  --json        as JSON\n"
	       "  --prometheus  in Prometheus' text format\n");
}

int gp_cli_stats(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "all", no_argument, NULL, 'a' },	   { "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	enum format fmt = TEXT;
	struct gp_stats_snapshot *s = NULL;
	long *pids = NULL;
	size_t n = 0, got = 0;
	int all = 0, rc = GP_CLI_OK, c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'a') {
			all = 1;
		} else if (c == 'j' || c == 'p') {
			enum format want = c == 'j' ? JSON : PROMETHEUS;
			if (fmt != TEXT && fmt != want) {
				fprintf(stderr, "gpupool stats: --json and --prometheus: give one\n");
				return stats_usage();
			}
			fmt = want;
		} else if (c == 'h') {
			stats_help();
			return GP_CLI_OK;
		} else {
			gp_cli_bad_option("gpupool stats", argv, c);
			return stats_usage();
		}
	}
	if (gp_cli_targets("gpupool stats", argc, argv, all, &pids, &n) != GP_CLI_OK)
		return stats_usage();
	s = calloc(n ? n : 1, sizeof(*s));
	if (s == NULL) {
		rc = GP_CLI_ERROR;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		/* --all: views of other users and stale ones are skipped quietly. */
		int r = gp_cli_read("gpupool stats", pids[i], &s[got], all);
		if (r == GP_CLI_OK)
			note_old(&s[got++]);
		else if (r == GP_CLI_NOT_GPUPOOL && !all && fmt == TEXT &&
			 gp_cli_driver_state(pids[i]) == GP_CLI_OK)
			continue; /* a suspended process needs no view to say so */
		else if (!all && rc == GP_CLI_OK)
			rc = r;
	}
	if (got > 0 || (all && fmt != TEXT)) {
		int r;

		gp_cli_account(s, got, fmt == TEXT);
		r = print(fmt == TEXT ? text_many : fmt == JSON ? json_one_or_many
							       : prometheus_many, s, got);
		if (rc == GP_CLI_OK)
			rc = r;
	} else if (all) {
		printf("no process has a live view\n");
	}
out:
	free(s);
	free(pids);
	return rc;
}

/* ---- top -------------------------------------------------------------------------------- */

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

/* 80 columns: 7 + 1 + 17 + 1 + 3 + 4 x 11 + 1 + 6. */
static void row(const struct gp_stats_snapshot *s, const struct gp_stats_device *d)
{
	char cmd[18], a[16], b[16], c[16], e[16];

	gp_stats_program_name(s->cmd, cmd, sizeof(cmd));
	printf("%7lld %-17s %3llu %10s %10s %10s %10s %6.1f\n", (long long)s->pid, cmd,
	       (unsigned long long)d->device, gp_stats_human_bytes(d->in_use_bytes, a, sizeof(a)),
	       gp_stats_human_bytes(d->idle_bytes, b, sizeof(b)),
	       gp_stats_human_bytes(d->pending_bytes, c, sizeof(c)),
	       gp_stats_human_bytes(d->peak_in_use_bytes, e, sizeof(e)), gp_stats_hit_rate(d));
}

static void suspended_row(const struct gp_stats_snapshot *s)
{
	time_t t = (time_t)(s->suspended_since_ns / 1000000000u);
	char when[32], parked[16];
	struct tm tm;

	localtime_r(&t, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	/* Within 80 columns at the widest (a 7-digit pid, "1023.9 GiB"), like the rows above. */
	if (s->self_suspended)
		printf("%7s   AUTO-SUSPENDED since %s, %s parked in host memory\n"
		       "%7s   %u resumes so far; next CUDA call or gpupool resume %lld\n", "", when,
		       gp_stats_human_bytes(s->parked_bytes, parked, sizeof(parked)), "",
		       (unsigned)s->resumes, (long long)s->pid);
	else
		printf("%7s   SUSPENDED since %s, %s parked (gpupool resume %lld)\n", "", when,
		       gp_stats_human_bytes(s->parked_bytes, parked, sizeof(parked)),
		       (long long)s->pid);
}

static void frame(int clear)
{
	struct gp_stats_snapshot s;
	size_t n, shown = 0, denied = 0, stale = 0;
	long *pids = gp_cli_list(&n);
	char when[32];
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	if (clear)
		fputs("\033[H\033[2J", stdout);
	printf("gpupool top - %s\n%7s %-17s %3s %10s %10s %10s %10s %6s\n", when, "PID", "COMMAND",
	       "DEV", "IN USE", "IDLE", "PENDING", "PEAK", "HIT%");
	for (size_t i = 0; i < n; i++) {
		int rc = gp_cli_read("gpupool top", pids[i], &s, 1);

		denied += rc == GP_CLI_DENIED;
		stale += rc == GP_CLI_STALE;
		if (rc != GP_CLI_OK)
			continue;
		shown++;
		if (s.ndev == 0) {
			char cmd[18];

			gp_stats_program_name(s.cmd, cmd, sizeof(cmd));
			printf("%7lld %-17s   -   (no device used yet)\n", (long long)s.pid, cmd);
		}
		for (uint64_t d = 0; d < s.ndev && d < GP_STATS_MAX_DEVICES; d++)
			row(&s, &s.dev[d]);
		if (s.suspended_since_ns != 0)
			suspended_row(&s);
	}
	if (shown == 0)
		printf("(no process has a live view)\n");
	if (denied > 0)
		printf("(%zu process(es) of other users not shown: permission denied)\n", denied);
	if (stale > 0)
		printf("(%zu stale view(s) of exited processes removed where allowed)\n", stale);
	fflush(stdout);
	free(pids);
}

static int top_usage(void)
{
	fprintf(stderr, "usage: gpupool top [-d|--interval SECONDS] [-n|--count FRAMES | --once]\n");
	return GP_CLI_ERROR;
}

static void top_help(void)
{
	printf("usage: gpupool top [-d|--interval SECONDS] [-n|--count FRAMES | --once]\n\n"
	       "Every process with a live view, one row per device, refreshed until ^C.\n"
	       "  -d, --interval SECONDS  between frames (default 1, at least 0.05)\n"
	       "  -n, --count FRAMES      stop after that many frames\n"
	       "      --once              one frame (-n 1)\n");
}

int gp_cli_top(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "interval", required_argument, NULL, 'd' }, { "count", required_argument, NULL, 'n' },
		{ "once", no_argument, NULL, 'o' },	       { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	double interval = 1.0;
	long frames = -1; /* until interrupted */
	int tty = isatty(STDOUT_FILENO), c, once = 0, counted = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":d:n:h", opts, NULL)) != -1) {
		if (c == 'd') {
			if (gp_cli_seconds("gpupool top", "-d", optarg, &interval) != 0)
				return GP_CLI_ERROR;
			if (interval < 0.05) {
				fprintf(stderr, "gpupool top: -d %s: at least 0.05 seconds\n", optarg);
				return GP_CLI_ERROR;
			}
		} else if (c == 'n') {
			if (gp_cli_count("gpupool top", "-n", optarg, &frames) != 0)
				return GP_CLI_ERROR;
			counted = 1;
		} else if (c == 'o') {
			once = 1;
		} else if (c == 'h') {
			top_help();
			return GP_CLI_OK;
		} else {
			gp_cli_bad_option("gpupool top", argv, c);
			return top_usage();
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gpupool top: unexpected argument: %s\n", argv[optind]);
		return top_usage();
	}
	if (once && counted) {
		fprintf(stderr, "gpupool top: --once and -n: give one\n");
		return top_usage();
	}
	if (once)
		frames = 1;
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	for (long f = 0; !stop && (frames < 0 || f < frames); f++) {
		struct timespec ts = { (time_t)interval,
				       (long)((interval - (double)(time_t)interval) * 1e9) };

		if (f > 0) {
			while (nanosleep(&ts, &ts) != 0 && !stop)
				;
			if (stop)
				break;
			if (!tty)
				putchar('\n');
		}
		frame(tty);
	}
	return GP_CLI_OK;
}
