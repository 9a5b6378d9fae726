/* json.c — the statistics as JSON (RFC 8259): one object per process, keys as in stats.h, exact
 * integers (bytes, ns), the command line as a valid UTF-8 string. For scripts and dashboards.
 * libc only: never reads the pool or the shim, only a snapshot. */
#include "out.h"
#include "stats.h"

/* `known` 0: the value means nothing yet (no release so far, or nobody measured it): null. */
static void value(struct gp_stats_out *o, enum gp_stats_unit unit, uint64_t v, int known)
{
	if (!known)
		gp_stats_puts(o, "null");
	else if (unit == GP_STATS_CAUSE)
		gp_stats_printf(o, "\"%s\"", gp_stats_cause_name(v));
	else if (unit == GP_STATS_SBYTES)
		gp_stats_printf(o, "%lld", (long long)(int64_t)v);
	else
		gp_stats_printf(o, "%llu", (unsigned long long)v);
}

static void device(struct gp_stats_out *o, const struct gp_stats_device *d)
{
	gp_stats_printf(o, "{\"device\":%llu,\"uuid\":", (unsigned long long)d->device);
	if (d->uuid[0] != '\0') {
		gp_stats_puts(o, "\"");
		gp_stats_put_escaped(o, d->uuid, 'j');
		gp_stats_puts(o, "\"");
	} else {
		gp_stats_puts(o, "null");
	}
#define GP_STATS_JSON_DEV(name, kind, unit, label, help)                                          \
	gp_stats_puts(o, ",\"" #name "\":");                                                      \
	value(o, unit, d->name, 1);
	GP_STATS_DEVICE(GP_STATS_JSON_DEV)
	GP_STATS_ACCOUNT(GP_STATS_JSON_DEV)
#undef GP_STATS_JSON_DEV
#define GP_STATS_JSON_NVML(name, kind, unit, label, help)                                         \
	gp_stats_puts(o, ",\"" #name "\":");                                                      \
	value(o, unit, d->name, d->name != GP_STATS_UNKNOWN);
	GP_STATS_NVML(GP_STATS_JSON_NVML)
#undef GP_STATS_JSON_NVML
	gp_stats_printf(o, ",\"hit_rate_percent\":%.2f}", gp_stats_hit_rate(d));
}

static void object(struct gp_stats_out *o, const struct gp_stats_snapshot *s)
{
	uint64_t n = s->ndev < GP_STATS_MAX_DEVICES ? s->ndev : GP_STATS_MAX_DEVICES;

	gp_stats_printf(o, "{\"pid\":%lld,\"uid\":%llu,\"command\":\"", (long long)s->pid,
			(unsigned long long)s->uid);
	gp_stats_put_escaped(o, s->cmd, 'j');
	gp_stats_printf(o, "\",\"signal\":%lld,\"start_time_ns\":%llu,\"taken_time_ns\":%llu",
			(long long)s->signo, (unsigned long long)s->start_ns,
			(unsigned long long)s->taken_ns);
#define GP_STATS_JSON_STATE(name, kind, unit, label, help)                                        \
	gp_stats_puts(o, ",\"" #name "\":");                                                      \
	if (unit == GP_STATS_TIME && s->name == 0)                                                \
		gp_stats_puts(o, "null");                                                         \
	else                                                                                      \
		value(o, unit, s->name, 1);
	GP_STATS_STATE(GP_STATS_JSON_STATE)
#undef GP_STATS_JSON_STATE
#define GP_STATS_JSON_PROC(name, kind, unit, label, help)                                         \
	gp_stats_puts(o, ",\"" #name "\":");                                                      \
	if (unit == GP_STATS_CAUSE)                                                               \
		value(o, unit, s->name, s->release_count > 0);                                    \
	else                                                                                      \
		value(o, unit, s->name, 1);
	GP_STATS_PROCESS(GP_STATS_JSON_PROC)
#undef GP_STATS_JSON_PROC
#define GP_STATS_JSON_CAUSE(name, kind, unit, label, help)                                        \
	gp_stats_puts(o, ",\"" #name "\":{");                                                     \
	for (int c = 0; c < GP_STATS_NCAUSES; c++)                                                \
		gp_stats_printf(o, "%s\"%s\":%llu", c ? "," : "", gp_stats_cause_name((uint64_t)c), \
				(unsigned long long)s->name[c]);                                  \
	gp_stats_puts(o, "}");
	GP_STATS_PER_CAUSE(GP_STATS_JSON_CAUSE)
#undef GP_STATS_JSON_CAUSE
	gp_stats_puts(o, ",\"devices\":[");
	for (uint64_t i = 0; i < n; i++) {
		if (i > 0)
			gp_stats_puts(o, ",");
		device(o, &s->dev[i]);
	}
	gp_stats_puts(o, "]}");
}

size_t gp_stats_json(const struct gp_stats_snapshot *s, char *buf, size_t len)
{
	struct gp_stats_out o;

	gp_stats_out_init(&o, buf, len);
	object(&o, s);
	gp_stats_puts(&o, "\n");
	return gp_stats_out_end(&o);
}

size_t gp_stats_json_many(const struct gp_stats_snapshot *s, size_t n, char *buf, size_t len)
{
	struct gp_stats_out o;

	gp_stats_out_init(&o, buf, len);
	gp_stats_puts(&o, "[");
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			gp_stats_puts(&o, ",\n");
		object(&o, &s[i]);
	}
	gp_stats_puts(&o, "]\n");
	return gp_stats_out_end(&o);
}
