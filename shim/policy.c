/* policy.c — cap, idle-age and pressure releases. Sizes given as a percentage are resolved per
 * device from its total memory when the device is first used. Over-cap notices come from the
 * free path as a bit in a mask and a wake-up; the control thread does the release. */
#define _GNU_SOURCE
#include "policy.h"
#include "control.h"
#include "log.h"
#include "real.h"

#include <stdatomic.h>
#include <time.h>

#define IDLE_CHECK_MIN_NS 10000000ULL   /* 10 ms */
#define IDLE_CHECK_MAX_NS 1000000000ULL /* 1 s */

static struct gp_pool *pool;
static struct gp_options opt;
static _Atomic uint64_t seen;     /* devices in use */
static _Atomic uint64_t over_cap; /* devices whose cache went over the cap */
static uint64_t min_free[GP_MAX_DEVICES]; /* bytes; written once per device before `seen` */
static uint64_t last_idle_check, last_poll;

static uint64_t now_coarse(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gp_policy_init(struct gp_pool *p, const struct gp_options *o)
{
	pool = p;
	opt = *o;
}

static int has_size(const struct gp_size *s)
{
	return s->bytes > 0 || s->percent > 0;
}

int gp_policy_needs_thread(void)
{
	return has_size(&opt.max_cached) || has_size(&opt.min_free) || opt.idle_timeout_ns > 0;
}

uint64_t gp_policy_period_ns(void)
{
	uint64_t period = 0;

	if (opt.idle_timeout_ns > 0) {
		period = opt.idle_timeout_ns / 4;
		if (period < IDLE_CHECK_MIN_NS)
			period = IDLE_CHECK_MIN_NS;
		if (period > IDLE_CHECK_MAX_NS)
			period = IDLE_CHECK_MAX_NS;
	}
	if (has_size(&opt.min_free) && (period == 0 || opt.poll_interval_ns < period))
		period = opt.poll_interval_ns;
	return period;
}

void gp_policy_device_seen(int device)
{
	size_t free_b = 0, total_b = 0;

	if (device < 0 || device >= GP_MAX_DEVICES)
		return;
	if ((has_size(&opt.max_cached) || has_size(&opt.min_free)) &&
	    gp_real.MemGetInfo(&free_b, &total_b) != cudaSuccess) {
		gp_real.GetLastError();
		total_b = 0;
	}
	if (has_size(&opt.max_cached)) {
		uint64_t cap = gp_opt_size_bytes(&opt.max_cached, total_b);
		/* A percentage of an unknown total cannot be honoured: say so, keep no cap. */
		if (cap == 0)
			gp_log(GP_LOG_WARN, "GPUPOOL_MAX_CACHED: device %d total memory unknown; no cap",
			       device);
		gp_pool_set_cap(pool, device, cap);
	}
	min_free[device] = gp_opt_size_bytes(&opt.min_free, total_b);
	atomic_fetch_or(&seen, 1ULL << device);
	gp_log(GP_LOG_DEBUG, "device %d: %.0f MiB total, cap %.0f MiB, min free %.0f MiB", device,
	       (double)total_b / 1048576.0, (double)gp_pool_cap(pool, device) / 1048576.0,
	       (double)min_free[device] / 1048576.0);
}

void gp_policy_over_cap(void *arg, int device)
{
	(void)arg;
	atomic_fetch_or(&over_cap, 1ULL << (device & 63));
	gp_control_request_policy();
}

static void run_cap(void)
{
	uint64_t mask = atomic_exchange(&over_cap, 0);

	for (int d = 0; mask != 0; d++, mask >>= 1)
		if (mask & 1)
			gp_control_release(pool, d, gp_pool_cap(pool, d), GP_CAUSE_CAP);
}

static void run_idle(uint64_t now)
{
	if (opt.idle_timeout_ns == 0 || now < opt.idle_timeout_ns)
		return;
	gp_control_release_idle(pool, now - opt.idle_timeout_ns);
}

/* Free memory as the device reports it; the control thread switches to the device. */
static void run_pressure(void)
{
	uint64_t mask = atomic_load(&seen);

	for (int d = 0; mask != 0; d++, mask >>= 1) {
		size_t free_b, total_b;
		uint64_t cached, deficit;

		if (!(mask & 1) || min_free[d] == 0)
			continue;
		if (gp_real.SetDevice(d) != cudaSuccess ||
		    gp_real.MemGetInfo(&free_b, &total_b) != cudaSuccess) {
			gp_real.GetLastError();
			continue;
		}
		if (free_b >= min_free[d])
			continue;
		cached = gp_pool_cached_bytes(pool, d);
		if (cached == 0)
			continue;
		deficit = min_free[d] - free_b;
		gp_control_release(pool, d, cached > deficit ? cached - deficit : 0,
				   GP_CAUSE_PRESSURE);
	}
}

void gp_policy_run(void)
{
	uint64_t now = now_coarse();

	run_cap();
	if (opt.idle_timeout_ns > 0 && now - last_idle_check >= gp_policy_period_ns()) {
		last_idle_check = now;
		run_idle(now);
	}
	if (has_size(&opt.min_free) && now - last_poll >= opt.poll_interval_ns - opt.poll_interval_ns / 8) {
		last_poll = now;
		run_pressure();
	}
}
