/* ptrmap.c — sharded open-addressing hash map from device address to block.
 * Linear probing with backward-shift deletion (no tombstones), grown at 50% load. Writers hold
 * the shard's lock and make the sequence number odd while they change anything; lock-free
 * readers check it (ptrmap.h). Every slot is read and written as an atomic, so a reader racing a
 * writer reads stale or mixed values, never torn words, and the check tells it so. */
#include "ptrmap.h"

#include <stdlib.h>

#define FIRST_CAP 16

/* Stores with release (plain moves on x86): a reader that sees a writer's store also sees the odd
 * sequence number stored before it (ptrmap.h has the loads). No fences: ThreadSanitizer cannot
 * see them. */
static void set_at(struct gp_ptrmap_table *t, size_t i, uintptr_t key, void *val)
{
	atomic_store_explicit(&t->slot[i].key, key, memory_order_release);
	atomic_store_explicit(&t->slot[i].val, val, memory_order_release);
}

/* Around every change a writer makes (it holds the lock). */
static void write_begin(struct gp_ptrmap_shard *s)
{
	/* Relaxed: the release stores of the change that follows carry it to readers. */
	atomic_store_explicit(&s->seq, atomic_load_explicit(&s->seq, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

static void write_end(struct gp_ptrmap_shard *s)
{
	atomic_store_explicit(&s->seq, atomic_load_explicit(&s->seq, memory_order_relaxed) + 1,
			      memory_order_release);
}

int gp_ptrmap_init(struct gp_ptrmap *m)
{
	for (int i = 0; i < GP_PTRMAP_SHARDS; i++) {
		struct gp_ptrmap_shard *s = &m->shard[i];
		atomic_init(&s->seq, 0);
		atomic_init(&s->table, NULL);
		s->count = 0;
		gp_lock_init(&s->lock);
	}
	return 0;
}

void gp_ptrmap_fini(struct gp_ptrmap *m)
{
	for (int i = 0; i < GP_PTRMAP_SHARDS; i++) {
		struct gp_ptrmap_table *t = atomic_load(&m->shard[i].table);
		while (t != NULL) {
			struct gp_ptrmap_table *older = t->older;
			free(t);
			t = older;
		}
		atomic_store(&m->shard[i].table, NULL);
	}
}

struct gp_ptrmap_shard *gp_ptrmap_shard(struct gp_ptrmap *m, uintptr_t key)
{
	return &m->shard[gp_ptrmap_mix(key) >> (64 - GP_PTRMAP_SHARDS_LOG2)]; /* the top bits */
}

static void put(struct gp_ptrmap_table *t, uintptr_t key, void *val)
{
	size_t i = gp_ptrmap_slot_of(t, key);
	while (gp_ptrmap_key_at(t, i) != 0)
		i = (i + 1) & (t->cap - 1);
	set_at(t, i, key, val);
}

/* The old table stays readable (late readers) until fini. */
static int grow(struct gp_ptrmap_shard *s)
{
	struct gp_ptrmap_table *old = gp_ptrmap_table_of(s), *t;
	size_t cap = old ? old->cap * 2 : FIRST_CAP;

	t = calloc(1, sizeof(*t) + cap * sizeof(t->slot[0]));
	if (t == NULL)
		return -1;
	t->cap = cap;
	t->older = old;
	for (size_t i = 0; old != NULL && i < old->cap; i++)
		if (gp_ptrmap_key_at(old, i) != 0)
			put(t, gp_ptrmap_key_at(old, i), gp_ptrmap_val_at(old, i));
	atomic_store_explicit(&s->table, t, memory_order_release);
	return 0;
}

/* The slot holding key in t, or t->cap when none does. */
static size_t slot_with(const struct gp_ptrmap_table *t, uintptr_t key)
{
	if (t == NULL)
		return 0;
	for (size_t n = 0, i = gp_ptrmap_slot_of(t, key); n < t->cap; n++, i = (i + 1) & (t->cap - 1)) {
		uintptr_t k = gp_ptrmap_key_at(t, i);
		if (k == key)
			return i;
		if (k == 0)
			break;
	}
	return t->cap;
}

/* A key already there is looked for first: put() alone would add a second entry behind it, which
 * lookups never reach and removals leave behind. */
int gp_ptrmap_insert(struct gp_ptrmap_shard *s, uintptr_t key, void *val, void **old)
{
	struct gp_ptrmap_table *t = gp_ptrmap_table_of(s);
	size_t i = slot_with(t, key);
	int rc = 0;

	if (old)
		*old = NULL;
	write_begin(s);
	if (t != NULL && i < t->cap) {
		if (old)
			*old = gp_ptrmap_val_at(t, i);
		set_at(t, i, key, val);
	} else if ((t == NULL || (s->count + 1) * 2 > t->cap) && grow(s) != 0) {
		rc = -1;
	} else {
		put(gp_ptrmap_table_of(s), key, val);
		s->count++;
	}
	write_end(s);
	return rc;
}

/* Backward-shift deletion: pull later entries of the probe run into the hole. */
static void delete_at(struct gp_ptrmap_shard *s, struct gp_ptrmap_table *t, size_t hole)
{
	size_t mask = t->cap - 1;

	for (size_t j = (hole + 1) & mask; gp_ptrmap_key_at(t, j) != 0; j = (j + 1) & mask) {
		size_t home = gp_ptrmap_slot_of(t, gp_ptrmap_key_at(t, j));
		/* Move j into the hole unless its home lies cyclically in (hole, j]. */
		if (((j - home) & mask) >= ((j - hole) & mask)) {
			set_at(t, hole, gp_ptrmap_key_at(t, j), gp_ptrmap_val_at(t, j));
			hole = j;
		}
	}
	set_at(t, hole, 0, NULL);
	s->count--;
}

void *gp_ptrmap_remove(struct gp_ptrmap_shard *s, uintptr_t key)
{
	struct gp_ptrmap_table *t = gp_ptrmap_table_of(s);
	size_t i = slot_with(t, key);
	void *val;

	if (t == NULL || i == t->cap)
		return NULL;
	val = gp_ptrmap_val_at(t, i);
	write_begin(s);
	delete_at(s, t, i);
	write_end(s);
	return val;
}

int gp_ptrmap_remove_entry(struct gp_ptrmap_shard *s, uintptr_t key, const void *val)
{
	struct gp_ptrmap_table *t = gp_ptrmap_table_of(s);
	size_t i = slot_with(t, key);

	if (t == NULL || i == t->cap || gp_ptrmap_val_at(t, i) != val)
		return 0;
	write_begin(s);
	delete_at(s, t, i);
	write_end(s);
	return 1;
}

size_t gp_ptrmap_filter(struct gp_ptrmap_shard *s, int (*keep)(void *val, void *arg), void *arg)
{
	struct gp_ptrmap_table *t = gp_ptrmap_table_of(s);
	size_t removed = 0, i = 0;

	if (t == NULL)
		return 0;
	write_begin(s);
	while (i < t->cap) {
		if (gp_ptrmap_key_at(t, i) != 0 && !keep(gp_ptrmap_val_at(t, i), arg)) {
			delete_at(s, t, i); /* may pull a later entry into i: look at i again */
			removed++;
			continue;
		}
		i++;
	}
	write_end(s);
	return removed;
}
