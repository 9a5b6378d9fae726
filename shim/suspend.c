/* suspend.c — auto-suspend's state machine (suspend.h), on the door's gate word. The control
 * thread arms the gate (WATCH) at most once per tick; the first call that does work opens it
 * again (a CAS: that is the activity). Still armed after GPUPOOL_AUTO_SUSPEND, the GPU quiet, no
 * capture and nothing refusing: release, then lock and checkpoint our own pid (park.h). A call
 * while SUSPENDED resumes first (one thread restores and unlocks, the others wait); a query is
 * answered when its stub has an answer. While not running, no driver call is made here but the
 * checkpoint calls. When in doubt, this file does not suspend. */
#define _GNU_SOURCE
#include "suspend.h"
#include "account.h"
#include "capture.h"
#include "clock.h"
#include "ctx.h"
#include "door/gate.h"
#include "fence.h"
#include "log.h"
#include "park.h"
#include "park_vmm.h"
#include "state.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define S (gp_shim.suspend)
#define LOCK_TIMEOUT_MS 2000u             /* the lock waits this long for calls inside the driver */
#define CONTEXT_ALLOWANCE (512ull << 20)  /* host bytes per device for the context (not counted) */
#define TICK_MAX_NS 1000000000ull         /* armed again at least this often after activity */
#define SUSPENDED_TICK_NS 200000000ull    /* while suspended: how often a resume request is seen */
#define RETRY_FIRST_NS 50000000ull        /* a failed restore is tried again after this, */
#define RETRY_MAX_NS 5000000000ull        /* doubling up to this */

static void (*release_all_fn)(void);
static void (*wake_fn)(void);
static _Thread_local int exempt;

static unsigned char gate(void)
{
	return atomic_load(&gp_gate_closed);
}

/* Leaving SUSPENDING or RESUMING: under the lock, seen by every waiter. */
static void set_gate_locked(unsigned char v)
{
	pthread_mutex_lock(&S.lock);
	atomic_store(&gp_gate_closed, v);
	pthread_cond_broadcast(&S.changed);
	pthread_mutex_unlock(&S.lock);
}

/* Wait while the gate is `busy` (SUSPENDING or RESUMING). The timed wait only bounds a wait
 * the broadcast already ends. */
static void wait_while_busy(void)
{
	pthread_mutex_lock(&S.lock);
	for (;;) {
		unsigned char g = gate();
		struct timespec ts;

		if (g != GP_SUSPEND_SUSPENDING && g != GP_SUSPEND_RESUMING)
			break;
		ts = gp_timespec_of(gp_clock_ns(CLOCK_MONOTONIC) + 100000000ull);
		pthread_cond_clockwait(&S.changed, &S.lock, CLOCK_MONOTONIC, &ts);
	}
	pthread_mutex_unlock(&S.lock);
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Restore until it works: a restore that fails (the device has not the memory back yet) leaves
 * the process checkpointed and nothing lost, so the calling thread waits and it is tried again,
 * as a call of a process suspended from outside waits for `gpupool resume`. 0 when the process
 * runs again, -1 when the driver says it never will (FAILED). */
static int restore(unsigned tries)
{
	uint64_t backoff = RETRY_FIRST_NS;
	char buf[32];
	int rc, state;

	for (unsigned n = 1;; n++) {
		rc = gp_park_restore();
		if (rc == CUDA_SUCCESS)
			break;
		if (gp_park_state(&state) == CUDA_SUCCESS) {
			if (state == GP_PARK_LOCKED)
				break; /* restored already (from outside): unlock below */
			if (state == GP_PARK_RUNNING)
				return 0;
			if (state == GP_PARK_FAILED) {
				gp_log(GP_LOG_ERROR, "auto-suspend: the driver reports the "
						     "process failed in its restore; it cannot be "
						     "resumed");
				return -1;
			}
		}
		if (tries != 0 && n >= tries) {
			gp_log(GP_LOG_ERROR, "auto-suspend: restore %u failed (%s); giving up", n,
			       gp_park_error(rc, buf, sizeof(buf)));
			return -1;
		}
		gp_log(n <= 3 || n % 20 == 0 ? GP_LOG_ERROR : GP_LOG_DEBUG,
		       "auto-suspend: restore %u failed (%s); the calling threads wait, nothing is "
		       "lost; trying again in %.2f s", n, gp_park_error(rc, buf, sizeof(buf)),
		       (double)backoff / 1e9);
		sleep_ns(backoff);
		backoff = backoff * 2 > RETRY_MAX_NS ? RETRY_MAX_NS : backoff * 2;
	}
	backoff = RETRY_FIRST_NS;
	while ((rc = gp_park_unlock()) != CUDA_SUCCESS) {
		if (gp_park_state(&state) == CUDA_SUCCESS && state == GP_PARK_RUNNING)
			break;
		gp_log_capped(GP_LOG_ERROR, &S.said_restore, "auto-suspend: unlock failed (%s); "
			      "trying again", gp_park_error(rc, buf, sizeof(buf)));
		sleep_ns(backoff);
		backoff = backoff * 2 > RETRY_MAX_NS ? RETRY_MAX_NS : backoff * 2;
	}
	return 0;
}

/* After the checkpoint API's restore and unlock: the VMM-backed blocks our copies parked come
 * back (park_vmm.h) before any thread goes on. A failure keeps their host copies and is tried
 * again, as a failed restore is; 0, or -1 after `tries` failures (0: for ever). */
static int unpark(unsigned tries)
{
	uint64_t backoff = RETRY_FIRST_NS;
	char buf[32];
	int rc;

	for (unsigned n = 1; gp_park_vmm_parked() > 0; n++) {
		rc = gp_unpark_vmm(NULL);
		if (rc == 0)
			break;
		if (tries != 0 && n >= tries) {
			gp_log(GP_LOG_ERROR, "auto-suspend: bringing back the VMM-backed blocks "
					     "failed %u times (%s); giving up", n,
			       gp_park_error(rc, buf, sizeof(buf)));
			return -1;
		}
		gp_log(n <= 3 || n % 20 == 0 ? GP_LOG_ERROR : GP_LOG_DEBUG,
		       "auto-suspend: bringing back the VMM-backed blocks failed (%s); the calling "
		       "threads wait, nothing is lost; trying again in %.2f s",
		       gp_park_error(rc, buf, sizeof(buf)), (double)backoff / 1e9);
		sleep_ns(backoff);
		backoff = backoff * 2 > RETRY_MAX_NS ? RETRY_MAX_NS : backoff * 2;
	}
	return 0;
}

/* A suspend given up after our copies parked blocks: they come back first, for as long as it
 * takes (the threads wait at the gate meanwhile). */
static void unpark_all(void)
{
	(void)unpark(0);
}

/* Resume a suspended process, or wait for the thread that does. */
static void wake(const char *why, unsigned tries)
{
	uint64_t t0;
	int rc;

	pthread_mutex_lock(&S.lock);
	for (;;) {
		unsigned char g = gate();
		struct timespec ts;

		if (g == GP_SUSPEND_SUSPENDED)
			break;
		if (g != GP_SUSPEND_SUSPENDING && g != GP_SUSPEND_RESUMING) {
			pthread_mutex_unlock(&S.lock);
			return;
		}
		ts = gp_timespec_of(gp_clock_ns(CLOCK_MONOTONIC) + 100000000ull);
		pthread_cond_clockwait(&S.changed, &S.lock, CLOCK_MONOTONIC, &ts);
	}
	atomic_store(&gp_gate_closed, GP_SUSPEND_RESUMING);
	pthread_mutex_unlock(&S.lock);

	t0 = gp_clock_ns(CLOCK_MONOTONIC);
	rc = restore(tries);
	if (rc == 0)
		rc = unpark(tries);
	atomic_store_explicit(&S.last_resume_ns, gp_clock_ns(CLOCK_MONOTONIC) - t0,
			      memory_order_relaxed);
	atomic_fetch_add_explicit(&S.resumes, 1, memory_order_relaxed);
	atomic_store_explicit(&S.since_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&S.parked_bytes, 0, memory_order_relaxed);
	if (rc != 0)
		atomic_store(&S.off, 1); /* the driver gave up on the process: never again */
	set_gate_locked(GP_SUSPEND_OPEN);
	gp_log(GP_LOG_INFO, "auto-suspend: resumed (%s) in %.3f s", why,
	       (double)atomic_load(&S.last_resume_ns) / 1e9);
	if (wake_fn != NULL)
		wake_fn();
}

void *gp_gate_pass(const struct gp_gate_fn *f)
{
	for (;;) {
		unsigned char g = gate(), expected = GP_SUSPEND_WATCH;

		if (exempt || g == GP_SUSPEND_OPEN)
			return f->real;
		if (f->kind == GP_GATE_RECALL &&
		    (g == GP_SUSPEND_WATCH || g == GP_SUSPEND_SUSPENDED))
			return f->answer != NULL ? f->answer : f->real; /* it asks or answers */
		if (g == GP_SUSPEND_WATCH) {
			if (f->kind != GP_GATE_WORK ||
			    atomic_compare_exchange_strong(&gp_gate_closed, &expected,
							   GP_SUSPEND_OPEN) ||
			    expected == GP_SUSPEND_OPEN)
				return f->real;
			continue; /* the control thread moved it on meanwhile */
		}
		if (g == GP_SUSPEND_SUSPENDED) {
			if (f->kind != GP_GATE_WORK && f->answer != NULL)
				return f->answer;
			wake(f->name != NULL ? f->name : "a CUDA call", 0);
			continue;
		}
		wait_while_busy();
	}
}

int gp_gate_hook(enum gp_gate_kind kind)
{
	static const struct gp_gate_fn work = { "a CUDA call", NULL, NULL, GP_GATE_WORK };

	if (exempt)
		return 0;
	if (kind == GP_GATE_WORK) {
		gp_gate_pass(&work);
		return 0;
	}
	for (;;) {
		unsigned char g = gate();

		if (g == GP_SUSPEND_SUSPENDED)
			return 1;
		if (g != GP_SUSPEND_SUSPENDING && g != GP_SUSPEND_RESUMING)
			return 0;
		wait_while_busy();
	}
}

int gp_gate_recall(unsigned long *epoch)
{
	for (;;) {
		unsigned char g = gate();

		if (g == GP_SUSPEND_SUSPENDED && !exempt) {
			*epoch = atomic_load(&S.suspend_epoch);
			return 1;
		}
		if (exempt || (g != GP_SUSPEND_SUSPENDING && g != GP_SUSPEND_RESUMING)) {
			*epoch = atomic_load(&S.epoch);
			return 0;
		}
		wait_while_busy();
	}
}

void gp_gate_wake(const char *why)
{
	if (!exempt && gate() == GP_SUSPEND_SUSPENDED)
		wake(why, 0);
}

int gp_suspend_meminfo(size_t *free_b, size_t *total_b)
{
	if (gate() != GP_SUSPEND_SUSPENDED || !S.meminfo_ok)
		return 0;
	*free_b = S.meminfo_free;
	*total_b = S.meminfo_total;
	return 1;
}

int gp_suspend_running(void)
{
	unsigned char g = gate();

	return g == GP_SUSPEND_OPEN || g == GP_SUSPEND_WATCH;
}

void gp_suspend_exempt_thread(void)
{
	exempt = 1;
}

void gp_suspend_note_ipc(void)
{
	atomic_store_explicit(&S.ipc_exported, 1, memory_order_relaxed);
}

void gp_suspend_wake_request(void)
{
	atomic_store(&S.wake_asked, 1);
}

/* A fork runs the driver's fork handlers, which wait while the process is locked: resume
 * first. Registered after the driver's (at init, once the driver is up), so it runs before. */
static void before_fork(void)
{
	unsigned char g = gate();

	if (!exempt && (g == GP_SUSPEND_SUSPENDED || g == GP_SUSPEND_SUSPENDING))
		wake("fork", 0);
}

int gp_suspend_init(const struct gp_options *o, void (*release_all)(void), void (*wakeup)(void))
{
	release_all_fn = release_all;
	wake_fn = wakeup;
	S.after_ns = o->auto_suspend_ns;
	S.copy_vmm = o->auto_suspend_copy;
	if (S.after_ns == 0)
		return 0;
	if (!gp_park_available()) {
		gp_log_capped(GP_LOG_WARN, &S.said_api, "GPUPOOL_AUTO_SUSPEND: the CUDA driver "
			      "has no checkpoint API (driver 570 or later, CUDA 12.8): "
			      "auto-suspend is off");
		atomic_store(&S.off, 1);
		return 0;
	}
	pthread_atfork(before_fork, NULL, NULL);
	gp_log(GP_LOG_INFO, "auto-suspend after %.3f s idle", (double)S.after_ns / 1e9);
	return 1;
}

/* A feature the checkpoint API cannot park (NVIDIA's cuda-checkpoint, driver 570: no UVM, no
 * IPC memory, x86-64 only), or NULL. Said once each at warn level by the caller. */
static const char *unsupported(_Atomic int **said)
{
#if !defined(__x86_64__)
	*said = &S.said_api;
	return "the driver's checkpoint API is x86-64 only";
#endif
	if (atomic_load_explicit(&S.ipc_exported, memory_order_relaxed)) {
		*said = &S.said_ipc;
		return "an IPC memory handle was handed out (cudaIpcGetMemHandle)";
	}
	if (gp_account_live_bytes(GP_ACCOUNT_MANAGED) > 0) {
		*said = &S.said_managed;
		return "managed memory is live (cudaMallocManaged)";
	}
	return NULL;
}

/* Host bytes available (MemAvailable), or -1 unknown. */
static int64_t host_available(void)
{
	char line[128];
	long long kib = -1;
	FILE *f = fopen("/proc/meminfo", "re");

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
			break;
	fclose(f);
	return kib < 0 ? -1 : (int64_t)kib * 1024;
}

/* What the process holds on the device now, the context aside: the pool's blocks (in use, idle,
 * pending) and what passed the pool. *ndev: the devices the pool has. */
static uint64_t device_bytes(int *ndev, int *only)
{
	struct gp_pool *pool = gp_shim.life.pool;
	uint64_t mask = gp_pool_devices(pool), n = gp_account_live_bytes(-1);

	*ndev = 0;
	*only = -1;
	for (int d = 0; mask != 0; d++, mask >>= 1) {
		struct gp_pool_dev_stats st;

		if (!(mask & 1) || gp_pool_dev_stats(pool, d, &st) != GP_OK)
			continue;
		n += st.live_bytes + st.idle_bytes + st.pending_bytes;
		(*ndev)++;
		*only = d;
	}
	return n;
}

/* Refused: not tried again before the next busy period. Said at `level` once for good where
 * `said` is given (a refusal that will not go away by itself), else once per busy period. */
static void refuse(int level, _Atomic int *said, const char *why)
{
	S.blocked = 1;
	if (said == NULL || !atomic_exchange(said, 1))
		gp_log(level, "auto-suspend: not suspending: %s; trying again after the next busy "
			      "period", why);
	else
		gp_log(GP_LOG_DEBUG, "auto-suspend: not suspending: %s", why);
}

/* Give up a suspend begun (SUSPENDING): the process runs on. */
static void back_off(void)
{
	set_gate_locked(GP_SUSPEND_OPEN);
}

static void try_suspend(void)
{
	unsigned char expected = GP_SUSPEND_WATCH;
	_Atomic int *said = NULL;
	const char *feature = unsupported(&said);
	uint64_t need, t0, extra = 0;
	struct gp_park_figures pf = { 0 };
	int64_t avail;
	int ndev, only, rc;
	char buf[32], msg[160];

	if (gp_capture_active()) {
		refuse(GP_LOG_INFO, NULL, "a CUDA graph capture is in progress");
		return;
	}
	if (feature != NULL) {
		refuse(GP_LOG_WARN, said, feature);
		return;
	}
	if (!gp_fence_quiet(NULL)) {
		if (!S.said_quiet)
			gp_log(GP_LOG_DEBUG, "auto-suspend: GPU work still in flight; not yet");
		S.said_quiet = 1;
		return; /* looked at again next tick, still armed */
	}
	t0 = gp_clock_ns(CLOCK_MONOTONIC);
	if (release_all_fn != NULL)
		release_all_fn();
	if (gate() != GP_SUSPEND_WATCH)
		return; /* a call came during the release: busy again */
	need = device_bytes(&ndev, &only);
	if (S.copy_vmm) {
		size_t host = 0, vmm = gp_park_vmm_bytes(&host);

		extra = host > vmm ? host - vmm : 0; /* the staging ring, before it is made */
	}
	avail = host_available();
	if (avail >= 0 && need + extra + CONTEXT_ALLOWANCE * (uint64_t)(ndev > 0 ? ndev : 1) >
				  (uint64_t)avail) {
		snprintf(msg, sizeof(msg), "not enough host memory (%.1f MiB on the device and "
			 "%.0f MiB per context; %.1f MiB available)", (double)need / 1048576.0,
			 (double)CONTEXT_ALLOWANCE / 1048576.0, (double)avail / 1048576.0);
		refuse(GP_LOG_WARN, &S.said_host, msg);
		return;
	}
	S.meminfo_ok = ndev == 1 && gp_ctx_mem_info(only, &S.meminfo_free, &S.meminfo_total) == 0;
	if (!atomic_compare_exchange_strong(&gp_gate_closed, &expected, GP_SUSPEND_SUSPENDING))
		return; /* activity since the release */
	/* Every thread of the program now waits at the gate: the VMM-backed blocks leave by our own
	 * copies first (park_vmm.h), the checkpoint API takes the rest. */
	if (S.copy_vmm && gp_park_vmm_bytes(NULL) > 0) {
		rc = gp_park_vmm(&pf);
		if (rc != 0) {
			unpark_all();
			back_off();
			snprintf(msg, sizeof(msg), "the copy of the VMM-backed blocks failed (%s)",
				 gp_park_error(rc, buf, sizeof(buf)));
			refuse(GP_LOG_WARN, &S.said_copy, msg);
			return;
		}
	}
	rc = gp_park_lock(LOCK_TIMEOUT_MS);
	if (rc != CUDA_SUCCESS) {
		unpark_all();
		back_off();
		if (rc == CUDA_ERROR_NOT_READY || rc == CUDA_ERROR_TIMEOUT) {
			refuse(GP_LOG_INFO, NULL, "the process could not be locked in time (a call "
						  "inside the driver); it carries on running");
			return;
		}
		snprintf(msg, sizeof(msg), "the driver refused the lock (%s)",
			 gp_park_error(rc, buf, sizeof(buf)));
		refuse(GP_LOG_WARN, &S.said_lock, msg);
		return;
	}
	rc = gp_park_checkpoint();
	if (rc != CUDA_SUCCESS) {
		int urc = gp_park_unlock();

		unpark_all();
		back_off();
		snprintf(msg, sizeof(msg), "the checkpoint failed (%s)%s",
			 gp_park_error(rc, buf, sizeof(buf)),
			 urc == CUDA_SUCCESS ? "" : "; the unlock failed too");
		refuse(GP_LOG_WARN, &S.said_lock, msg);
		return;
	}
	atomic_store_explicit(&S.last_suspend_ns, gp_clock_ns(CLOCK_MONOTONIC) - t0,
			      memory_order_relaxed);
	atomic_store(&S.suspend_epoch, atomic_load(&S.epoch)); /* the watch that ended here */
	atomic_store_explicit(&S.parked_bytes, need, memory_order_relaxed);
	atomic_store_explicit(&S.copied_bytes, pf.bytes, memory_order_relaxed);
	atomic_store_explicit(&S.since_ns, gp_clock_ns(CLOCK_REALTIME), memory_order_relaxed);
	atomic_fetch_add_explicit(&S.suspends, 1, memory_order_relaxed);
	set_gate_locked(GP_SUSPEND_SUSPENDED);
	gp_log(GP_LOG_INFO, "auto-suspended after %.3f s idle, in %.3f s: %.1f MiB parked in host "
			    "memory (the context besides), %.1f MiB of it by gpupool's copies in "
			    "%.3f s", (double)S.after_ns / 1e9,
	       (double)atomic_load(&S.last_suspend_ns) / 1e9, (double)need / 1048576.0,
	       (double)pf.bytes / 1048576.0, (double)pf.park_ns / 1e9);
	if (wake_fn != NULL)
		wake_fn();
}

uint64_t gp_suspend_tick(void)
{
	uint64_t now, tick;
	unsigned char g;

	if (S.after_ns == 0 || atomic_load_explicit(&S.off, memory_order_relaxed))
		return 0;
	if (atomic_exchange(&S.wake_asked, 0))
		wake("gpupool resume", 0);
	g = gate();
	if (g != GP_SUSPEND_OPEN && g != GP_SUSPEND_WATCH)
		return SUSPENDED_TICK_NS;
	now = gp_clock_ns(CLOCK_MONOTONIC);
	tick = S.after_ns / 4 < TICK_MAX_NS ? S.after_ns / 4 : TICK_MAX_NS;
	if (tick == 0)
		tick = 1;
	if (g == GP_SUSPEND_OPEN) {
		/* Busy since the last look: arm again (at most once per tick), and try again. */
		S.blocked = 0;
		S.said_quiet = 0;
		S.armed_ns = now;
		atomic_fetch_add(&S.epoch, 1); /* what threads remember of the last watch is void */
		atomic_store(&gp_gate_closed, GP_SUSPEND_WATCH);
		return tick;
	}
	if (S.blocked)
		return tick;
	if (now - S.armed_ns >= S.after_ns) {
		try_suspend();
		return gp_suspend_running() ? tick : SUSPENDED_TICK_NS;
	}
	return S.armed_ns + S.after_ns - now < tick ? S.armed_ns + S.after_ns - now : tick;
}

void gp_suspend_stop(void)
{
	atomic_store(&S.off, 1);
	if (gate() == GP_SUSPEND_OPEN)
		return;
	wake("exit", 8);
	/* Whatever the control thread does next, the calls of the exit pass unwatched. */
	pthread_mutex_lock(&S.lock);
	if (gate() == GP_SUSPEND_WATCH)
		atomic_store(&gp_gate_closed, GP_SUSPEND_OPEN);
	pthread_mutex_unlock(&S.lock);
}

void gp_suspend_forget(void)
{
	atomic_store(&S.off, 1);
	atomic_store(&gp_gate_closed, GP_SUSPEND_OPEN);
	pthread_mutex_init(&S.lock, NULL);
	pthread_cond_init(&S.changed, NULL);
}

void gp_suspend_fill(struct gp_stats_snapshot *s)
{
	uint64_t since = atomic_load_explicit(&S.since_ns, memory_order_relaxed);

	s->auto_suspend_ns = S.after_ns;
	s->suspends = atomic_load_explicit(&S.suspends, memory_order_relaxed);
	s->resumes = atomic_load_explicit(&S.resumes, memory_order_relaxed);
	s->last_resume_duration_ns = atomic_load_explicit(&S.last_resume_ns, memory_order_relaxed);
	s->last_suspend_duration_ns = atomic_load_explicit(&S.last_suspend_ns, memory_order_relaxed);
	s->self_suspended = since != 0;
	if (since != 0) {
		s->suspended_since_ns = since;
		s->parked_bytes = atomic_load_explicit(&S.parked_bytes, memory_order_relaxed);
	}
}
