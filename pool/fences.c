/* fences.c — the pool's fence ring: a fence covers every free made before it was recorded; one
 * thread at a time drives (records and polls) them, in order, with no pool lock held during a
 * backend call. A cached block may be reused once a fence recorded after its free completed,
 * never sooner. */
#define _POSIX_C_SOURCE 200809L
#include "pool_impl.h"

#include <sched.h>

/* ---- fences ---------------------------------------------------------------------------- */

static int try_drive(struct gp_pool *p)
{
	int expected = 0;
	return atomic_compare_exchange_strong(&p->driving, &expected, 1);
}

/* Every free stamped below `num` may be reused. Only the driving thread stores done_epoch, and it
 * only grows: a join may have made a later number done than the fence reaped after it. */
static void mark_done(struct gp_pool *p, uint64_t num)
{
	if (num > atomic_load_explicit(&p->done_epoch, memory_order_relaxed))
		atomic_store_explicit(&p->done_epoch, num, memory_order_release);
}

/* Every free stamped below `num` had its GPU work done (a fence completed, the GPU was idle):
 * their blocks may be unmapped or given back at once (settled). The driving thread's alone. */
static void mark_settled(struct gp_pool *p, uint64_t num)
{
	if (num > atomic_load_explicit(&p->settled_epoch, memory_order_relaxed))
		atomic_store_explicit(&p->settled_epoch, num, memory_order_release);
}

/* The last join's settle fence, polled: complete, what the join made done is settled too. */
static void reap_settle(struct gp_pool *p)
{
	if (p->settle.handle == NULL || p->be.fence_query(p->be.ctx, p->settle.handle) != 1)
		return;
	mark_settled(p, p->settle.num);
	if (p->be.fence_destroy)
		p->be.fence_destroy(p->be.ctx, p->settle.handle);
	p->settle.handle = NULL;
}

/* A join: the frees stamped below `num` are done at once. One settle fence pending at a time
 * (asked for only when none is): later joins settle with the next one, or with a fence. */
static int try_join(struct gp_pool *p, int inflight, uint64_t num)
{
	void *settle = NULL;

	if (p->be.join == NULL ||
	    p->be.join(p->be.ctx, inflight, p->settle.handle == NULL ? &settle : NULL) != 1)
		return 0;
	mark_done(p, num);
	if (settle != NULL)
		p->settle = (struct fence_slot){ settle, num, gp_fine_ns() };
	return 1;
}

/* Poll (or wait for) fences in order; a fence counts only once all earlier ones have. */
static void reap_fences(struct gp_pool *p, int wait)
{
	for (;;) {
		struct fence_slot f;
		int done;

		gp_mutex_lock(&p->fence_lock);
		if (p->ring_count == 0) {
			gp_mutex_unlock(&p->fence_lock);
			return;
		}
		f = p->ring[p->ring_head];
		gp_mutex_unlock(&p->fence_lock);

		if (wait && p->be.fence_wait)
			done = p->be.fence_wait(p->be.ctx, f.handle) == GP_OK;
		else
			done = p->be.fence_query(p->be.ctx, f.handle) == 1;
		if (!done)
			return;

		gp_mutex_lock(&p->fence_lock);
		p->ring_head = (p->ring_head + 1) % MAX_FENCES;
		p->ring_count--;
		gp_mutex_unlock(&p->fence_lock);
		mark_done(p, f.num);
		mark_settled(p, f.num);
		if (p->be.fence_destroy)
			p->be.fence_destroy(p->be.ctx, f.handle);
	}
}

/* Whether to ask the backend if the GPU is idle instead of recording a fence: only with no
 * fence in flight (one is: the GPU is behind), and not for a while after it last said no (a
 * busy GPU: the question would only add to each fence's cost). */
#define QUIET_BACKOFF_MAX 64u

static int try_quiet(struct gp_pool *p, int ring_empty, int ask)
{
	if (p->be.quiet == NULL || !ring_empty)
		return 0;
	if (ask) { /* asked whatever the back-off says, which a no leaves as it was */
		if (p->be.quiet(p->be.ctx) != 1)
			return 0;
		p->quiet_skip = 0;
		p->quiet_backoff = 1;
		return 1;
	}
	if (p->quiet_skip > 0) {
		p->quiet_skip--;
		return 0;
	}
	if (p->be.quiet(p->be.ctx) == 1) {
		p->quiet_backoff = 1;
		return 1;
	}
	p->quiet_skip = p->quiet_backoff;
	if (p->quiet_backoff < QUIET_BACKOFF_MAX)
		p->quiet_backoff *= 2;
	return 0;
}

/* Cover every free made so far, if any free is not yet covered: at once when the GPU is idle,
 * else by recording a fence. `ask`: the GPU is asked whether it is idle even while backing off. */
static int record_fence(struct gp_pool *p, int ask)
{
	void *handle = NULL;
	uint64_t num, t;
	int full, empty;

	gp_mutex_lock(&p->fence_lock);
	full = p->ring_count == MAX_FENCES;
	empty = p->ring_count == 0;
	gp_mutex_unlock(&p->fence_lock);
	if (!atomic_load(&p->dirty)) {
		/* Nothing new to cover, but fences in flight: a join completes them now. A block
		 * freed meanwhile has the current number, which this does not make done. */
		num = atomic_load(&p->epoch);
		if (!empty && num > atomic_load_explicit(&p->done_epoch, memory_order_relaxed))
			try_join(p, 1, num);
		return GP_OK;
	}
	if (full && p->be.join == NULL)
		return GP_EAGAIN;
	/* Clear `dirty` and advance the epoch before recording (or asking): a free that stamped the
	 * old epoch happened before this point, so the events recorded next are behind its GPU
	 * work, and an idle GPU has finished it. */
	atomic_store(&p->dirty, 0);
	num = atomic_fetch_add(&p->epoch, 1) + 1;
	/* An idle GPU (no fence in flight), or a join (which covers the fences in flight too):
	 * every earlier number is done. */
	if (try_quiet(p, empty, ask)) {
		mark_done(p, num);
		mark_settled(p, num);
		return GP_OK;
	}
	if (try_join(p, !empty, num))
		return GP_OK;
	if (full) {
		atomic_store(&p->dirty, 1); /* the number is used up; the next fence covers its blocks */
		return GP_EAGAIN;
	}
	if (p->be.fence_record(p->be.ctx, &handle) != GP_OK) {
		atomic_store(&p->dirty, 1);
		/* The number is used up; the next fence covers its blocks (its number is larger). */
		return GP_EAGAIN;
	}
	t = gp_fine_ns();
	gp_mutex_lock(&p->fence_lock);
	p->ring[(p->ring_head + p->ring_count) % MAX_FENCES] = (struct fence_slot){ handle, num, t };
	p->ring_count++;
	gp_mutex_unlock(&p->fence_lock);
	return GP_OK;
}

/* How long ago the fence that covers a block freed at `epoch` was recorded: 0 when none in
 * flight does (not recorded yet, or already complete). */
uint64_t gp_fence_age_ns(struct gp_pool *p, uint64_t epoch)
{
	uint64_t t = 0;

	gp_mutex_lock(&p->fence_lock);
	for (unsigned i = 0; i < p->ring_count; i++) {
		const struct fence_slot *f = &p->ring[(p->ring_head + i) % MAX_FENCES];
		if (f->num > epoch) {
			t = f->t_ns;
			break;
		}
	}
	gp_mutex_unlock(&p->fence_lock);
	return t == 0 ? 0 : gp_fine_ns() - t;
}

static int drive(struct gp_pool *p, int wait, int ask)
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
	reap_settle(p);
	rc = record_fence(p, ask);
	reap_fences(p, wait);
	atomic_store(&p->driving, 0);
	return rc;
}

int gp_pool_advance(struct gp_pool *p, int wait)
{
	return drive(p, wait, 0);
}

int gp_pool_advance_asking(struct gp_pool *p)
{
	return drive(p, 0, 1);
}

void gp_pool_set_ordered(struct gp_pool *p, int ordered)
{
	atomic_store(&p->ordered, ordered);
	if (!ordered)
		atomic_store(&p->dirty, 1); /* blocks freed while ordered now need a fence */
}
