/* driver_event.c — the stand-in driver's events: "the GPU" completes them at once, when told
 * (manual events), after a latency, or on synchronisation; what a stream has pending is what its
 * events say. Entry points cuEventCreate/Destroy/Record/Query/Synchronize, with the record and
 * query faults. Test-only. */
#include "driver.h"

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

/* Synchronised past it: done now, whatever the latency. */
static void finish(struct CUevent_st *e)
{
	e->done = 1;
	e->done_at_ns = 0;
}

void complete_all(int device)
{
	struct CUevent_st *e;

	for (e = st.events; e != NULL; e = e->next)
		if (e->recorded && !e->captured && (device < 0 || e->device == device))
			finish(e);
}

/* Does e belong to stream s (of `device`)? The legacy stream waits for every blocking stream of
 * its device, so all of the device's events are its own. */
static int on_stream(const struct CUevent_st *e, CUstream s, int device)
{
	return e->stream == s || (is_legacy_stream(s) && e->device == device);
}

void complete_stream(CUstream s, int device)
{
	struct CUevent_st *e;

	for (e = st.events; e != NULL; e = e->next)
		if (e->recorded && !e->captured && on_stream(e, s, device))
			finish(e);
}

int stream_has_pending(CUstream s, int device)
{
	struct CUevent_st *e;

	for (e = st.events; e != NULL; e = e->next)
		if (e->recorded && !e->captured && !e->done && on_stream(e, s, device))
			return 1;
	return 0;
}

/* s is going away: its events now belong to their device's default stream. */
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
		free(hEvent);
		rc = CUDA_SUCCESS;
		break;
	}
	leave();
	return rc;
}

/* An event belongs to the device whose context was current when it was created; recording it on
 * a stream of another device is an error, as on a GPU. With the lock held. */
static CUresult record_event(CUevent e, CUstream s, int dev, const char *fn)
{
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
	e->recorded = 1;
	e->stream = is_default_stream(s) ? NULL : s;
	e->seq = ++st.record_seq;
	e->captured = !is_default_stream(s) && s->capturing;
	e->done = !e->captured && !st.manual_events;
	e->done_at_ns = mono_ns() + (uint64_t)atomic_load(&st_event_latency_us) * 1000u;
	return CUDA_SUCCESS;
}

static CUresult event_record(CUevent e, CUstream s, const char *fn)
{
	CUresult rc;
	int dev;

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
	return !e->recorded || (e->done && mono_ns() >= e->done_at_ns) ? CUDA_SUCCESS
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

/* Waits for the event, which also completes what was recorded before it on the same stream. */
CUresult cuEventSynchronize(CUevent hEvent)
{
	struct CUevent_st *e;
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
	for (e = st.events; e != NULL; e = e->next)
		if (e->recorded && !e->captured && e->stream == hEvent->stream &&
		    e->device == hEvent->device && e->seq <= hEvent->seq)
			finish(e);
out:
	leave();
	return rc;
}
