/* control.c — signal handling and the control thread.
 * The handler sets a flag and posts a semaphore (both async-signal-safe) and does nothing else:
 * no CUDA, no lock, no allocation, no fd. The control thread does the release, in relaxed
 * capture mode, and defers it while a CUDA graph capture is underway anywhere. */
#define _GNU_SOURCE
#include "control.h"
#include "clock.h"
#include "capture.h"
#include "ctx.h"
#include "door/lookup.h"
#include "fence.h"
#include "framework.h"
#include "account.h"
#include "log.h"
#include "observe.h"
#include "policy.h"
#include "state.h"
#include "suspend.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFER_NS 10000000ULL /* retry a deferred release every 10 ms */

/* Its state is gp_shim.control (state.h); what the handler and the constructor touch is in
 * gp_shim_early.control, on a page the dynamic linker has written already (shim.c, LOAD_TIME). */

static const char *const cause_names[] = { "signal", "cap", "idle", "pressure", "oom", "api" };

static void on_signal(int sig)
{
	int saved = errno;

	(void)sig;
	atomic_store(&gp_shim_early.control.signalled, 1);
	if (atomic_load(&gp_shim_early.control.sem_ready))
		sem_post(&gp_shim_early.control.wake);
	errno = saved;
}

/* The semaphore the handler posts, made ready when the control thread starts: until then the
 * handler only notes the signal (the thread looks at the note when it starts). Not at load
 * time: the first calls of sem_init and sem_post touch pages of libc that a process which never
 * uses CUDA would not touch. */
static int wake_setup(void)
{
	if (atomic_load(&gp_shim_early.control.sem_ready))
		return 0;
	if (sem_init(&gp_shim_early.control.wake, 0, 0) != 0)
		return -1;
	/* The library binds lazily: bind sem_post now, so the handler never runs the dynamic
	 * linker's resolver. */
	sem_post(&gp_shim_early.control.wake);
	while (sem_trywait(&gp_shim_early.control.wake) != 0 && errno == EINTR)
		;
	atomic_store(&gp_shim_early.control.sem_ready, 1);
	return 0;
}

/* A disposition that is not the default: the program (or an earlier library) installed a handler,
 * or a parent ignored the signal and exec kept that (nohup, a supervisor). */
/* "USR1", "RTMIN+3": for messages (sigabbrev_np names no real-time signal). */
static const char *sig_name(int sig, char *buf, size_t n)
{
	const char *abbrev = sig < SIGRTMIN ? sigabbrev_np(sig) : NULL;

	if (abbrev != NULL)
		return abbrev;
	snprintf(buf, n, "RTMIN+%d", sig - SIGRTMIN);
	return buf;
}

static int disposed(const struct sigaction *sa)
{
	return (sa->sa_flags & SA_SIGINFO) ? sa->sa_sigaction != NULL : sa->sa_handler != SIG_DFL;
}

int gp_control_install_signal(int signo)
{
	struct sigaction sa, old;

	if (signo == 0)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	/* One system call in the usual case; where something was there already, it goes back at
	 * once (a signal in between only wakes a control thread that does not exist yet). */
	if (sigaction(signo, &sa, &old) != 0)
		return -1;
	if (disposed(&old)) {
		sigaction(signo, &old, NULL);
		gp_shim_early.control.kept_signo = signo;
		gp_shim_early.control.kept_ignored = !(old.sa_flags & SA_SIGINFO) &&
						     old.sa_handler == SIG_IGN;
		return 0;
	}
	gp_shim_early.control.installed_signo = signo;
	return 0;
}

int gp_control_signal(void)
{
	int kept = gp_shim_early.control.kept_signo;
	char buf[16];

	if (kept != 0 && !atomic_exchange(&gp_shim.control.said_kept, 1))
		gp_log(GP_LOG_INFO, "SIG%s %s when gpupool loaded: kept, no release handler; "
				    "`gpupool release` asks through the live view",
		       sig_name(kept, buf, sizeof(buf)),
		       gp_shim_early.control.kept_ignored ? "was ignored (by the parent)"
							  : "had a handler already");
	return gp_shim_early.control.installed_signo;
}

static void log_release(const struct gp_release_result *r, enum gp_release_cause cause)
{
	gp_log(GP_LOG_INFO, "released %.1f MiB in %llu blocks (%s) in %.3f ms%s",
	       (double)r->bytes / 1048576.0, (unsigned long long)r->blocks, cause_names[cause],
	       (double)r->duration_ns / 1e6, r->errors ? "; some frees failed" : "");
}

void gp_control_configure(int framework_flush)
{
	gp_shim.control.flush_frameworks = framework_flush;
}

/* Frameworks empty their caches into the pool first, so their segments go back too. Only on
 * the control thread (a user thread may be inside PyTorch's allocator, holding its lock). A
 * signal always flushes; the policies flush when their plan says so (run_policy). */
static int wants_flush(enum gp_release_cause cause)
{
	return gp_shim.control.flush_frameworks &&
	       pthread_equal(pthread_self(), gp_shim.control.thread) && cause == GP_CAUSE_SIGNAL;
}

/* Down to `target` cached bytes (0: all), or, with `cut` not 0, about `cut` bytes of them. */
static void release_as(struct gp_pool *pool, int device, uint64_t target, uint64_t cut,
		       enum gp_release_cause cause, struct gp_release_result *out)
{
	struct gp_release_result r;
	uint64_t t0 = gp_clock_ns(CLOCK_MONOTONIC);
	int flushed = 0;

	atomic_fetch_add(&gp_shim.control.releasing, 1);
	if (wants_flush(cause))
		flushed = gp_framework_flush();
	pthread_mutex_lock(&gp_shim.control.release_lock);
	if (cut != 0)
		gp_pool_release_bytes(pool, device, cut, cause, &r);
	else
		gp_pool_release(pool, device, target, cause, &r);
	pthread_mutex_unlock(&gp_shim.control.release_lock);
	if (cause == GP_CAUSE_SIGNAL)
		gp_framework_trim_async_pools();
	atomic_fetch_sub(&gp_shim.control.releasing, 1);
	if (flushed)
		gp_log(GP_LOG_DEBUG, "framework caches flushed before the release");
	r.duration_ns = gp_clock_ns(CLOCK_MONOTONIC) - t0;
	gp_obs_released(cause, &r);
	/* Asked-for releases always say what they did; automatic ones only when they did it. */
	if (r.blocks > 0 || cause == GP_CAUSE_SIGNAL || cause == GP_CAUSE_API)
		log_release(&r, cause);
	if (out)
		*out = r;
}

static void release(struct gp_pool *pool, int device, uint64_t target,
		    enum gp_release_cause cause, struct gp_release_result *out)
{
	release_as(pool, device, target, 0, cause, out);
}

void gp_control_release_now(struct gp_pool *pool, int device, enum gp_release_cause cause,
			    struct gp_release_result *out)
{
	release(pool, device, 0, cause, out);
}

/* Blocks freed before `before_ns` (the backend's coarse clock). */
static void release_idle(struct gp_pool *pool, uint64_t before_ns)
{
	struct gp_release_result r;
	uint64_t t0 = gp_clock_ns(CLOCK_MONOTONIC);

	atomic_fetch_add(&gp_shim.control.releasing, 1);
	pthread_mutex_lock(&gp_shim.control.release_lock);
	gp_pool_release_idle(pool, -1, before_ns, GP_CAUSE_IDLE, &r);
	pthread_mutex_unlock(&gp_shim.control.release_lock);
	atomic_fetch_sub(&gp_shim.control.releasing, 1);
	r.duration_ns = gp_clock_ns(CLOCK_MONOTONIC) - t0;
	gp_obs_released(GP_CAUSE_IDLE, &r);
	if (r.blocks > 0)
		log_release(&r, GP_CAUSE_IDLE);
}

/* Sleep until woken, or at most `ns` when it is not 0. */
static void wait_for_work(uint64_t ns)
{
	struct timespec ts;
	int rc;

	if (ns == 0) {
		while ((rc = sem_wait(&gp_shim_early.control.wake)) != 0 && errno == EINTR)
			;
		return;
	}
	/* The monotonic clock: a change of the wall clock must not stretch or skip a tick. */
	ts = gp_timespec_of(gp_clock_ns(CLOCK_MONOTONIC) + ns);
	while ((rc = sem_clockwait(&gp_shim_early.control.wake, CLOCK_MONOTONIC, &ts)) != 0 &&
	       errno == EINTR)
		;
}

/* The devices over their cap, brought down to it. */
static void run_cap(void)
{
	struct gp_pool *pool = gp_shim.control.pool;
	uint64_t mask = atomic_exchange(&gp_shim.control.over_cap, 0);

	for (int d = 0; mask != 0; d++, mask >>= 1)
		if (mask & 1)
			release(pool, d, gp_pool_cap(pool, d), GP_CAUSE_CAP, NULL);
}

static uint64_t pool_allocs(void)
{
	struct gp_pool *pool = gp_shim.control.pool;
	uint64_t mask = gp_pool_devices(pool), n = 0;

	for (int d = 0; mask != 0; d++, mask >>= 1) {
		struct gp_pool_dev_stats st;
		if ((mask & 1) && gp_pool_dev_stats(pool, d, &st) == GP_OK)
			n += st.allocs;
	}
	return n;
}

/* Free memory of the devices in `mask` as the device reports it; a device that cannot tell is
 * left out. */
static uint64_t measure_free(uint64_t mask, uint64_t *free_bytes)
{
	uint64_t read = 0;

	for (int d = 0; mask != 0; d++, mask >>= 1) {
		size_t free_b, total_b;

		if (!(mask & 1) || gp_ctx_mem_info(d, &free_b, &total_b) != 0)
			continue;
		free_bytes[d] = free_b;
		read |= 1ULL << d;
	}
	return read;
}

/* Carry out the policy's plan: the frameworks' flush first (their memory lands in the pool),
 * then the pressure releases, cut by each device's deficit, then the idle ones. A cut, not a
 * target: a target worked out from the cached bytes read here would also give back whatever
 * the program frees before the release runs (seen under TSan: a device 64 MiB short gave back
 * all 160 MiB cached, the frees having landed meanwhile). */
static void act(const struct gp_policy_plan *p, enum gp_release_cause flush_cause)
{
	struct gp_pool *pool = gp_shim.control.pool;
	uint64_t mask = p->pressure;

	if (p->flush && gp_shim.control.flush_frameworks && gp_framework_flush())
		gp_log(GP_LOG_DEBUG, "framework caches flushed (%s)", cause_names[flush_cause]);
	for (int d = 0; mask != 0; d++, mask >>= 1)
		if ((mask & 1) && gp_pool_cached_bytes(pool, d) > 0 && p->deficit[d] > 0)
			release_as(pool, d, 0, p->deficit[d], GP_CAUSE_PRESSURE, NULL);
	if (p->idle_all)
		release(pool, -1, 0, GP_CAUSE_IDLE, NULL);
	else if (p->idle_before_ns != 0)
		release_idle(pool, p->idle_before_ns);
}

static void run_policy(void)
{
	struct gp_policy_input in;
	struct gp_policy_plan plan;
	uint64_t measure;

	memset(&in, 0, sizeof(in));
	run_cap();
	in.now_ns = gp_clock_ns(CLOCK_MONOTONIC_COARSE); /* the pool's clock: blocks' free times */
	in.due = gp_policy_due(in.now_ns, &measure);
	if (in.due == 0)
		return;
	in.pool_allocs = pool_allocs();
	in.measured = measure_free(measure, in.free_bytes);
	if (gp_shim.control.flush_frameworks && gp_policy_wants_probe(&in)) {
		struct gp_fw_state fw;

		in.fw_known = gp_framework_probe(&fw);
		in.fw_cached = fw.cached;
		in.fw_activity = fw.activity;
	}
	gp_policy_plan(&in, &plan);
	act(&plan, plan.pressure ? GP_CAUSE_PRESSURE : GP_CAUSE_IDLE);
}

/* What a trim put off because its blocks were younger than GPUPOOL_VMM_AGE (pool/trim.c), and
 * what the pool holds beyond the most the program asked for at once in its last two busy spells
 * (when it made new memory in the last one), given back once the program has allocated nothing
 * for the age: about the larger of the two, the blocks idle longest first (by then those kept
 * blocks are old; what the program freed last goes last). A program still asking for memory
 * never pays it (the age's point). Quiet is the pool's allocation count unchanged across ticks
 * at least the age apart (at least 10 ms apart without an age). */
static uint64_t owed_tick_ns(void)
{
	uint64_t t = gp_shim.policy.opt.vmm_age_ns / 2;

	return t < 10000000ULL ? 10000000ULL : t;
}

static void run_owed(void)
{
	struct gp_shim_control *c = &gp_shim.control;
	uint64_t now, n, mask;

	if (!atomic_load(&c->owed))
		return;
	now = gp_clock_ns(CLOCK_MONOTONIC_COARSE);
	n = pool_allocs();
	if (c->owed_since == 0 || n != c->owed_allocs) {
		c->owed_allocs = n;
		c->owed_since = now;
		return;
	}
	if (now - c->owed_since < gp_shim.policy.opt.vmm_age_ns)
		return;
	atomic_store(&c->owed, 0);
	c->owed_since = 0;
	mask = gp_pool_devices(c->pool);
	for (int d = 0; mask != 0; d++, mask >>= 1) {
		uint64_t owed, excess, give;

		if (!(mask & 1))
			continue;
		owed = gp_pool_take_owed(c->pool, d);
		excess = gp_pool_take_quiet_excess(c->pool, d);
		give = owed > excess ? owed : excess;
		if (give == 0)
			continue;
		gp_log(GP_LOG_DEBUG, "device %d: quiet for GPUPOOL_VMM_AGE: giving back %.1f MiB "
				     "(%.1f MiB the age kept from trims, %.1f MiB above the most asked for "
				     "at once in the last two busy spells)", d, (double)give / 1048576.0,
		       (double)owed / 1048576.0, (double)excess / 1048576.0);
		release_as(c->pool, d, 0, give, GP_CAUSE_IDLE, NULL);
	}
}

void gp_control_owed(void *arg, int device)
{
	(void)arg;
	(void)device;
	atomic_store(&gp_shim.control.owed, 1);
	gp_control_wake();
}

/* Whether the program has replaced our handler for the release signal (servers install their
 * own, to reopen logs): said once, and the view stops naming the signal. The request word of
 * the view still works. */
static void check_handler(void)
{
	int signo = gp_shim_early.control.installed_signo;
	struct sigaction cur;
	char buf[16];

	if (signo == 0 || gp_shim.control.handler_lost || sigaction(signo, NULL, &cur) != 0 ||
	    cur.sa_handler == on_signal)
		return;
	gp_shim.control.handler_lost = 1;
	gp_log(GP_LOG_WARN, "the program replaced gpupool's SIG%s handler: `gpupool release` still "
			    "works, through the live view", sig_name(signo, buf, sizeof(buf)));
	gp_obs_signal_lost();
}

/* Auto-suspend's release (suspend.c asks it of this file): the frameworks' caches first, then
 * every idle block and the driver's own pools, so that only what is in use is parked. On the
 * control thread only. */
static void release_before_suspend(void)
{
	if (gp_shim.control.flush_frameworks && gp_framework_flush())
		gp_log(GP_LOG_DEBUG, "framework caches flushed before a suspend");
	release(gp_shim.control.pool, -1, 0, GP_CAUSE_IDLE, NULL);
	gp_framework_trim_async_pools();
}

int gp_control_auto_suspend(const struct gp_options *o)
{
	return gp_suspend_init(o, release_before_suspend, gp_control_wake);
}

static uint64_t shorter(uint64_t a, uint64_t b)
{
	return a == 0 ? b : (b == 0 || a < b ? a : b);
}

static void *control_main(void *arg)
{
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	uint64_t period = gp_policy_period_ns(), requests_seen = gp_obs_requests(), requests;
	uint64_t wakes_seen = gp_obs_resume_requests(), wakes, suspend_ns = 0;
	int release_due = 0;

	(void)arg;
	gp_suspend_exempt_thread();
	/* Nothing this thread does may invalidate a capture of another thread's. */
	if (gp_cu.ThreadExchangeStreamCaptureMode != NULL)
		gp_cu.ThreadExchangeStreamCaptureMode(&mode);
	for (;;) {
		int deferred = (release_due || atomic_load(&gp_shim.control.policy_due)) &&
			       gp_suspend_running();
		uint64_t sleep_ns = period;

		if (deferred && (sleep_ns == 0 || sleep_ns > DEFER_NS))
			sleep_ns = DEFER_NS;
		if (atomic_load(&gp_shim.control.owed))
			sleep_ns = shorter(sleep_ns, owed_tick_ns());
		wait_for_work(gp_obs_sleep_ns(shorter(sleep_ns, suspend_ns)));
		if (atomic_load(&gp_shim.control.stopping))
			break;
		/* What only this thread may ask (the driver's pools, the frameworks under the GIL),
		 * for the view's accounting lines; never while auto-suspend has the process off the
		 * driver (every driver call would wait for the resume). */
		if (gp_obs_viewing() && gp_suspend_running()) {
			struct gp_fw_state fw;

			gp_account_measure();
			if (gp_shim.control.flush_frameworks && gp_account_frameworks_due() &&
			    gp_framework_probe(&fw) && fw.present)
				gp_account_frameworks(fw.cached_device, GP_FW_MAX_DEVICES);
		}
		/* A still program leaves its last frees pending until its next allocation drives
		 * the fences: driven here (without waiting), so that the view shows them idle once
		 * the GPU is done with them. Never while suspended or during a capture. */
		if (gp_obs_unsettled() && gp_suspend_running() && !gp_capture_active())
			gp_pool_advance(gp_shim.control.pool, 0);
		gp_obs_tick();
		check_handler();
		requests = gp_obs_requests();
		if (requests != requests_seen) {
			requests_seen = requests;
			release_due = 1;
		}
		wakes = gp_obs_resume_requests();
		if (wakes != wakes_seen) {
			wakes_seen = wakes;
			gp_suspend_wake_request();
		}
		if (atomic_exchange(&gp_shim_early.control.signalled, 0))
			release_due = 1;
		if (atomic_exchange(&gp_shim.control.requested, 0))
			release_due = 1;
		if (!gp_suspend_running()) {
			suspend_ns = gp_suspend_tick(); /* releases wait for the resume */
			continue;
		}
		if (gp_capture_active()) {
			suspend_ns = gp_suspend_tick(); /* which says why it does not suspend */
			continue; /* a graph capture is underway: no real frees; try again shortly */
		}
		if (release_due) {
			release_due = 0;
			release(gp_shim.control.pool, -1, 0, GP_CAUSE_SIGNAL, NULL);
		}
		atomic_store(&gp_shim.control.policy_due, 0);
		run_policy();
		run_owed();
		suspend_ns = gp_suspend_tick();
	}
	return NULL;
}

int gp_control_start(struct gp_pool *pool)
{
	sigset_t all, old;
	int rc;

	if (atomic_exchange(&gp_shim.control.started, 1))
		return 0;
	if (wake_setup() != 0)
		return -1;
	gp_shim.control.pool = pool;
	/* Signals go to the program's threads, never to ours. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&gp_shim.control.thread, NULL, control_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		gp_log(GP_LOG_ERROR, "cannot start the control thread (%s); releases only on OOM",
		       strerror(rc));
		return -1;
	}
	pthread_detach(gp_shim.control.thread);
	pthread_setname_np(gp_shim.control.thread, "gpupool");
	/* A signal that came before the thread existed is not lost. */
	if (atomic_load(&gp_shim_early.control.signalled))
		sem_post(&gp_shim_early.control.wake);
	return 0;
}

void gp_control_over_cap(void *arg, int device)
{
	(void)arg;
	atomic_fetch_or(&gp_shim.control.over_cap, 1ULL << (device & (GP_MAX_DEVICES - 1)));
	atomic_store(&gp_shim.control.policy_due, 1);
	if (atomic_load(&gp_shim_early.control.sem_ready) && atomic_load(&gp_shim.control.started))
		sem_post(&gp_shim_early.control.wake);
}

void gp_control_wake(void)
{
	if (atomic_load(&gp_shim_early.control.sem_ready) && atomic_load(&gp_shim.control.started))
		sem_post(&gp_shim_early.control.wake);
}

void gp_control_request(void)
{
	atomic_store(&gp_shim.control.requested, 1);
	if (atomic_load(&gp_shim_early.control.sem_ready))
		sem_post(&gp_shim_early.control.wake);
}

void gp_control_stop(void)
{
	if (!atomic_load(&gp_shim.control.started) ||
	    !atomic_load(&gp_shim_early.control.sem_ready))
		return;
	atomic_store(&gp_shim.control.stopping, 1);
	sem_post(&gp_shim_early.control.wake);
	/* The runtime is torn down after us; do not let it go under a release in progress. */
	for (int i = 0; i < 2000 && atomic_load(&gp_shim.control.releasing); i++)
		usleep(1000);
}

void gp_control_forget(void)
{
	atomic_store(&gp_shim.control.started, 0);
	atomic_store(&gp_shim.control.releasing, 0);
	/* A fork's child: the parent's holder is gone. */
	pthread_mutex_init(&gp_shim.control.release_lock, NULL);
}
