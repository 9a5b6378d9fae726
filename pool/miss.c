/* miss.c — the pool's miss policy, when this thread's own list has no block it may reuse now:
 * another thread's list, a larger class's block (cfg.oversize_pct), fence batching of small
 * classes, a bounded wait for fenced blocks (cfg.reuse_wait_ns, _poll_ns, _age_ns); else pool.c
 * makes a real allocation. Never on the hit path, never a backend call under a pool lock, never
 * a block handed out before its fence is done. */
#define _POSIX_C_SOURCE 200809L
#include "pool_impl.h"

#include <sched.h>
#include <stdatomic.h>
#include <time.h>

/* Whether the head of list c (the block take_cached would hand out) can give part of itself: it
 * is movable and the backend splits blocks (the split takes what take_cached could), or it may
 * move at time t (a remap can take part of it). Handing it out whole to a smaller request would
 * hold all of it. t is read by the caller: the clock is a backend call, never made under c's
 * lock. */
static int movable_head(struct gp_pool *p, struct gp_list *c, uint64_t t)
{
	int yes;

	if (ld(&c->cached_blocks) == 0)
		return 0;
	gp_lock(&c->lock);
	yes = c->head != NULL && c->head->movable &&
	      (p->be.split != NULL || may_move(p, c->head, t));
	gp_unlock(&c->lock);
	return yes;
}

/* This thread's stripe of the class first, then the others. A block taken from another
 * stripe moves to this thread's stripe (its counters with it), so that its next free and
 * reuse stay on this thread's lock. `spare`: lists whose head may move at time t are passed
 * over. */
static struct gp_block *take_any(struct gp_pool *p, struct gp_dev *d, unsigned cls, unsigned s0,
				 size_t bytes, int *waiting, int spare, uint64_t t)
{
	struct gp_list *base = &d->list[cls * GP_STRIPES], *own = &base[s0], *src;
	struct gp_block *b =
		spare && movable_head(p, own, t) ? NULL : take_cached(p, own, bytes, waiting);

	for (unsigned i = 1; b == NULL && i < GP_STRIPES; i++) {
		src = &base[(s0 + i) % GP_STRIPES];
		if (spare && movable_head(p, src, t))
			continue;
		b = take_cached(p, src, bytes, waiting);
		if (b == NULL)
			continue;
		gp_lock(&src->lock);
		bump(&src->live_blocks, -1);
		bump(&src->live_bytes, -(int64_t)b->bytes);
		bump(&src->requested_bytes, -(int64_t)bytes);
		gp_unlock(&src->lock);
		gp_lock(&own->lock);
		bump(&own->live_blocks, 1);
		bump(&own->live_bytes, (int64_t)b->bytes);
		bump(&own->requested_bytes, (int64_t)bytes);
		gp_unlock(&own->lock);
		set_list(b, cls * GP_STRIPES + s0);
	}
	return b;
}

#define WAIT_MIN_FENCED 2
#define WAIT_MIN_FENCED_BYTES ((uint64_t)64 << 20)

/* A reusable cached block of a larger class, at most cfg.oversize_pct of the request: memory
 * the pool holds anyway, where a real allocation would add to it (see struct gp_pool_config).
 * It stays in its own class: its free returns it there. Where a remap may serve the miss, a
 * block that may move is left to it: the remap takes only the part it needs. */
unsigned gp_pool_larger_last(const struct gp_pool *p, unsigned cls, size_t bytes)
{
	uint64_t limit = (uint64_t)bytes * p->cfg.oversize_pct / 100;
	unsigned n = gp_pool_class_count(), last = cls;

	if (p->cfg.oversize_pct <= 100 || small_class(cls))
		return cls;
	while (last + 1 < n && gp_pool_class_bytes(last + 1) <= limit)
		last++;
	return last;
}

static struct gp_block *take_larger(struct gp_pool *p, struct gp_dev *d, unsigned cls,
				    unsigned s0, size_t bytes, int *waiting)
{
	unsigned last = gp_pool_larger_last(p, cls, bytes);
	struct gp_block *b = NULL;
	uint64_t t;
	int spare;

	if (last == cls)
		return NULL;
	spare = remaps_class(p, cls) && (p->be.split != NULL || gp_may_release(p));
	t = spare && p->be.split == NULL ? now(p) : 0; /* only a remap's age rule needs the time */
	for (unsigned c = cls + 1; b == NULL && c <= last; c++)
		b = take_any(p, d, c, s0, bytes, waiting, spare, t);
	if (b != NULL)
		atomic_fetch_add_explicit(&d->oversize_hits, 1, memory_order_relaxed);
	return b;
}

/* A cached block for the request: of its own class, else a larger one. *waiting: some block
 * that could have served was still fenced. */
static struct gp_block *take_fit(struct gp_pool *p, struct gp_dev *d, unsigned cls, unsigned s0,
				 size_t bytes, int *waiting)
{
	struct gp_block *b = take_any(p, d, cls, s0, bytes, waiting, 0, 0);

	return b != NULL ? b : take_larger(p, d, cls, s0, bytes, waiting);
}

/* A wait for fences polls back to back for its first WAIT_SPIN_NS, then sleeps between polls
 * an eighth of the time waited so far (at most WAIT_NAP_MAX_NS): a wait of milliseconds costs a
 * few dozen fence queries, not one per microsecond, and ends at most an eighth late. */
#ifndef WAIT_SPIN_NS /* -D for experiments (scripts/bench-settings with GPUPOOL_BUILD_DIR) */
#define WAIT_SPIN_NS 50000u
#endif
#define WAIT_NAP_MAX_NS 500000u

static void wait_nap(uint64_t waited_ns)
{
	uint64_t ns = waited_ns / 8;
	struct timespec ts;

	if (waited_ns < WAIT_SPIN_NS)
		return;
	if (ns > WAIT_NAP_MAX_NS)
		ns = WAIT_NAP_MAX_NS;
	ts = gp_timespec_of(ns);
	nanosleep(&ts, NULL);
}

/* Until no thread drives the fences (fences.c), for at most `ns`. */
static void await_driver(struct gp_pool *p, uint64_t ns)
{
	uint64_t t0 = gp_fine_ns();

	while (atomic_load(&p->driving) && gp_fine_ns() - t0 < ns)
		sched_yield();
}

/* Cached blocks of a class, over its stripes (racy: a hint). When the head of each list is
 * still fenced, so are the blocks behind it (freed later). */
static uint64_t class_cached_blocks(struct gp_dev *d, unsigned cls)
{
	uint64_t n = 0;

	for (unsigned s = 0; s < GP_STRIPES; s++)
		n += ld(&d->list[cls * GP_STRIPES + s].cached_blocks);
	return n;
}

/* Whether a miss whose class holds only fenced blocks should wait for them rather than grow
 * the pool: once the class holds WAIT_MIN_FENCED of them and WAIT_MIN_FENCED_BYTES. Below, a
 * new block costs little memory, and a loop that frees and allocates one size rotates through
 * as many blocks as hide the fences' latency (one per iteration the GPU lags behind), at the
 * speed of a hit instead of a wait per allocation. A small class waits only once this thread's
 * own list (stripe s0) holds a fence batch too: WAIT_MIN_FENCED_BYTES spread over many threads'
 * lists is too few blocks a thread to hide a fence, and every miss would wait.
 * A short list grows only while the class holds fewer than GP_STRIPES fence batches: a list's
 * own length is no bound, as threads take each other's reusable blocks and a list robbed below a
 * batch grows again without end (e2e_reuse_threads_bound checks the bound). */
static int worth_waiting(struct gp_pool *p, struct gp_dev *d, unsigned cls, unsigned s0)
{
	uint64_t n = class_cached_blocks(d, cls);

	if (n < WAIT_MIN_FENCED || n * gp_pool_class_bytes(cls) < WAIT_MIN_FENCED_BYTES)
		return 0;
	if (p->batch[cls] <= 1 || !small_class(cls))
		return 1;
	return ld(&d->list[cls * GP_STRIPES + s0].cached_blocks) >= p->batch[cls] ||
	       n >= (uint64_t)GP_STRIPES * p->batch[cls];
}

/* The free epoch of the class's oldest cached block (UINT64_MAX: none). */
static uint64_t oldest_epoch(struct gp_dev *d, unsigned cls)
{
	uint64_t e = UINT64_MAX;

	for (unsigned s = 0; s < GP_STRIPES; s++) {
		struct gp_list *c = &d->list[cls * GP_STRIPES + s];
		if (ld(&c->cached_blocks) == 0)
			continue;
		gp_lock(&c->lock);
		if (c->head != NULL && c->head->epoch < e)
			e = c->head->epoch;
		gp_unlock(&c->lock);
	}
	return e;
}

/* Whether a miss should wait the full cfg.reuse_wait_ns: its class is worth waiting for, or,
 * above 1 MiB, the fence covering its oldest block is old enough (cfg.reuse_age_ns). At or below,
 * a new block costs little memory (the driver packs small requests tightly). */
static int wait_long(struct gp_pool *p, struct gp_dev *d, unsigned cls, unsigned s0)
{
	uint64_t e;

	if (worth_waiting(p, d, cls, s0))
		return 1;
	if (p->cfg.reuse_age_ns == 0 || small_class(cls) ||
	    (e = oldest_epoch(d, cls)) == UINT64_MAX)
		return 0;
	return gp_fence_age_ns(p, e) >= p->cfg.reuse_age_ns;
}

/* See cfg.fence_batch. At most the class's batch of blocks of at most 1 MiB. */
static int batching(struct gp_pool *p, struct gp_dev *d, unsigned cls)
{
	return p->batch[cls] > 1 && small_class(cls) &&
	       class_cached_blocks(d, cls) < p->batch[cls];
}

/* A miss that found a fenced block of its class (the larger classes not looked at yet), or none
 * of its class and only fenced larger ones within cfg.oversize_pct. Three answers, cheapest
 * first: a small class still batching grows (NULL, no fence call); otherwise the fences are
 * driven (recent frees covered, fences polled; when another thread is driving them, what is
 * reusable now is taken, else that thread is waited for first, up to cfg.drive_wait_ns) and, if
 * none of those blocks may be reused yet, driven again until one may, none is left, or the wait
 * has passed: cfg.reuse_wait_ns when the class is worth waiting for, else cfg.reuse_poll_ns (at
 * most reuse_wait_ns). NULL: make a real allocation. No lock is held between polls. */
static struct gp_block *reuse_fenced(struct gp_pool *p, struct gp_dev *d, unsigned cls,
				     unsigned s0, size_t bytes)
{
	uint64_t start = 0, deadline = 0, limit, t;
	struct gp_block *b;
	int waiting, awaited = 0;

	if (batching(p, d, cls))
		return NULL;
	for (;;) {
		int busy = gp_pool_advance(p, 0) == GP_EAGAIN; /* another thread drives them */

		if (busy && deadline != 0)
			sched_yield(); /* let the driving thread run */
		waiting = 0;
		b = take_fit(p, d, cls, s0, bytes, &waiting);
		if (b != NULL || !waiting)
			return b;
		/* Nothing reusable now (a larger block included: gp_pool_alloc left those to this
		 * function). Above 1 MiB wait once for the thread driving the fences, then look
		 * again (and drive them ourselves if still needed); small blocks do not: the driver
		 * packs them tightly, and one more block costs less than threads taking turns at
		 * the fences. */
		if (busy && !awaited && !small_class(cls)) {
			awaited = 1;
			await_driver(p, p->drive_wait_ns);
			continue;
		}
		t = gp_fine_ns();
		if (deadline == 0) {
			limit = p->cfg.reuse_wait_ns;
			if (p->cfg.reuse_poll_ns < limit && !wait_long(p, d, cls, s0))
				limit = p->cfg.reuse_poll_ns;
			if (limit == 0)
				return NULL;
			start = t;
			deadline = t + limit;
			atomic_fetch_add_explicit(&d->fence_waits, 1, memory_order_relaxed);
		} else if (t >= deadline) {
			atomic_fetch_add_explicit(&d->fence_wait_timeouts, 1, memory_order_relaxed);
			return NULL;
		} else {
			wait_nap(t - start);
		}
	}
}

/* A miss on this thread's own list. When its head is fenced, the list holds cfg.fence_batch
 * blocks and the class is not batching, the fences are driven first (reuse_fenced): one fence
 * covers this thread's frees and every other thread's, where a look through the other
 * threads' lists would write to their lines while they use them (threads would take each
 * other's blocks in turn). Otherwise the other lists (a short list takes from them, so that a
 * thread's own list grows to a batch), then (above 1 MiB) a larger class, then the fences.
 * The larger classes are looked at only after the fences are driven when a block of the class
 * itself is fenced: a looped size whose fence is done then reuses its own block without a scan
 * of the classes up to cfg.oversize_pct, and a larger block is not taken where its own would
 * do. NULL: make a real allocation. */
__attribute__((noinline)) struct gp_block *
gp_pool_take_missed(struct gp_pool *p, struct gp_dev *d, unsigned cls, unsigned s0, size_t bytes,
		    int own_fenced)
{
	struct gp_block *b;
	int waiting = 0;

	if (own_fenced && ld(&d->list[cls * GP_STRIPES + s0].cached_blocks) >= p->batch[cls] &&
	    !batching(p, d, cls))
		return reuse_fenced(p, d, cls, s0, bytes);
	b = take_any(p, d, cls, s0, bytes, &waiting, 0, 0);
	if (b == NULL && !waiting)
		b = take_larger(p, d, cls, s0, bytes, &waiting);
	if (b == NULL && waiting)
		b = reuse_fenced(p, d, cls, s0, bytes);
	return b;
}
