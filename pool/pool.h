/* pool.h — the caching block pool: size classes, free lists, pointer->block map, fences, release.
 * Pure C11 + pthreads, no CUDA header, environment or logging: the GPU is reached only through
 * struct gp_backend, settings come in struct gp_pool_config. Contract: no backend call (nor config
 * callback) is ever made while a pool lock is held: the unit tests' pool counts the locks each
 * thread holds, and their fake backend checks the count is 0 in every call (pool/hooks.h). */
#ifndef GPUPOOL_POOL_H
#define GPUPOOL_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "sizeclass.h"

/* Devices are bits of a 64-bit mask throughout the pool and the shim. */
#define GP_MAX_DEVICES 64

/* Return codes of the pool and of backend calls. */
enum gp_rc {
	GP_OK = 0,
	GP_ENOMEM = 1,   /* the device is out of memory (backend alloc) */
	GP_EINVAL = 2,   /* bad argument: double free, pointer the pool does not own, bad device */
	GP_ENOTOWNED = 3, /* free: the pointer was never handed out by the pool (pass it on) */
	GP_EBACKEND = 4, /* the backend failed for another reason (the backend keeps the detail) */
	GP_EAGAIN = 5,   /* fence: cannot be recorded now (e.g. a graph capture is underway) */
};

/* Why a release runs; used for accounting and for the caller's log line. */
enum gp_release_cause {
	GP_CAUSE_SIGNAL = 0,
	GP_CAUSE_CAP,
	GP_CAUSE_IDLE,
	GP_CAUSE_PRESSURE,
	GP_CAUSE_OOM,
	GP_CAUSE_API,
	GP_CAUSE_COUNT
};

/*
 * The device as the pool sees it. Every function returns enum gp_rc (or, for fence_query,
 * 1 = complete, 0 = not yet, negative = error). None is called with a pool lock held.
 *
 * alloc        one real device allocation of exactly `bytes` on `device`.
 * free         give one allocation back to the driver. `settled`: a fence recorded after the
 *              block's last free has completed, so no GPU work can still use it. When 0 it must
 *              be safe all the same while such work runs (cudaFree is: it waits).
 * movable      optional: 1 when the allocation at ptr (just made by alloc) may be handed to
 *              remap as a source: its physical memory can move to another address range.
 * remap        optional: one new allocation of at least `bytes` on `device` made of physical
 *              memory of the n movable source allocations src[] (every one settled: no GPU work
 *              uses them) plus new memory for the rest; *got: its size. From a source it moves
 *              all (src[i].take == src[i].bytes) or, when take is less, at least `take` bytes
 *              from its end, whole pieces of its physical memory, and the source keeps the rest
 *              at its address (a smaller allocation). On success src[i].take says the bytes
 *              moved; a source they are all of is gone. The wanted bytes together are at most
 *              `bytes`; what is moved beyond (a piece larger than asked for) adds to the new
 *              allocation. On failure *consumed says what became of the sources: 0, untouched;
 *              1, every one given back to the driver whole.
 * split        optional: the movable allocation at ptr of `bytes` becomes two where it lies, with
 *              no memory moved and no driver call: [ptr, ptr + bytes - *tail) and a new one,
 *              [ptr + bytes - *tail, ptr + bytes), *tail the fewest whole pieces of its end that
 *              hold at least `take` bytes. GP_EINVAL, and nothing changes, when that would be all
 *              of it. Each is then an allocation of its own (free, remap, split).
 * merge        optional: the n movable allocations ptr[0..n), each beginning where the one before
 *              ends, become one at ptr[0] of their bytes together, with no memory moved and no
 *              driver call. GP_EINVAL, nothing changed, when they are not parts of one
 *              allocation that splits made.
 * joinable     optional, with merge: 1 when the allocation at b begins where the one at a ends
 *              and both are parts of one allocation (merge would join them), else 0. Cheap, no
 *              driver call.
 * fence_record record a fence: it completes once every GPU operation issued before this call,
 *              on every stream of every device, has completed. GP_EAGAIN: cannot now (capture).
 *              The fence handle is opaque to the pool.
 * fence_query  poll a recorded fence; never blocks.
 * fence_wait   block until the fence completes (only in gp_pool_advance(pool, 1)).
 * fence_destroy release the handle.
 * quiet        optional: 1 when every GPU operation issued before this call, on every stream
 *              of every device, has already completed (the GPU is idle): no fence is needed
 *              for the frees made so far. 0 when not, or not known. Never blocks.
 * join         optional: 1 when the frees made so far need no fence because every GPU
 *              operation issued after this call will run after every one issued before it that
 *              is not done yet (the backend made the streams wait on the GPU: fence.c says how);
 *              0 when it did not. Never blocks. Asked when the GPU is not idle; `inflight`: fences
 *              recorded earlier are not known complete yet (the join must cover their work too).
 *              `settle` (NULL: not asked for): on a join, a fence handle (or NULL) that
 *              completes once every GPU operation issued before the join is done, queried and
 *              destroyed as the others: until then the blocks those frees made are reused but
 *              not unmapped or given back without a wait (free's `settled`).
 * now_ns       a monotonic clock (idle ages); tests inject a controllable one.
 *              gp_pool_coarse_ns (CLOCK_MONOTONIC_COARSE) is read inline, with no call.
 * may_release  optional: 0 when real frees must not happen now on this thread (a CUDA graph
 *              capture is underway): a miss then neither releases to the cap, trims nor
 *              remaps, and the OOM path fails instead of releasing.
 */
/* A source of a remap: a cached allocation whose physical memory moves into a new one. `take`:
 * the bytes wanted from it (all: its `bytes`), and after a successful remap the bytes moved. */
struct gp_piece {
	void *ptr;
	size_t bytes;
	size_t take;
};

struct gp_backend {
	void *ctx;
	int (*alloc)(void *ctx, int device, size_t bytes, void **out);
	int (*free)(void *ctx, int device, void *ptr, size_t bytes, int settled);
	int (*movable)(void *ctx, void *ptr);
	int (*remap)(void *ctx, int device, size_t bytes, struct gp_piece *src, unsigned n,
		     void **out, size_t *got, int *consumed);
	int (*split)(void *ctx, int device, void *ptr, size_t bytes, size_t take, size_t *tail);
	int (*merge)(void *ctx, int device, void *const *ptr, const size_t *bytes, unsigned n);
	int (*joinable)(void *ctx, void *a, void *b);
	int (*fence_record)(void *ctx, void **fence);
	int (*fence_query)(void *ctx, void *fence);
	int (*fence_wait)(void *ctx, void *fence);
	void (*fence_destroy)(void *ctx, void *fence);
	int (*quiet)(void *ctx);
	int (*join)(void *ctx, int inflight, void **settle);
	uint64_t (*now_ns)(void *ctx);
	int (*may_release)(void *ctx);
};

struct gp_pool_config {
	/* A cached block is reused as soon as it is freed (no fence): only sound when all GPU work
	 * is in one stream order. The shim turns this off for good when a stream is created. */
	int ordered;
	/* Called (no lock held) by the free (or unhold) that takes a device's cached bytes above its
	 * cap (gp_pool_set_cap); once, until gp_pool_release runs for that device. May be NULL. */
	void (*over_cap)(void *arg, int device);
	/* Called (no lock held) once for each block the pool drops because the driver handed its
	 * address out again: the program freed it through a path the pool did not see (or a device
	 * was reset and gp_pool_forget_device not called). The block leaves the pool's figures
	 * (counted in stale_evictions); `bytes` is its size. May be NULL. */
	void (*stale)(void *arg, int device, void *ptr, size_t bytes);
	/* Called (no lock held) when a device comes to owe a trim (gp_pool_take_owed): a miss grew
	 * by bytes that idle blocks younger than remap_age_ns would have given back; and, with
	 * remap_trim, when the pool first makes new memory after gp_pool_take_quiet_excess (a window
	 * with something to settle once quiet). May be NULL. */
	void (*owed)(void *arg, int device);
	void *arg; /* passed to over_cap, stale and owed */
	/* A miss whose size class holds only blocks still fenced, at least 2 and 64 MiB of them,
	 * polls their fences for up to this long before a real allocation (0: one poll, and no
	 * reuse_poll_ns either). Not waiting grows the pool by every block freed while the GPU
	 * lags behind. */
	uint64_t reuse_wait_ns;
	/* The same for a class with fewer fenced blocks (and not batching, below), for up to this
	 * long (at most reuse_wait_ns; 0: one poll). On an idle GPU a fence completes within
	 * microseconds, sooner than a real allocation returns, where one poll finds it not yet
	 * complete and the pool grows by the block. */
	uint64_t reuse_poll_ns;
	/* Such a class (fewer fenced blocks) above 1 MiB waits as long as reuse_wait_ns all the
	 * same when the fence covering its oldest block was recorded at least this long ago (0:
	 * never): the GPU work queued after that fence keeps the GPU busy while the miss waits. */
	uint64_t reuse_age_ns;
	/* Above 1 MiB, a miss that would otherwise make a real allocation may take a reusable
	 * cached block of a larger class if it is at most this percentage of the request (the
	 * smallest such class first). 100 or less: never, a block serves its own class only. */
	unsigned oversize_pct;
	/* A class of at most 1 MiB whose cached blocks are all fenced and fewer than this grows
	 * (a real allocation) instead of recording a fence on the miss: its frees pile up and one
	 * fence later covers them all, so a loop over one size pays a fence per fence_batch
	 * allocations, not per allocation. 0 or 1: a fence on every such miss. It is also the
	 * length at which a thread's own list of such a class drives the fences before it takes
	 * other threads' blocks, and at which its misses begin to wait for them (reuse_wait_ns). */
	unsigned fence_batch;
	/* A small class whose fence_batch blocks hold fewer bytes than this batches more of them:
	 * as many as fit in these bytes, at most FENCE_BATCH_MAX_FACTOR times fence_batch (a loop
	 * over 64 KiB then pays one fence per 64 allocations, not 16). 0: fence_batch for all. */
	uint64_t fence_batch_bytes;
	/* A miss above 1 MiB that needs the fences driven while another thread drives them waits up
	 * to this long for that thread, then drives them itself, before a real allocation (0: 20 us).
	 * A drive costs far less than a real allocation, whose memory stays besides. (At or
	 * below 1 MiB a new block costs little memory, and threads would take turns at the fences.) */
	uint64_t drive_wait_ns;
	/* Misses of a class of at least this many bytes (0: none; needs backend remap) use idle
	 * memory cached under other sizes, in this order, before a real allocation:
	 *  - split (backend split, where offered): the end of the smallest larger movable block
	 *    that may be reused now becomes the block; the rest stays cached where it is, a smaller
	 *    block. No driver call: counted a hit. Such a miss takes no larger movable block whole
	 *    (cfg.oversize_pct): it can give the part asked for instead.
	 *  - merge (backend merge, where offered), when no block is large enough: the fewest
	 *    cached neighbours that may be reused now (parts of one allocation that splits handed
	 *    out, each beginning where the one before ends) that hold the miss become one block,
	 *    which then serves it as above. No driver call either.
	 *  - remap: whole idle movable blocks of smaller classes, the largest first, up to
	 *    remap_max_pieces of them, then, for what they leave, part of one more (the smallest that
	 *    holds it; the rest stays cached, smaller) move into a new block of the miss's class,
	 *    and only what is still missing is new memory. Only blocks whose fence is done and that
	 *    were freed at least remap_age_ns ago (backend clock) move: a size in use a moment ago
	 *    is likely to be asked again, and a hit costs less than a remap. */
	size_t remap_min_bytes;
	uint64_t remap_age_ns;
	unsigned remap_max_pieces; /* 0: REMAP_MAX_PIECES_DEFAULT */
	/* With remap: a miss that must still grow by R bytes first gives back idle movable blocks of
	 * other classes (settled, as old as remap_age_ns, the largest first) until R bytes are back:
	 * the device's footprint stays at what is in use plus what could not be moved or given back,
	 * at the price of new memory when those sizes come back. What blocks too young to go kept
	 * from it is owed, for the caller to give back once they are old (gp_pool_take_owed). */
	int remap_trim;
	/* Bytes of blocks each thread may keep in a cache of its own (0: none): while reuse needs no
	 * fence (ordered), a thread's free puts the block there and its next allocation of the class
	 * takes it back with no lock and no locked instruction. Per thread at most TC_CLASS_MAX
	 * blocks of a class, of one device, never a movable one (remap, split and merge use those).
	 * Releases, a miss about to grow and a stale claim take blocks out of any thread's cache;
	 * an exiting thread gives its blocks back. Off where the kernel has no expedited
	 * membarrier (what lets a release take a cache from under its owner). */
	uint64_t tcache_bytes;
};

/* Per-device figures, summed over size classes. Bytes are real allocation sizes. Read from
 * counters with no lock taken (gp_pool_dev_stats), so figures read while other threads allocate
 * and free may disagree with each other by what those threads were doing. */
struct gp_pool_dev_stats {
	uint64_t live_bytes;      /* handed out and not given back to the pool (held blocks too) */
	uint64_t live_blocks;
	uint64_t held_bytes;      /* of live_bytes, freed during a graph capture, kept for the graph
				   * until gp_pool_unhold */
	uint64_t held_blocks;
	uint64_t idle_bytes;      /* cached and safe to reuse */
	uint64_t idle_blocks;
	uint64_t pending_bytes;   /* cached, waiting for a fence (GPU work may still use them). Exact
				   * while each list's were freed in at most 4 fence epochs (up to 3
				   * fences in flight); beyond, some idle blocks count as pending (never
				   * the other way) until the older fences are done. idle + pending:
				   * the bytes cached in lists, exact. */
	uint64_t pending_blocks;
	uint64_t requested_bytes; /* what the program asked for, of live_bytes */
	uint64_t peak_live_bytes;     /* exact with one thread, else an upper bound (<= reserved) */
	uint64_t peak_reserved_bytes; /* live + idle + pending */
	uint64_t allocs;          /* successful gp_pool_alloc calls */
	uint64_t hits;            /* served from the cache */
	uint64_t real_allocs;     /* backend alloc calls that succeeded */
	uint64_t real_frees;      /* backend free calls */
	uint64_t failed_allocs;   /* gp_pool_alloc calls that returned an error */
	uint64_t frees;           /* blocks cached by gp_pool_free or gp_pool_unhold */
	uint64_t bad_frees;       /* double frees */
	uint64_t stale_evictions; /* blocks dropped when the driver gave their address to a new one
				   * (cfg.stale): freed behind the pool's back */
	uint64_t fence_waits;     /* misses that waited for fenced blocks (cfg.reuse_wait_ns, reuse_poll_ns) */
	uint64_t fence_wait_timeouts; /* ... and gave up: a real allocation followed */
	uint64_t oversize_hits;   /* misses served by a larger class's block (cfg.oversize_pct) */
	uint64_t splits;          /* hits served by the end of a larger movable block (backend split) */
	uint64_t merges;          /* cached neighbours made one block (backend merge) for a miss */
	uint64_t remaps;          /* misses served by remapping cached blocks (cfg.remap_min_bytes) */
	uint64_t remapped_bytes;  /* bytes of cached blocks those remaps moved (not new memory) */
	uint64_t trims;           /* idle blocks given back before the pool grew (cfg.remap_trim) */
	uint64_t trimmed_bytes;   /* their bytes */
	uint64_t trim_owed;       /* bytes the age kept from trims, not given back yet */
	uint64_t movable_bytes;   /* of live + cached bytes, those in movable blocks */
	uint64_t tcaches;         /* threads' caches of the device, held by a thread now */
	uint64_t tcaches_shared;  /* of those, made shared (gp_tc_revoke): their frees lock */
};

/* What one release did. */
struct gp_release_result {
	uint64_t bytes;     /* bytes given back to the driver */
	uint64_t blocks;
	uint64_t errors;    /* backend free failures (the block is forgotten, not retried) */
	uint64_t duration_ns;
};

struct gp_pool;

/* Size classes: a request of `bytes` is rounded up to class_bytes(class_of(bytes)), which
 * wastes at most 12.5% over what a native allocation of `bytes` occupies on the device
 * (the driver rounds requests above 1 MiB up to 2 MiB). gp_pool_class_of and
 * gp_pool_class_count are inline (sizeclass.h). */
size_t gp_pool_class_bytes(unsigned cls);
/* The largest class a block of `bytes` serves (bytes at least 512): class_bytes <= bytes. */
unsigned gp_pool_class_floor(size_t bytes);

/* A backend's now_ns: CLOCK_MONOTONIC_COARSE (the pool reads it inline when given this one). */
uint64_t gp_pool_coarse_ns(void *ctx);

int gp_pool_create(const struct gp_backend *backend, const struct gp_pool_config *cfg,
		   struct gp_pool **out);
/* Frees the pool's host memory only: never calls the backend, so fences still in flight are
 * abandoned to it (used in tests; the shim keeps its pool for the life of the process). */
void gp_pool_destroy(struct gp_pool *pool);

/* Hand out a block of at least `bytes` (0 or above the largest class: GP_EINVAL) on `device`. A
 * cache hit makes no backend call. On GP_ENOMEM from the backend the pool releases what it
 * caches on that device (waiting for pending blocks through the backend's free) and retries once,
 * where may_release allows; *retried tells the caller. */
int gp_pool_alloc(struct gp_pool *pool, int device, size_t bytes, void **out, int *retried);

/* Take back a block. GP_ENOTOWNED: the pool holds no block at this pointer (never handed out,
 * or given back to the driver since), or NULL (not an error of the pool: the caller passes it
 * on). GP_EINVAL: double free (the block is cached, or held: gp_pool_hold), counted in
 * bad_frees, nothing else changes. Never calls the backend. */
int gp_pool_free(struct gp_pool *pool, void *ptr);

/* A free made while a CUDA graph is captured: the graph may still use the block when it is
 * launched, so it is neither cached nor given back but held, until gp_pool_unhold. The block
 * stays counted as in use (live_bytes: the graph uses it), and as held (held_bytes); it is on no
 * list, so no allocation gets it and no release gives it back; gp_pool_free of it is a double
 * free; gp_pool_block_size says 0 (the program freed it); gp_pool_forget_device forgets it.
 * One compare-and-swap from the state read with the lookup, as gp_pool_free: GP_OK, with *ticket
 * (naming this very allocation, for gp_pool_unhold), *bytes (the block's real size) and *device
 * (each may be NULL); GP_EINVAL when the block is not in use (a double free: counted in
 * bad_frees, nothing else changes); GP_ENOTOWNED for NULL or a pointer the pool holds no block
 * at. Never calls the backend. */
int gp_pool_hold(struct gp_pool *pool, void *ptr, uint32_t *ticket, size_t *bytes, int *device);

/* The held block at ptr given to the pool exactly as gp_pool_free would (cached, reused once a
 * fence after this call completes), if it is still the held allocation `ticket` names:
 * GP_ENOTOWNED when the pool holds nothing at ptr (a device reset forgot it), GP_EINVAL when it
 * is another allocation or not held (the record may have been recycled); neither changes or
 * counts anything. Never calls the backend. */
int gp_pool_unhold(struct gp_pool *pool, void *ptr, uint32_t ticket);

/* Size of a live block the pool handed out (0 if not one: a held block is not). */
size_t gp_pool_block_size(struct gp_pool *pool, const void *ptr, int *device);

/* Give cached blocks back through backend->free: device < 0 means every device. `target` is
 * the number of cached bytes that may stay (0 = release everything cached); the oldest freed
 * blocks go first. Pending blocks are released too (backend free is safe for them).
 * Releases are not serialised, and allocation and free go on meanwhile: the caller's (the
 * control thread's), a miss's release to the cap (gp_pool_set_cap), gp_pool_alloc's release on
 * out-of-memory and cfg.remap_trim's give-backs may all run at once. A lock around them would
 * make an allocating thread wait behind a release that waits for the device (backend free of a
 * pending block). Each block leaves its list under the list's lock, taken out by one release
 * only, so none is given back twice. A release to a target gives back at most what was over the
 * target when it began, and counts as cached the blocks that other releases have taken out and
 * not given back yet: side by side, releases may leave the cache below a target by those. */
int gp_pool_release(struct gp_pool *pool, int device, uint64_t target,
		    enum gp_release_cause cause, struct gp_release_result *res);
/* Give back about `bytes` of each device's cached blocks (device < 0: every device), the oldest
 * freed first, in whole blocks (the last may pass `bytes`), fewer when less is cached: a cut by
 * an amount, however much the program frees between the caller's decision and the release (a
 * target computed from a cached figure read before would give back those frees too). A cut of 0
 * bytes does nothing. */
int gp_pool_release_bytes(struct gp_pool *pool, int device, uint64_t bytes,
			  enum gp_release_cause cause, struct gp_release_result *res);
/* All three return GP_EBACKEND when a backend free failed (the block is forgotten all the same).
 * gp_pool_release and gp_pool_release_bytes count every call under its cause;
 * gp_pool_release_idle only calls that released something (it runs on a timer). */

/* Give back the cached blocks of `device` (< 0: all) freed before `freed_before_ns` (backend
 * clock): the idle-age policy. */
int gp_pool_release_idle(struct gp_pool *pool, int device, uint64_t freed_before_ns,
			 enum gp_release_cause cause, struct gp_release_result *res);

/* cfg.remap_trim with remap_age_ns: what a device owes (the bytes of idle blocks that misses
 * grew by instead, because those blocks were younger than the age; at most what such blocks
 * held at the last of those misses; cfg.owed says when a debt begins), taken (the debt is 0
 * again) by a caller that has seen the program allocate nothing for the age, to give that many
 * bytes back (gp_pool_release_bytes); 0 for a device not seen. The debt as it stands:
 * gp_pool_dev_stats' trim_owed. */
uint64_t gp_pool_take_owed(struct gp_pool *pool, int device);

/* cfg.remap_trim: what a device holds beyond the most its program asked for at once (requested
 * bytes, not the blocks' sizes) in its last two windows (a window: from one call to the next),
 * when the pool made new memory for it in the last one (else 0), for a caller that has seen the
 * program allocate nothing for remap_age_ns to give back (gp_pool_release_bytes): what a caching
 * allocator that rounded nothing would not hold (two windows, so that a short spell after a long
 * one keeps what the long one needs). Each call begins a new window, at what is asked for then;
 * the first growth of a window calls cfg.owed, as a debt's beginning does. 0 below 2 MiB, and for
 * a device not seen. */
uint64_t gp_pool_take_quiet_excess(struct gp_pool *pool, int device);

/* Cap on a device's cached bytes (0 = none); see gp_pool_config.over_cap. A miss that finds the
 * cache over the cap releases down to it before its real allocation (where may_release allows),
 * so the device's footprint stays within its live bytes plus the cap. */
void gp_pool_set_cap(struct gp_pool *pool, int device, uint64_t bytes);
uint64_t gp_pool_cap(struct gp_pool *pool, int device);
/* Cached bytes of a device (idle + pending, and blocks a release, split, merge or remap has out
 * of their lists for the moment), cheap: reserved bytes less the stripes' in-use counts. */
uint64_t gp_pool_cached_bytes(struct gp_pool *pool, int device);

/* Drive fences: poll recorded ones, record a new one if frees are not yet covered.
 * Never blocks (`wait` = 0; GP_EAGAIN when another thread is driving them) or waits for all
 * pending frees to be fenced (`wait` = 1). */
int gp_pool_advance(struct gp_pool *pool, int wait);

/* Turn immediate reuse off (for good) or on; see gp_pool_config.ordered. */
void gp_pool_set_ordered(struct gp_pool *pool, int ordered);

/* Forget every block of `device`, held ones too, without calling the backend (after
 * cudaDeviceReset). */
void gp_pool_forget_device(struct gp_pool *pool, int device);

/* A device's figures (all 0 for a device not seen yet; GP_EINVAL for a bad one). Takes no pool
 * lock and walks no list: allocation and free never wait for it. */
int gp_pool_dev_stats(struct gp_pool *pool, int device, struct gp_pool_dev_stats *out);
/* Bitmask of devices the pool has seen, for iterating stats. */
uint64_t gp_pool_devices(struct gp_pool *pool);
/* Releases done per cause and bytes released per cause, since creation. */
void gp_pool_release_counts(struct gp_pool *pool, uint64_t counts[GP_CAUSE_COUNT],
			    uint64_t bytes[GP_CAUSE_COUNT]);

#endif
