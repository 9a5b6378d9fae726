/* capture.c — which streams are being captured into a CUDA graph, as the shim saw their captures
 * begin and end (entry.c). While any is, the shim makes no call that a capture forbids on a
 * thread in global capture mode: fences are neither recorded nor polled (fence.c), frees are
 * held for the graph (graphs.c), releases wait (control.c). Up to 64 captures at once are
 * tracked; one beyond that is not (its begin returns 0, so its end is not looked for). */
#include "capture.h"

#include <pthread.h>
#include <stdatomic.h>

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t capturing[64];
static _Atomic int ncapturing;

int gp_capture_begin(cudaStream_t s)
{
	int tracked = 0;

	pthread_mutex_lock(&cap_lock);
	if (atomic_load(&ncapturing) < 64) {
		capturing[atomic_load(&ncapturing)] = s;
		atomic_fetch_add(&ncapturing, 1);
		tracked = 1;
	}
	pthread_mutex_unlock(&cap_lock);
	return tracked;
}

int gp_capture_end(cudaStream_t s)
{
	int found = 0;

	pthread_mutex_lock(&cap_lock);
	int n = atomic_load(&ncapturing);
	for (int i = 0; i < n; i++) {
		if (capturing[i] == s) {
			capturing[i] = capturing[n - 1];
			atomic_fetch_sub(&ncapturing, 1);
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&cap_lock);
	return found;
}

int gp_capture_active(void)
{
	return atomic_load(&ncapturing) != 0;
}
