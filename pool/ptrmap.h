/* ptrmap.h — the pool's pointer -> block map: sharded open-addressing hash tables.
 * Internal to pool/. Writers (insert, remove, filter) hold the shard's lock, and bump the shard's
 * sequence number around every change. Readers either hold the lock (gp_ptrmap_find), or hold
 * nothing and check the sequence number around their reads (gp_ptrmap_read_begin, _find_racy,
 * _read_retry: a seqlock), so that a free, the hot path's busiest lookup, writes nothing that
 * another thread's free reads. No backend call may happen while a shard is locked.
 *
 * A lock-free reader may look at a table the writer has just replaced, or at an entry being
 * moved: tables replaced by growth are kept until gp_ptrmap_fini (together less than the table
 * in use), every slot is an atomic, and a value read is always one some writer stored (or NULL).
 * What a caller reads of the value must be read with acquire loads, before read_retry.
 * What the values point to must stay readable for as long as the map lives (the pool recycles
 * its block records instead of freeing them). */
#ifndef GPUPOOL_PTRMAP_H
#define GPUPOOL_PTRMAP_H

#include "lock.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* 2^GP_PTRMAP_SHARDS_LOG2 shards, each its own lock and cache line. Writers are misses and
 * releases; a free locks nothing here unless it meets a writer. Set at build time
 * (-DGP_PTRMAP_SHARDS_LOG2=8) to try another count: scripts/bench-variants. */
#ifndef GP_PTRMAP_SHARDS_LOG2
#define GP_PTRMAP_SHARDS_LOG2 6
#endif
#define GP_PTRMAP_SHARDS (1 << GP_PTRMAP_SHARDS_LOG2)

struct gp_ptrmap_slot {
	_Atomic uintptr_t key; /* 0 = empty */
	void *_Atomic val;
};

struct gp_ptrmap_table {
	size_t cap;                    /* slots, a power of two */
	struct gp_ptrmap_table *older; /* the table this one replaced, kept for late readers */
	struct gp_ptrmap_slot slot[];
};

struct gp_ptrmap_shard {
	struct gp_lock lock;
	_Atomic unsigned seq;                  /* odd while a writer changes the table */
	struct gp_ptrmap_table *_Atomic table; /* NULL before the first insert */
	size_t count;
} __attribute__((aligned(GP_LINE)));

struct gp_ptrmap {
	struct gp_ptrmap_shard shard[GP_PTRMAP_SHARDS];
};

/* The probe, inline here so that the hot path's lookup is inlined into the shim's free (no call
 * on the path every free takes). Slots are loaded with acquire (plain
 * moves on x86), so a lock-free reader's later check of the sequence number cannot be done
 * before them. */
static inline uint64_t gp_ptrmap_mix(uintptr_t key)
{
	uint64_t h = (uint64_t)key >> 8; /* device allocations are at least 256-byte aligned */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

static inline struct gp_ptrmap_table *gp_ptrmap_table_of(struct gp_ptrmap_shard *s)
{
	return atomic_load_explicit(&s->table, memory_order_acquire);
}

static inline size_t gp_ptrmap_slot_of(const struct gp_ptrmap_table *t, uintptr_t key)
{
	return (size_t)gp_ptrmap_mix(key) & (t->cap - 1);
}

static inline uintptr_t gp_ptrmap_key_at(const struct gp_ptrmap_table *t, size_t i)
{
	return atomic_load_explicit(&((struct gp_ptrmap_table *)t)->slot[i].key, memory_order_acquire);
}

static inline void *gp_ptrmap_val_at(const struct gp_ptrmap_table *t, size_t i)
{
	return atomic_load_explicit(&((struct gp_ptrmap_table *)t)->slot[i].val, memory_order_acquire);
}

/* At most cap probes: a racing reader may see a table no writer ever left full, but a stale view
 * must not loop forever. */
static inline void *gp_ptrmap_find_in(const struct gp_ptrmap_table *t, uintptr_t key)
{
	if (t == NULL)
		return NULL;
	for (size_t n = 0, i = gp_ptrmap_slot_of(t, key); n < t->cap; n++, i = (i + 1) & (t->cap - 1)) {
		uintptr_t k = gp_ptrmap_key_at(t, i);
		if (k == key)
			return gp_ptrmap_val_at(t, i);
		if (k == 0)
			return NULL;
	}
	return NULL;
}

int gp_ptrmap_init(struct gp_ptrmap *m);
void gp_ptrmap_fini(struct gp_ptrmap *m);
struct gp_ptrmap_shard *gp_ptrmap_shard(struct gp_ptrmap *m, uintptr_t key);
/* With the shard locked: */
static inline void *gp_ptrmap_find(struct gp_ptrmap_shard *s, uintptr_t key)
{
	return gp_ptrmap_find_in(gp_ptrmap_table_of(s), key);
}

/* key -> val: 0, or -1 (no memory: nothing changed). A key holds one entry at most: one already
 * there has its value replaced, and the value it had goes to *old (NULL when the key was new; old
 * may be NULL). */
int gp_ptrmap_insert(struct gp_ptrmap_shard *s, uintptr_t key, void *val, void **old);
/* Remove key's entry; returns its value (NULL: none). */
void *gp_ptrmap_remove(struct gp_ptrmap_shard *s, uintptr_t key);
/* Remove key's entry only while it maps to val (one that replaced it stays): 1 when removed. */
int gp_ptrmap_remove_entry(struct gp_ptrmap_shard *s, uintptr_t key, const void *val);
/* Remove every entry for which keep(val, arg) is 0; returns how many were removed. */
size_t gp_ptrmap_filter(struct gp_ptrmap_shard *s, int (*keep)(void *val, void *arg), void *arg);

/* Without the lock:
 *     unsigned seq = gp_ptrmap_read_begin(s);    (0 with the bit set: a writer is busy)
 *     v = gp_ptrmap_find_racy(s, key); ...read what v points to...
 *     if (!gp_ptrmap_read_retry(s, seq)) -> v, and what was read of it, held together
 * find_racy's answer means nothing until read_retry says 0. */
static inline unsigned gp_ptrmap_read_begin(struct gp_ptrmap_shard *s)
{
	return atomic_load_explicit(&s->seq, memory_order_acquire);
}

static inline void *gp_ptrmap_find_racy(struct gp_ptrmap_shard *s, uintptr_t key)
{
	return gp_ptrmap_find_in(gp_ptrmap_table_of(s), key);
}

static inline int gp_ptrmap_read_retry(struct gp_ptrmap_shard *s, unsigned seq)
{
	/* The reads it checks were acquire loads (ptrmap.c, and the caller's of what it found):
	 * this load cannot be done before them. */
	return (seq & 1) || atomic_load_explicit(&s->seq, memory_order_relaxed) != seq;
}

#endif
