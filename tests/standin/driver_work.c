/* driver_work.c — the stand-in's "GPU": the work queued on a stream (kernels, host functions,
 * copies, memsets, stream-ordered frees, event markers, waits for an event) runs in queue order
 * on a thread of the stream's own, started with its first item, once what the item depends on
 * is complete (the items before it, and the legacy stream's order: standin.h); and waiting for
 * a stream's item or for a device. It never decides what is queued (the entry points do), and
 * runs no work with st.lock held but a stream-ordered free. Test-only. */
#define _GNU_SOURCE
#include "driver.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* `s` has completed its seq-th item. */
struct dep {
	struct CUstream_st *s; /* held; NULL once met (and let go) */
	uint64_t seq;
};

struct work {
	struct work *next;
	struct work_args a;
	uint64_t seq;           /* its place in its stream */
	uint64_t ticket;        /* its place among all the work of the process (st.ticket) */
	uint64_t not_before_ns; /* CLOCK_MONOTONIC; 0: at once */
	int ndeps;
	struct dep deps[];
};

/* A worker's own: the stream it works for, and the ticket of the item it runs outside st.lock
 * (0: none). Both 0 on every other thread. */
static _Thread_local struct CUstream_st *my_stream;
static _Thread_local uint64_t my_ticket;

static pthread_attr_t detached;

static void init_progress(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&st.progress, &ca);
	pthread_condattr_destroy(&ca);
}

void work_setup(void)
{
	int d;

	init_progress();
	pthread_attr_init(&detached);
	pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
	for (d = 0; d < STANDIN_MAX_DEVICES; d++) {
		st.dev[d].legacy.legacy = 1;
		st.dev[d].legacy.device = d;
		pthread_cond_init(&st.dev[d].legacy.wake, NULL);
	}
}

/* ---- streams (st.lock held) ---- */

/* Every stream but the legacy ones: those in st.streams, then the retired ones still kept. */
static struct CUstream_st *first_stream(void)
{
	return st.streams != NULL ? st.streams : st.zombies;
}

static struct CUstream_st *next_stream(const struct CUstream_st *s)
{
	if (s->next != NULL || s->retired)
		return s->next;
	return st.zombies;
}

int stream_blocking(const struct CUstream_st *s)
{
	return !s->legacy && !(s->flags & CU_STREAM_NON_BLOCKING);
}

int stream_busy(const struct CUstream_st *s)
{
	return s->done < s->queued;
}

static int blocking_busy(int device)
{
	const struct CUstream_st *b;

	for (b = first_stream(); b != NULL; b = next_stream(b))
		if (b->device == device && stream_blocking(b) && stream_busy(b))
			return 1;
	return 0;
}

int stream_settled(const struct CUstream_st *s)
{
	if (stream_busy(s))
		return 0;
	if (s->legacy)
		return !blocking_busy(s->device);
	return !stream_blocking(s) || !stream_busy(&st.dev[s->device].legacy);
}

void stream_hold(struct CUstream_st *s)
{
	if (!s->legacy)
		s->refs++;
}

static void stream_free(struct CUstream_st *s)
{
	struct CUstream_st **link;

	for (link = &st.zombies; *link != NULL; link = &(*link)->next) {
		if (*link == s) {
			*link = s->next;
			break;
		}
	}
	pthread_cond_destroy(&s->wake);
	free(s);
}

/* The handle's reference goes at retirement, the worker's when its work is done: the last one
 * is always of a retired stream. */
void stream_drop(struct CUstream_st *s)
{
	if (!s->legacy && --s->refs == 0)
		stream_free(s);
}

void stream_retire(struct CUstream_st *s)
{
	s->retired = 1;
	s->next = st.zombies;
	st.zombies = s;
	pthread_cond_signal(&s->wake); /* an idle worker ends */
	stream_drop(s);
}

/* ---- queueing ---- */

static void add_dep(struct dep *out, int *n, struct CUstream_st *s, uint64_t seq)
{
	if (out != NULL) {
		out[*n].s = s;
		out[*n].seq = seq;
		stream_hold(s);
	}
	(*n)++;
}

/* What an item queued on s now waits for besides the items before it (CUDA's "stream
 * synchronization behavior"): on the legacy stream, the work queued so far on every blocking
 * stream of its device; on a blocking stream, the work queued so far on the legacy stream; for
 * a wait, the event's point. Returns how many; out NULL: only counts. */
static int gather_deps(const struct CUstream_st *s, const struct work_args *a, struct dep *out)
{
	struct CUstream_st *b, *legacy = &st.dev[s->device].legacy;
	int n = 0;

	if (a->kind == WORK_WAIT && a->wait_on != NULL && a->wait_on->done < a->wait_seq)
		add_dep(out, &n, a->wait_on, a->wait_seq);
	if (s->legacy) {
		for (b = first_stream(); b != NULL; b = next_stream(b))
			if (b->device == s->device && stream_blocking(b) && stream_busy(b))
				add_dep(out, &n, b, b->queued);
	} else if (stream_blocking(s) && stream_busy(legacy)) {
		add_dep(out, &n, legacy, legacy->queued);
	}
	return n;
}

static void *worker_main(void *arg);

/* Its worker, with every signal blocked: they stay the program's threads' to take. */
static int start_worker(struct CUstream_st *s)
{
	sigset_t all, old;
	pthread_t t;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&t, &detached, worker_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return -1;
	s->worker = 1;
	stream_hold(s);
	return 0;
}

CUresult queue_work(struct CUstream_st *s, const struct work_args *a, uint64_t *seq)
{
	unsigned delay_us = atomic_load(&st_launch_delay_us);
	int n = gather_deps(s, a, NULL);
	struct work *w;

	if (!s->worker && start_worker(s) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	w = calloc(1, sizeof(*w) + (size_t)n * sizeof(w->deps[0]));
	if (w == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	w->a = *a;
	w->ndeps = gather_deps(s, a, w->deps);
	w->seq = ++s->queued;
	w->ticket = ++st.ticket;
	if (a->delayed && delay_us > 0)
		w->not_before_ns = mono_ns() + (uint64_t)delay_us * 1000u;
	if (s->tail != NULL)
		s->tail->next = w;
	else
		s->head = w;
	s->tail = w;
	st.dev[s->device].outstanding++;
	st.dev[s->device].c.work_queued++;
	pthread_cond_signal(&s->wake);
	if (seq != NULL)
		*seq = w->seq;
	return CUDA_SUCCESS;
}

/* ---- the workers ---- */

/* Whether w may start; each dependency is let go once met. */
static int deps_met(struct work *w)
{
	int i;

	for (i = 0; i < w->ndeps; i++) {
		struct dep *d = &w->deps[i];

		if (d->s == NULL)
			continue;
		if (d->s->done < d->seq)
			return 0;
		stream_drop(d->s);
		d->s = NULL;
	}
	return 1;
}

/* Runs w: outside st.lock (a kernel may call CUDA), but a stream-ordered free. */
static void run(const struct CUstream_st *s, const struct work *w)
{
	const struct work_args *a = &w->a;

	if (a->kind == WORK_LOCKED)
		a->locked(a->arg, s->device);
	if (a->kind == WORK_LOCKED || a->kind == WORK_MARKER || a->kind == WORK_WAIT)
		return;
	my_ticket = w->ticket;
	pthread_mutex_unlock(&st.lock);
	if (a->kind == WORK_KERNEL)
		a->kernel(a->params);
	else if (a->kind == WORK_HOST_FN)
		a->host(a->arg);
	else if (a->kind == WORK_COPY)
		memmove(a->dst, a->src, a->n);
	else if (a->kind == WORK_MEMSET)
		memset(a->dst, a->value, a->n);
	pthread_mutex_lock(&st.lock);
	my_ticket = 0;
}

static void complete(struct CUstream_st *s, struct work *w)
{
	struct device *d = &st.dev[s->device];
	int i;

	s->head = w->next;
	if (s->head == NULL)
		s->tail = NULL;
	s->done = w->seq;
	for (i = 0; i < w->ndeps; i++)
		if (w->deps[i].s != NULL)
			stream_drop(w->deps[i].s);
	d->outstanding--;
	d->c.work_done++;
	if (w->a.kind == WORK_KERNEL)
		d->c.kernels_run++;
	else if (w->a.kind == WORK_HOST_FN)
		d->c.host_funcs_run++;
	free(w);
	pthread_cond_broadcast(&st.progress);
}

static struct timespec mono_at(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };

	return ts;
}

/* Until its stream is retired and its work done: then it lets go of the stream and ends. */
static void *worker_main(void *arg)
{
	struct CUstream_st *s = arg;

	my_stream = s;
	pthread_mutex_lock(&st.lock);
	for (;;) {
		struct work *w = s->head;
		struct timespec at;

		if (w == NULL && s->retired)
			break;
		if (w == NULL) {
			pthread_cond_wait(&s->wake, &st.lock);
			continue;
		}
		if (!deps_met(w)) {
			pthread_cond_wait(&st.progress, &st.lock);
			continue;
		}
		if (w->not_before_ns > mono_ns()) {
			at = mono_at(w->not_before_ns);
			pthread_cond_timedwait(&st.progress, &st.lock, &at);
			continue;
		}
		run(s, w);
		complete(s, w);
		report_if_due();
	}
	s->worker = 0;
	stream_drop(s);
	pthread_mutex_unlock(&st.lock);
	return NULL;
}

int in_worker(void)
{
	return my_stream != NULL;
}

/* ---- waiting (st.lock dropped meanwhile) ---- */

/* A kernel that waits for its own stream has nothing left to wait for: the items before it are
 * done, and those after it wait for it. */
void wait_stream(struct CUstream_st *s, uint64_t seq)
{
	if (s == my_stream)
		return;
	stream_hold(s);
	while (s->done < seq)
		pthread_cond_wait(&st.progress, &st.lock);
	stream_drop(s);
}

/* Does `device` have an item up to ticket `upto` not complete? A stream's items are in ticket
 * order: its head tells. */
static int device_busy(int device, uint64_t upto)
{
	const struct CUstream_st *s = &st.dev[device].legacy;

	if (s->head != NULL && s->head->ticket <= upto)
		return 1;
	for (s = first_stream(); s != NULL; s = next_stream(s))
		if (s->device == device && s->head != NULL && s->head->ticket <= upto)
			return 1;
	return 0;
}

/* From a kernel or host function, only the work queued before it: an item waits only for work
 * queued before it, so that work never waits for the caller, and the rest may. */
void wait_device(int device)
{
	uint64_t upto = my_ticket != 0 ? my_ticket - 1 : st.ticket;

	while (device_busy(device, upto))
		pthread_cond_wait(&st.progress, &st.lock);
}

void drain_device(int device)
{
	uint64_t upto = my_ticket != 0 ? my_ticket - 1 : UINT64_MAX;

	while (device_busy(device, upto))
		pthread_cond_wait(&st.progress, &st.lock);
}

uint64_t work_outstanding(int device)
{
	uint64_t n = 0;
	int d;

	for (d = 0; d < STANDIN_MAX_DEVICES; d++)
		if (device < 0 || d == device)
			n += st.dev[d].outstanding;
	return n;
}

/* ---- fork ---- */

/* s in a forked child: its worker did not come along; its work goes onto *dead, done. */
static void orphan(struct CUstream_st *s, struct work **dead)
{
	if (s->tail != NULL) {
		s->tail->next = *dead;
		*dead = s->head;
	}
	s->head = s->tail = NULL;
	s->done = s->queued;
	if (s->worker && !s->legacy)
		s->refs--; /* its worker's: freed below if it was the last */
	s->worker = 0;
	pthread_cond_init(&s->wake, NULL); /* waiters of the parent's are not here */
}

/* A forked child has only the thread that forked (st.lock held): the work queued in the parent
 * is dropped as if complete (markers reached), and the next item queued starts a new worker. */
void work_after_fork(void)
{
	struct work *dead = NULL, *w;
	struct CUstream_st *s;
	int d, i;

	init_progress();
	for (d = 0; d < STANDIN_MAX_DEVICES; d++) {
		orphan(&st.dev[d].legacy, &dead);
		st.dev[d].outstanding = 0;
	}
	for (s = first_stream(); s != NULL; s = next_stream(s))
		orphan(s, &dead);
	while ((w = dead) != NULL) {
		dead = w->next;
		for (i = 0; i < w->ndeps; i++)
			if (w->deps[i].s != NULL)
				stream_drop(w->deps[i].s);
		free(w);
	}
	for (s = st.zombies; s != NULL;) {
		if (s->refs == 0) {
			stream_free(s);
			s = st.zombies;
		} else {
			s = s->next;
		}
	}
}
