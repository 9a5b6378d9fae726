/* capture.c — which streams are being captured into a CUDA graph. A capture counts from just
 * before its begin is passed to the driver (so no thread records a fence on the legacy stream
 * while it starts) until its end returns, or its begin failed. While any is underway, the shim
 * makes no call that a capture forbids on a thread in global capture mode: fences are neither
 * recorded nor polled (fence.c), frees are held for the graph (graphs.c), releases wait
 * (control.c). Up to MAX_CAPTURES at once are tracked; one beyond that is not (its begin returns
 * 0, so its end is not looked for). A stream already tracked is not counted twice. */
#include "capture.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAX_CAPTURES 64

static struct {
	pthread_mutex_t lock;
	CUstream streams[MAX_CAPTURES]; /* guarded by lock */
	_Atomic int n;
} cap = { .lock = PTHREAD_MUTEX_INITIALIZER };

int gp_capture_begin(CUstream s)
{
	int tracked = 0, n;

	pthread_mutex_lock(&cap.lock);
	n = atomic_load(&cap.n);
	for (int i = 0; i < n; i++)
		if (cap.streams[i] == s)
			goto out;
	if (n < MAX_CAPTURES) {
		cap.streams[n] = s;
		atomic_store(&cap.n, n + 1);
		tracked = 1;
	}
out:
	pthread_mutex_unlock(&cap.lock);
	return tracked;
}

int gp_capture_end(CUstream s)
{
	int found = 0, n;

	pthread_mutex_lock(&cap.lock);
	n = atomic_load(&cap.n);
	for (int i = 0; i < n; i++) {
		if (cap.streams[i] == s) {
			cap.streams[i] = cap.streams[n - 1];
			atomic_store(&cap.n, n - 1);
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&cap.lock);
	return found;
}

int gp_capture_active(void)
{
	return atomic_load(&cap.n) != 0;
}
