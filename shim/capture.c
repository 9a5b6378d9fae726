/* capture.c — which streams are being captured into a CUDA graph. A capture counts from just
 * before its begin is passed to the driver (so no thread records a fence on the legacy stream
 * while it starts) until its end returns, or its begin failed. While any is underway, the shim
 * makes no call that a capture forbids on a thread in global capture mode: fences are neither
 * recorded nor polled (fence.c), frees are held for the graph (graphs.c), releases wait
 * (control.c). Up to GP_CAPTURE_MAX at once are tracked; one beyond that is not (its begin returns
 * 0, so its end is not looked for). A stream already tracked is not counted twice. Never calls
 * CUDA. A begin waits for the driver calls already inside the gate (a fence being recorded, a
 * real free) to leave it: the only wait here; entering the gate never waits. */
#include "capture.h"
#include "state.h" /* gp_shim.capture */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

int gp_capture_begin(CUstream s)
{
	int tracked = 0, n;

	pthread_mutex_lock(&gp_shim.capture.lock);
	n = atomic_load(&gp_shim.capture.n);
	for (int i = 0; i < n; i++)
		if (gp_shim.capture.streams[i] == s)
			goto out;
	if (n < GP_CAPTURE_MAX) {
		gp_shim.capture.streams[n] = s;
		atomic_store(&gp_shim.capture.n, n + 1);
		tracked = 1;
	}
out:
	pthread_mutex_unlock(&gp_shim.capture.lock);
	/* n is up (sequentially consistent): from here no call enters the gate, and one that entered
	 * before is waited for. A call counts itself in, then looks at n (gp_capture_gate_enter):
	 * either it sees this capture, or this sees it. */
	while (tracked && atomic_load(&gp_shim.capture.gate) != 0)
		sched_yield();
	return tracked;
}

int gp_capture_gate_enter(void)
{
	atomic_fetch_add(&gp_shim.capture.gate, 1);
	if (atomic_load(&gp_shim.capture.n) == 0)
		return 1;
	atomic_fetch_sub(&gp_shim.capture.gate, 1);
	return 0;
}

void gp_capture_gate_leave(void)
{
	atomic_fetch_sub(&gp_shim.capture.gate, 1);
}

int gp_capture_has(CUstream s)
{
	int found = 0, n;

	if (atomic_load(&gp_shim.capture.n) == 0)
		return 0;
	pthread_mutex_lock(&gp_shim.capture.lock);
	n = atomic_load(&gp_shim.capture.n);
	for (int i = 0; i < n && !found; i++)
		found = gp_shim.capture.streams[i] == s;
	pthread_mutex_unlock(&gp_shim.capture.lock);
	return found;
}

int gp_capture_end(CUstream s)
{
	int found = 0, n;

	pthread_mutex_lock(&gp_shim.capture.lock);
	n = atomic_load(&gp_shim.capture.n);
	for (int i = 0; i < n; i++) {
		if (gp_shim.capture.streams[i] == s) {
			gp_shim.capture.streams[i] = gp_shim.capture.streams[n - 1];
			atomic_store(&gp_shim.capture.n, n - 1);
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&gp_shim.capture.lock);
	return found;
}

int gp_capture_active(void)
{
	return atomic_load(&gp_shim.capture.n) != 0;
}

unsigned gp_capture_count(void)
{
	int n = atomic_load(&gp_shim.capture.n);

	return n > 0 ? (unsigned)n : 0;
}
