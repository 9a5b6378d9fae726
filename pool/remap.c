/* remap.c — a miss served by idle memory cached under other sizes (and, with cfg.remap_trim,
 * idle memory that cannot serve it given back first: trim.c). Cached movable blocks of smaller
 * classes (the largest first), then part of one that holds what they leave (the smallest such),
 * settled and freed at least cfg.remap_age_ns ago, leave their lists and go to backend remap,
 * which moves their physical memory into one new block of the miss's class and adds new memory
 * for the rest only; a block that gave part of itself comes back smaller. Never on the hit path,
 * never a backend call under a pool lock, never a block whose GPU work may still run (settled,
 * pool_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include "pool_impl.h"

#define REMAP_MAX_PIECES_DEFAULT 32u
#define REMAP_MAX_PIECES 64u

/* Unlink from list c its oldest block that may move. A list is in free order, and fences and
 * ages only grow along it: the first block that is not settled or not old enough ends the look. */
struct gp_block *gp_pool_take_movable(struct gp_pool *p, struct gp_list *c, uint64_t t)
{
	struct gp_block *b, *prev = NULL;

	if (ld(&c->cached_blocks) == 0)
		return NULL;
	gp_lock(&c->lock);
	for (b = c->head; b != NULL; prev = b, b = b->next) {
		if (may_move(p, b, t))
			break;
		if (!settled(p, b) || !old_enough(p, b, t)) {
			b = NULL;
			break;
		}
	}
	if (b != NULL)
		unlink_cached(c, prev, b);
	gp_unlock(&c->lock);
	return b;
}

/* Up to `max` blocks that fit `want` bytes together, the largest classes below cls first (a
 * block of cls itself would have been a hit). A block larger than what is still wanted (one
 * that a remap left with more than its class) becomes the last, partial source. Returns how
 * many; *have: the bytes wanted of them; *partial: the index of a partial source, or n. */
static unsigned gather(struct gp_pool *p, struct gp_dev *d, unsigned cls, unsigned s0,
		       size_t want, unsigned max, struct gp_block **blk, size_t *take,
		       size_t *have, unsigned *partial)
{
	uint64_t t = now(p);
	unsigned n = 0;

	*have = 0;
	*partial = max;
	for (unsigned c = cls; c-- > 0 && n < max && *partial == max;) {
		size_t cb = gp_pool_class_bytes(c);

		if (small_class(c))
			break;
		for (unsigned i = 0; i < GP_STRIPES && n < max && cb <= want - *have; i++) {
			struct gp_list *l = &d->list[c * GP_STRIPES + (s0 + i) % GP_STRIPES];
			struct gp_block *b;

			while (n < max && *partial == max && cb <= want - *have &&
			       (b = gp_pool_take_movable(p, l, t)) != NULL) {
				take[n] = b->bytes <= want - *have ? b->bytes : want - *have;
				if (take[n] < b->bytes)
					*partial = n;
				*have += take[n];
				blk[n++] = b;
			}
		}
	}
	if (*partial == max)
		*partial = n;
	return n;
}

/* The smallest cached block that may move and holds `need` bytes or more, looked for from the
 * class of `need` up (this thread's stripe first): the partial source of a remap, which gives
 * what the miss still needs and keeps the rest. */
static struct gp_block *take_donor(struct gp_pool *p, struct gp_dev *d, size_t need, unsigned s0)
{
	uint64_t t = now(p);
	struct gp_block *b;

	for (unsigned c = gp_pool_class_of(need); c < gp_pool_class_count(); c++) {
		if (small_class(c))
			continue;
		for (unsigned i = 0; i < GP_STRIPES; i++)
			if ((b = gp_pool_take_movable(p, &d->list[c * GP_STRIPES + (s0 + i) % GP_STRIPES], t)) !=
			    NULL)
				return b;
	}
	return NULL;
}

/* Back into the map and into its list in free order: a source a remap left as it was, or the
 * smaller block a partial source became (reusable now: its fence is done). Unless it is stale:
 * marked by the claim of a new block at its address before it left the map, or its address in
 * the map again, another block's (pool_impl.h); then dropped. Map and list under the shard's
 * lock, as push_cached. */
static void relist(struct gp_pool *p, struct gp_dev *d, struct gp_block *b)
{
	struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)b->ptr);
	int gone;

	gp_lock(&s->lock);
	gone = block_state(b) != BLOCK_CACHED || gp_ptrmap_find(s, (uintptr_t)b->ptr) != NULL;
	if (!gone) {
		/* No room in the map: a release still finds it in its list. */
		(void)gp_ptrmap_insert(s, (uintptr_t)b->ptr, b, NULL);
		link_in_order(p, d, b);
	}
	gp_unlock(&s->lock);
	if (gone)
		gp_pool_drop_stale(p, b, STALE_UNLISTED);
}

/* The remap failed and left the sources as they were: back where their frees belong. */
static void put_back(struct gp_pool *p, struct gp_dev *d, struct gp_block **blk, unsigned n)
{
	while (n-- > 0)
		relist(p, d, blk[n]);
}

/* `bytes` of a source are gone (moved into the new block, or given back by a failed remap). */
static void forget_bytes(struct gp_dev *d, size_t bytes, int freed)
{
	atomic_fetch_sub(&d->reserved_bytes, bytes);
	atomic_fetch_sub(&d->movable_bytes, bytes);
	if (freed)
		atomic_fetch_add(&d->real_frees, 1);
}

/* A source gave `moved` of its bytes to the new block: gone when that is all of it, else a
 * smaller cached block at the same address, in the largest class it serves, on its stripe. */
static void settle_source(struct gp_pool *p, struct gp_dev *d, struct gp_block *b, size_t moved)
{
	forget_bytes(d, moved, 0);
	if (moved >= b->bytes) {
		retire_block(p, b);
		return;
	}
	shrink_block(b, b->bytes - moved);
	relist(p, d, b);
}

int gp_pool_remap(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls, unsigned s0,
		  size_t bytes, void **out)
{
	struct gp_block *blk[REMAP_MAX_PIECES], *nb;
	struct gp_piece src[REMAP_MAX_PIECES];
	size_t take[REMAP_MAX_PIECES];
	unsigned max = p->cfg.remap_max_pieces ? p->cfg.remap_max_pieces : REMAP_MAX_PIECES_DEFAULT;
	size_t want = gp_pool_class_bytes(cls), have, moved = 0, got = 0;
	void *ptr = NULL;
	int consumed = 0, stale = 0, rc;
	unsigned n, partial;

	if (max > REMAP_MAX_PIECES)
		max = REMAP_MAX_PIECES;
	gp_pool_advance_asking(p); /* recent frees' fences polled: more blocks may be settled */
	/* Blocks still fenced are not waited for: freed a moment ago, their size is likely to be
	 * asked for again (as with remap_age_ns), so moving them would only pass the need for new
	 * memory on to that size's next miss, and the wait would cost this miss the GPU's lag. */
	n = gather(p, d, cls, s0, want, max, blk, take, &have, &partial);
	if (have < want && partial == n && n < max && (blk[n] = take_donor(p, d, want - have, s0))) {
		take[n] = blk[n]->bytes < want - have ? blk[n]->bytes : want - have;
		have += take[n++];
	}
	if (have < want)
		gp_pool_trim_others(p, d, device, cls, want - have);
	if (n == 0)
		return GP_ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		map_remove_block(p, blk[i]);
		src[i] = (struct gp_piece){ blk[i]->ptr, blk[i]->bytes, take[i] };
		stale |= block_state(blk[i]) != BLOCK_CACHED;
	}
	if (stale) { /* a source's address was handed out again: it is dropped, the rest stay */
		put_back(p, d, blk, n);
		return GP_ENOMEM;
	}
	rc = p->be.remap(p->be.ctx, device, want, src, n, &ptr, &got, &consumed);
	if (rc != GP_OK) {
		if (consumed) {
			for (unsigned i = 0; i < n; i++) {
				forget_bytes(d, blk[i]->bytes, 1);
				retire_block(p, blk[i]);
			}
		} else {
			put_back(p, d, blk, n);
		}
		return rc;
	}
	for (unsigned i = 0; i < n; i++) {
		moved += src[i].take;
		settle_source(p, d, blk[i], src[i].take);
	}
	atomic_fetch_add(&d->remaps, 1);
	atomic_fetch_add(&d->remapped_bytes, moved);
	if (got < want)
		got = want;
	if (got > moved && p->cfg.remap_trim)
		gp_pool_note_growth(p, d, device);
	if (enter_made(p, d, device, cls, s0, bytes, got, ptr, 1, &nb) != GP_OK)
		return GP_ENOMEM;
	*out = ptr;
	return GP_OK;
}
