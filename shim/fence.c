/* fence.c — keeping pooled reuse as safe as native cudaFree without a stall per free.
 * Through the driver API where it can (driver_device), else the runtime.
 * The registry lock guards the stream list and is held while events are recorded on those
 * streams, so a stream is never used after its destroy; the hot path never takes it.
 * Nothing here touches a thread's sticky CUDA error: calls are skipped while one is pending,
 * and the errors they cause themselves (cudaErrorNotReady) are cleared. */
#include "fence.h"
#include "capture.h"
#include "driver.h"
#include "log.h"
#include "pool.h"
#include "real.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct stream_ent {
	cudaStream_t s;
	int dev;
	int blocking; /* synchronizes with its device's legacy stream: that one's event covers it */
};

struct ev {
	cudaEvent_t e;
	int dev;
	unsigned gen; /* resets[dev] when the event was made: a later reset destroyed it */
};

struct fence {
	int n, next; /* events, and the first not yet seen complete */
	struct ev ev[];
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stream_ent *streams;
static int nstreams, capstreams;
static struct ev *retired; /* last events of destroyed streams, not yet in a fence */
static int nretired, capretired;
static struct ev *spare;   /* recycled events */
static int nspare, capspare;
static _Atomic uint64_t devmask;
static _Atomic unsigned resets[64]; /* cudaDeviceReset calls per device */

static _Atomic int warned_query;

static int error_pending(void);

static int push(void **arr, int *n, int *cap, size_t size, const void *item)
{
	if (*n == *cap) {
		int ncap = *cap ? *cap * 2 : 16;
		void *p = realloc(*arr, (size_t)ncap * size);
		if (p == NULL)
			return -1;
		*arr = p;
		*cap = ncap;
	}
	memcpy((char *)*arr + (size_t)*n * size, item, size);
	(*n)++;
	return 0;
}

void gp_fence_use_device(int device)
{
	uint64_t bit = 1ULL << (device & 63);
	if (!(atomic_load_explicit(&devmask, memory_order_relaxed) & bit))
		atomic_fetch_or(&devmask, bit);
}

/* -1 when the runtime cannot tell: then nothing here may switch devices (it could not switch
 * back), and the error that cudaGetDevice left is cleared. */
static int current_device(void)
{
	int d = 0;

	if (gp_real.GetDevice == NULL)
		return 0;
	if (gp_real.GetDevice(&d) != cudaSuccess) {
		gp_real.GetLastError();
		return -1;
	}
	return d;
}

static void switch_to(int dev, int *cur)
{
	if (*cur != dev && gp_real.SetDevice(dev) == cudaSuccess)
		*cur = dev;
}

/* With reg_lock held. The current device must be `dev` if a new event is created. */
static int event_get(int dev, int *cur, struct ev *out)
{
	out->dev = dev;
	out->gen = atomic_load(&resets[dev & 63]);
	for (int i = nspare - 1; i >= 0; i--) {
		if (spare[i].dev == dev) {
			out->e = spare[i].e;
			spare[i] = spare[--nspare];
			return 0;
		}
	}
	switch_to(dev, cur);
	return gp_real.EventCreateWithFlags(&out->e, cudaEventDisableTiming) == cudaSuccess ? 0 : -1;
}

/* The event's device was reset since it was made: the event is gone, and so is the work. */
static int stale(const struct ev *e)
{
	return e->gen != atomic_load_explicit(&resets[e->dev & 63], memory_order_relaxed);
}

/* A blocking stream needs no event (or query) of its own when its device's legacy stream gets
 * one in the same fence: the legacy stream waits for it (fence.h). */
static int covered_by_legacy(const struct stream_ent *s, uint64_t mask)
{
	return s->blocking && s->dev < 64 && (mask & (1ULL << s->dev));
}

static int keep_live(struct ev *arr, int n, int dev)
{
	int k = 0;

	for (int i = 0; i < n; i++)
		if (arr[i].dev != dev)
			arr[k++] = arr[i];
	return k;
}

void gp_fence_device_reset(int device)
{
	if (device < 0 || device >= 64)
		return;
	pthread_mutex_lock(&reg_lock);
	atomic_fetch_add(&resets[device], 1);
	nspare = keep_live(spare, nspare, device);
	nretired = keep_live(retired, nretired, device);
	for (int i = 0; i < nstreams;) {
		if (streams[i].dev == device)
			streams[i] = streams[--nstreams];
		else
			i++;
	}
	pthread_mutex_unlock(&reg_lock);
}

void gp_fence_stream_created(cudaStream_t s, unsigned flags)
{
	struct stream_ent e = { s, current_device(), !(flags & cudaStreamNonBlocking) };

	/* Device unknown: 0, and an event of its own. If that is wrong, recording on the stream
	 * fails and each fence is dropped (no reuse) until the stream is destroyed: slow, never
	 * unsafe. */
	if (e.dev < 0) {
		e.dev = 0;
		e.blocking = 0;
	}

	pthread_mutex_lock(&reg_lock);
	push((void **)&streams, &nstreams, &capstreams, sizeof(e), &e);
	pthread_mutex_unlock(&reg_lock);
}

void gp_fence_stream_destroying(cudaStream_t s)
{
	int pending = error_pending(), cur = current_device(), start = cur, wait = 0, failed = 0;

	pthread_mutex_lock(&reg_lock);
	for (int i = 0; i < nstreams; i++) {
		struct ev r;
		if (streams[i].s != s)
			continue;
		/* The work already queued on it must still be waited for by the next fence; when its
		 * last event cannot be recorded, it is waited for now. */
		if (!gp_capture_active()) {
			wait = 1;
			if (start >= 0 && event_get(streams[i].dev, &cur, &r) == 0) {
				if (gp_real.EventRecord(r.e, s) == cudaSuccess &&
				    push((void **)&retired, &nretired, &capretired, sizeof(r), &r) == 0)
					wait = 0;
				else
					gp_real.EventDestroy(r.e);
			}
			failed = wait;
		}
		streams[i] = streams[--nstreams];
		break;
	}
	pthread_mutex_unlock(&reg_lock);
	if (start >= 0)
		switch_to(start, &cur);
	if (wait && gp_real.StreamSynchronize != NULL)
		gp_real.StreamSynchronize(s);
	if (failed && !pending)
		gp_real.GetLastError(); /* the errors are ours, not the program's */
}

/* A thread with a pending CUDA error keeps it: we make no call that could replace it. */
static int error_pending(void)
{
	return gp_real.PeekAtLastError != NULL && gp_real.PeekAtLastError() != cudaSuccess;
}

/* The driver API does the fences' work where it can (bench/cuda_calls.cu: a third less time
 * than the runtime's calls, and no runtime error state to guard: the driver's calls leave it
 * alone): when the pool has used one device and that device's context is current on this
 * thread, so that its legacy stream is the one the runtime's calls would use. Returns that
 * device, or -1: use the runtime. The entry points call gp_drv_resolve before they take
 * reg_lock: its first call runs dlopen, which takes the loader's lock, and a library's
 * constructor holding that lock may be creating a stream (gp_fence_stream_created takes
 * reg_lock); after that it costs a load. */
static int driver_device(uint64_t mask)
{
	CUcontext ctx = NULL;
	CUdevice dev = -1;

	if ((mask & (mask - 1)) != 0 || gp_drv_resolve() != 0)
		return -1;
	if (gp_drv.CtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL ||
	    gp_drv.CtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 || dev >= 64 ||
	    mask != 1ULL << dev)
		return -1;
	return dev;
}

#define NOT_THIS_WAY 1

static int spares_of(int dev)
{
	int n = 0;

	for (int i = 0; i < nspare; i++)
		n += spare[i].dev == dev;
	return n;
}

/* A fence that misses a stream would be unsafe: its events go back to the spares (the retired
 * ones were not taken yet) and it is dropped. With reg_lock held. */
static void drop_fence(struct fence *f)
{
	for (int i = 0; i < f->n; i++)
		push((void **)&spare, &nspare, &capspare, sizeof(struct ev), &f->ev[i]);
	free(f);
}

/* The last events of destroyed streams join the fence. With reg_lock held. */
static void take_retired(struct fence *f)
{
	for (int i = 0; i < nretired; i++)
		f->ev[f->n++] = retired[i];
	nretired = 0;
}

/* gp_fence_record through the driver, with reg_lock held: with events from the spares only (a
 * new one is made by the runtime), and every stream that needs an event on the one device.
 * NOT_THIS_WAY: use the runtime. */
static int record_by_driver(uint64_t mask, struct fence **out)
{
	int dev = driver_device(mask), need = 1, cur, failed = 0;
	struct fence *f;

	if (dev < 0)
		return NOT_THIS_WAY;
	for (int i = 0; i < nstreams; i++) {
		if (covered_by_legacy(&streams[i], mask))
			continue;
		if (streams[i].dev != dev)
			return NOT_THIS_WAY;
		need++;
	}
	if (spares_of(dev) < need)
		return NOT_THIS_WAY;
	f = malloc(sizeof(*f) + sizeof(struct ev) * (size_t)(need + nretired));
	if (f == NULL)
		return GP_EAGAIN;
	f->n = f->next = 0;
	cur = dev;
	for (int i = -1; i < nstreams && !failed; i++) {
		struct ev *e = &f->ev[f->n];
		if (i >= 0 && covered_by_legacy(&streams[i], mask))
			continue;
		event_get(dev, &cur, e); /* a spare: cannot fail */
		if (gp_drv.EventRecord(e->e, i < 0 ? CU_STREAM_LEGACY : streams[i].s) != CUDA_SUCCESS) {
			push((void **)&spare, &nspare, &capspare, sizeof(struct ev), e);
			failed = 1;
			break;
		}
		f->n++;
	}
	if (failed) {
		drop_fence(f);
		return GP_EAGAIN;
	}
	take_retired(f);
	*out = f;
	return GP_OK;
}

int gp_fence_record(void *ctx, void **out)
{
	uint64_t mask = atomic_load(&devmask);
	struct fence *f = NULL;
	int cur, start, rc = GP_EAGAIN, failed = 0;

	(void)ctx;
	*out = NULL;
	if (gp_capture_active() || gp_real.EventRecord == NULL)
		return GP_EAGAIN;
	(void)gp_drv_resolve(); /* before reg_lock: see driver_device */
	pthread_mutex_lock(&reg_lock);
	rc = record_by_driver(mask, &f);
	pthread_mutex_unlock(&reg_lock);
	if (rc != NOT_THIS_WAY) {
		*out = f;
		return rc;
	}
	rc = GP_EAGAIN;
	if (error_pending())
		return GP_EAGAIN;
	cur = start = current_device();
	if (start < 0)
		return GP_EAGAIN; /* could not switch back after recording on other devices */
	pthread_mutex_lock(&reg_lock);
	f = malloc(sizeof(*f) + sizeof(struct ev) * (size_t)(__builtin_popcountll(mask) + nstreams +
								 nretired));
	if (f == NULL)
		goto out;
	f->n = f->next = 0;
	for (int d = 0; d < 64; d++) {
		struct ev *e = &f->ev[f->n];
		if (!(mask & (1ULL << d)))
			continue;
		if (event_get(d, &cur, e) != 0) {
			failed = 1;
			continue;
		}
		switch_to(d, &cur); /* the legacy stream is the current device's */
		if (gp_real.EventRecord(e->e, cudaStreamLegacy) != cudaSuccess) {
			gp_real.EventDestroy(e->e);
			failed = 1;
			continue;
		}
		f->n++;
	}
	for (int i = 0; i < nstreams; i++) {
		struct ev *e = &f->ev[f->n];
		/* The legacy stream's event was recorded above (a fence missing it is dropped). */
		if (covered_by_legacy(&streams[i], mask))
			continue;
		if (event_get(streams[i].dev, &cur, e) != 0) {
			failed = 1;
			continue;
		}
		if (gp_real.EventRecord(e->e, streams[i].s) != cudaSuccess) {
			gp_real.EventDestroy(e->e);
			failed = 1;
			continue;
		}
		f->n++;
	}
	if (failed) {
		drop_fence(f);
		f = NULL;
		goto out;
	}
	take_retired(f);
	rc = GP_OK;
out:
	pthread_mutex_unlock(&reg_lock);
	switch_to(start, &cur);
	if (failed && gp_real.GetLastError)
		gp_real.GetLastError();
	*out = f;
	return rc;
}

/* gp_fence_quiet through the driver, with reg_lock held. -1: not this way. */
static int quiet_by_driver(uint64_t mask)
{
	int idle;

	if (driver_device(mask) < 0)
		return -1;
	idle = nretired == 0 && gp_drv.StreamQuery(CU_STREAM_LEGACY) == CUDA_SUCCESS;
	for (int i = 0; i < nstreams && idle; i++)
		if (!covered_by_legacy(&streams[i], mask))
			idle = gp_drv.StreamQuery(streams[i].s) == CUDA_SUCCESS;
	return idle;
}

/* Whether every stream a fence would record on is idle now (cudaStreamQuery: all work queued
 * on it so far is done), which covers the same work without an event. Not with events of
 * destroyed streams still pending (a fence takes those over). */
int gp_fence_quiet(void *ctx)
{
	uint64_t mask = atomic_load(&devmask);
	int cur, start, idle = 1, failed = 0;

	(void)ctx;
	if (gp_capture_active() || gp_real.StreamQuery == NULL)
		return 0;
	(void)gp_drv_resolve(); /* before reg_lock: see driver_device */
	pthread_mutex_lock(&reg_lock);
	idle = quiet_by_driver(mask);
	pthread_mutex_unlock(&reg_lock);
	if (idle >= 0)
		return idle;
	if (error_pending())
		return 0;
	cur = start = current_device();
	if (start < 0)
		return 0;
	idle = 1;
	pthread_mutex_lock(&reg_lock);
	if (nretired > 0)
		idle = 0;
	for (int d = 0; d < 64 && idle; d++) {
		cudaError_t e;
		if (!(mask & (1ULL << d)))
			continue;
		switch_to(d, &cur); /* the legacy stream is the current device's */
		if (cur != d) {
			idle = 0;
			break;
		}
		e = gp_real.StreamQuery(cudaStreamLegacy);
		idle = e == cudaSuccess;
		failed |= e != cudaSuccess;
	}
	for (int i = 0; i < nstreams && idle; i++) {
		cudaError_t e;
		if (covered_by_legacy(&streams[i], mask))
			continue; /* queried with its device's legacy stream above */
		e = gp_real.StreamQuery(streams[i].s);
		idle = e == cudaSuccess;
		failed |= e != cudaSuccess;
	}
	pthread_mutex_unlock(&reg_lock);
	switch_to(start, &cur);
	if (failed && gp_real.GetLastError)
		gp_real.GetLastError(); /* cudaErrorNotReady, or an error of ours */
	return idle;
}

/* One event of a fence: 1 complete, 0 not (or not known to be). Through the driver when `drv`
 * (the device driver_device gave, -1: none) is the event's device. `pending`: 1 when the thread
 * has a runtime error of its own (the runtime is not asked then), -1 not looked at yet. */
static int event_done(const struct ev *ev, int drv, int *pending)
{
	cudaError_t e;

	if (stale(ev))
		return 1;
	if (ev->dev == drv) {
		CUresult r = gp_drv.EventQuery(ev->e);
		if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY)
			return r == CUDA_SUCCESS;
		gp_log_capped(GP_LOG_WARN, &warned_query,
			      "cuEventQuery failed (error %d); fence not complete", (int)r);
		return 0;
	}
	if (*pending < 0)
		*pending = error_pending();
	if (*pending)
		return 0;
	e = gp_real.EventQuery(ev->e);
	if (e == cudaErrorNotReady) {
		gp_real.GetLastError();
		return 0;
	}
	if (e != cudaSuccess) {
		/* Not known to be complete (a capture begun on another thread, a transient error):
		 * not reused yet. In a broken context nothing completes, and nothing needs to: every
		 * real allocation fails there anyway. */
		gp_log_capped(GP_LOG_WARN, &warned_query,
			      "cudaEventQuery failed (error %d); fence not complete", (int)e);
		gp_real.GetLastError();
		return 0;
	}
	return 1;
}

int gp_fence_query(void *ctx, void *fence)
{
	struct fence *f = fence;
	int drv, pending = -1;

	(void)ctx;
	if (gp_capture_active())
		return 0;
	drv = driver_device(atomic_load(&devmask));
	while (f->next < f->n) {
		if (!event_done(&f->ev[f->next], drv, &pending))
			return 0;
		f->next++;
	}
	return 1;
}

int gp_fence_wait(void *ctx, void *fence)
{
	struct fence *f = fence;

	(void)ctx;
	if (gp_capture_active())
		return GP_EAGAIN;
	while (f->next < f->n) {
		if (!stale(&f->ev[f->next]) &&
		    gp_real.EventSynchronize(f->ev[f->next].e) != cudaSuccess)
			gp_real.GetLastError();
		f->next++;
	}
	return GP_OK;
}

void gp_fence_destroy(void *ctx, void *fence)
{
	struct fence *f = fence;

	(void)ctx;
	if (f == NULL)
		return;
	pthread_mutex_lock(&reg_lock);
	for (int i = 0; i < f->n; i++)
		if (!stale(&f->ev[i]) &&
		    push((void **)&spare, &nspare, &capspare, sizeof(struct ev), &f->ev[i]) != 0)
			gp_real.EventDestroy(f->ev[i].e);
	pthread_mutex_unlock(&reg_lock);
	free(f);
}
