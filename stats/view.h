/* view.h — the live view: one small shared-memory file per process, /dev/shm/gpupool.<pid>
 * (mode 0600, owned by the process's user), holding a snapshot behind a seqlock so that other
 * processes read consistent figures without stopping the writer. The layout is versioned; a
 * reader of another version refuses it. libc only. */
#ifndef GPUPOOL_STATS_VIEW_H
#define GPUPOOL_STATS_VIEW_H

#include "stats.h"

#include <stddef.h>
#include <stdint.h>

#define GP_STATS_VIEW_DIR "/dev/shm"
#define GP_STATS_VIEW_PREFIX "gpupool."
#define GP_STATS_VIEW_MAGIC 0x5745495650475047ULL /* "GPGPVIEW" read as a little-endian word */
#define GP_STATS_VIEW_VERSION 11u                  /* bump on any change below or in stats.h */

/*
 * The file. Written by one process (its control thread, or a release), read by any number.
 * Every field is a 64-bit word or a whole number of them. The reader copies `snap` word by word
 * between two reads of `seq` and retries while `seq` is odd or changed.
 */
struct gp_stats_view {
	uint64_t magic;
	uint32_t version;
	uint32_t size;       /* sizeof(struct gp_stats_view) of the writer, bytes */
	uint64_t proc_start; /* the writer's start, clock ticks after boot (/proc/<pid>/stat, field
			      * 22): a live process with the same pid but another start is not it */
	uint64_t seq;        /* seqlock: odd while `snap` is being written */
	uint64_t requests;   /* release requests: any reader of the same user adds one
			      * (gp_stats_view_request); the writer acts on a change, at its next
			      * look (the release signal only makes it look sooner) */
	uint64_t suspended_ns; /* Unix time, ns, when `gpupool suspend` checkpointed the process;
				* 0: running. Written by that command (a suspended process cannot
				* write), cleared by `gpupool resume`; readers see it in
				* snap.suspended_since_ns */
	uint64_t parked_bytes; /* bytes the checkpoint moved to host memory (snap.parked_bytes) */
	uint64_t resume_requests; /* `gpupool resume` of a process that suspended itself
				   * (GPUPOOL_AUTO_SUSPEND): any reader of the same user adds one;
				   * the writer's control thread resumes it at its next look */
	/* pid, uid, release signal, start time and command line first, then the counters, the
	 * last release and the per-device entries (struct gp_stats_snapshot). */
	struct gp_stats_snapshot snap;
};

/* What a reader found. */
enum gp_stats_view_rc {
	GP_VIEW_OK = 0,
	GP_VIEW_NONE,      /* no view file for this pid */
	GP_VIEW_DENIED,    /* the file exists but may not be read (another user's, mode 0600) */
	GP_VIEW_BAD,       /* not a view, or a view of another layout version */
	GP_VIEW_BUSY,      /* the writer was always mid-update (or died in one) */
	GP_VIEW_STALE,     /* the process that wrote it is gone (or its pid was reused) */
	GP_VIEW_FORGED,    /* the file's owner is not the process's: not trusted */
	GP_VIEW_ERROR,     /* another system error (errno says) */
};

const char *gp_stats_view_rc_text(int rc);

/* /dev/shm/gpupool.<pid> into buf; -1 if it does not fit. */
int gp_stats_view_path(long pid, char *buf, size_t len);

/* The start of process `pid` in clock ticks after boot, or 0 if it cannot be read. */
uint64_t gp_stats_proc_start(long pid);
/* Process `pid`'s command line, arguments separated by spaces, cut to fit; "" if unreadable. */
void gp_stats_cmdline(long pid, char *buf, size_t len);

/* Writer: create the file for this process (O_CREAT|O_EXCL|O_NOFOLLOW, 0600) and publish
 * `first`. A regular file of the same name that this user owns can only be left by an earlier
 * program of the same pid (exec, or a dead process): it is replaced. Returns 0 or -errno. */
int gp_stats_view_create(const char *path, const struct gp_stats_snapshot *first,
			 struct gp_stats_view **out);
/* Writer: publish a new snapshot (one writer at a time: the caller serialises). */
void gp_stats_view_publish(struct gp_stats_view *v, const struct gp_stats_snapshot *s);
/* Writer: unmap; with `path`, remove the file too. */
void gp_stats_view_close(struct gp_stats_view *v, const char *path);

/* Writer: the release requests made so far (compare with the count last acted on). */
uint64_t gp_stats_view_requests(const struct gp_stats_view *v);

/* Reader: ask the live process behind `path` for a release, through its view: the same checks
 * as gp_stats_view_read (a stale or forged view is not written to). Returns enum
 * gp_stats_view_rc. */
int gp_stats_view_request(const char *path);

/* Writer: the resume requests made so far. */
uint64_t gp_stats_view_resume_requests(const struct gp_stats_view *v);
/* Reader: ask the live process behind `path`, which suspended itself, to resume: the same checks
 * as gp_stats_view_request. Returns enum gp_stats_view_rc. */
int gp_stats_view_request_resume(const char *path);

/* Reader: mark the live process behind `path` suspended since `since_ns` (Unix time, ns) with
 * `parked` bytes in host memory, or running again (since_ns 0). The same checks as
 * gp_stats_view_request. Returns enum gp_stats_view_rc. */
int gp_stats_view_mark(const char *path, uint64_t since_ns, uint64_t parked);

/* Reader: a consistent copy of the view at `path` into *out, checked against the live process
 * named by its pid (GP_VIEW_STALE, GP_VIEW_FORGED). Any file of a process that is gone is stale,
 * even one left half-made. Returns enum gp_stats_view_rc; *out is only valid on GP_VIEW_OK. */
int gp_stats_view_read(const char *path, struct gp_stats_snapshot *out);

#endif
