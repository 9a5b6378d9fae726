/* driver_stream.c — the stand-in driver's streams and the stream-capture rules (CUDA programming
 * guide, "Prohibited and Unhandled Operations"): creating, destroying, querying, synchronising
 * and capturing streams, each thread's per-thread default streams, the thread's capture mode,
 * and the checks the other entry points make against captures in progress. What runs on a
 * stream, and when, is driver_work.c's. Test-only. */
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local CUstreamCaptureMode thread_capture_mode;
static _Thread_local char thread_token_;

/* This thread's per-thread default stream of each device, made at its first work; valid while
 * the device was not reset since (`resets`). Retired when the thread ends (pt_key). */
static _Thread_local struct {
	struct CUstream_st *s;
	uint64_t resets;
} my_pt[STANDIN_MAX_DEVICES];
static pthread_key_t pt_key;

const void *thread_token(void)
{
	return &thread_token_;
}

/* ---- the capture rules (st.lock held) ---- */

/* Whether a potentially unsafe call (allocation, free, queries, synchronisation) from this
 * thread is prohibited now, per cuThreadExchangeStreamCaptureMode. */
static int capture_prohibits(void)
{
	struct CUstream_st *s;

	if (st.captures == 0 || thread_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return 0;
	for (s = st.streams; s != NULL; s = s->next) {
		if (!s->capturing || s->capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
			continue;
		if (s->capture_thread == thread_token())
			return 1;
		if (thread_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
		    s->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL)
			return 1;
	}
	return 0;
}

static const char *cu_error_name(CUresult rc)
{
	switch (rc) {
	case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
	case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT";
	default: return "an error";
	}
}

/* An illegal call during capture also invalidates the capture, as on a GPU. Returns rc; with
 * STANDIN_TRACE=1 says on stderr which call broke the rules, to tell a shim's author. */
CUresult capture_error(const char *fn, int device, CUresult rc)
{
	struct CUstream_st *s;

	for (s = st.streams; s != NULL; s = s->next)
		if (s->capturing && (device < 0 || s->device == device))
			s->capture_invalid = 1;
	if (st.trace)
		fprintf(stderr, "standin: %s during stream capture: %s (thread capture mode %d)\n", fn,
			cu_error_name(rc), (int)thread_capture_mode);
	return rc;
}

CUresult check_unsafe_call(const char *fn)
{
	if (!capture_prohibits())
		return CUDA_SUCCESS;
	return capture_error(fn, -1, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

/* The legacy stream implicitly waits for every blocking stream of its device: touching it while
 * one of those is capturing is an error. */
int legacy_stream_blocked(int device)
{
	struct CUstream_st *s;

	for (s = st.streams; s != NULL; s = s->next)
		if (s->capturing && s->device == device && !(s->flags & CU_STREAM_NON_BLOCKING))
			return 1;
	return 0;
}

int device_capturing(int device)
{
	struct CUstream_st *s;

	for (s = st.streams; s != NULL; s = s->next)
		if (s->capturing && s->device == device)
			return 1;
	return 0;
}

/* ---- stream handles (st.lock held) ---- */

int is_default_stream(CUstream s)
{
	return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

int is_legacy_stream(CUstream s)
{
	return s == NULL || s == CU_STREAM_LEGACY;
}

int stream_valid(CUstream s)
{
	struct CUstream_st *it;

	if (is_default_stream(s))
		return 1;
	for (it = st.streams; it != NULL; it = it->next)
		if (it == s)
			return 1;
	return 0;
}

/* A default stream belongs to the current context's device. */
int stream_device(CUstream s, int ctx_dev)
{
	return is_default_stream(s) ? ctx_dev : s->device;
}

/* A new stream of `device` in st.streams, its handle's reference taken; NULL without memory. */
static struct CUstream_st *stream_new(int device, unsigned flags, int priority)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->device = device;
	s->flags = flags;
	s->priority = priority;
	s->refs = 1;
	pthread_cond_init(&s->wake, NULL);
	s->next = st.streams;
	st.streams = s;
	return s;
}

static int pt_valid(int device)
{
	return my_pt[device].s != NULL && my_pt[device].resets == st.dev[device].resets;
}

/* The stream behind a handle (valid, of `device` if a default one): the legacy stream, this
 * thread's per-thread one (made if `create`, else NULL if it has none: it has had no work), or
 * the handle's own. NULL without memory. */
struct CUstream_st *stream_of(CUstream s, int device, int create)
{
	struct CUstream_st *pt;

	if (is_legacy_stream(s))
		return &st.dev[device].legacy;
	if (s != CU_STREAM_PER_THREAD)
		return s;
	if (pt_valid(device) || !create)
		return pt_valid(device) ? my_pt[device].s : NULL;
	pt = stream_new(device, CU_STREAM_DEFAULT, 0); /* blocking: it synchronises with the legacy */
	if (pt == NULL)
		return NULL;
	pt->per_thread = 1;
	my_pt[device].s = pt;
	my_pt[device].resets = st.dev[device].resets;
	pthread_setspecific(pt_key, pt); /* any non-NULL value: pt_exit runs at the thread's end */
	return pt;
}

/* Off st.streams: retired (its work still runs, its worker then ends). */
static void stream_gone(struct CUstream_st *s)
{
	struct CUstream_st **link;

	for (link = &st.streams; *link != NULL; link = &(*link)->next) {
		if (*link == s) {
			*link = s->next;
			break;
		}
	}
	if (s->capturing)
		st.captures--;
	s->capturing = 0;
	forget_stream(s);
	stream_retire(s);
}

/* The thread ends: its per-thread streams go, as a destroyed stream goes. */
static void pt_exit(void *unused)
{
	int d;

	(void)unused;
	pthread_mutex_lock(&st.lock);
	for (d = 0; d < STANDIN_MAX_DEVICES; d++)
		if (pt_valid(d))
			stream_gone(my_pt[d].s);
	memset(my_pt, 0, sizeof(my_pt));
	leave();
}

void streams_setup(void)
{
	pthread_key_create(&pt_key, pt_exit);
}

/* Work queued on s (a launch, an asynchronous memset or copy): whether it may be queued, and
 * whether it runs now (*run; not when captured). *device: in, the current context's; out, the
 * stream's. */
CUresult stream_work(const char *fn, CUstream s, int *device, int *run)
{
	*run = 0;
	if (!stream_valid(s))
		return CUDA_ERROR_INVALID_HANDLE;
	*device = stream_device(s, *device);
	if (is_legacy_stream(s) && legacy_stream_blocked(*device))
		return capture_error(fn, *device, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	*run = is_default_stream(s) || !s->capturing;
	return CUDA_SUCCESS;
}

/* Its streams, handles and per-thread ones, go (its work was drained: their workers end). */
void destroy_device_streams(int device)
{
	struct CUstream_st *s = st.streams, *next;

	for (; s != NULL; s = next) {
		next = s->next;
		if (s->device == device)
			stream_gone(s);
	}
}

/* ---- creating and destroying ---- */

static CUresult stream_create(CUstream *phStream, unsigned flags, int priority)
{
	struct CUstream_st *s;
	CUresult rc;
	int dev;

	rc = enter_ctx(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (phStream == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	s = stream_new(dev, flags, priority);
	if (s == NULL) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	st.dev[dev].c.stream_creates++;
	*phStream = s;
out:
	leave();
	return rc;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	return stream_create(phStream, Flags, 0);
}

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	return stream_create(phStream, flags, priority);
}

/* Returns at once: the work already queued still runs, its events complete (driver_work.c). */
CUresult cuStreamDestroy_v2(CUstream hStream)
{
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (is_default_stream(hStream) || !stream_valid(hStream) || hStream->per_thread) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	st.dev[hStream->device].c.stream_destroys++;
	stream_gone(hStream);
out:
	leave();
	return rc;
}

/* ---- queries and synchronisation ---- */

/* cuStreamQuery's answer, with the lock held. */
static CUresult query_stream(CUstream s, int dev, const char *fn)
{
	struct CUstream_st *t;
	CUresult rc;

	if (!stream_valid(s))
		return CUDA_ERROR_INVALID_HANDLE;
	rc = check_unsafe_call(fn);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!is_default_stream(s) && s->capturing)
		return capture_error(fn, s->device, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	dev = stream_device(s, dev);
	if (is_legacy_stream(s) && legacy_stream_blocked(dev))
		return capture_error(fn, dev, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	/* With manual events, work is always queued that completes only when the test says, and it
	 * cannot say so for work queued later; with an event latency, the "GPU" always lags that far
	 * behind: never idle, in both. Else the stream's own work: the legacy stream's waits for
	 * what blocking streams had queued before it, not for what they queued after. */
	if (st.manual_events || atomic_load(&st_event_latency_us) > 0)
		return CUDA_ERROR_NOT_READY;
	t = stream_of(s, dev, 0);
	return t != NULL && stream_busy(t) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

static CUresult stream_query(CUstream s, const char *fn)
{
	CUresult rc;
	int dev;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	st.dev[here(-1)].c.stream_queries++;
	rc = query_stream(s, dev, fn);
	leave();
	return rc;
}

CUresult cuStreamQuery(CUstream hStream)
{
	return stream_query(hStream, __func__);
}

CUresult cuStreamQuery_ptsz(CUstream hStream)
{
	return stream_query(hStream != NULL ? hStream : CU_STREAM_PER_THREAD, __func__);
}

/* Waits for the work queued on it so far (the legacy stream's waits for what blocking streams
 * had queued before it). */
static CUresult stream_sync(CUstream s, const char *fn)
{
	struct CUstream_st *t;
	CUresult rc;
	int dev;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	st.dev[here(-1)].c.syncs++;
	if (!stream_valid(s)) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	rc = check_unsafe_call(fn);
	if (rc != CUDA_SUCCESS)
		goto out;
	if (!is_default_stream(s) && s->capturing) {
		rc = capture_error(fn, s->device, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
		goto out;
	}
	dev = stream_device(s, dev);
	if (is_legacy_stream(s) && legacy_stream_blocked(dev)) {
		rc = capture_error(fn, dev, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
		goto out;
	}
	t = stream_of(s, dev, 0);
	if (t == NULL)
		goto out;
	stream_hold(t);
	wait_stream(t, t->queued);
	complete_stream(t);
	stream_drop(t);
out:
	leave();
	return rc;
}

CUresult cuStreamSynchronize(CUstream hStream)
{
	return stream_sync(hStream, __func__);
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	return stream_sync(hStream != NULL ? hStream : CU_STREAM_PER_THREAD, __func__);
}

/* Later work on s waits for the event's point (a wait queued on s), unless there is nothing to
 * wait for: the event reached and s settled. Captures are unchanged: a capturing stream, or an
 * event recorded in a capture, waits for nothing. */
static CUresult stream_wait_event(CUstream s, CUevent e)
{
	struct work_args a = { .kind = WORK_WAIT };
	struct CUstream_st *t;
	CUresult rc;
	int dev;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!stream_valid(s) || !event_valid(e)) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	if ((!is_default_stream(s) && s->capturing) || !e->recorded || e->captured)
		goto out;
	t = stream_of(s, dev, 1);
	if (t == NULL) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (event_reached(e) && stream_settled(t))
		goto out;
	if (!event_reached(e)) {
		a.wait_on = e->on;
		a.wait_seq = e->point;
	}
	rc = queue_work(t, &a, NULL);
out:
	leave();
	return rc;
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	(void)Flags;
	return stream_wait_event(hStream, hEvent);
}

CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	(void)Flags;
	return stream_wait_event(hStream != NULL ? hStream : CU_STREAM_PER_THREAD, hEvent);
}

/* ---- capture ---- */

/* into: the graph the capture ends in (cuStreamBeginCaptureToGraph), NULL: a new one. */
static CUresult begin_capture(CUstream s, CUstreamCaptureMode mode, CUgraph into)
{
	CUresult rc;
	int dev;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (is_default_stream(s)) {
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		goto out;
	}
	if (!stream_valid(s)) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (s->capturing) {
		rc = CUDA_ERROR_ILLEGAL_STATE;
		goto out;
	}
	s->capturing = 1;
	s->capture_invalid = 0;
	s->capture_mode = mode;
	s->capture_thread = thread_token();
	s->capture_graph = into;
	st.captures++;
out:
	leave();
	return rc;
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	return begin_capture(hStream, mode, NULL);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	return begin_capture(hStream != NULL ? hStream : CU_STREAM_PER_THREAD, mode, NULL);
}

static CUresult begin_capture_to_graph(CUstream s, CUgraph g, const CUgraphNode *deps, size_t n,
				       CUstreamCaptureMode mode)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (g == NULL || (n > 0 && deps == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	return begin_capture(s, mode, g);
}

CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
				     const CUgraphNode *dependencies,
				     const CUgraphEdgeData *dependencyData, size_t numDependencies,
				     CUstreamCaptureMode mode)
{
	(void)dependencyData;
	return begin_capture_to_graph(hStream, hGraph, dependencies, numDependencies, mode);
}

CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
					  const CUgraphNode *dependencies,
					  const CUgraphEdgeData *dependencyData,
					  size_t numDependencies, CUstreamCaptureMode mode)
{
	(void)dependencyData;
	return begin_capture_to_graph(hStream != NULL ? hStream : CU_STREAM_PER_THREAD, hGraph,
				      dependencies, numDependencies, mode);
}

/* Ends s's capture (st.lock held): events captured into the graph were never real points in
 * the stream. */
static void end_capture(CUstream s)
{
	struct CUevent_st *e;

	s->capturing = 0;
	st.captures--;
	for (e = st.events; e != NULL; e = e->next) {
		if (e->captured && e->stream == s) {
			e->captured = 0;
			e->recorded = 0;
		}
	}
}

static CUresult end_capture_call(CUstream s, CUgraph *pGraph)
{
	CUresult rc;
	int dev;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (pGraph == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	*pGraph = NULL;
	if (is_default_stream(s) || !stream_valid(s)) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	if (!s->capturing) {
		rc = CUDA_ERROR_ILLEGAL_STATE;
		goto out;
	}
	if (s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED && s->capture_thread != thread_token()) {
		rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
		goto out;
	}
	end_capture(s);
	if (s->capture_invalid)
		rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	else if (s->capture_graph != NULL)
		*pGraph = s->capture_graph;
	else
		rc = new_graph(pGraph, s->device);
out:
	leave();
	return rc;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	return end_capture_call(hStream, phGraph);
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	return end_capture_call(hStream != NULL ? hStream : CU_STREAM_PER_THREAD, phGraph);
}

static CUresult is_capturing(CUstream s, CUstreamCaptureStatus *status)
{
	CUresult rc;
	int dev;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (status == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	*status = CU_STREAM_CAPTURE_STATUS_NONE;
	if (!stream_valid(s)) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	if (is_legacy_stream(s)) {
		if (legacy_stream_blocked(dev))
			rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
		goto out;
	}
	if (s == CU_STREAM_PER_THREAD || !s->capturing)
		goto out;
	*status = s->capture_invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
				     : CU_STREAM_CAPTURE_STATUS_ACTIVE;
out:
	leave();
	return rc;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	return is_capturing(hStream, captureStatus);
}

CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	return is_capturing(hStream != NULL ? hStream : CU_STREAM_PER_THREAD, captureStatus);
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	CUstreamCaptureMode old = thread_capture_mode;
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (mode == NULL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	thread_capture_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}
