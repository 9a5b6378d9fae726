/* suspend.c — `gpupool suspend PID...` and `gpupool resume PID...`: take a whole idle CUDA process
 * off the GPU and put it back, through the driver's checkpoint API, from outside. A gpupool
 * process is first asked for a release (through its view), so that only live memory is copied.
 * A process that cannot be locked in time is left as it was; a resume that fails leaves the
 * process suspended or locked, never lost, and says how to retry. Never signals a process that
 * is not a gpupool process, and never writes a view but the suspension words. A process that
 * suspended itself (GPUPOOL_AUTO_SUSPEND) is resumed through its view's resume request, by its
 * own control thread: never by the driver's calls from here, which would leave its own state
 * wrong. */
#define _GNU_SOURCE
#include "ckpt.h"
#include "cli.h"
#include "view.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_NS 10000000L /* 10 ms */

struct opts {
	double timeout_s; /* lock, and the release before it */
	int release;      /* ask a gpupool process for a release first */
	int force;        /* checkpoint even when host memory looks too small */
	int json;
};

/* What one suspend or resume saw; -1: not measured. */
struct report {
	long pid;
	int gpupool;
	const char *skipped;      /* why no release ran first, or NULL */
	int64_t released_bytes;   /* by the release before the lock */
	double release_ms;        /* from the request to the release reported */
	double lock_ms, checkpoint_ms, restore_ms, unlock_ms;
	int64_t device_before, device_after; /* the process's device memory (NVML), bytes */
	int64_t resident_before, resident_after; /* its host memory, bytes */
	int64_t parked;           /* bytes moved to host memory */
	const char *parked_from;  /* how `parked` was measured */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double ms_since(uint64_t t0)
{
	return (double)(mono_ns() - t0) / 1e6;
}

static const char *bytes_text(int64_t v, char *buf, size_t len)
{
	if (v < 0)
		snprintf(buf, len, "unknown");
	else
		gp_stats_human_bytes((uint64_t)v, buf, len);
	return buf;
}

/* The process exists and may be acted on by this user. */
static int check_process(const char *cmd, long pid)
{
	if (kill((pid_t)pid, 0) == 0)
		return GP_CLI_OK;
	if (errno == EPERM) {
		fprintf(stderr, "%s: permission denied: process %ld belongs to another user (run as "
				"that user or as root)\n", cmd, pid);
		return GP_CLI_DENIED;
	}
	fprintf(stderr, "%s: no such process: %ld\n", cmd, pid);
	return GP_CLI_NO_PROCESS;
}

/* The driver's state of `pid`, or an exit code after saying why there is none. */
static int driver_state(const char *cmd, struct gp_ckpt *c, long pid, int *state)
{
	char err[64];
	int rc = gp_ckpt_state(c, pid, state);

	if (rc == GP_CKPT_SUCCESS)
		return GP_CLI_OK;
	if (!gp_ckpt_has_driver(pid))
		fprintf(stderr, "%s: process %ld is not a CUDA process (it has not loaded the CUDA "
				"driver)\n", cmd, pid);
	else
		fprintf(stderr, "%s: the CUDA driver does not know process %ld as a CUDA process "
				"(no CUDA call yet?): %s\n", cmd, pid, gp_ckpt_error(c, rc, err, sizeof(err)));
	return GP_CLI_NOT_GPUPOOL;
}

/* Ask a gpupool process for a release and wait until it reports one (or the time runs out). */
static int release_first(const char *cmd, long pid, const struct gp_stats_snapshot *s,
			 double timeout_s, struct report *r)
{
	uint64_t t0 = mono_ns(), end = t0 + (uint64_t)(timeout_s * 1e9);
	struct gp_stats_snapshot now;
	int rc = gp_cli_ask_release(cmd, pid, s, 1);

	if (rc != GP_CLI_OK)
		return rc;
	while (mono_ns() < end) {
		struct timespec ts = { 0, POLL_NS };

		nanosleep(&ts, NULL);
		rc = gp_cli_read(cmd, pid, &now, 0);
		if (rc != GP_CLI_OK)
			return rc;
		if (now.release_count > s->release_count) {
			r->released_bytes = (int64_t)now.last_release_bytes;
			r->release_ms = ms_since(t0);
			return GP_CLI_OK;
		}
	}
	r->skipped = "no release reported in time: everything it holds is copied";
	fprintf(stderr, "%s: process %ld reported no release within %.1f s (a CUDA graph capture "
			"may be holding it off); checkpointing it as it is\n", cmd, pid, timeout_s);
	return GP_CLI_OK;
}

/* Bytes the pool of a gpupool process still holds on its devices. */
static int64_t pool_bytes(const struct gp_stats_snapshot *s)
{
	int64_t n = 0;

	for (uint64_t d = 0; d < s->ndev && d < GP_STATS_MAX_DEVICES; d++)
		n += (int64_t)(s->dev[d].in_use_bytes + s->dev[d].idle_bytes + s->dev[d].pending_bytes);
	return n;
}

/* The host memory a checkpoint will take is what the process holds on the device: refuse when
 * that is known and more than the host has available. */
static int check_host_memory(const char *cmd, long pid, int64_t need, int force)
{
	int64_t avail = gp_ckpt_host_available_bytes();
	char a[32], b[32];

	if (need <= 0 || avail < 0 || need <= avail)
		return GP_CLI_OK;
	if (force) {
		fprintf(stderr, "%s: process %ld: the checkpoint needs about %s of host memory and %s "
				"is available; going on (--force)\n", cmd, pid, bytes_text(need, a, sizeof(a)),
			bytes_text(avail, b, sizeof(b)));
		return GP_CLI_OK;
	}
	fprintf(stderr, "%s: not enough host memory: process %ld holds about %s on the device and "
			"%s is available (MemAvailable); nothing was done (--force tries anyway)\n",
		cmd, pid, bytes_text(need, a, sizeof(a)), bytes_text(avail, b, sizeof(b)));
	return GP_CLI_NO_MEMORY;
}

static void mark_view(long pid, uint64_t since_ns, int64_t parked)
{
	char path[64];

	gp_stats_view_path(pid, path, sizeof(path));
	gp_stats_view_mark(path, since_ns, parked > 0 ? (uint64_t)parked : 0);
}

/* After the lock: a capture that began before it makes the checkpoint unsafe. */
static int capture_in_progress(const char *cmd, long pid, int gpupool)
{
	struct gp_stats_snapshot s;

	if (!gpupool || gp_cli_read(cmd, pid, &s, 1) != GP_CLI_OK || s.captures == 0)
		return 0;
	fprintf(stderr, "%s: process %ld has a CUDA graph capture in progress: it was left "
			"running; try again when the capture ends\n", cmd, pid);
	return 1;
}

static int suspend_one(struct gp_ckpt *c, long pid, const struct opts *o, struct report *r)
{
	const char *cmd = "gpupool suspend";
	struct gp_stats_snapshot s;
	char err[64];
	int state, rc;
	uint64_t t0;
	int64_t need = -1, dev_before, dev_after;

	rc = driver_state(cmd, c, pid, &state);
	if (rc != GP_CLI_OK)
		return rc;
	if (state != GP_CKPT_RUNNING) {
		fprintf(stderr, "%s: process %ld is already %s%s\n", cmd, pid,
			state == GP_CKPT_CHECKPOINTED ? "suspended" : gp_ckpt_state_name(state),
			state == GP_CKPT_FAILED ? " (the driver reports an uncorrectable error)"
						: ": gpupool resume gives it the GPU back");
		return GP_CLI_STATE;
	}
	r->gpupool = gp_cli_read(cmd, pid, &s, 1) == GP_CLI_OK;
	if (r->gpupool && s.captures != 0) {
		fprintf(stderr, "%s: process %ld has a CUDA graph capture in progress: nothing was "
				"done; try again when the capture ends\n", cmd, pid);
		return GP_CLI_STATE;
	}
	if (!r->gpupool)
		r->skipped = "not a gpupool process: everything it holds is copied";
	else if (!o->release)
		r->skipped = "--no-release: everything it holds is copied";
	else if ((rc = release_first(cmd, pid, &s, o->timeout_s, r)) != GP_CLI_OK)
		return rc;
	r->device_before = gp_ckpt_process_device_bytes(c, pid);
	r->resident_before = gp_ckpt_resident_bytes(pid);
	dev_before = gp_ckpt_device_used_bytes(c);
	if (r->device_before > 0)
		need = r->device_before;
	else if (r->gpupool && gp_cli_read(cmd, pid, &s, 1) == GP_CLI_OK)
		need = pool_bytes(&s);
	rc = check_host_memory(cmd, pid, need, o->force);
	if (rc != GP_CLI_OK)
		return rc;

	t0 = mono_ns();
	rc = gp_ckpt_lock(c, pid, (unsigned)(o->timeout_s * 1000));
	r->lock_ms = ms_since(t0);
	if (rc == GP_CKPT_NOT_READY || rc == GP_CKPT_TIMEOUT) {
		fprintf(stderr, "%s: process %ld is busy: it could not be locked within %.1f s (GPU "
				"work still running?); it was left running as it was\n", cmd, pid, o->timeout_s);
		return GP_CLI_TIMEOUT;
	}
	if (rc != GP_CKPT_SUCCESS) {
		fprintf(stderr, "%s: process %ld could not be locked: %s; it was left running\n", cmd,
			pid, gp_ckpt_error(c, rc, err, sizeof(err)));
		return GP_CLI_ERROR;
	}
	if (capture_in_progress(cmd, pid, r->gpupool)) {
		gp_ckpt_unlock(c, pid);
		return GP_CLI_STATE;
	}
	t0 = mono_ns();
	rc = gp_ckpt_checkpoint(c, pid);
	r->checkpoint_ms = ms_since(t0);
	if (rc != GP_CKPT_SUCCESS) {
		int urc = gp_ckpt_unlock(c, pid);

		fprintf(stderr, "%s: the checkpoint of process %ld failed: %s; %s\n", cmd, pid,
			gp_ckpt_error(c, rc, err, sizeof(err)),
			urc == GP_CKPT_SUCCESS ? "it was unlocked and keeps running"
					       : "it is still locked: gpupool resume unlocks it");
		return GP_CLI_ERROR;
	}
	r->device_after = gp_ckpt_process_device_bytes(c, pid);
	r->resident_after = gp_ckpt_resident_bytes(pid);
	/* What the checkpoint copied, from the best figure there is: what the process held on the
	 * device (NVML); what left the device (NVML, all processes: the process may be in another
	 * pid namespace); what its pool held (a lower bound: no context, nothing outside the pool);
	 * how much its resident host memory grew. */
	dev_after = gp_ckpt_device_used_bytes(c);
	if (r->device_before > 0) {
		r->parked = r->device_before - (r->device_after > 0 ? r->device_after : 0);
		r->parked_from = "what it held on the device, NVML";
	} else if (dev_before >= 0 && dev_after >= 0 && dev_before > dev_after) {
		r->parked = dev_before - dev_after;
		r->parked_from = "the device memory it freed, NVML";
	} else if (r->gpupool && need >= 0) {
		r->parked = need;
		r->parked_from = "the blocks its pool held, from its view: at least";
	} else if (r->resident_before >= 0 && r->resident_after > r->resident_before) {
		r->parked = r->resident_after - r->resident_before;
		r->parked_from = "the growth of its resident host memory";
	}
	if (r->gpupool)
		mark_view(pid, unix_ns(), r->parked);
	return GP_CLI_OK;
}

/* Whether `pid` is a gpupool process that suspended itself (its view says so). */
static int suspended_itself(long pid)
{
	struct gp_stats_snapshot s;

	return gp_cli_read("gpupool resume", pid, &s, 1) == GP_CLI_OK && s.self_suspended &&
	       s.suspended_since_ns != 0;
}

/* A process that suspended itself resumes itself: asked through its view, its control thread
 * restores and unlocks it. Waits until its view says it runs. */
static int resume_self(const char *cmd, long pid, struct report *r)
{
	uint64_t t0 = mono_ns(), end = t0 + 60ull * 1000000000u;
	struct gp_stats_snapshot now;
	char path[64];
	int rc;

	gp_stats_view_path(pid, path, sizeof(path));
	rc = gp_stats_view_request_resume(path);
	if (rc != GP_VIEW_OK) {
		fprintf(stderr, "%s: process %ld: %s\n", cmd, pid, gp_stats_view_rc_text(rc));
		return GP_CLI_ERROR;
	}
	r->gpupool = 1;
	while (mono_ns() < end) {
		struct timespec ts = { 0, POLL_NS };

		nanosleep(&ts, NULL);
		if (gp_cli_read(cmd, pid, &now, 0) != GP_CLI_OK)
			return GP_CLI_ERROR;
		if (now.suspended_since_ns == 0) {
			r->restore_ms = ms_since(t0);
			return GP_CLI_OK;
		}
	}
	fprintf(stderr, "%s: process %ld suspended itself and has not resumed within 60 s of the "
			"request (its restore may be failing: see its log); it stays suspended, "
			"nothing lost; its next CUDA call resumes it too\n", cmd, pid);
	return GP_CLI_ERROR;
}

static int resume_one(struct gp_ckpt *c, long pid, struct report *r)
{
	const char *cmd = "gpupool resume";
	char err[64];
	int state, rc;
	uint64_t t0;

	rc = driver_state(cmd, c, pid, &state);
	if (rc != GP_CLI_OK)
		return rc;
	if (state == GP_CKPT_RUNNING) {
		fprintf(stderr, "%s: process %ld is not suspended\n", cmd, pid);
		mark_view(pid, 0, 0); /* a mark left by a suspend that was interrupted */
		return GP_CLI_STATE;
	}
	if (state == GP_CKPT_FAILED) {
		fprintf(stderr, "%s: the CUDA driver reports process %ld failed (an uncorrectable error "
				"during its checkpoint or restore): it cannot be resumed\n", cmd, pid);
		return GP_CLI_ERROR;
	}
	{
		struct gp_stats_snapshot s;
		r->gpupool = gp_cli_read(cmd, pid, &s, 1) == GP_CLI_OK;
	}
	r->device_before = gp_ckpt_process_device_bytes(c, pid);
	r->resident_before = gp_ckpt_resident_bytes(pid);
	if (state == GP_CKPT_CHECKPOINTED) {
		t0 = mono_ns();
		rc = gp_ckpt_restore(c, pid);
		r->restore_ms = ms_since(t0);
		if (rc != GP_CKPT_SUCCESS) {
			fprintf(stderr, "%s: the restore of process %ld failed: %s; it stays suspended, "
					"nothing lost: free device memory and retry gpupool resume %ld\n", cmd,
				pid, gp_ckpt_error(c, rc, err, sizeof(err)), pid);
			return GP_CLI_ERROR;
		}
	}
	t0 = mono_ns();
	rc = gp_ckpt_unlock(c, pid);
	r->unlock_ms = ms_since(t0);
	if (rc != GP_CKPT_SUCCESS) {
		fprintf(stderr, "%s: process %ld was restored but could not be unlocked: %s; its CUDA "
				"calls still wait: retry gpupool resume %ld\n", cmd, pid,
			gp_ckpt_error(c, rc, err, sizeof(err)), pid);
		return GP_CLI_ERROR;
	}
	r->device_after = gp_ckpt_process_device_bytes(c, pid);
	r->resident_after = gp_ckpt_resident_bytes(pid);
	mark_view(pid, 0, 0);
	return GP_CLI_OK;
}

static void json_num(const char *key, int64_t v)
{
	if (v < 0)
		printf(",\"%s\":null", key);
	else
		printf(",\"%s\":%lld", key, (long long)v);
}

static void json_ms(const char *key, double v)
{
	if (v < 0)
		printf(",\"%s\":null", key);
	else
		printf(",\"%s\":%.3f", key, v);
}

static void print_report(const struct report *r, int suspend, int json)
{
	char a[32], b[32];

	if (json) {
		printf("{\"pid\":%ld,\"action\":\"%s\",\"gpupool\":%s", r->pid,
		       suspend ? "suspend" : "resume", r->gpupool ? "true" : "false");
		if (suspend) {
			printf(",\"released_first\":%s", r->skipped == NULL ? "true" : "false");
			json_num("released_bytes", r->released_bytes);
			json_ms("release_ms", r->release_ms);
			json_ms("lock_ms", r->lock_ms);
			json_ms("checkpoint_ms", r->checkpoint_ms);
			json_num("parked_bytes", r->parked);
		} else {
			json_ms("restore_ms", r->restore_ms);
			json_ms("unlock_ms", r->unlock_ms);
		}
		json_num("device_bytes_before", r->device_before);
		json_num("device_bytes_after", r->device_after);
		json_num("resident_bytes_before", r->resident_before);
		json_num("resident_bytes_after", r->resident_after);
		printf("}\n");
		return;
	}
	printf("pid %ld: %s\n", r->pid, suspend ? "suspended" : "resumed");
	if (suspend) {
		if (r->skipped != NULL)
			printf("  release     skipped: %s\n", r->skipped);
		else
			printf("  release     %s given back in %.1f ms\n",
			       bytes_text(r->released_bytes, a, sizeof(a)), r->release_ms);
		printf("  lock        %.1f ms\n  checkpoint  %.1f ms\n", r->lock_ms, r->checkpoint_ms);
	} else {
		if (r->restore_ms >= 0)
			printf("  restore     %.1f ms\n", r->restore_ms);
		else
			printf("  restore     not needed (it was locked, not checkpointed)\n");
		printf("  unlock      %.1f ms\n", r->unlock_ms);
	}
	if (r->device_before >= 0)
		printf("  device      %s -> %s held by the process (NVML)\n",
		       bytes_text(r->device_before, a, sizeof(a)), bytes_text(r->device_after, b, sizeof(b)));
	else
		printf("  device      not measured (no NVML here)\n");
	if (suspend && r->parked_from != NULL)
		printf("  parked      %s in host memory (%s)\n", bytes_text(r->parked, a, sizeof(a)),
		       r->parked_from);
	if (r->resident_before >= 0 && r->resident_after >= 0)
		printf("  host        %s -> %s resident\n", bytes_text(r->resident_before, a, sizeof(a)),
		       bytes_text(r->resident_after, b, sizeof(b)));
	if (suspend)
		printf("  its CUDA calls wait until: gpupool resume %ld\n", r->pid);
}

static void help(int suspend)
{
	if (suspend)
		printf("usage: gpupool suspend PID... [--timeout SECONDS] [--no-release] [--force]\n"
		       "                          [--json]\n\n"
		       "Takes a whole CUDA process off the GPU: its device memory is copied to host\n"
		       "memory and the GPU memory is free for others; its CUDA calls wait until\n"
		       "gpupool resume. A gpupool process first gives its idle memory back, so only\n"
		       "live memory is copied. Any CUDA process can be suspended (NVIDIA driver 570\n"
		       "or later: the driver's checkpoint API).\n"
		       "  --timeout SECONDS  how long to wait for the release, and to lock a busy\n"
		       "                     process (default 10); one not locked in time is left\n"
		       "                     running as it was\n"
		       "  --no-release       copy everything it holds, idle memory included\n"
		       "  --force            go on when the host seems to lack the memory\n"
		       "  --json             one JSON object per process\n");
	else
		printf("usage: gpupool resume PID... [--json]\n\n"
		       "Gives a suspended process its GPU memory back (restore) and lets its CUDA\n"
		       "calls run again (unlock). A failed restore leaves it suspended: free device\n"
		       "memory and run it again.\n"
		       "  --json             one JSON object per process\n");
}

static int usage(int suspend)
{
	fprintf(stderr, suspend ? "usage: gpupool suspend PID... [--timeout SECONDS] [--no-release] "
				  "[--force]\n                          [--json]\n"
				: "usage: gpupool resume PID... [--json]\n");
	return GP_CLI_ERROR;
}

static int run(int argc, char **argv, int suspend)
{
	static const struct option sopts[] = {
		{ "timeout", required_argument, NULL, 't' }, { "no-release", no_argument, NULL, 'r' },
		{ "force", no_argument, NULL, 'f' },	     { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },	     { NULL, 0, NULL, 0 },
	};
	static const struct option ropts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *cmd = suspend ? "gpupool suspend" : "gpupool resume";
	struct opts o = { .timeout_s = 10, .release = 1 };
	struct gp_ckpt *c = NULL;
	char why[256];
	int ch, worst = GP_CLI_OK, rc;
	long *pids = NULL;
	size_t n = 0;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":h", suspend ? sopts : ropts, NULL)) != -1) {
		if (ch == 't') {
			if (gp_cli_seconds(cmd, "--timeout", optarg, &o.timeout_s) != 0)
				return GP_CLI_ERROR;
		} else if (ch == 'r') {
			o.release = 0;
		} else if (ch == 'f') {
			o.force = 1;
		} else if (ch == 'j') {
			o.json = 1;
		} else if (ch == 'h') {
			help(suspend);
			return GP_CLI_OK;
		} else {
			gp_cli_bad_option(cmd, argv, ch);
			return usage(suspend);
		}
	}
	if (gp_cli_targets(cmd, argc, argv, 0, &pids, &n) != GP_CLI_OK)
		return usage(suspend);
	for (size_t i = 0; i < n; i++) {
		struct report r = {
			.pid = pids[i], .released_bytes = -1, .release_ms = -1,
			.lock_ms = -1, .checkpoint_ms = -1, .restore_ms = -1, .unlock_ms = -1,
			.device_before = -1, .device_after = -1, .resident_before = -1,
			.resident_after = -1, .parked = -1,
		};

		/* the process first: no such process or another user's needs no driver to say so */
		rc = check_process(cmd, r.pid);
		if (rc == GP_CLI_OK && !suspend && suspended_itself(r.pid)) {
			rc = resume_self(cmd, r.pid, &r);
			if (rc == GP_CLI_OK)
				print_report(&r, suspend, o.json);
			else if (worst == GP_CLI_OK)
				worst = rc;
			fflush(stdout);
			continue;
		}
		if (rc == GP_CLI_OK && c == NULL) {
			rc = gp_ckpt_open(&c, why, sizeof(why));
			if (rc != GP_CLI_OK) {
				fprintf(stderr, "%s: %s\n", cmd, why);
				free(pids);
				return rc;
			}
		}
		if (rc == GP_CLI_OK)
			rc = suspend ? suspend_one(c, r.pid, &o, &r) : resume_one(c, r.pid, &r);
		if (rc == GP_CLI_OK)
			print_report(&r, suspend, o.json);
		else if (worst == GP_CLI_OK)
			worst = rc;
		fflush(stdout);
	}
	gp_ckpt_close(c);
	free(pids);
	return worst;
}

int gp_cli_suspend(int argc, char **argv)
{
	return run(argc, argv, 1);
}

int gp_cli_resume(int argc, char **argv)
{
	return run(argc, argv, 0);
}

int gp_cli_driver_state(long pid)
{
	struct gp_ckpt *c = NULL;
	char why[256];
	int state;

	if (!gp_ckpt_has_driver(pid) || gp_ckpt_open(&c, why, sizeof(why)) != GP_CLI_OK)
		return GP_CLI_NOT_GPUPOOL;
	if (gp_ckpt_state(c, pid, &state) != GP_CKPT_SUCCESS) {
		gp_ckpt_close(c);
		return GP_CLI_NOT_GPUPOOL;
	}
	printf("pid %ld: not a gpupool process; the CUDA driver reports it %s%s\n", pid,
	       state == GP_CKPT_CHECKPOINTED ? "suspended (checkpointed)" : gp_ckpt_state_name(state),
	       state == GP_CKPT_CHECKPOINTED || state == GP_CKPT_LOCKED
		       ? ": gpupool resume gives it the GPU back" : "");
	gp_ckpt_close(c);
	return GP_CLI_OK;
}
