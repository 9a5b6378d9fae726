/* merge.c — cached blocks that lie side by side, pieces of one allocation that splits handed out,
 * become one block again (backend merge: no memory moves, no driver call), so that a miss larger
 * than each of them is served where they lie (split.c) rather than by moving memory (remap.c) or
 * new memory. Run by such a miss only, never on the hit path; never a backend call under a pool
 * lock; only blocks that may be reused now, as a hit's. */
#define _POSIX_C_SOURCE 200809L
#include "pool_impl.h"

#define MERGE_SNAPSHOT_MAX 4096u /* cached blocks looked at by one miss */
#define MERGE_MAX 64u            /* blocks merged into one at most */

struct ent {
	uintptr_t ptr;
	size_t bytes;
	unsigned list;
	struct gp_block *b;
};

/* Every cached movable block that may be reused now, of the classes above 1 MiB: its address,
 * size and list as they are while it is in that list (read under the list's lock). *fenced: some
 * other such block may not be reused yet. */
static unsigned snapshot(struct gp_pool *p, struct gp_dev *d, struct ent *e, unsigned cap,
			 int *fenced)
{
	unsigned n = 0;

	for (unsigned c = 0; c < gp_pool_class_count() && n < cap; c++) {
		if (small_class(c))
			continue;
		for (unsigned s = 0; s < GP_STRIPES && n < cap; s++) {
			struct gp_list *l = &d->list[c * GP_STRIPES + s];

			if (ld(&l->cached_blocks) == 0)
				continue;
			gp_lock(&l->lock);
			for (struct gp_block *b = l->head; b != NULL && n < cap; b = b->next) {
				if (!b->movable)
					continue;
				if (reusable(p, b))
					e[n++] = (struct ent){ (uintptr_t)b->ptr, b->bytes,
							       c * GP_STRIPES + s, b };
				else
					*fenced = 1;
			}
			gp_unlock(&l->lock);
		}
	}
	return n;
}

static int by_ptr(const void *a, const void *b)
{
	uintptr_t x = ((const struct ent *)a)->ptr, y = ((const struct ent *)b)->ptr;

	return x < y ? -1 : x > y;
}

/* Whether e[j] may join e[j - 1]: it begins where that one ends, and (where the backend can say)
 * both are parts of one allocation: blocks of two ranges that happen to touch are not. */
static int joins(struct gp_pool *p, const struct ent *e, unsigned j)
{
	return e[j - 1].ptr + e[j - 1].bytes == e[j].ptr &&
	       (p->be.joinable == NULL ||
		p->be.joinable(p->be.ctx, (void *)e[j - 1].ptr, (void *)e[j].ptr));
}

/* The shortest run of neighbours (each joins the one before) that holds `want` bytes, the one
 * with the fewest bytes: *first and *count. 0 when none. */
static int best_run(struct gp_pool *p, const struct ent *e, unsigned n, size_t want,
		    unsigned *first, unsigned *count)
{
	size_t best = SIZE_MAX;

	for (unsigned i = 0; i < n; i++) {
		size_t sum = e[i].bytes;

		for (unsigned j = i + 1; j < n && j - i < MERGE_MAX && sum < want && joins(p, e, j);
		     j++) {
			sum += e[j].bytes;
			if (sum >= want && sum < best) {
				best = sum;
				*first = i;
				*count = j - i + 1;
			}
		}
	}
	return best != SIZE_MAX;
}

/* Unlink e's block from its list if it is still there as snapshot saw it and may be reused. */
static int take(struct gp_pool *p, struct gp_dev *d, const struct ent *e)
{
	struct gp_list *c = &d->list[e->list];
	struct gp_block *b, *prev = NULL;
	int ok = 0;

	gp_lock(&c->lock);
	for (b = c->head; b != NULL && b != e->b; prev = b, b = b->next)
		;
	if (b != NULL && (uintptr_t)b->ptr == e->ptr && b->bytes == e->bytes && reusable(p, b)) {
		unlink_cached(c, prev, b);
		ok = 1;
	}
	gp_unlock(&c->lock);
	return ok;
}

int gp_pool_coalesce(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls)
{
	struct ent *e = malloc(MERGE_SNAPSHOT_MAX * sizeof(*e));
	void *ptr[MERGE_MAX];
	size_t bytes[MERGE_MAX], sum = 0;
	unsigned n, first = 0, count = 0, got = 0;
	struct gp_block *head;
	int rc = GP_ENOMEM, stale = 0;

	if (e == NULL)
		return GP_ENOMEM;
	/* The first look found only fenced neighbours: the fences are driven once (as split.c's
	 * take_donor does) and they are looked at again, before the miss moves memory instead. */
	for (int driven = 0;; driven = 1) {
		int fenced = 0;

		n = snapshot(p, d, e, MERGE_SNAPSHOT_MAX, &fenced);
		qsort(e, n, sizeof(*e), by_ptr);
		if (best_run(p, e, n, gp_pool_class_bytes(cls), &first, &count))
			break;
		if (driven || !fenced || gp_pool_advance_asking(p) != GP_OK)
			goto out;
	}
	for (got = 0; got < count && take(p, d, &e[first + got]); got++) {
		ptr[got] = e[first + got].b->ptr;
		bytes[got] = e[first + got].bytes;
		stale |= block_state(e[first + got].b) != BLOCK_CACHED;
	}
	/* A part whose address the driver has handed out again (stale) is not merged: put back,
	 * it is dropped, and the others stay as they were. */
	if (got == count && !stale)
		rc = p->be.merge(p->be.ctx, device, ptr, bytes, count);
	if (got < count || stale || rc != GP_OK) {
		while (got-- > 0)
			push_cached(p, d, e[first + got].b);
		rc = rc == GP_OK ? GP_EAGAIN : rc;
		goto out;
	}
	/* One block now, the first's record: the others' records go, their bytes join it. It may
	 * be reused once all of them could (their latest free epoch and time). */
	head = e[first].b;
	for (unsigned i = 1; i < count; i++) {
		struct gp_block *b = e[first + i].b;

		sum += b->bytes;
		if (b->epoch > head->epoch)
			head->epoch = b->epoch;
		if (b->freed_ns > head->freed_ns)
			head->freed_ns = b->freed_ns;
		map_remove_block(p, b);
		retire_block(p, b);
	}
	shrink_block(head, head->bytes + sum);
	push_cached(p, d, head);
	atomic_fetch_add_explicit(&d->merges, 1, memory_order_relaxed);
out:
	free(e);
	return rc;
}
