/* observe.c — the statistics snapshot, read from the pool's own counters (kept under the class
 * locks the hot path takes anyway, so observing adds no lock there), and what is done with it:
 * the live view (publish.c), trace samples (trace.c), the exit summary (summary.c). Runs on the
 * control thread, after releases and at exit; never calls CUDA. */
#define _GNU_SOURCE
#include "observe.h"
#include "account.h"
#include "capture.h"
#include "clock.h"
#include "ctx.h"
#include "log.h"
#include "state.h" /* gp_shim.obs */
#include "summary.h"
#include "suspend.h"
#include "trace.h"
#include "publish.h"
#include "view.h" /* gp_stats_cmdline (stats/view.h) */

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VIEW_PERIOD_NS 200000000ULL  /* the live view is at most this old */
#define TRACE_PERIOD_NS 20000000ULL  /* pool samples in the trace (a plot's resolution) */

_Static_assert((int)GP_STATS_NCAUSES == (int)GP_CAUSE_COUNT,
	       "stats.h lists the pool's release causes, in its order");

/* %p -> pid, %% -> %; a relative path is made absolute now (the program may chdir later).
 * -1 after saying so if it does not fit: a cut name would be another file. */
static int expand_path(const char *what, const char *in, char *out, size_t len)
{
	size_t n = 0;

	out[0] = '\0';
	if (in[0] != '/' && getcwd(out, len - 1) != NULL && strcmp(out, "/") != 0) {
		n = strlen(out);
		out[n++] = '/';
	}
	for (; *in != '\0' && n + 24 < len; in++) {
		if (in[0] == '%' && in[1] == 'p') {
			n += (size_t)snprintf(out + n, len - n, "%ld", (long)getpid());
			in++;
			continue;
		}
		if (in[0] == '%' && in[1] == '%')
			in++;
		out[n++] = *in;
	}
	out[n] = '\0';
	if (*in == '\0')
		return 0;
	gp_log(GP_LOG_ERROR, "%s: the path is too long; ignored", what);
	return -1;
}

/* Device d's UUID as NVML writes it ("GPU-" and 36 characters), asked of the driver once; empty
 * when it cannot say. publish_lock held. */
static const char *device_uuid(int d)
{
	char *u = gp_shim.obs.uuid[d];

	if (u[0] == '\0' && !gp_shim.obs.uuid_tried[d] && gp_suspend_running()) {
		gp_shim.obs.uuid_tried[d] = 1;
		gp_ctx_device_uuid(d, u, GP_STATS_UUID_MAX);
	}
	return u;
}

/* The figures now; publish_lock held (it guards the last release). */
static void snapshot(struct gp_stats_snapshot *s)
{
	/* A device the program uses only past the pool (a context of its own, managed memory)
	 * has an entry too: its accounting lines. */
	uint64_t mask = gp_pool_devices(gp_shim.obs.pool) | gp_account_devices();

	memcpy(s, &gp_shim.obs.who,
	       offsetof(struct gp_stats_snapshot, cmd) + sizeof(gp_shim.obs.who.cmd));
	gp_stats_reset(s);
	s->taken_ns = gp_clock_ns(CLOCK_REALTIME);
	s->captures = gp_capture_count();
	for (int d = 0; mask != 0; d++, mask >>= 1) {
		struct gp_pool_dev_stats p;
		struct gp_stats_device *e;

		if (!(mask & 1) || (e = gp_stats_device_entry(s, d)) == NULL)
			continue;
		memcpy(e->uuid, device_uuid(d), GP_STATS_UUID_MAX);
		gp_account_fill(d, e, &s->framework_read_ns);
		if (gp_pool_dev_stats(gp_shim.obs.pool, d, &p) != GP_OK)
			continue;
		e->in_use_bytes = p.live_bytes;
		e->in_use_blocks = p.live_blocks;
		e->requested_bytes = p.requested_bytes;
		e->idle_bytes = p.idle_bytes;
		e->idle_blocks = p.idle_blocks;
		e->pending_bytes = p.pending_bytes;
		e->pending_blocks = p.pending_blocks;
		e->peak_in_use_bytes = p.peak_live_bytes;
		e->peak_reserved_bytes = p.peak_reserved_bytes;
		e->allocs = p.allocs;
		e->hits = p.hits;
		e->frees = p.frees;
		e->thread_caches = p.tcaches;
		e->thread_caches_shared = p.tcaches_shared;
		e->real_mallocs = p.real_allocs;
		e->real_frees = p.real_frees;
		e->failed_allocs = p.failed_allocs;
		e->oom_retries = atomic_load_explicit(&gp_shim.obs.oom_retries[d],
						      memory_order_relaxed);
		e->bad_frees = p.bad_frees;
		e->unseen_frees = p.stale_evictions;
		e->held_bytes = p.held_bytes;
		e->oversize_hits = p.oversize_hits;
		e->splits = p.splits;
		e->merges = p.merges;
		e->remaps = p.remaps;
		e->remapped_bytes = p.remapped_bytes;
		e->trims = p.trims;
		e->trimmed_bytes = p.trimmed_bytes;
		e->owed_bytes = p.trim_owed;
		e->vmm_bytes = p.movable_bytes;
		e->fence_waits = p.fence_waits;
		e->fence_wait_timeouts = p.fence_wait_timeouts;
		/* Joins need one device (fence.c): that one's. */
		if (atomic_load(&gp_shim.fence.devmask) == 1ULL << d)
			e->fence_joins = atomic_load(&gp_shim.fence.joins);
	}
	gp_pool_release_counts(gp_shim.obs.pool, s->releases, s->released_bytes);
	s->release_count = gp_shim.obs.last_count;
	s->last_release_cause = gp_shim.obs.last_cause;
	s->last_release_bytes = gp_shim.obs.last_bytes;
	s->last_release_blocks = gp_shim.obs.last_blocks;
	s->last_release_duration_ns = gp_shim.obs.last_ns;
	s->last_release_time_ns = gp_shim.obs.last_at;
	gp_suspend_fill(s);
}

int gp_obs_start(struct gp_pool *p, const struct gp_options *o, void (*wake)(void))
{
	struct gp_stats_snapshot *who = &gp_shim.obs.who;
	char path[GP_OPT_PATH_MAX + PATH_MAX];

	gp_shim.obs.pool = p;
	gp_shim.obs.owner = getpid();
	who->pid = (int64_t)gp_shim.obs.owner;
	who->uid = (uint64_t)geteuid();
	who->signo = o->signo;
	who->start_ns = gp_clock_ns(CLOCK_REALTIME);
	gp_stats_cmdline((long)gp_shim.obs.owner, who->cmd, sizeof(who->cmd));
	if (o->stats_file[0] != '\0' &&
	    expand_path("GPUPOOL_STATS_FILE", o->stats_file, gp_shim.obs.stats_file,
			sizeof(gp_shim.obs.stats_file)) != 0)
		gp_shim.obs.stats_file[0] = '\0';
	pthread_mutex_lock(&gp_shim.obs.publish_lock);
	snapshot(&gp_shim.obs.scratch);
	if (o->stats_shm)
		gp_shim.obs.viewing = gp_view_start(&gp_shim.obs.scratch) == 0;
	if (o->trace[0] != '\0' && expand_path("GPUPOOL_TRACE", o->trace, path, sizeof(path)) == 0) {
		gp_shim.obs.tracing = gp_trace_start(path, wake) == 0;
		if (gp_shim.obs.tracing)
			gp_trace_sample(&gp_shim.obs.scratch, "start");
	}
	pthread_mutex_unlock(&gp_shim.obs.publish_lock);
	gp_shim.obs.period_ns = gp_shim.obs.tracing ? TRACE_PERIOD_NS : VIEW_PERIOD_NS;
	return gp_shim.obs.viewing || gp_shim.obs.tracing;
}

int gp_obs_viewing(void)
{
	return atomic_load_explicit(&gp_shim.obs.viewing, memory_order_relaxed);
}

uint64_t gp_obs_sleep_ns(uint64_t ns)
{
	if (!gp_shim.obs.viewing && !gp_shim.obs.tracing)
		return ns;
	return ns == 0 || ns > gp_shim.obs.period_ns ? gp_shim.obs.period_ns : ns;
}

/* Notes gp_obs_unsettled's answer from the snapshot just taken. publish_lock held. */
static void note_settling(const struct gp_stats_snapshot *s)
{
	uint64_t activity = 0, pending = 0;

	for (uint64_t i = 0; i < s->ndev && i < GP_STATS_MAX_DEVICES; i++) {
		activity += s->dev[i].allocs + s->dev[i].frees;
		pending += s->dev[i].pending_bytes;
	}
	atomic_store_explicit(&gp_shim.obs.unsettled,
			      pending > 0 && activity == gp_shim.obs.last_activity,
			      memory_order_relaxed);
	gp_shim.obs.last_activity = activity;
}

int gp_obs_unsettled(void)
{
	return atomic_load_explicit(&gp_shim.obs.unsettled, memory_order_relaxed);
}

/* publish_lock held. */
static void publish(const char *event)
{
	snapshot(&gp_shim.obs.scratch);
	note_settling(&gp_shim.obs.scratch);
	if (gp_shim.obs.viewing)
		gp_view_publish(&gp_shim.obs.scratch);
	if (gp_shim.obs.tracing)
		gp_trace_sample(&gp_shim.obs.scratch, event);
}

void gp_obs_tick(void)
{
	uint64_t now = gp_clock_ns(CLOCK_MONOTONIC), period = gp_shim.obs.period_ns;

	if (gp_shim.obs.tracing)
		gp_trace_flush(); /* on every wake: a thread's ring may be filling up */
	if ((!gp_shim.obs.viewing && !gp_shim.obs.tracing) ||
	    now - gp_shim.obs.last_tick_ns < period - period / 8)
		return;
	gp_shim.obs.last_tick_ns = now;
	pthread_mutex_lock(&gp_shim.obs.publish_lock);
	publish("tick");
	pthread_mutex_unlock(&gp_shim.obs.publish_lock);
}

void gp_obs_released(enum gp_release_cause cause, const struct gp_release_result *r)
{
	/* Automatic releases that found nothing are not news; asked-for ones always are. */
	if (gp_shim.obs.owner == 0 ||
	    (r->blocks == 0 && cause != GP_CAUSE_SIGNAL && cause != GP_CAUSE_API))
		return;
	pthread_mutex_lock(&gp_shim.obs.publish_lock);
	gp_shim.obs.last_cause = (uint64_t)cause;
	gp_shim.obs.last_bytes = r->bytes;
	gp_shim.obs.last_blocks = r->blocks;
	gp_shim.obs.last_ns = r->duration_ns;
	gp_shim.obs.last_at = gp_clock_ns(CLOCK_REALTIME);
	gp_shim.obs.last_count++;
	publish(gp_stats_cause_name((uint64_t)cause));
	pthread_mutex_unlock(&gp_shim.obs.publish_lock);
}

/* Under publish_lock: the exit unmaps the view under it, and the control thread may be looking. */
uint64_t gp_obs_requests(void)
{
	uint64_t n;

	pthread_mutex_lock(&gp_shim.obs.publish_lock);
	n = atomic_load(&gp_shim.obs.viewing) ? gp_view_requests() : 0;
	pthread_mutex_unlock(&gp_shim.obs.publish_lock);
	return n;
}

uint64_t gp_obs_resume_requests(void)
{
	uint64_t n;

	pthread_mutex_lock(&gp_shim.obs.publish_lock);
	n = atomic_load(&gp_shim.obs.viewing) ? gp_view_resume_requests() : 0;
	pthread_mutex_unlock(&gp_shim.obs.publish_lock);
	return n;
}

void gp_obs_signal_lost(void)
{
	pthread_mutex_lock(&gp_shim.obs.publish_lock);
	gp_shim.obs.who.signo = 0;
	if (gp_shim.obs.owner != 0)
		publish("tick");
	pthread_mutex_unlock(&gp_shim.obs.publish_lock);
}

void gp_obs_oom_retry(int device)
{
	if (device >= 0 && device < GP_MAX_DEVICES)
		atomic_fetch_add_explicit(&gp_shim.obs.oom_retries[device], 1, memory_order_relaxed);
}

void gp_obs_exit(void)
{
	if (gp_shim.obs.owner == 0 || getpid() != gp_shim.obs.owner)
		return; /* never started, or a forked child: the parent's files are not ours */
	pthread_mutex_lock(&gp_shim.obs.publish_lock);
	snapshot(&gp_shim.obs.scratch);
	if (gp_shim.obs.tracing)
		gp_trace_stop(&gp_shim.obs.scratch);
	gp_shim.obs.tracing = 0;
	gp_summary_write(&gp_shim.obs.scratch,
			 gp_shim.obs.stats_file[0] != '\0' ? gp_shim.obs.stats_file : NULL);
	if (gp_shim.obs.viewing)
		gp_view_stop();
	gp_shim.obs.viewing = 0;
	pthread_mutex_unlock(&gp_shim.obs.publish_lock);
}
