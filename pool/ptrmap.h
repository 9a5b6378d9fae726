/* ptrmap.h — the pool's pointer -> block map: sharded open-addressing hash tables.
 * Internal to pool/. The caller locks a shard (gp_ptrmap_shard + lock) around find/insert/remove,
 * so it can change a block's state atomically with the lookup. No backend call may happen while
 * a shard is locked. */
#ifndef GPUPOOL_PTRMAP_H
#define GPUPOOL_PTRMAP_H

#include "lock.h"

#include <stddef.h>
#include <stdint.h>

/* 2^GP_PTRMAP_SHARDS_LOG2 shards, each its own lock and cache line; a free locks the shard its
 * block's address hashes to. Set at build time (-DGP_PTRMAP_SHARDS_LOG2=8) to try another
 * count: scripts/bench-variants. */
#ifndef GP_PTRMAP_SHARDS_LOG2
#define GP_PTRMAP_SHARDS_LOG2 6
#endif
#define GP_PTRMAP_SHARDS (1 << GP_PTRMAP_SHARDS_LOG2)

struct gp_ptrmap_shard {
	struct gp_lock lock;
	uintptr_t *keys; /* 0 = empty slot */
	void **vals;
	size_t cap;      /* slots, a power of two (0 before the first insert) */
	size_t count;
} __attribute__((aligned(64)));

struct gp_ptrmap {
	struct gp_ptrmap_shard shard[GP_PTRMAP_SHARDS];
};

int gp_ptrmap_init(struct gp_ptrmap *m);
void gp_ptrmap_fini(struct gp_ptrmap *m);
struct gp_ptrmap_shard *gp_ptrmap_shard(struct gp_ptrmap *m, uintptr_t key);
/* With the shard locked: */
void *gp_ptrmap_find(struct gp_ptrmap_shard *s, uintptr_t key);
int gp_ptrmap_insert(struct gp_ptrmap_shard *s, uintptr_t key, void *val); /* 0 or -1 (no memory) */
void *gp_ptrmap_remove(struct gp_ptrmap_shard *s, uintptr_t key);
/* Remove every entry for which keep(val, arg) is 0; returns how many were removed. */
size_t gp_ptrmap_filter(struct gp_ptrmap_shard *s, int (*keep)(void *val, void *arg), void *arg);

#endif
