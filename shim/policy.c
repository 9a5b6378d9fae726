/* policy.c — cap, idle-age and pressure decisions. Sizes given as a percentage are resolved per
 * device from its total memory when the device is first used.
 * Idle age: a block cached longer than GPUPOOL_IDLE_TIMEOUT goes; and when the whole process has
 * allocated nothing for that long (the pool's count and the frameworks' own activity figure both
 * unchanged), the frameworks' caches are flushed and everything cached goes.
 * Pressure: while a device has less free memory than GPUPOOL_MIN_FREE, the pool's cache is cut by
 * the deficit; the frameworks are flushed first when they hold memory, but a device that stays
 * short (another process) must not make this one empty its frameworks' caches at every poll:
 * flushes in a row (no poll between them found every device with enough free memory) are spaced
 * out, the gap doubling up to FLUSH_GAP_MAX. In a row is what the polls saw, not how soon the
 * next flush came: a slow flush or a late tick (a busy machine, the GIL held) must not count as
 * a quiet spell and bring back a flush at every poll. */
#define _GNU_SOURCE
#include "policy.h"
#include "ctx.h"
#include "door/lookup.h"
#include "log.h"
#include "state.h" /* gp_shim.policy */

#include <stdatomic.h>
#include <string.h>

#define IDLE_CHECK_MIN_NS 10000000ULL   /* 10 ms */
#define IDLE_CHECK_MAX_NS 1000000000ULL /* 1 s */
#define FLUSH_MIN_BYTES (2ULL << 20)    /* less in a framework's cache is not worth a flush */
#define FLUSH_GAP_MAX_NS 10000000000ULL /* 10 s */

void gp_policy_init(struct gp_pool *p, const struct gp_options *o)
{
	struct gp_shim_policy *pol = &gp_shim.policy;

	pol->pool = p;
	pol->opt = *o;
	pol->flush_gap_ns = o->poll_interval_ns;
}

static int has_size(const struct gp_size *s)
{
	return s->bytes > 0 || s->percent > 0;
}

int gp_policy_needs_thread(void)
{
	const struct gp_shim_policy *pol = &gp_shim.policy;

	/* GPUPOOL_VMM_TRIM: the thread gives back, once the program is quiet, what the age kept and
	 * what the pool holds beyond the most the program asked for at once in its last two busy
	 * spells (control.c). */
	return has_size(&pol->opt.max_cached) || has_size(&pol->opt.min_free) ||
	       pol->opt.idle_timeout_ns > 0 || (pol->opt.vmm != GP_VMM_OFF && pol->opt.vmm_trim);
}

static uint64_t idle_period(void)
{
	const struct gp_shim_policy *pol = &gp_shim.policy;
	uint64_t period = pol->opt.idle_timeout_ns / 4;

	if (period < IDLE_CHECK_MIN_NS)
		period = IDLE_CHECK_MIN_NS;
	return period > IDLE_CHECK_MAX_NS ? IDLE_CHECK_MAX_NS : period;
}

uint64_t gp_policy_period_ns(void)
{
	const struct gp_shim_policy *pol = &gp_shim.policy;
	uint64_t period = pol->opt.idle_timeout_ns > 0 ? idle_period() : 0;

	if (has_size(&pol->opt.min_free) && (period == 0 || pol->opt.poll_interval_ns < period))
		period = pol->opt.poll_interval_ns;
	return period;
}

/* The device's memory: through the driver in its context, else the runtime (which makes one: a
 * program's first cudaMalloc). */
static int device_memory(int device, size_t *free_b, size_t *total_b)
{
	int rc = gp_ctx_mem_info(device, free_b, total_b);

	if (rc != 0 && gp_real.MemGetInfo != NULL) {
		rc = gp_real.MemGetInfo(free_b, total_b) == cudaSuccess ? 0 : -1;
		if (rc != 0)
			gp_real.GetLastError();
	}
	return rc;
}

void gp_policy_device_seen(int device)
{
	struct gp_shim_policy *pol = &gp_shim.policy;
	size_t free_b = 0, total_b = 0;

	if (device < 0 || device >= GP_MAX_DEVICES)
		return;
	if ((has_size(&pol->opt.max_cached) || has_size(&pol->opt.min_free)) &&
	    device_memory(device, &free_b, &total_b) != 0)
		total_b = 0;
	if (has_size(&pol->opt.max_cached)) {
		uint64_t cap = gp_opt_size_bytes(&pol->opt.max_cached, total_b);
		/* A percentage of an unknown total cannot be honoured: say so, keep no cap. */
		if (cap == 0)
			gp_log(GP_LOG_WARN, "GPUPOOL_MAX_CACHED: device %d total memory unknown; no cap",
			       device);
		gp_pool_set_cap(pol->pool, device, cap);
	}
	pol->min_free[device] = gp_opt_size_bytes(&pol->opt.min_free, total_b);
	atomic_fetch_or(&pol->seen, 1ULL << device);
	gp_log(GP_LOG_DEBUG, "device %d: %.0f MiB total, cap %.0f MiB, min free %.0f MiB", device,
	       (double)total_b / 1048576.0, (double)gp_pool_cap(pol->pool, device) / 1048576.0,
	       (double)pol->min_free[device] / 1048576.0);
}

unsigned gp_policy_due(uint64_t now, uint64_t *measure)
{
	struct gp_shim_policy *pol = &gp_shim.policy;
	unsigned due = 0;

	*measure = 0;
	if (pol->opt.idle_timeout_ns > 0 && now - pol->last_idle_check >= idle_period()) {
		pol->last_idle_check = now;
		due |= GP_POLICY_IDLE;
	}
	/* A timer that fires a little early still counts: else every other poll would be missed. */
	if (has_size(&pol->opt.min_free) &&
	    now - pol->last_poll >= pol->opt.poll_interval_ns - pol->opt.poll_interval_ns / 8) {
		uint64_t mask = atomic_load(&pol->seen);

		pol->last_poll = now;
		due |= GP_POLICY_POLL;
		for (int d = 0; mask != 0; d++, mask >>= 1)
			if ((mask & 1) && pol->min_free[d] > 0)
				*measure |= 1ULL << d;
	}
	return due;
}

static uint64_t short_devices(const struct gp_policy_input *in)
{
	const struct gp_shim_policy *pol = &gp_shim.policy;
	uint64_t mask = in->measured, out = 0;

	if (!(in->due & GP_POLICY_POLL))
		return 0;
	for (int d = 0; mask != 0; d++, mask >>= 1)
		if ((mask & 1) && in->free_bytes[d] < pol->min_free[d])
			out |= 1ULL << d;
	return out;
}

static int flush_gap_over(uint64_t now)
{
	const struct gp_shim_policy *pol = &gp_shim.policy;

	return pol->last_flush_ns == 0 || now - pol->last_flush_ns >= pol->flush_gap_ns;
}

int gp_policy_wants_probe(const struct gp_policy_input *in)
{
	const struct gp_shim_policy *pol = &gp_shim.policy;

	if (short_devices(in) != 0 && flush_gap_over(in->now_ns))
		return 1;
	/* While the pool itself serves allocations the process is not idle: no need to look. */
	return (in->due & GP_POLICY_IDLE) && in->pool_allocs == pol->pool_allocs;
}

/* A flush under pressure: the gap to the next one doubles when the pressure stayed since the
 * last one, and starts again from the poll interval after a quiet spell. */
static void pressure_flushed(uint64_t now)
{
	struct gp_shim_policy *pol = &gp_shim.policy;

	if (pol->last_flush_ns != 0 && !pol->quiet_since_flush)
		pol->flush_gap_ns = pol->flush_gap_ns * 2 > FLUSH_GAP_MAX_NS ? FLUSH_GAP_MAX_NS
									     : pol->flush_gap_ns * 2;
	else
		pol->flush_gap_ns = pol->opt.poll_interval_ns;
	pol->quiet_since_flush = 0;
	pol->last_flush_ns = now;
}

static void plan_pressure(const struct gp_policy_input *in, struct gp_policy_plan *out)
{
	struct gp_shim_policy *pol = &gp_shim.policy;
	uint64_t mask = short_devices(in);

	/* A poll that measured and found no device short: the pressure did not stay. */
	if ((in->due & GP_POLICY_POLL) && in->measured != 0 && mask == 0)
		pol->quiet_since_flush = 1;
	out->pressure = mask;
	for (int d = 0; mask != 0; d++, mask >>= 1)
		if (mask & 1)
			out->deficit[d] = pol->min_free[d] - in->free_bytes[d];
	if (out->pressure != 0 && in->fw_known && in->fw_cached >= FLUSH_MIN_BYTES &&
	    flush_gap_over(in->now_ns)) {
		out->flush = 1;
		pressure_flushed(in->now_ns);
	}
}

static void plan_idle(const struct gp_policy_input *in, struct gp_policy_plan *out)
{
	struct gp_shim_policy *pol = &gp_shim.policy;
	uint64_t now = in->now_ns, timeout = pol->opt.idle_timeout_ns;

	if (timeout == 0)
		return;
	if (in->pool_allocs != pol->pool_allocs) {
		pol->pool_allocs = in->pool_allocs;
		pol->active_ns = now;
	}
	if (in->fw_known && in->fw_activity != pol->fw_activity) {
		pol->fw_activity = in->fw_activity;
		pol->active_ns = now;
	}
	if (!(in->due & GP_POLICY_IDLE) || now < timeout)
		return;
	out->idle_before_ns = now - timeout;
	if (in->fw_known && in->fw_cached >= FLUSH_MIN_BYTES && now - pol->active_ns >= timeout) {
		out->flush = 1;
		out->idle_all = 1;
	}
}

void gp_policy_plan(const struct gp_policy_input *in, struct gp_policy_plan *out)
{
	struct gp_shim_policy *pol = &gp_shim.policy;

	memset(out, 0, sizeof(*out));
	if (pol->active_ns == 0)
		pol->active_ns = in->now_ns; /* the first tick: activity is measured from here */
	plan_pressure(in, out);
	plan_idle(in, out);
}
