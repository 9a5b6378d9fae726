/* prom.c — the statistics in the Prometheus text exposition format (0.0.4), for a textfile
 * collector or the exporter (`gpupool exporter`): one family per field of stats.h (counters end in
 * _total, durations and moments are in seconds), samples labelled by pid and device or cause; who
 * a process is (command, program, container) and a device's UUID only in info families joined on
 * pid. Never reads the pool or the shim, only a snapshot. */
#include "out.h"
#include "stats.h"

#include <stdio.h>
#include <string.h>

/* gpupool_<name>: "_ns" becomes "_seconds"; counters get "_total". */
static const char *metric(const char *name, enum gp_stats_kind kind, char *buf, size_t len)
{
	size_t n = strlen(name);

	if (n > 3 && strcmp(name + n - 3, "_ns") == 0)
		snprintf(buf, len, "gpupool_%.*s_seconds", (int)(n - 3), name);
	else
		snprintf(buf, len, "gpupool_%s", name);
	if (kind == GP_STATS_COUNTER)
		strncat(buf, "_total", len - strlen(buf) - 1);
	return buf;
}

static void family(struct gp_stats_out *o, const char *m, enum gp_stats_kind kind,
		   const char *help)
{
	gp_stats_printf(o, "# HELP %s %s\n# TYPE %s %s\n", m, help, m,
			kind == GP_STATS_COUNTER ? "counter" : "gauge");
}

static void value(struct gp_stats_out *o, enum gp_stats_unit unit, uint64_t v)
{
	if (unit == GP_STATS_NS || unit == GP_STATS_TIME)
		gp_stats_printf(o, " %.9f\n", (double)v / 1e9);
	else if (unit == GP_STATS_SBYTES)
		gp_stats_printf(o, " %lld\n", (long long)(int64_t)v);
	else
		gp_stats_printf(o, " %llu\n", (unsigned long long)v);
}

static void process_info(struct gp_stats_out *o, const struct gp_stats_snapshot *s, size_t n,
			 const char *const *container)
{
	char program[GP_STATS_CMD_MAX];

	family(o, "gpupool_process_info", GP_STATS_GAUGE,
	       "A process under gpupool: its command line, program, release signal and container "
	       "(always 1).");
	for (size_t i = 0; i < n; i++) {
		gp_stats_program_name(s[i].cmd, program, sizeof(program));
		gp_stats_printf(o, "gpupool_process_info{pid=\"%lld\",command=\"", (long long)s[i].pid);
		gp_stats_put_escaped(o, s[i].cmd, 'p');
		gp_stats_puts(o, "\",program=\"");
		gp_stats_put_escaped(o, program, 'p');
		gp_stats_printf(o, "\",signal=\"%lld\",container=\"", (long long)s[i].signo);
		gp_stats_put_escaped(o, container != NULL && container[i] != NULL ? container[i] : "",
				     'p');
		gp_stats_puts(o, "\"} 1\n");
	}
	family(o, "gpupool_device_info", GP_STATS_GAUGE,
	       "A device a process under gpupool uses: its UUID, as NVML names it (always 1).");
	for (size_t i = 0; i < n; i++) {
		for (uint64_t d = 0; d < s[i].ndev && d < GP_STATS_MAX_DEVICES; d++) {
			gp_stats_printf(o, "gpupool_device_info{pid=\"%lld\",device=\"%llu\",uuid=\"",
					(long long)s[i].pid, (unsigned long long)s[i].dev[d].device);
			gp_stats_put_escaped(o, s[i].dev[d].uuid, 'p');
			gp_stats_puts(o, "\"} 1\n");
		}
	}
	family(o, "gpupool_process_start_time_seconds", GP_STATS_GAUGE,
	       "When the process started using the pool (Unix time).");
	for (size_t i = 0; i < n; i++)
		gp_stats_printf(o, "gpupool_process_start_time_seconds{pid=\"%lld\"} %.3f\n",
				(long long)s[i].pid, (double)s[i].start_ns / 1e9);
}

size_t gp_stats_prometheus(const struct gp_stats_snapshot *s, size_t n, const char *const *container,
			   char *buf, size_t len)
{
	struct gp_stats_out o;
	char m[128];

	gp_stats_out_init(&o, buf, len);
	process_info(&o, s, n, container);
#define GP_STATS_PROM_DEV(name, kind, unit, label, help)                                          \
	family(&o, metric(#name, kind, m, sizeof(m)), kind, help);                                \
	for (size_t i = 0; i < n; i++) {                                                          \
		for (uint64_t d = 0; d < s[i].ndev && d < GP_STATS_MAX_DEVICES; d++) {            \
			gp_stats_printf(&o, "%s{pid=\"%lld\",device=\"%llu\"}", m,                \
					(long long)s[i].pid, (unsigned long long)s[i].dev[d].device); \
			value(&o, unit, s[i].dev[d].name);                                        \
		}                                                                                 \
	}
	GP_STATS_DEVICE(GP_STATS_PROM_DEV)
	GP_STATS_ACCOUNT(GP_STATS_PROM_DEV)
#undef GP_STATS_PROM_DEV
	/* NVML's rows only where a reader measured them: no sample rather than a made-up one. */
#define GP_STATS_PROM_NVML(name, kind, unit, label, help)                                         \
	family(&o, metric(#name, kind, m, sizeof(m)), kind, help);                                \
	for (size_t i = 0; i < n; i++) {                                                          \
		for (uint64_t d = 0; d < s[i].ndev && d < GP_STATS_MAX_DEVICES; d++) {            \
			if (s[i].dev[d].name == GP_STATS_UNKNOWN)                                 \
				continue;                                                         \
			gp_stats_printf(&o, "%s{pid=\"%lld\",device=\"%llu\"}", m,                \
					(long long)s[i].pid, (unsigned long long)s[i].dev[d].device); \
			value(&o, unit, s[i].dev[d].name);                                        \
		}                                                                                 \
	}
	GP_STATS_NVML(GP_STATS_PROM_NVML)
#undef GP_STATS_PROM_NVML
#define GP_STATS_PROM_CAUSE(name, kind, unit, label, help)                                        \
	family(&o, metric(#name, kind, m, sizeof(m)), kind, help);                                \
	for (size_t i = 0; i < n; i++) {                                                          \
		for (int c = 0; c < GP_STATS_NCAUSES; c++) {                                      \
			gp_stats_printf(&o, "%s{pid=\"%lld\",cause=\"%s\"}", m, (long long)s[i].pid, \
					gp_stats_cause_name((uint64_t)c));                        \
			value(&o, unit, s[i].name[c]);                                            \
		}                                                                                 \
	}
	GP_STATS_PER_CAUSE(GP_STATS_PROM_CAUSE)
#undef GP_STATS_PROM_CAUSE
	/* The last release's cause is a label (an "info" gauge); nothing before the first one. */
#define GP_STATS_PROM_PROC(name, kind, unit, label, help)                                         \
	family(&o, metric(#name, kind, m, sizeof(m)), kind, help);                                \
	for (size_t i = 0; i < n; i++) {                                                          \
		if (unit == GP_STATS_CAUSE) {                                                     \
			if (s[i].release_count > 0)                                               \
				gp_stats_printf(&o, "%s{pid=\"%lld\",cause=\"%s\"} 1\n", m,       \
						(long long)s[i].pid,                              \
						gp_stats_cause_name(s[i].name));                  \
			continue;                                                                 \
		}                                                                                 \
		gp_stats_printf(&o, "%s{pid=\"%lld\"}", m, (long long)s[i].pid);                  \
		value(&o, unit, s[i].name);                                                       \
	}
	GP_STATS_STATE(GP_STATS_PROM_PROC)
	GP_STATS_PROCESS(GP_STATS_PROM_PROC)
#undef GP_STATS_PROM_PROC
	return gp_stats_out_end(&o);
}
