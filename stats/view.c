/* view.c — the live view's file: create, publish behind a seqlock, read a consistent copy, and
 * tell a live writer from a stale or forged file. libc and Linux /proc only; never logs: callers
 * turn the return codes into words. */
#define _GNU_SOURCE
#include "view.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define READ_TRIES 2000 /* ~2 s of retries against a writer caught mid-update */

_Static_assert(sizeof(struct gp_stats_snapshot) % 8 == 0, "the snapshot is copied in words");
_Static_assert(sizeof(struct gp_stats_view) < (1u << 31), "size fits its field");

const char *gp_stats_view_rc_text(int rc)
{
	switch (rc) {
	case GP_VIEW_OK:
		return "ok";
	case GP_VIEW_NONE:
		return "no live view";
	case GP_VIEW_DENIED:
		return "permission denied";
	case GP_VIEW_BAD:
		return "not a gpupool view of this version";
	case GP_VIEW_BUSY:
		return "the view is being written and never settled";
	case GP_VIEW_STALE:
		return "stale view: the process has exited";
	case GP_VIEW_FORGED:
		return "the view's owner is not the process's owner";
	default:
		return "system error";
	}
}

int gp_stats_view_path(long pid, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s/%s%ld", GP_STATS_VIEW_DIR, GP_STATS_VIEW_PREFIX, pid);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

static ssize_t read_file(const char *path, char *buf, size_t len)
{
	ssize_t got, total = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	while ((size_t)total < len &&
	       ((got = read(fd, buf + total, len - (size_t)total)) > 0 || (got < 0 && errno == EINTR)))
		total += got > 0 ? got : 0;
	close(fd);
	return total;
}

uint64_t gp_stats_proc_start(long pid)
{
	char path[64], buf[1024], *p;
	ssize_t n;
	int field;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	n = read_file(path, buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
	if (p == NULL)
		return 0;
	/* After ')' come field 3 (state) onwards; starttime is field 22. */
	for (field = 2; field < 22 && p != NULL; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

void gp_stats_cmdline(long pid, char *buf, size_t len)
{
	char path[64];
	ssize_t n;

	if (len == 0)
		return;
	snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
	n = read_file(path, buf, len - 1);
	if (n < 0)
		n = 0;
	while (n > 0 && buf[n - 1] == '\0')
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == '\0')
			buf[i] = ' ';
	buf[n] = '\0';
}

/* The snapshot moves as 64-bit words, each an atomic access (readers are other processes).
 * Release stores here and acquire loads in the reader order every word after the odd `seq`
 * (plain moves on x86; no fences, which thread sanitizer builds cannot have). */
static void store_words(struct gp_stats_view *v, const struct gp_stats_snapshot *s)
{
	uint64_t *dst = (uint64_t *)(void *)&v->snap;
	const unsigned char *src = (const unsigned char *)s;

	for (size_t i = 0; i < sizeof(*s) / 8; i++) {
		uint64_t w;
		memcpy(&w, src + i * 8, 8);
		__atomic_store_n(&dst[i], w, __ATOMIC_RELEASE);
	}
}

void gp_stats_view_publish(struct gp_stats_view *v, const struct gp_stats_snapshot *s)
{
	uint64_t seq = __atomic_load_n(&v->seq, __ATOMIC_RELAXED);

	__atomic_store_n(&v->seq, seq + 1, __ATOMIC_RELAXED);
	store_words(v, s);
	__atomic_store_n(&v->seq, seq + 2, __ATOMIC_RELEASE);
}

/* A file of ours with this name can only be left by an earlier program of the same pid. */
static int replace_own(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	int rc = -EEXIST;

	if (fd < 0)
		return -EEXIST;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    unlink(path) == 0)
		rc = 0;
	close(fd);
	return rc;
}

int gp_stats_view_create(const char *path, const struct gp_stats_snapshot *first,
			 struct gp_stats_view **out)
{
	struct gp_stats_view *v = MAP_FAILED;
	int fd = -1, rc;

	*out = NULL;
	for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && (errno != EEXIST || attempt > 0 || replace_own(path) != 0)) {
			rc = -errno;
			goto out;
		}
	}
	if (ftruncate(fd, (off_t)sizeof(*v)) != 0) {
		rc = -errno;
		goto out;
	}
	v = mmap(NULL, sizeof(*v), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (v == MAP_FAILED) {
		rc = -errno;
		goto out;
	}
	/* Readers check magic last: write everything else first. */
	v->version = GP_STATS_VIEW_VERSION;
	v->size = (uint32_t)sizeof(*v);
	v->proc_start = gp_stats_proc_start((long)getpid());
	gp_stats_view_publish(v, first);
	__atomic_store_n(&v->magic, GP_STATS_VIEW_MAGIC, __ATOMIC_RELEASE);
	*out = v;
	rc = 0;
out:
	if (rc != 0 && fd >= 0)
		unlink(path);
	if (fd >= 0)
		close(fd); /* the mapping stays */
	return rc;
}

void gp_stats_view_close(struct gp_stats_view *v, const char *path)
{
	if (v != NULL)
		munmap(v, sizeof(*v));
	if (path != NULL)
		unlink(path);
}

/* The pid in ".../gpupool.<pid>", or -1. */
static long pid_of_path(const char *path)
{
	const char *base = strrchr(path, '/');
	char *end;
	long pid;

	base = base ? base + 1 : path;
	if (strncmp(base, GP_STATS_VIEW_PREFIX, strlen(GP_STATS_VIEW_PREFIX)) != 0)
		return -1;
	base += strlen(GP_STATS_VIEW_PREFIX);
	pid = strtol(base, &end, 10);
	return *base != '\0' && *end == '\0' && pid > 0 ? pid : -1;
}

static int copy_consistent(const struct gp_stats_view *v, struct gp_stats_snapshot *out)
{
	const uint64_t *src = (const uint64_t *)(const void *)&v->snap;
	unsigned char *dst = (unsigned char *)out;

	for (int tries = 0; tries < READ_TRIES; tries++) {
		uint64_t s1 = __atomic_load_n(&v->seq, __ATOMIC_ACQUIRE), s2;

		if (!(s1 & 1)) {
			for (size_t i = 0; i < sizeof(*out) / 8; i++) {
				uint64_t w = __atomic_load_n(&src[i], __ATOMIC_ACQUIRE);
				memcpy(dst + i * 8, &w, 8);
			}
			s2 = __atomic_load_n(&v->seq, __ATOMIC_RELAXED);
			if (s1 == s2)
				return GP_VIEW_OK;
		}
		if (tries > 10) {
			struct timespec ts = { 0, 1000000 };
			nanosleep(&ts, NULL);
		}
	}
	return GP_VIEW_BUSY;
}

static int dead(long pid)
{
	return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Is the writer still the process that runs under this pid, owned by the file's owner? */
static int check_writer(long pid, uint64_t proc_start, uid_t file_uid)
{
	char proc[64];
	struct stat st;
	uint64_t now_start;

	if (dead(pid))
		return GP_VIEW_STALE;
	now_start = gp_stats_proc_start(pid);
	if (now_start != 0 && proc_start != 0 && now_start != proc_start)
		return GP_VIEW_STALE; /* the pid now belongs to another process */
	snprintf(proc, sizeof(proc), "/proc/%ld", pid);
	if (stat(proc, &st) != 0)
		return GP_VIEW_OK; /* alive (kill said so) but hidden from us (hidepid): trust it */
	/* /proc/<pid> belongs to the process's user (root when it is not dumpable). */
	if (st.st_uid != file_uid && st.st_uid != 0)
		return GP_VIEW_FORGED;
	return GP_VIEW_OK;
}

/* Map the view at `path` for a reader (`writable`: to write a request or the suspension words),
 * checked to be a regular file of this layout named after a pid: GP_VIEW_OK with *v mapped
 * (munmap it) and *st its file's status, or why not. A file too short or of another layout whose
 * process is gone is stale (it was killed while creating it). */
static int map_view(const char *path, int writable, struct gp_stats_view **v, struct stat *st)
{
	long pid = pid_of_path(path);
	int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	int rc = GP_VIEW_OK;

	*v = MAP_FAILED;
	if (fd < 0)
		return errno == ENOENT ? GP_VIEW_NONE
		       : errno == EACCES || errno == EPERM ? GP_VIEW_DENIED
		       : errno == ELOOP ? GP_VIEW_BAD : GP_VIEW_ERROR;
	if (fstat(fd, st) != 0)
		rc = GP_VIEW_ERROR;
	else if (!S_ISREG(st->st_mode) || pid < 0)
		rc = GP_VIEW_BAD;
	else if ((size_t)st->st_size < sizeof(**v))
		rc = dead(pid) ? GP_VIEW_STALE : GP_VIEW_BAD;
	else if ((*v = mmap(NULL, sizeof(**v), writable ? PROT_READ | PROT_WRITE : PROT_READ,
			    MAP_SHARED, fd, 0)) == MAP_FAILED)
		rc = GP_VIEW_ERROR;
	else if (__atomic_load_n(&(*v)->magic, __ATOMIC_ACQUIRE) != GP_STATS_VIEW_MAGIC ||
		 (*v)->version != GP_STATS_VIEW_VERSION || (*v)->size != sizeof(**v))
		rc = dead(pid) ? GP_VIEW_STALE : GP_VIEW_BAD;
	close(fd); /* the mapping stays */
	if (rc != GP_VIEW_OK && *v != MAP_FAILED) {
		munmap(*v, sizeof(**v));
		*v = MAP_FAILED;
	}
	return rc;
}

int gp_stats_view_read(const char *path, struct gp_stats_snapshot *out)
{
	struct gp_stats_view *v;
	struct stat st;
	int rc = map_view(path, 0, &v, &st);

	if (rc != GP_VIEW_OK)
		return rc;
	rc = copy_consistent(v, out);
	if (rc == GP_VIEW_OK) {
		/* Strings end inside their fields, whatever a writer put there. */
		out->cmd[sizeof(out->cmd) - 1] = '\0';
		for (size_t d = 0; d < GP_STATS_MAX_DEVICES; d++)
			out->dev[d].uuid[GP_STATS_UUID_MAX - 1] = '\0';
		uint64_t since = __atomic_load_n(&v->suspended_ns, __ATOMIC_ACQUIRE);

		/* `gpupool suspend` writes the header (the process cannot); a process that
		 * suspended itself writes its own snapshot. */
		if (since != 0 || !out->self_suspended) {
			out->suspended_since_ns = since;
			out->parked_bytes = since != 0 ? __atomic_load_n(&v->parked_bytes,
									__ATOMIC_ACQUIRE)
						       : 0;
			out->self_suspended = 0;
		}
	}
	if (rc == GP_VIEW_OK && out->pid != pid_of_path(path))
		rc = GP_VIEW_FORGED;
	if (rc == GP_VIEW_OK || rc == GP_VIEW_BUSY) {
		int w = check_writer(pid_of_path(path), v->proc_start, st.st_uid);
		if (w != GP_VIEW_OK)
			rc = w; /* a writer that died mid-update is stale, not busy */
	}
	munmap(v, sizeof(*v));
	return rc;
}

uint64_t gp_stats_view_requests(const struct gp_stats_view *v)
{
	return __atomic_load_n(&v->requests, __ATOMIC_ACQUIRE);
}

uint64_t gp_stats_view_resume_requests(const struct gp_stats_view *v)
{
	return __atomic_load_n(&v->resume_requests, __ATOMIC_ACQUIRE);
}

/* What a reader of the same user may write: one more release or resume request, or the
 * suspension. */
struct view_write {
	int mark;          /* 0: a release request; 1: the suspension words; 2: a resume request */
	uint64_t since_ns; /* Unix time, ns; 0: running */
	uint64_t parked;   /* bytes */
};

static int write_view(const char *path, const struct view_write *w)
{
	struct gp_stats_view *v;
	struct stat st;
	int rc = map_view(path, 1, &v, &st);

	if (rc != GP_VIEW_OK)
		return rc;
	rc = check_writer(pid_of_path(path), v->proc_start, st.st_uid);
	if (rc == GP_VIEW_OK && w->mark == 0) {
		__atomic_fetch_add(&v->requests, 1, __ATOMIC_RELEASE);
	} else if (rc == GP_VIEW_OK && w->mark == 2) {
		__atomic_fetch_add(&v->resume_requests, 1, __ATOMIC_RELEASE);
	} else if (rc == GP_VIEW_OK) {
		/* parked first: a reader that sees the moment sees its bytes (or the last one's) */
		__atomic_store_n(&v->parked_bytes, w->parked, __ATOMIC_RELEASE);
		__atomic_store_n(&v->suspended_ns, w->since_ns, __ATOMIC_RELEASE);
	}
	munmap(v, sizeof(*v));
	return rc;
}

int gp_stats_view_request(const char *path)
{
	const struct view_write w = { .mark = 0 };

	return write_view(path, &w);
}

int gp_stats_view_request_resume(const char *path)
{
	const struct view_write w = { .mark = 2 };

	return write_view(path, &w);
}

int gp_stats_view_mark(const char *path, uint64_t since_ns, uint64_t parked)
{
	const struct view_write w = { .mark = 1, .since_ns = since_ns, .parked = since_ns ? parked : 0 };

	return write_view(path, &w);
}
