/* account.c — the accounting table for people: every byte a process holds on each device, line
 * by line, the lines adding up to NVML's figure for the process (what nvidia-smi shows), one
 * column per device; then what is unknown or estimated, in words. Renders a snapshot only: the
 * NVML rows are whatever the reader put there (GP_STATS_UNKNOWN when it could not). libc only. */
#include "out.h"
#include "stats.h"

#include <stdio.h>
#include <string.h>

#define LABEL_W 42
#define CELL_W 14

static const char *cell_text(enum gp_stats_unit unit, uint64_t v, char *buf, size_t len)
{
	char b[32];

	if (v == GP_STATS_UNKNOWN)
		snprintf(buf, len, "unknown");
	else if (unit == GP_STATS_SBYTES && (int64_t)v < 0)
		snprintf(buf, len, "-%s", gp_stats_human_bytes(-v, b, sizeof(b)));
	else
		gp_stats_human_bytes(v, buf, len);
	return buf;
}

/* One row: `label`, then field `off` (a uint64_t in struct gp_stats_device) of every device. */
static void row(struct gp_stats_out *o, const struct gp_stats_snapshot *s, uint64_t n,
		const char *label, enum gp_stats_unit unit, size_t off)
{
	char cell[48];

	gp_stats_printf(o, "%-*s", LABEL_W, label);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v;

		memcpy(&v, (const char *)&s->dev[i] + off, sizeof(v));
		gp_stats_printf(o, "%*s", CELL_W, cell_text(unit, v, cell, sizeof(cell)));
	}
	gp_stats_puts(o, "\n");
}

/* What the table cannot vouch for, said once under it. */
static void notes(struct gp_stats_out *o, const struct gp_stats_snapshot *s, uint64_t n)
{
	int unknown = 0, over = 0, managed = 0;
	char a[32];

	for (uint64_t i = 0; i < n; i++) {
		unknown |= s->dev[i].nvml_process_bytes == GP_STATS_UNKNOWN;
		over |= s->dev[i].other_bytes != GP_STATS_UNKNOWN && (int64_t)s->dev[i].other_bytes < 0;
		managed |= s->dev[i].passed_managed_bytes != 0;
	}
	if (unknown)
		gp_stats_puts(o, "  NVML's figure unknown on a device: so is the rest (context, libraries)\n");
	if (over)
		gp_stats_puts(o, "  a rest below 0: an estimated line counts more than the device holds\n");
	if (s->framework_read_ns != 0)
		gp_stats_puts(o, "  PyTorch/CuPy: read under the GIL at most once a second; CuPy's pool on "
				 "device 0 only\n");
	if (managed)
		gp_stats_puts(o, "  managed memory: what was allocated; the device holds the pages that "
				 "moved there\n");
	gp_stats_printf(o, "  passed through, %s or less: counted in 512-byte steps (estimated: the "
			   "driver packs these)\n", gp_stats_human_bytes(1u << 20, a, sizeof(a)));
}

size_t gp_stats_account_text(const struct gp_stats_snapshot *s, char *buf, size_t len)
{
	uint64_t n = s->ndev < GP_STATS_MAX_DEVICES ? s->ndev : GP_STATS_MAX_DEVICES;
	struct gp_stats_out o;
	char cell[48];

	gp_stats_out_init(&o, buf, len);
	if (n == 0) {
		gp_stats_puts(&o, "device memory: no device used yet\n");
		return gp_stats_out_end(&o);
	}
	gp_stats_printf(&o, "%-*s", LABEL_W, "device memory, every byte");
	for (uint64_t i = 0; i < n; i++) {
		snprintf(cell, sizeof(cell), "device %llu", (unsigned long long)s->dev[i].device);
		gp_stats_printf(&o, "%*s", CELL_W, cell);
	}
	gp_stats_puts(&o, "\n");
	row(&o, s, n, "in use by the program (gpupool's blocks)", GP_STATS_BYTES,
	    offsetof(struct gp_stats_device, in_use_bytes));
	/* An indented label is inside the line above: shown only once a framework was read. */
#define GP_STATS_ACCOUNT_ROW(name, kind, unit, label, help)                                      \
	if (label[0] != ' ' || s->framework_read_ns != 0)                                         \
		row(&o, s, n, label[0] == ' ' ? label : "  " label, unit,                         \
		    offsetof(struct gp_stats_device, name));                                      \
	if (strcmp(#name, "framework_cached_bytes") == 0) {                                       \
		row(&o, s, n, "idle in gpupool's cache", GP_STATS_BYTES,                          \
		    offsetof(struct gp_stats_device, idle_bytes));                                \
		row(&o, s, n, "pending (freed, the GPU not done yet)", GP_STATS_BYTES,            \
		    offsetof(struct gp_stats_device, pending_bytes));                             \
		gp_stats_puts(&o, "passed through the pool:\n");                                  \
	}
	GP_STATS_ACCOUNT(GP_STATS_ACCOUNT_ROW)
#undef GP_STATS_ACCOUNT_ROW
#define GP_STATS_NVML_ROW(name, kind, unit, label, help)                                         \
	row(&o, s, n, strcmp(#name, "nvml_process_bytes") == 0 ? "= " label : label, unit,       \
	    offsetof(struct gp_stats_device, name));
	GP_STATS_NVML(GP_STATS_NVML_ROW)
#undef GP_STATS_NVML_ROW
	notes(&o, s, n);
	return gp_stats_out_end(&o);
}
