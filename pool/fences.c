/* fences.c — the pool's fence ring: a fence covers every free made before it was recorded; one
 * thread at a time drives (records and polls) them, in order, with no pool lock held during a
 * backend call. A cached block may be reused once a fence recorded after its free completed. */
#define _POSIX_C_SOURCE 200809L
#include "pool_impl.h"

#include <sched.h>

/* ---- fences ---------------------------------------------------------------------------- */

static int try_drive(struct gp_pool *p)
{
	int expected = 0;
	return atomic_compare_exchange_strong(&p->driving, &expected, 1);
}

/* Poll (or wait for) fences in order; a fence counts only once all earlier ones have. */
static void reap_fences(struct gp_pool *p, int wait)
{
	for (;;) {
		struct fence_slot f;
		int done;

		pthread_mutex_lock(&p->fence_lock);
		if (p->ring_count == 0) {
			pthread_mutex_unlock(&p->fence_lock);
			return;
		}
		f = p->ring[p->ring_head];
		pthread_mutex_unlock(&p->fence_lock);

		if (wait && p->be.fence_wait)
			done = p->be.fence_wait(p->be.ctx, f.handle) == GP_OK;
		else
			done = p->be.fence_query(p->be.ctx, f.handle) == 1;
		if (!done)
			return;

		pthread_mutex_lock(&p->fence_lock);
		p->ring_head = (p->ring_head + 1) % MAX_FENCES;
		p->ring_count--;
		pthread_mutex_unlock(&p->fence_lock);
		atomic_store_explicit(&p->done_epoch, f.num, memory_order_release);
		if (p->be.fence_destroy)
			p->be.fence_destroy(p->be.ctx, f.handle);
	}
}

/* Record a fence covering every free made so far, if any free is not yet covered. */
static int record_fence(struct gp_pool *p)
{
	void *handle = NULL;
	uint64_t num;
	int full;

	if (!atomic_load(&p->dirty))
		return GP_OK;
	pthread_mutex_lock(&p->fence_lock);
	full = p->ring_count == MAX_FENCES;
	pthread_mutex_unlock(&p->fence_lock);
	if (full)
		return GP_EAGAIN;
	/* Clear `dirty` and advance the epoch before recording: a free that stamped the old epoch
	 * happened before this point, so the events recorded next are behind its GPU work. */
	atomic_store(&p->dirty, 0);
	num = atomic_fetch_add(&p->epoch, 1) + 1;
	if (p->be.fence_record(p->be.ctx, &handle) != GP_OK) {
		atomic_store(&p->dirty, 1);
		/* The number is used up; the next fence covers its blocks (its number is larger). */
		return GP_EAGAIN;
	}
	pthread_mutex_lock(&p->fence_lock);
	p->ring[(p->ring_head + p->ring_count) % MAX_FENCES] = (struct fence_slot){ handle, num };
	p->ring_count++;
	pthread_mutex_unlock(&p->fence_lock);
	return GP_OK;
}

int gp_pool_advance(struct gp_pool *p, int wait)
{
	int rc = GP_OK;

	if (p->be.fence_record == NULL || p->be.fence_query == NULL)
		return GP_OK;
	while (!try_drive(p)) {
		if (!wait)
			return GP_EAGAIN;
		sched_yield();
	}
	reap_fences(p, 0);
	rc = record_fence(p);
	reap_fences(p, wait);
	atomic_store(&p->driving, 0);
	return rc;
}

void gp_pool_set_ordered(struct gp_pool *p, int ordered)
{
	atomic_store(&p->ordered, ordered);
	if (!ordered)
		atomic_store(&p->dirty, 1); /* blocks freed while ordered now need a fence */
}
