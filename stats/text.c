/* text.c — the statistics for people: one column per device, one row per field of the lists in
 * stats.h, then releases by cause and the last release. Fits one screen for a few devices.
 * Never allocates; local time only for the moments shown. */
#define _GNU_SOURCE
#include "out.h"
#include "stats.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define LABEL_W 28
#define CELL_W 14

static const char *clock_text(uint64_t unix_ns, char *buf, size_t len)
{
	time_t t = (time_t)(unix_ns / 1000000000u);
	struct tm tm;

	if (unix_ns == 0 || localtime_r(&t, &tm) == NULL) {
		snprintf(buf, len, "never");
		return buf;
	}
	strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
	return buf;
}

static const char *duration_text(uint64_t ns, char *buf, size_t len)
{
	if (ns < 1000000u)
		snprintf(buf, len, "%.1f us", (double)ns / 1e3);
	else if (ns < 10000000000ull)
		snprintf(buf, len, "%.3f ms", (double)ns / 1e6);
	else
		snprintf(buf, len, "%.1f s", (double)ns / 1e9);
	return buf;
}

static const char *value_text(enum gp_stats_unit unit, uint64_t v, char *buf, size_t len)
{
	switch (unit) {
	case GP_STATS_BYTES:
		return gp_stats_human_bytes(v, buf, len);
	case GP_STATS_NS:
		return duration_text(v, buf, len);
	case GP_STATS_TIME:
		return clock_text(v, buf, len);
	case GP_STATS_CAUSE:
		snprintf(buf, len, "%s", gp_stats_cause_name(v));
		return buf;
	case GP_STATS_SBYTES:
		if ((int64_t)v < 0) {
			char b[32];
			snprintf(buf, len, "-%s", gp_stats_human_bytes(-(uint64_t)v, b, sizeof(b)));
			return buf;
		}
		return gp_stats_human_bytes(v, buf, len);
	case GP_STATS_COUNT:
		break;
	}
	snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

static const char *signal_text(int64_t signo, char *buf, size_t len)
{
	static const struct {
		int signo;
		const char *name;
	} names[] = { { SIGHUP, "SIGHUP" }, { SIGUSR1, "SIGUSR1" }, { SIGUSR2, "SIGUSR2" },
		      { SIGURG, "SIGURG" }, { SIGWINCH, "SIGWINCH" }, { SIGPWR, "SIGPWR" } };

	if (signo == 0) {
		snprintf(buf, len, "none");
		return buf;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (names[i].signo == signo) {
			snprintf(buf, len, "%s (%lld)", names[i].name, (long long)signo);
			return buf;
		}
	}
	snprintf(buf, len, "%lld", (long long)signo);
	return buf;
}

static const char *uptime_text(uint64_t start_ns, uint64_t now_ns, char *buf, size_t len)
{
	uint64_t s = now_ns > start_ns ? (now_ns - start_ns) / 1000000000u : 0;

	if (s < 60)
		snprintf(buf, len, "%llus", (unsigned long long)s);
	else if (s < 3600)
		snprintf(buf, len, "%llum%02llus", (unsigned long long)(s / 60),
			 (unsigned long long)(s % 60));
	else
		snprintf(buf, len, "%lluh%02llum", (unsigned long long)(s / 3600),
			 (unsigned long long)(s / 60 % 60));
	return buf;
}

static void header(struct gp_stats_out *o, const struct gp_stats_snapshot *s)
{
	char a[64], b[64], c[64];

	gp_stats_printf(o, "pid %lld: ", (long long)s->pid);
	gp_stats_put_escaped(o, s->cmd, 0);
	gp_stats_printf(o, "\n  started %s, up %s, release signal %s\n",
			clock_text(s->start_ns, a, sizeof(a)),
			uptime_text(s->start_ns, s->taken_ns, b, sizeof(b)),
			signal_text(s->signo, c, sizeof(c)));
	if (s->suspended_since_ns != 0 && s->self_suspended)
		gp_stats_printf(o, "  SUSPENDED by itself (auto-suspend) since %s: %s parked in host "
				"memory (its blocks and what passed the pool; the context not "
				"counted); its next CUDA call resumes it\n",
				clock_text(s->suspended_since_ns, a, sizeof(a)),
				gp_stats_human_bytes(s->parked_bytes, b, sizeof(b)));
	else if (s->suspended_since_ns != 0)
		gp_stats_printf(o, "  SUSPENDED since %s: %s parked in host memory; its CUDA calls "
				"wait for gpupool resume\n",
				clock_text(s->suspended_since_ns, a, sizeof(a)),
				gp_stats_human_bytes(s->parked_bytes, b, sizeof(b)));
	if (s->auto_suspend_ns != 0)
		gp_stats_printf(o, "  auto-suspend after %s idle: %llu suspends%s%s, %llu resumes%s%s\n",
				duration_text(s->auto_suspend_ns, a, sizeof(a)),
				(unsigned long long)s->suspends,
				s->suspends != 0 ? ", the last took " : "",
				s->suspends != 0 ? duration_text(s->last_suspend_duration_ns, b,
								 sizeof(b)) : "",
				(unsigned long long)s->resumes,
				s->resumes != 0 ? ", the last took " : "",
				s->resumes != 0 ? duration_text(s->last_resume_duration_ns, c,
								sizeof(c)) : "");
	if (s->captures != 0)
		gp_stats_printf(o, "  CUDA graph captures in progress: %llu\n",
				(unsigned long long)s->captures);
}

static void devices(struct gp_stats_out *o, const struct gp_stats_snapshot *s)
{
	uint64_t n = s->ndev < GP_STATS_MAX_DEVICES ? s->ndev : GP_STATS_MAX_DEVICES;
	char cell[64];

	if (n == 0) {
		gp_stats_puts(o, "no device used yet\n");
		return;
	}
	gp_stats_printf(o, "%-*s", LABEL_W, "");
	for (uint64_t i = 0; i < n; i++) {
		snprintf(cell, sizeof(cell), "device %llu", (unsigned long long)s->dev[i].device);
		gp_stats_printf(o, "%*s", CELL_W, cell);
	}
	gp_stats_puts(o, "\n");
	/* A row that is 0 on every device is left out when it is a counter nested under another
	 * (its label indented), or any row nested two deep (under such a counter), but for cache
	 * hits: those rows count what settings do (GPUPOOL_OVERSIZE, GPUPOOL_VMM,
	 * GPUPOOL_REUSE_WAIT, GPUPOOL_VMM_TRIM and its age's debt), and a run without them has
	 * nothing to say there. JSON, Prometheus and the view keep every figure. */
#define GP_STATS_TEXT_ROW(name, kind, unit, label, help)                                          \
	{                                                                                         \
		uint64_t any = 0;                                                                 \
		for (uint64_t i = 0; i < n; i++)                                                  \
			any |= s->dev[i].name;                                                    \
		if (any != 0 || label[0] != ' ' || strcmp(#name, "hits") == 0 ||                  \
		    (kind != GP_STATS_COUNTER && label[2] != ' ')) {                              \
			gp_stats_printf(o, "%-*s", LABEL_W, label);                               \
			for (uint64_t i = 0; i < n; i++)                                          \
				gp_stats_printf(o, "%*s", CELL_W,                                 \
						value_text(unit, s->dev[i].name, cell, sizeof(cell))); \
			gp_stats_puts(o, "\n");                                                 \
		}                                                                                 \
	}
	GP_STATS_DEVICE(GP_STATS_TEXT_ROW)
#undef GP_STATS_TEXT_ROW
	gp_stats_printf(o, "%-*s", LABEL_W, "hit rate");
	for (uint64_t i = 0; i < n; i++) {
		snprintf(cell, sizeof(cell), "%.1f%%", gp_stats_hit_rate(&s->dev[i]));
		gp_stats_printf(o, "%*s", CELL_W, cell);
	}
	gp_stats_puts(o, "\n");
}

static void releases(struct gp_stats_out *o, const struct gp_stats_snapshot *s)
{
	char cell[64];

	gp_stats_printf(o, "%-*s", LABEL_W, "releases by cause");
	for (int c = 0; c < GP_STATS_NCAUSES; c++)
		gp_stats_printf(o, "%*s", 10, gp_stats_cause_name((uint64_t)c));
	gp_stats_puts(o, "\n");
#define GP_STATS_TEXT_CAUSE_ROW(name, kind, unit, label, help)                                    \
	gp_stats_printf(o, "  %-*s", LABEL_W - 2, label);                                         \
	for (int c = 0; c < GP_STATS_NCAUSES; c++)                                                \
		gp_stats_printf(o, "%*s", 10, value_text(unit, s->name[c], cell, sizeof(cell)));  \
	gp_stats_puts(o, "\n");
	GP_STATS_PER_CAUSE(GP_STATS_TEXT_CAUSE_ROW)
#undef GP_STATS_TEXT_CAUSE_ROW
	if (s->release_count == 0) {
		gp_stats_printf(o, "%-*s%s\n", LABEL_W, "last release", "none yet");
		return;
	}
#define GP_STATS_TEXT_PROCESS(name, kind, unit, label, help)                                      \
	gp_stats_printf(o, "%-*s%s\n", LABEL_W, label, value_text(unit, s->name, cell, sizeof(cell)));
	GP_STATS_PROCESS(GP_STATS_TEXT_PROCESS)
#undef GP_STATS_TEXT_PROCESS
}

size_t gp_stats_text(const struct gp_stats_snapshot *s, char *buf, size_t len)
{
	struct gp_stats_out o;

	gp_stats_out_init(&o, buf, len);
	header(&o, s);
	devices(&o, s);
	releases(&o, s);
	return gp_stats_out_end(&o);
}
