/* ptrmap.c — sharded open-addressing hash map from device address to block.
 * Linear probing with backward-shift deletion (no tombstones), grown at 50% load.
 * Holds no lock of its own beyond the shard's, which the caller takes. */
#include "ptrmap.h"

#include <stdlib.h>

static uint64_t mix(uintptr_t key)
{
	uint64_t h = (uint64_t)key >> 8; /* device allocations are at least 256-byte aligned */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

int gp_ptrmap_init(struct gp_ptrmap *m)
{
	for (int i = 0; i < GP_PTRMAP_SHARDS; i++) {
		struct gp_ptrmap_shard *s = &m->shard[i];
		s->keys = NULL;
		s->vals = NULL;
		s->cap = 0;
		s->count = 0;
		gp_lock_init(&s->lock);
	}
	return 0;
}

void gp_ptrmap_fini(struct gp_ptrmap *m)
{
	for (int i = 0; i < GP_PTRMAP_SHARDS; i++) {
		free(m->shard[i].keys);
		free(m->shard[i].vals);
	}
}

struct gp_ptrmap_shard *gp_ptrmap_shard(struct gp_ptrmap *m, uintptr_t key)
{
	return &m->shard[mix(key) >> (64 - GP_PTRMAP_SHARDS_LOG2)]; /* the top bits */
}

static size_t slot_of(const struct gp_ptrmap_shard *s, uintptr_t key)
{
	return (size_t)mix(key) & (s->cap - 1);
}

void *gp_ptrmap_find(struct gp_ptrmap_shard *s, uintptr_t key)
{
	if (s->cap == 0)
		return NULL;
	for (size_t i = slot_of(s, key);; i = (i + 1) & (s->cap - 1)) {
		if (s->keys[i] == key)
			return s->vals[i];
		if (s->keys[i] == 0)
			return NULL;
	}
}

static void put(uintptr_t *keys, void **vals, size_t cap, uintptr_t key, void *val)
{
	size_t i = (size_t)mix(key) & (cap - 1);
	while (keys[i] != 0)
		i = (i + 1) & (cap - 1);
	keys[i] = key;
	vals[i] = val;
}

static int grow(struct gp_ptrmap_shard *s)
{
	size_t cap = s->cap ? s->cap * 2 : 64;
	uintptr_t *keys = calloc(cap, sizeof(*keys));
	void **vals = calloc(cap, sizeof(*vals));

	if (keys == NULL || vals == NULL) {
		free(keys);
		free(vals);
		return -1;
	}
	for (size_t i = 0; i < s->cap; i++)
		if (s->keys[i] != 0)
			put(keys, vals, cap, s->keys[i], s->vals[i]);
	free(s->keys);
	free(s->vals);
	s->keys = keys;
	s->vals = vals;
	s->cap = cap;
	return 0;
}

int gp_ptrmap_insert(struct gp_ptrmap_shard *s, uintptr_t key, void *val)
{
	if ((s->count + 1) * 2 > s->cap && grow(s) != 0)
		return -1;
	put(s->keys, s->vals, s->cap, key, val);
	s->count++;
	return 0;
}

/* Backward-shift deletion: pull later entries of the probe run into the hole. */
static void delete_at(struct gp_ptrmap_shard *s, size_t hole)
{
	size_t mask = s->cap - 1;

	for (size_t j = (hole + 1) & mask; s->keys[j] != 0; j = (j + 1) & mask) {
		size_t home = slot_of(s, s->keys[j]);
		/* Move j into the hole unless its home lies cyclically in (hole, j]. */
		if (((j - home) & mask) >= ((j - hole) & mask)) {
			s->keys[hole] = s->keys[j];
			s->vals[hole] = s->vals[j];
			hole = j;
		}
	}
	s->keys[hole] = 0;
	s->vals[hole] = NULL;
	s->count--;
}

void *gp_ptrmap_remove(struct gp_ptrmap_shard *s, uintptr_t key)
{
	if (s->cap == 0)
		return NULL;
	for (size_t i = slot_of(s, key);; i = (i + 1) & (s->cap - 1)) {
		if (s->keys[i] == key) {
			void *val = s->vals[i];
			delete_at(s, i);
			return val;
		}
		if (s->keys[i] == 0)
			return NULL;
	}
}

size_t gp_ptrmap_filter(struct gp_ptrmap_shard *s, int (*keep)(void *val, void *arg), void *arg)
{
	size_t removed = 0;
	size_t i = 0;

	while (i < s->cap) {
		if (s->keys[i] != 0 && !keep(s->vals[i], arg)) {
			delete_at(s, i); /* may pull a later entry into i: look at i again */
			removed++;
			continue;
		}
		i++;
	}
	return removed;
}
