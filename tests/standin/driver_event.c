/* driver_event.c — the stand-in driver's events: a record puts a marker in the stream's work
 * (driver_work.c), and the event is reached when the stream's worker gets there, or at once if
 * the stream has nothing to wait for; manual events and the event latency are overlays on that.
 * Entry points cuEventCreate/Destroy/Record/Query/Synchronize, with the record and query faults.
 * Test-only. */
#include "driver.h"

#include <pthread.h>
#include <stdlib.h>

/* ---- the events' state (st.lock held) ---- */

int event_valid(CUevent e)
{
	struct CUevent_st *it;

	for (it = st.events; it != NULL; it = it->next)
		if (it == e)
			return 1;
	return 0;
}

/* Its stream's worker went past its marker (or it was recorded with nothing to wait for). */
int event_reached(const struct CUevent_st *e)
{
	return e->on == NULL || e->point == 0 || e->on->done >= e->point;
}

/* Lets go of the stream it was recorded on. */
static void unplace(struct CUevent_st *e)
{
	if (e->on != NULL)
		stream_drop(e->on);
	e->on = NULL;
	e->point = 0;
}

/* Synchronised past it, or told complete: done once reached, whatever the latency. */
static void finish(struct CUevent_st *e)
{
	e->held = 0;
	e->done_at_ns = 0;
}

void complete_all(int device)
{
	struct CUevent_st *e;

	for (e = st.events; e != NULL; e = e->next)
		if (e->recorded && !e->captured && (device < 0 || e->device == device))
			finish(e);
}

/* s was synchronised: the events reached on it are done, and on the legacy stream those reached
 * on the blocking streams of its device too (it waited for them). */
void complete_stream(struct CUstream_st *s)
{
	struct CUevent_st *e;

	for (e = st.events; e != NULL; e = e->next)
		if (e->recorded && !e->captured && e->on != NULL && event_reached(e) &&
		    (e->on == s ||
		     (s->legacy && e->on->device == s->device && stream_blocking(e->on))))
			finish(e);
}

/* s is going away: its events now belong to their device's default stream (for the capture
 * rules; their point stays where it is). */
void forget_stream(CUstream s)
{
	struct CUevent_st *e;

	for (e = st.events; e != NULL; e = e->next)
		if (e->stream == s)
			e->stream = NULL;
}

void destroy_device_events(int device)
{
	struct CUevent_st **link = &st.events, *e;

	while (*link != NULL) {
		e = *link;
		if (e->device != device) {
			link = &e->next;
			continue;
		}
		*link = e->next;
		unplace(e);
		free(e);
	}
}

/* ---- entry points ---- */

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	struct CUevent_st *e;
	CUresult rc;
	int dev;

	rc = enter_ctx(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (phEvent == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	e->device = dev;
	e->flags = Flags;
	e->next = st.events;
	st.events = e;
	*phEvent = e;
out:
	leave();
	return rc;
}

CUresult cuEventDestroy_v2(CUevent hEvent)
{
	struct CUevent_st **link;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = CUDA_ERROR_INVALID_HANDLE;
	for (link = &st.events; *link != NULL; link = &(*link)->next) {
		if (*link != hEvent)
			continue;
		*link = hEvent->next;
		unplace(hEvent);
		free(hEvent);
		rc = CUDA_SUCCESS;
		break;
	}
	leave();
	return rc;
}

/* An event belongs to the device whose context was current when it was created; recording it on
 * a stream of another device is an error, as on a GPU. Its point: a marker queued on the stream,
 * or none when the stream has nothing to wait for (then it is reached at once). With the lock
 * held. */
static CUresult record_event(CUevent e, CUstream s, int dev, const char *fn)
{
	struct work_args marker = { .kind = WORK_MARKER };
	struct CUstream_st *on = NULL;
	uint64_t point = 0;
	CUresult rc;

	st.dev[here(-1)].c.event_records++;
	if (!event_valid(e) || !stream_valid(s))
		return CUDA_ERROR_INVALID_HANDLE;
	rc = inject(STANDIN_FAULT_EVENT_RECORD);
	if (rc != CUDA_SUCCESS)
		return rc;
	dev = stream_device(s, dev);
	if (dev != e->device)
		return CUDA_ERROR_INVALID_HANDLE;
	if (is_legacy_stream(s) && legacy_stream_blocked(dev))
		return capture_error(fn, dev, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	if (is_default_stream(s) || !s->capturing) {
		on = stream_of(s, dev, 1);
		if (on == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (!stream_settled(on) && (rc = queue_work(on, &marker, &point)) != CUDA_SUCCESS)
			return rc;
		stream_hold(on);
	}
	unplace(e);
	e->on = on;
	e->point = point;
	e->recorded = 1;
	e->stream = is_default_stream(s) ? NULL : s;
	e->seq = ++st.record_seq;
	e->captured = on == NULL;
	e->held = !e->captured && st.manual_events;
	e->done_at_ns = mono_ns() + (uint64_t)atomic_load(&st_event_latency_us) * 1000u;
	return CUDA_SUCCESS;
}

/* standin_hold_event_records: calls of cuEventRecord wait at their entry while held (a test stops
 * a caller between its own checks and the driver). Apart from st.lock: a held call holds none. */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static int holding, held;

void standin_hold_event_records(int on)
{
	pthread_mutex_lock(&hold_lock);
	holding = on != 0;
	pthread_cond_broadcast(&hold_cond);
	pthread_mutex_unlock(&hold_lock);
}

int standin_held_event_records(void)
{
	int n;

	pthread_mutex_lock(&hold_lock);
	n = held;
	pthread_mutex_unlock(&hold_lock);
	return n;
}

static void wait_while_held(void)
{
	pthread_mutex_lock(&hold_lock);
	held++;
	while (holding)
		pthread_cond_wait(&hold_cond, &hold_lock);
	held--;
	pthread_mutex_unlock(&hold_lock);
}

static CUresult event_record(CUevent e, CUstream s, const char *fn)
{
	CUresult rc;
	int dev;

	wait_while_held();
	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = record_event(e, s, dev, fn);
	leave();
	return rc;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	return event_record(hEvent, hStream, __func__);
}

CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	return event_record(hEvent, hStream != NULL ? hStream : CU_STREAM_PER_THREAD, __func__);
}

/* cuEventQuery's answer, with the lock held. */
static CUresult query_event(CUevent e)
{
	CUresult rc;

	if (!event_valid(e))
		return CUDA_ERROR_INVALID_HANDLE;
	rc = check_unsafe_call("cuEventQuery");
	if (rc != CUDA_SUCCESS)
		return rc;
	if (e->captured)
		return capture_error("cuEventQuery", -1, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	rc = inject(STANDIN_FAULT_EVENT_QUERY);
	if (rc != CUDA_SUCCESS)
		return rc;
	return !e->recorded || (event_reached(e) && !e->held && mono_ns() >= e->done_at_ns)
		       ? CUDA_SUCCESS
		       : CUDA_ERROR_NOT_READY;
}

CUresult cuEventQuery(CUevent hEvent)
{
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	st.dev[here(-1)].c.event_queries++;
	rc = query_event(hEvent);
	leave();
	return rc;
}

/* Waits until the event is reached; then it is done, and so is what was recorded before it on
 * the same stream (manual events, latency). */
CUresult cuEventSynchronize(CUevent hEvent)
{
	struct CUstream_st *on;
	struct CUevent_st *e;
	uint64_t seq;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	st.dev[here(-1)].c.syncs++;
	if (!event_valid(hEvent)) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	rc = check_unsafe_call(__func__);
	if (rc != CUDA_SUCCESS)
		goto out;
	if (hEvent->captured) {
		rc = capture_error(__func__, -1, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
		goto out;
	}
	if (!hEvent->recorded)
		goto out;
	on = hEvent->on; /* recorded outside a capture: it has a stream */
	seq = hEvent->seq;
	stream_hold(on);
	wait_stream(on, hEvent->point);
	/* The lock was dropped: another thread may have destroyed it or recorded it again since. */
	for (e = st.events; e != NULL; e = e->next)
		if (e->recorded && !e->captured && e->on == on && e->seq <= seq && event_reached(e))
			finish(e);
	stream_drop(on);
out:
	leave();
	return rc;
}
