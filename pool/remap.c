/* remap.c — a miss served by idle memory cached under other sizes (and, with cfg.remap_trim,
 * idle memory that cannot serve it given back first). Cached movable blocks of
 * smaller classes (the largest first), settled and freed at least cfg.remap_age_ns ago, leave
 * their lists and go to backend remap, which moves their physical memory into one new block of
 * the miss's class and adds new memory for the rest only. Never on the hit path, never a backend
 * call under a pool lock, never a block whose GPU work may still run (settled, pool_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include "pool_impl.h"

#define REMAP_MAX_PIECES_DEFAULT 32u
#define REMAP_MAX_PIECES 64u

/* Whether a cached block may move now: movable, its fence done, idle long enough. */
static int may_move(struct gp_pool *p, const struct gp_block *b, uint64_t t)
{
	uint64_t age = p->cfg.remap_age_ns;

	return b->movable && settled(p, b) && (age == 0 || (t > b->freed_ns && t - b->freed_ns >= age));
}

/* Unlink from list c its oldest block that may move. A list is in free order, and fences and
 * ages only grow along it: the first block that is not settled or not old enough ends the look. */
static struct gp_block *take_movable(struct gp_pool *p, struct gp_list *c, uint64_t t)
{
	struct gp_block *b, *prev = NULL;

	if (ld(&c->cached_blocks) == 0)
		return NULL;
	gp_lock(&c->lock);
	for (b = c->head; b != NULL; prev = b, b = b->next) {
		if (may_move(p, b, t))
			break;
		if (!settled(p, b) || (p->cfg.remap_age_ns != 0 && t - b->freed_ns < p->cfg.remap_age_ns)) {
			b = NULL;
			break;
		}
	}
	if (b != NULL) {
		if (prev != NULL)
			prev->next = b->next;
		else
			c->head = b->next;
		if (c->tail == b)
			c->tail = prev;
		b->next = NULL;
		bump(&c->cached_blocks, -1);
		bump(&c->cached_bytes, -(int64_t)b->bytes);
	}
	gp_unlock(&c->lock);
	return b;
}

/* Up to `max` blocks that fit `want` bytes together, the largest classes below cls first (a
 * block of cls itself would have been a hit). Returns how many; *have: their bytes. */
static unsigned gather(struct gp_pool *p, struct gp_dev *d, unsigned cls, unsigned s0,
		       size_t want, unsigned max, struct gp_block **blk, size_t *have)
{
	uint64_t t = now(p);
	unsigned n = 0;

	*have = 0;
	for (unsigned c = cls; c-- > 0 && n < max;) {
		size_t cb = gp_pool_class_bytes(c);

		if (small_class(c))
			break;
		for (unsigned i = 0; i < GP_STRIPES && n < max && cb <= want - *have; i++) {
			struct gp_list *l = &d->list[c * GP_STRIPES + (s0 + i) % GP_STRIPES];
			struct gp_block *b;

			while (n < max && cb <= want - *have && (b = take_movable(p, l, t)) != NULL) {
				blk[n++] = b;
				*have += b->bytes;
			}
		}
	}
	return n;
}

/* cfg.remap_trim: give back idle movable blocks of classes other than cls, the largest first,
 * until `need` bytes are back. */
static void trim(struct gp_pool *p, struct gp_dev *d, unsigned cls, size_t need)
{
	struct gp_block *list = NULL, *b;
	struct gp_release_result r = { 0, 0, 0, 0 };
	uint64_t t = now(p);
	size_t got = 0;

	for (unsigned c = gp_pool_class_count(); c-- > 0 && got < need;) {
		if (small_class(c))
			break;
		if (c == cls)
			continue;
		for (unsigned i = 0; i < GP_STRIPES && got < need; i++) {
			struct gp_list *l = &d->list[c * GP_STRIPES + i];

			while (got < need && (b = take_movable(p, l, t)) != NULL) {
				b->next = list;
				list = b;
				got += b->bytes;
			}
		}
	}
	if (list != NULL)
		gp_pool_free_blocks(p, d, list, &r);
}

static void map_remove(struct gp_pool *p, struct gp_block *b)
{
	struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)b->ptr);

	gp_lock(&s->lock);
	gp_ptrmap_remove(s, (uintptr_t)b->ptr);
	gp_unlock(&s->lock);
}

/* The remap failed and left the sources as they were: back into the map and to the heads of
 * their lists, the reverse of the order they were taken in (so each list keeps its order). */
static void put_back(struct gp_pool *p, struct gp_dev *d, struct gp_block **blk, unsigned n)
{
	while (n-- > 0) {
		struct gp_block *b = blk[n];
		struct gp_list *c = &d->list[b->list];
		struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)b->ptr);

		gp_lock(&s->lock);
		gp_ptrmap_insert(s, (uintptr_t)b->ptr, b); /* no room: a release still finds it */
		gp_unlock(&s->lock);
		gp_lock(&c->lock);
		b->next = c->head;
		c->head = b;
		if (c->tail == NULL)
			c->tail = b;
		atomic_store_explicit(&c->head_epoch, b->epoch, memory_order_relaxed);
		bump(&c->cached_blocks, 1);
		bump(&c->cached_bytes, (int64_t)b->bytes);
		gp_unlock(&c->lock);
	}
}

/* The sources are gone (moved into the new block, or given back by a failed remap). */
static void forget(struct gp_pool *p, struct gp_dev *d, struct gp_block **blk, unsigned n,
		   int freed)
{
	for (unsigned i = 0; i < n; i++) {
		atomic_fetch_sub(&d->reserved_bytes, blk[i]->bytes);
		atomic_fetch_sub(&d->movable_bytes, blk[i]->bytes);
		if (freed)
			atomic_fetch_add(&d->real_frees, 1);
		retire_block(p, blk[i]);
	}
}

int gp_pool_remap(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls, unsigned s0,
		  size_t bytes, void **out)
{
	struct gp_block *blk[REMAP_MAX_PIECES], *nb;
	struct gp_piece src[REMAP_MAX_PIECES];
	unsigned max = p->cfg.remap_max_pieces ? p->cfg.remap_max_pieces : REMAP_MAX_PIECES_DEFAULT;
	size_t want = gp_pool_class_bytes(cls), have;
	void *ptr = NULL;
	int consumed = 0, rc;
	unsigned n;

	if (max > REMAP_MAX_PIECES)
		max = REMAP_MAX_PIECES;
	gp_pool_advance(p, 0); /* recent frees' fences polled: more blocks may be settled */
	/* Blocks still fenced are not waited for: with the GPU 2 ms behind (the stand-in's
	 * STANDIN_EVENT_LATENCY_US, the recorded PyTorch trace) such a wait lowered no peak and made
	 * the warm replay 1.6x slower. */
	n = gather(p, d, cls, s0, want, max, blk, &have);
	if (p->cfg.remap_trim && have < want)
		trim(p, d, cls, want - have);
	if (n == 0)
		return GP_ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		map_remove(p, blk[i]);
		src[i] = (struct gp_piece){ blk[i]->ptr, blk[i]->bytes };
	}
	rc = p->be.remap(p->be.ctx, device, want, src, n, &ptr, &consumed);
	if (rc != GP_OK) {
		if (consumed)
			forget(p, d, blk, n, 1);
		else
			put_back(p, d, blk, n);
		return rc;
	}
	forget(p, d, blk, n, 0);
	atomic_fetch_add(&d->remaps, 1);
	atomic_fetch_add(&d->remapped_bytes, have);
	if (gp_pool_enter_block(p, d, device, cls, cls * GP_STRIPES + s0, bytes, ptr, 1, &nb) !=
	    GP_OK) {
		p->be.free(p->be.ctx, device, ptr, want, 1);
		atomic_fetch_add(&d->real_frees, 1);
		return GP_ENOMEM;
	}
	*out = ptr;
	return GP_OK;
}
