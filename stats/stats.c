/* stats.c — what every rendering shares: cause names, reset, device entries, derived figures.
 * The field lists themselves live in stats.h, once. libc only: never the pool or the shim. */
#include "stats.h"

#include <string.h>

#define GP_STATS_CAUSE_NAME(name) #name,
static const char *const cause_names[] = { GP_STATS_CAUSES(GP_STATS_CAUSE_NAME) };

const char *gp_stats_cause_name(uint64_t i)
{
	return i < GP_STATS_NCAUSES ? cause_names[i] : "?";
}

void gp_stats_reset(struct gp_stats_snapshot *s)
{
#define GP_STATS_ZERO(name, ...) s->name = 0;
#define GP_STATS_ZERO_ARRAY(name, ...) memset(s->name, 0, sizeof(s->name));
	GP_STATS_STATE(GP_STATS_ZERO)
	GP_STATS_PROCESS(GP_STATS_ZERO)
	GP_STATS_PER_CAUSE(GP_STATS_ZERO_ARRAY)
#undef GP_STATS_ZERO
#undef GP_STATS_ZERO_ARRAY
	s->taken_ns = 0;
	s->ndev = 0;
	memset(s->dev, 0, sizeof(s->dev));
}

struct gp_stats_device *gp_stats_device_entry(struct gp_stats_snapshot *s, int device)
{
	struct gp_stats_device *d;

	for (uint64_t i = 0; i < s->ndev && i < GP_STATS_MAX_DEVICES; i++)
		if (s->dev[i].device == (uint64_t)device)
			return &s->dev[i];
	if (device < 0 || s->ndev >= GP_STATS_MAX_DEVICES)
		return NULL;
	d = &s->dev[s->ndev++];
	memset(d, 0, sizeof(*d));
	d->device = (uint64_t)device;
#define GP_STATS_UNKNOWN_FIELD(name, ...) d->name = GP_STATS_UNKNOWN;
	GP_STATS_NVML(GP_STATS_UNKNOWN_FIELD)
#undef GP_STATS_UNKNOWN_FIELD
	return d;
}

void gp_stats_program_name(const char *cmdline, char *out, size_t len)
{
	size_t n = strcspn(cmdline, " "), start = 0;

	if (len == 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (cmdline[i] == '/')
			start = i + 1;
	n -= start;
	if (n > len - 1)
		n = len - 1;
	memcpy(out, cmdline + start, n);
	out[n] = '\0';
	for (char *p = out; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

uint64_t gp_stats_accounted_bytes(const struct gp_stats_device *d)
{
	uint64_t sum = d->in_use_bytes + d->idle_bytes + d->pending_bytes;

	/* An indented label is a figure inside the line above it, not a line of its own. */
#define GP_STATS_ADD_LINE(name, kind, unit, label, help)                                         \
	if (label[0] != ' ')                                                                      \
		sum += d->name;
	GP_STATS_ACCOUNT(GP_STATS_ADD_LINE)
#undef GP_STATS_ADD_LINE
	return sum;
}

void gp_stats_account(struct gp_stats_device *d)
{
	if (d->nvml_process_bytes == GP_STATS_UNKNOWN) {
		d->other_bytes = GP_STATS_UNKNOWN;
		return;
	}
	/* Two's complement: a difference below 0 reads back as such through int64_t. */
	d->other_bytes = d->nvml_process_bytes - gp_stats_accounted_bytes(d);
}

double gp_stats_hit_rate(const struct gp_stats_device *d)
{
	return d->allocs == 0 ? 0.0 : 100.0 * (double)d->hits / (double)d->allocs;
}
