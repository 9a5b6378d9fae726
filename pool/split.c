/* split.c — a miss served by the end of a larger cached block (backend split): the smallest
 * larger movable block that may be reused now gives the pieces the miss needs from its end,
 * where they are mapped already, and stays cached, smaller, at its address. No memory moves and
 * no driver call: a hit, in the memory the pool holds, where the oversize rule would hand out the
 * whole block and a real allocation would add to the pool. Never a backend call under a pool
 * lock, never a block that may not be reused yet. */
#define _POSIX_C_SOURCE 200809L
#include "pool_impl.h"

/* The head of list c if it is movable and may be reused now, unlinked (still cached: a free of
 * it is refused as a double free meanwhile). *fenced: the list holds a block still fenced. */
static struct gp_block *take_head(struct gp_pool *p, struct gp_list *c, int *fenced)
{
	struct gp_block *b = lock_reusable_head(p, c, fenced);

	if (b == NULL)
		return NULL;
	if (b->movable)
		unlink_cached(c, NULL, b);
	else
		b = NULL;
	gp_unlock(&c->lock);
	return b;
}

/* The first such block of the smallest class from `from` up (this thread's stripe first). A
 * block of the miss's class itself that may be reused would have been a hit: one is there after
 * a merge (merge.c), or freed a moment ago. */
static struct gp_block *take_movable_from(struct gp_pool *p, struct gp_dev *d, unsigned from,
					  unsigned s0, int *fenced)
{
	struct gp_block *b;

	for (unsigned c = from; c < gp_pool_class_count(); c++)
		for (unsigned i = 0; i < GP_STRIPES; i++)
			if ((b = take_head(p, &d->list[c * GP_STRIPES + (s0 + i) % GP_STRIPES],
					   fenced)) != NULL)
				return b;
	return NULL;
}

/* Such a block; the first time only fenced ones were found, the fences are driven once (recent
 * frees covered, recorded fences polled; on an idle GPU, quiet, they are done at once) and it is
 * looked for again: a free of another size a moment ago is otherwise never covered by a fence on
 * this miss's path, which looks at its own class's fences only. */
static struct gp_block *take_donor(struct gp_pool *p, struct gp_dev *d, unsigned from, unsigned s0,
				   int *driven)
{
	int fenced = 0;
	struct gp_block *b = take_movable_from(p, d, from, s0, &fenced);

	if (b == NULL && fenced && !*driven) {
		*driven = 1;
		if (gp_pool_advance_asking(p) == GP_OK)
			b = take_movable_from(p, d, from, s0, &fenced);
	}
	return b;
}

/* The end of b (out of its list, reusable) becomes a block of class cls for a request of
 * `bytes`; b, smaller, goes back into its list in free order. Otherwise (the backend would not
 * split it: its last pieces that hold the class are all of it) b stays out of its list, as it
 * was. GP_ENOMEM when b was stale (its address handed out again: dropped, not split). */
static int split_block(struct gp_pool *p, struct gp_dev *d, int device, struct gp_block *b,
		       unsigned cls, unsigned s0, size_t bytes, void **out)
{
	struct gp_block *nb;
	size_t tail = 0;
	void *ptr;
	int rc, was_settled;

	if (block_state(b) != BLOCK_CACHED) {
		push_cached(p, d, b); /* drops it */
		return GP_ENOMEM;
	}
	rc = p->be.split(p->be.ctx, device, b->ptr, b->bytes, gp_pool_class_bytes(cls), &tail);
	if (rc != GP_OK || tail == 0 || tail >= b->bytes)
		return rc != GP_OK ? rc : GP_EBACKEND; /* nonsense: nothing changed either */
	ptr = (char *)b->ptr + (b->bytes - tail);
	was_settled = settled(p, b); /* read now: once back in its list b is another thread's */
	/* The tail's bytes leave the block and come back with the new one (enter_block). */
	atomic_fetch_sub(&d->reserved_bytes, tail);
	atomic_fetch_sub(&d->movable_bytes, tail);
	shrink_block(b, b->bytes - tail);
	push_cached(p, d, b);
	if (enter_made(p, d, device, cls, s0, bytes, tail, ptr, was_settled, &nb) != GP_OK)
		return GP_ENOMEM;
	gp_lock(&d->list[list_of(nb)].lock);
	bump(&d->list[list_of(nb)].hits, 1);
	gp_unlock(&d->list[list_of(nb)].lock);
	atomic_fetch_add_explicit(&d->splits, 1, memory_order_relaxed);
	*out = ptr;
	return GP_OK;
}

#define SPLIT_TRIES 4 /* blocks a miss tries that the backend will not split */

/* The smallest block that can give: of the miss's class, handed out whole; larger, its end. One
 * the backend will not split (its pieces too large for the part asked for) is handed out whole
 * when it is at most cfg.oversize_pct of the request (an oversize hit, as without this), else
 * the next larger class is tried. */
int gp_pool_split(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls, unsigned s0,
		  size_t bytes, void **out)
{
	unsigned from = cls;
	int driven = 0, rc = GP_ENOMEM;

	for (int tries = 0; tries < SPLIT_TRIES; tries++) {
		struct gp_block *b = take_donor(p, d, from, s0, &driven);

		if (b == NULL)
			return GP_ENOMEM;
		if (b->cls == cls) { /* all of it: no larger class's worth to keep */
			if (gp_pool_hand_out(p, d, b, bytes) != GP_OK)
				return GP_ENOMEM; /* stale */
			*out = b->ptr;
			return GP_OK;
		}
		rc = split_block(p, d, device, b, cls, s0, bytes, out);
		if (rc == GP_OK || rc == GP_ENOMEM)
			return rc;
		if (p->cfg.oversize_pct > 100 &&
		    (uint64_t)b->bytes * 100 <= (uint64_t)bytes * p->cfg.oversize_pct) {
			if (gp_pool_hand_out(p, d, b, bytes) != GP_OK)
				return GP_ENOMEM; /* stale */
			atomic_fetch_add_explicit(&d->oversize_hits, 1, memory_order_relaxed);
			*out = b->ptr;
			return GP_OK;
		}
		from = b->cls + 1u;
		push_cached(p, d, b);
		if (rc != GP_EINVAL)
			return rc;
	}
	return rc;
}
