/* observe.c — the statistics snapshot, read from the pool's own counters (kept under the class
 * locks the hot path takes anyway, so observing adds no lock there), and what is done with it:
 * the live view (view.c), trace samples (trace.c), the exit summary (summary.c). Runs on the
 * control thread, after releases and at exit; never calls CUDA. */
#define _GNU_SOURCE
#include "observe.h"
#include "log.h"
#include "summary.h"
#include "trace.h"
#include "view.h"
#include "../stats/view.h" /* gp_stats_cmdline (this folder has its own view.h) */

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

static struct gp_pool *pool;
static pid_t owner;       /* 0: not started; a forked child is not the owner */
static _Atomic int tracing, viewing;
static uint64_t period_ns, last_tick_ns;
static char stats_file[GP_OPT_PATH_MAX + PATH_MAX];
static _Atomic uint64_t oom_retries[GP_MAX_DEVICES];

/* The last release and the figures being published; publish_lock serialises the publishers
 * (control thread, a gpupool_release caller, exit). */
static pthread_mutex_t publish_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gp_stats_snapshot who;     /* pid, uid, signal, start, command */
static struct gp_stats_snapshot scratch; /* large: kept off the stacks */
static uint64_t last_count, last_cause, last_bytes, last_blocks, last_ns, last_at;

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

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

/* The figures now; publish_lock held (it guards the last release). */
static void snapshot(struct gp_stats_snapshot *s)
{
	uint64_t mask = gp_pool_devices(pool);

	memcpy(s, &who, offsetof(struct gp_stats_snapshot, cmd) + sizeof(who.cmd));
	gp_stats_reset(s);
	s->taken_ns = clock_ns(CLOCK_REALTIME);
	for (int d = 0; mask != 0; d++, mask >>= 1) {
		struct gp_pool_dev_stats p;
		struct gp_stats_device *e;

		if (!(mask & 1) || gp_pool_dev_stats(pool, d, &p) != GP_OK ||
		    (e = gp_stats_device_entry(s, d)) == NULL)
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
		e->real_mallocs = p.real_allocs;
		e->real_frees = p.real_frees;
		e->failed_allocs = p.failed_allocs;
		e->oom_retries = atomic_load_explicit(&oom_retries[d], memory_order_relaxed);
		e->bad_frees = p.bad_frees;
		e->oversize_hits = p.oversize_hits;
		e->fence_waits = p.fence_waits;
		e->fence_wait_timeouts = p.fence_wait_timeouts;
	}
	gp_pool_release_counts(pool, s->releases, s->released_bytes);
	s->release_count = last_count;
	s->last_release_cause = last_cause;
	s->last_release_bytes = last_bytes;
	s->last_release_blocks = last_blocks;
	s->last_release_duration_ns = last_ns;
	s->last_release_time_ns = last_at;
}

int gp_obs_start(struct gp_pool *p, const struct gp_options *o, void (*wake)(void))
{
	char path[GP_OPT_PATH_MAX + PATH_MAX];

	pool = p;
	owner = getpid();
	who.pid = (int64_t)owner;
	who.uid = (uint64_t)geteuid();
	who.signo = o->signo;
	who.start_ns = clock_ns(CLOCK_REALTIME);
	gp_stats_cmdline((long)owner, who.cmd, sizeof(who.cmd));
	if (o->stats_file[0] != '\0' &&
	    expand_path("GPUPOOL_STATS_FILE", o->stats_file, stats_file, sizeof(stats_file)) != 0)
		stats_file[0] = '\0';
	pthread_mutex_lock(&publish_lock);
	snapshot(&scratch);
	if (o->stats_shm)
		viewing = gp_view_start(&scratch) == 0;
	if (o->trace[0] != '\0' && expand_path("GPUPOOL_TRACE", o->trace, path, sizeof(path)) == 0) {
		tracing = gp_trace_start(path, wake) == 0;
		if (tracing)
			gp_trace_sample(&scratch, "start");
	}
	pthread_mutex_unlock(&publish_lock);
	period_ns = tracing ? TRACE_PERIOD_NS : VIEW_PERIOD_NS;
	return viewing || tracing;
}

uint64_t gp_obs_sleep_ns(uint64_t ns)
{
	if (!viewing && !tracing)
		return ns;
	return ns == 0 || ns > period_ns ? period_ns : ns;
}

/* publish_lock held. */
static void publish(const char *event)
{
	snapshot(&scratch);
	if (viewing)
		gp_view_publish(&scratch);
	if (tracing)
		gp_trace_sample(&scratch, event);
}

void gp_obs_tick(void)
{
	uint64_t now = clock_ns(CLOCK_MONOTONIC);

	if (tracing)
		gp_trace_flush(); /* on every wake: a thread's ring may be filling up */
	if ((!viewing && !tracing) || now - last_tick_ns < period_ns - period_ns / 8)
		return;
	last_tick_ns = now;
	pthread_mutex_lock(&publish_lock);
	publish("tick");
	pthread_mutex_unlock(&publish_lock);
}

void gp_obs_released(enum gp_release_cause cause, const struct gp_release_result *r)
{
	/* Automatic releases that found nothing are not news; asked-for ones always are. */
	if (owner == 0 || (r->blocks == 0 && cause != GP_CAUSE_SIGNAL && cause != GP_CAUSE_API))
		return;
	pthread_mutex_lock(&publish_lock);
	last_cause = (uint64_t)cause;
	last_bytes = r->bytes;
	last_blocks = r->blocks;
	last_ns = r->duration_ns;
	last_at = clock_ns(CLOCK_REALTIME);
	last_count++;
	publish(gp_stats_cause_name((uint64_t)cause));
	pthread_mutex_unlock(&publish_lock);
}

uint64_t gp_obs_requests(void)
{
	return viewing ? gp_view_requests() : 0;
}

void gp_obs_signal_lost(void)
{
	pthread_mutex_lock(&publish_lock);
	who.signo = 0;
	if (owner != 0)
		publish("tick");
	pthread_mutex_unlock(&publish_lock);
}

void gp_obs_oom_retry(int device)
{
	if (device >= 0 && device < GP_MAX_DEVICES)
		atomic_fetch_add_explicit(&oom_retries[device], 1, memory_order_relaxed);
}

void gp_obs_exit(void)
{
	if (owner == 0 || getpid() != owner)
		return; /* never started, or a forked child: the parent's files are not ours */
	pthread_mutex_lock(&publish_lock);
	snapshot(&scratch);
	if (tracing)
		gp_trace_stop(&scratch);
	tracing = 0;
	gp_summary_write(&scratch, stats_file[0] != '\0' ? stats_file : NULL);
	if (viewing)
		gp_view_stop();
	viewing = 0;
	pthread_mutex_unlock(&publish_lock);
}
