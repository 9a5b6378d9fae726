/* driver_ckpt.c — the checkpoint API of the stand-in driver (cuCheckpointProcess*), across
 * processes, as the real one: the caller names a pid, the target does the work. A target with
 * STANDIN_CHECKPOINT=1 answers from its first cuInit on: a thread of its own serves a small
 * shared file, /dev/shm/standin-ckpt.<pid> (mode 0600), that the caller's stand-in writes a
 * request into. Lock takes the driver's lock (st.lock) once every stream's queued work is
 * complete (driver_work.c), so every later call of the target waits, and so does new work;
 * checkpoint parks every allocation's bytes in host memory, poisons the "device" bytes and frees
 * the device's capacity; restore copies them back; unlock drops the lock. A process may name
 * itself, as on the real driver (auto-suspend): the same serving thread answers it, so that the
 * lock is taken and dropped by one thread whichever of its threads asks, and it is started at the
 * first such call even without STANDIN_CHECKPOINT. Test-only. */
#define _GNU_SOURCE
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define POISON 0xdb /* what the "device" holds while checkpointed */

enum op { OP_STATE = 1, OP_LOCK, OP_CHECKPOINT, OP_RESTORE, OP_UNLOCK };

/* The shared file: a caller fills op and timeout_ms, then bumps req; the target answers in
 * result and state, then sets ack to req. Callers take turns with flock. */
struct box {
	_Atomic uint32_t req;
	_Atomic uint32_t ack;
	uint32_t op;
	uint32_t timeout_ms; /* OP_LOCK: 0 waits for ever */
	int32_t result;      /* CUresult */
	int32_t state;       /* CUprocessState after the call */
};

/* A parked allocation. */
struct park {
	struct park *next;
	struct alloc *a;
	void *bytes;
};

/* The target's side; only its serving thread writes it. */
static struct {
	pthread_once_t once, self_once;
	pid_t owner; /* the process that made the box (a forked child is not it) */
	struct box *box;
	char path[64];
	CUprocessState state;
	struct park *parked;
	uint64_t used[STANDIN_MAX_DEVICES]; /* each device's charged bytes before the checkpoint */
	unsigned restore_fails; /* STANDIN_CHECKPOINT_RESTORE_FAILS: restores still to refuse */
} ck = { .once = PTHREAD_ONCE_INIT, .self_once = PTHREAD_ONCE_INIT };

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

static uint64_t deadline_ns(unsigned timeout_ms)
{
	return timeout_ms == 0 ? UINT64_MAX : mono_ns() + (uint64_t)timeout_ms * 1000000u;
}

static struct timespec realtime_in(uint64_t ns)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(ns / 1000000000u);
	ts.tv_nsec += (long)(ns % 1000000000u);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* ---- the target's side (its serving thread) ---- */

/* Hold st.lock with no work queued on any stream, before the deadline (st.progress tells when
 * work completes). */
static CUresult do_lock(unsigned timeout_ms)
{
	uint64_t end = deadline_ns(timeout_ms);
	struct timespec until;
	int rc;

	do {
		uint64_t now = mono_ns();

		if (now >= end)
			return CUDA_ERROR_NOT_READY;
		until = realtime_in(end == UINT64_MAX ? 3600ull * 1000000000u : end - now);
		rc = pthread_mutex_timedlock(&st.lock, &until);
	} while (rc == ETIMEDOUT);
	if (rc != 0)
		return CUDA_ERROR_UNKNOWN;
	while (work_outstanding(-1) > 0) {
		if (end != UINT64_MAX) {
			until.tv_sec = (time_t)(end / 1000000000u);
			until.tv_nsec = (long)(end % 1000000000u);
			rc = pthread_cond_timedwait(&st.progress, &st.lock, &until);
		} else {
			rc = pthread_cond_wait(&st.progress, &st.lock);
		}
		if (rc == ETIMEDOUT && work_outstanding(-1) > 0) {
			pthread_mutex_unlock(&st.lock);
			return CUDA_ERROR_NOT_READY;
		}
	}
	return CUDA_SUCCESS;
}

static void unpark_all(int copy_back)
{
	while (ck.parked != NULL) {
		struct park *p = ck.parked;

		ck.parked = p->next;
		if (copy_back)
			memcpy(p->a->ptr, p->bytes, p->a->size);
		free(p->bytes);
		free(p);
	}
}

/* st.lock held (locked state). */
static CUresult do_checkpoint(void)
{
	for (size_t b = 0; b < STANDIN_MAP_BUCKETS; b++) {
		for (struct alloc *a = st.map[b]; a != NULL; a = a->next) {
			struct park *p = calloc(1, sizeof(*p));

			if (p == NULL || (p->bytes = malloc(a->size)) == NULL) {
				free(p);
				unpark_all(1);
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			memcpy(p->bytes, a->ptr, a->size);
			p->a = a;
			p->next = ck.parked;
			ck.parked = p;
		}
	}
	for (struct park *p = ck.parked; p != NULL; p = p->next)
		memset(p->a->ptr, POISON, p->a->size);
	for (int d = 0; d < st.ndevices; d++) {
		ck.used[d] = st.dev[d].used;
		st.dev[d].used = 0;
	}
	st.checkpointed = 1;
	nvml_publish();
	return CUDA_SUCCESS;
}

static void do_restore(void)
{
	unpark_all(1);
	for (int d = 0; d < st.ndevices; d++)
		st.dev[d].used = ck.used[d];
	st.checkpointed = 0;
	nvml_publish();
}

static CUresult serve(uint32_t op, unsigned timeout_ms)
{
	CUresult rc = CUDA_SUCCESS;

	switch (op) {
	case OP_STATE:
		break;
	case OP_LOCK:
		if (ck.state != CU_PROCESS_STATE_RUNNING)
			return CUDA_ERROR_ILLEGAL_STATE;
		rc = do_lock(timeout_ms);
		if (rc == CUDA_SUCCESS)
			ck.state = CU_PROCESS_STATE_LOCKED;
		break;
	case OP_CHECKPOINT:
		if (ck.state != CU_PROCESS_STATE_LOCKED)
			return CUDA_ERROR_ILLEGAL_STATE;
		rc = do_checkpoint();
		if (rc == CUDA_SUCCESS)
			ck.state = CU_PROCESS_STATE_CHECKPOINTED;
		break;
	case OP_RESTORE:
		if (ck.state != CU_PROCESS_STATE_CHECKPOINTED)
			return CUDA_ERROR_ILLEGAL_STATE;
		if (ck.restore_fails > 0) { /* as a device without the memory now: nothing changes */
			ck.restore_fails--;
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		do_restore();
		ck.state = CU_PROCESS_STATE_LOCKED;
		break;
	case OP_UNLOCK:
		if (ck.state != CU_PROCESS_STATE_LOCKED)
			return CUDA_ERROR_ILLEGAL_STATE;
		pthread_mutex_unlock(&st.lock);
		ck.state = CU_PROCESS_STATE_RUNNING;
		break;
	default:
		rc = CUDA_ERROR_INVALID_VALUE;
	}
	return rc;
}

static void *server(void *arg)
{
	uint32_t seen = 0;

	(void)arg;
	for (;;) {
		uint32_t req = atomic_load(&ck.box->req);

		if (req == seen) {
			futex(&ck.box->req, FUTEX_WAIT, req, NULL);
			continue;
		}
		seen = req;
		ck.box->result = (int32_t)serve(ck.box->op, ck.box->timeout_ms);
		ck.box->state = (int32_t)ck.state;
		atomic_store(&ck.box->ack, req);
		futex(&ck.box->ack, FUTEX_WAKE, INT_MAX, NULL);
	}
	return NULL;
}

static void start_box(int forced)
{
	const char *on = getenv("STANDIN_CHECKPOINT");
	pthread_attr_t attr;
	pthread_t t;
	int fd;

	const char *fails = getenv("STANDIN_CHECKPOINT_RESTORE_FAILS");

	if (ck.box != NULL || (!forced && (on == NULL || strcmp(on, "1") != 0)))
		return;
	if (fails != NULL)
		ck.restore_fails = (unsigned)strtoul(fails, NULL, 10);
	ck.owner = getpid();
	snprintf(ck.path, sizeof(ck.path), "/dev/shm/standin-ckpt.%ld", (long)ck.owner);
	fd = open(ck.path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (ftruncate(fd, sizeof(struct box)) == 0)
		ck.box = mmap(NULL, sizeof(struct box), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (ck.box == MAP_FAILED || ck.box == NULL) {
		ck.box = NULL;
		unlink(ck.path);
		return;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, server, NULL) != 0) {
		unlink(ck.path);
		ck.box = NULL;
	}
	pthread_attr_destroy(&attr);
}

static void start(void)
{
	start_box(0);
}

/* A call of the process on its own pid: served as another process's call would be. */
static void start_self(void)
{
	pthread_once(&ck.once, start); /* not both at once */
	start_box(1);
}

void ckpt_start(void)
{
	pthread_once(&ck.once, start);
}

__attribute__((destructor)) static void ckpt_fini(void)
{
	if (ck.box != NULL && ck.owner == getpid())
		unlink(ck.path);
}

/* ---- the caller's side ---- */

static CUresult ask(int pid, uint32_t op, unsigned timeout_ms, CUprocessState *state)
{
	char path[64];
	struct box *box = MAP_FAILED;
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	uint32_t req;
	int fd;

	rc = check_call();
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = CUDA_ERROR_INVALID_VALUE;
	if (pid <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (pid == (int)getpid() && (ck.owner == 0 || ck.owner == getpid()))
		pthread_once(&ck.self_once, start_self);
	snprintf(path, sizeof(path), "/dev/shm/standin-ckpt.%d", pid);
	fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE; /* not a CUDA process of the stand-in */
	if (flock(fd, LOCK_EX) != 0)
		goto out;
	box = mmap(NULL, sizeof(*box), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (box == MAP_FAILED)
		goto out;
	box->op = op;
	box->timeout_ms = timeout_ms;
	req = atomic_load(&box->req) + 1;
	atomic_store(&box->req, req);
	futex(&box->req, FUTEX_WAKE, INT_MAX, NULL);
	for (;;) {
		const struct timespec tick = { 0, 50000000L };
		uint32_t ack = atomic_load(&box->ack);

		if (ack == req)
			break;
		if (kill(pid, 0) != 0 && errno == ESRCH)
			goto out; /* the target died */
		futex(&box->ack, FUTEX_WAIT, ack, &tick);
	}
	rc = (CUresult)box->result;
	if (state != NULL)
		*state = (CUprocessState)box->state;
out:
	if (box != MAP_FAILED)
		munmap(box, sizeof(*box));
	close(fd);
	return rc;
}

CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
	if (state == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return ask(pid, OP_STATE, 0, state);
}

CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
	return ask(pid, OP_LOCK, args != NULL ? args->timeoutMs : 0, NULL);
}

CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
	(void)args;
	return ask(pid, OP_CHECKPOINT, 0, NULL);
}

CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
	(void)args;
	return ask(pid, OP_RESTORE, 0, NULL);
}

CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
	(void)args;
	return ask(pid, OP_UNLOCK, 0, NULL);
}
