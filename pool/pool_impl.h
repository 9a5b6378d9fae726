/* pool_impl.h — the pool's internals, shared by its files (pool.c: create, the hit, free, hold,
 * stale records, stats; miss.c: the miss policy; split.c, merge.c, remap.c, trim.c: idle memory of
 * other sizes; fences.c: the fence ring; release.c: giving blocks back). Not a public interface:
 * nothing outside pool/ includes it. */
#ifndef GPUPOOL_POOL_IMPL_H
#define GPUPOOL_POOL_IMPL_H

#include "pool.h"
#include "clock.h"
#include "lock.h"
#include "ptrmap.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_FENCES 64 /* fences in flight */
#define DRIVE_WAIT_DEFAULT_NS 20000u /* cfg.drive_wait_ns when 0 */
#define FENCE_BATCH_MAX_FACTOR 4u /* cfg.fence_batch_bytes grows a batch at most this much */

/* A block's state word: its state in the low STATE_BITS, above them a generation that grows each
 * time the block is handed out, new or from the cache (30 bits: a stale free would have to wait
 * for 2^30 hand-outs of one record between its lookup and its compare-and-swap). A free (or a
 * hold) finds its block without a lock and changes the word with one compare-and-swap from what
 * it read during the lookup, so it can only ever act on the allocation it looked up: not on a
 * later owner's, whether the block came back from the cache or its record was recycled for
 * another block (gp_pool_free). HELD: freed by the program while a CUDA graph was captured, kept
 * for the graph (gp_pool_hold): still in use, on no list, until gp_pool_unhold caches it. */
enum block_state { BLOCK_UNUSED = 0, BLOCK_LIVE = 1, BLOCK_CACHED = 2, BLOCK_HELD = 3 };
#define STATE_BITS 2
#define STATE_MASK ((uint32_t)(1u << STATE_BITS) - 1)

static inline unsigned state_of(uint32_t word)
{
	return word & STATE_MASK;
}

static inline uint32_t with_state(uint32_t word, enum block_state s)
{
	return (word & ~STATE_MASK) | (uint32_t)s;
}

/* The word of a block handed out to a new owner: the next generation, in use. */
static inline uint32_t next_live(uint32_t word)
{
	return with_state(word + (1u << STATE_BITS), BLOCK_LIVE);
}

/* One record per block, 64 bytes, each alone in a GP_LINE unit (carved from GP_LINE-aligned
 * slabs, never freed while the pool lives: new_block): threads using neighbouring records never
 * write to one line, nor to the two lines the prefetcher fetches together (lock.h, GP_LINE). */
#define GP_BLOCK_ALIGN __attribute__((aligned(GP_LINE)))

/* A function of the miss path (or of a rare turn of the hit path) that is never inlined: the shim
 * flattens its allocation and free around the pool's (shim.c), which takes the hit path whole
 * into one frame and must stop at these calls. */
#define GP_MISS_PATH __attribute__((noinline))

struct gp_block {
	void *ptr;
	size_t bytes;         /* real allocation size (the class size, or more after a remap) */
	size_t requested;     /* bytes the owner asked for */
	uint64_t epoch;       /* fence count when freed: reusable once done_epoch > epoch */
	uint64_t freed_ns;    /* when freed (backend clock); from a thread cache, when it left it */
	struct gp_block *next; /* class free list, oldest first; the spare list */
	int device;
	uint16_t cls;
	uint8_t movable;      /* backend movable: a remap may take its physical memory */
	uint8_t unused_;
	/* Index of its home list in the device (class and stripe). An atomic (relaxed: plain moves)
	 * only for the claim of a stale record (pool.c), which reads it while the block may be out of
	 * its list and another thread changes it; everyone else reads it as its owner. */
	_Atomic unsigned list;
	/* The thread cache it was handed out from, whose owner frees it without a locked
	 * instruction while the cache is not shared (pool.c own_free); NULL when it came from
	 * anywhere else. Written before the state word that makes it live, so that a reader of that
	 * word sees this generation's. */
	struct gp_tcache *_Atomic owner;
	_Atomic uint32_t state; /* generation and block_state, above */
} GP_BLOCK_ALIGN;

static inline unsigned block_state(struct gp_block *b)
{
	return state_of(atomic_load_explicit(&b->state, memory_order_acquire));
}

static inline unsigned list_of(const struct gp_block *b)
{
	return atomic_load_explicit(&((struct gp_block *)b)->list, memory_order_relaxed);
}

static inline void set_list(struct gp_block *b, unsigned list)
{
	atomic_store_explicit(&b->list, list, memory_order_relaxed);
}

/* Each size class has GP_STRIPES lists; threads get stripes round-robin (pool.c), so up to
 * GP_STRIPES threads allocating the same size never share a lock. A block goes back to the list
 * it came from. Counters are atomics so stats can read them without the lock; writers hold the
 * list lock. 16: a stripe for each thread of a 16-core machine (fewer stripes put two such
 * threads on one lock; more only add lists, which cost memory and which every release walks
 * once). Set at build time: cmake -DGPUPOOL_STRIPES=N. */
#ifndef GP_STRIPES
#define GP_STRIPES 16
#endif
#define MAX_CLASSES 288 /* >= gp_pool_class_count(), checked at create */

/* Where the blocks that frees appended to a list in one epoch begin: the list's in_bytes and
 * frees when the first of them came (struct gp_list). */
#define LIST_MARKS 4

struct gp_mark {
	_Atomic uint64_t epoch, bytes, blocks;
};

struct gp_list {
	struct gp_lock lock;
	struct gp_block *head, *tail; /* cached blocks in free order */
	/* At most the head's free epoch (the epochs of a list grow from head to tail): set when a
	 * block becomes the head (append_cached, link_cached) and when a look under the lock finds
	 * the head fenced. Read without the lock: a list whose head is surely fenced is passed over
	 * without writing to its lines (take_cached). */
	_Atomic uint64_t head_epoch;
	_Atomic uint64_t cached_blocks, cached_bytes;
	_Atomic uint64_t live_blocks, live_bytes, requested_bytes;
	_Atomic uint64_t allocs, hits, frees;
	/* Its fenced blocks counted without a walk and without the lock (gp_pool_dev_stats): a list
	 * is in free order, so the blocks still fenced (freed in an epoch >= done_epoch) are the ones
	 * at its tail, appended by frees since the first of them. in_bytes and frees: the bytes and
	 * blocks frees have appended (modulo 2^64; every append is a free's, cache_block), in_epoch
	 * the epoch of the last (UINT64_MAX: none, set by dev_get); mark[n % LIST_MARKS] (n < marks):
	 * where the appends of each of the last LIST_MARKS epochs began. The fenced ones are then
	 * in_bytes and frees less the first mark of an epoch >= done_epoch, at most what is cached:
	 * blocks
	 * taken from the head (hits, releases) leave that tail as it is until they reach into it, and
	 * then all that is left is fenced; a block taken from the middle (a split, merge, remap or
	 * trim takes only idle ones) does not count. Over- rather than understated where the marks
	 * cannot tell: lost_epoch, epoch + 1 of the newest mark overwritten (more epochs fenced than
	 * marks); pushed_epoch, of the newest block put back into the middle while fenced (ordered
	 * mode only): while either is above done_epoch, every cached block of the list counts as
	 * fenced. Written under the lock: the free's append pays a compare and two stores, a hit
	 * nothing. */
	_Atomic uint64_t in_bytes, in_epoch;
	struct gp_mark mark[LIST_MARKS] __attribute__((aligned(GP_LINE)));
	_Atomic uint64_t marks, lost_epoch, pushed_epoch;
} __attribute__((aligned(GP_LINE)));

/* Bytes in use (the blocks' bytes) and requested (what their allocations asked for, counted only
 * where the quiet excess needs them: `count_req`, cfg.remap_trim), per stripe, so that threads do
 * not share one counter's cache line: own + remote, req + req_remote (modulo 2^64), and the peaks
 * of those sums. `own` and `req` are written by the stripe's owner only (pool.c account_live),
 * `remote` and `req_remote` by the others, on a line of their own. */
struct gp_stripe_acct {
	_Atomic uint64_t own, peak, req, req_peak;
	int count_req;
	_Atomic uint64_t remote __attribute__((aligned(GP_LINE)));
	_Atomic uint64_t req_remote;
} __attribute__((aligned(GP_LINE)));

struct gp_dev {
	struct gp_list list[MAX_CLASSES * GP_STRIPES]; /* class c, stripe s: [c * GP_STRIPES + s] */
	struct gp_stripe_acct acct[GP_STRIPES];
	_Atomic uint64_t reserved_bytes; /* live + cached, real bytes */
	_Atomic uint64_t peak_reserved;
	_Atomic uint64_t real_allocs, real_frees, failed_allocs, bad_frees;
	_Atomic uint64_t fence_waits, fence_wait_timeouts, oversize_hits; /* misses only */
	_Atomic uint64_t splits, merges;
	/* Threads that have cached blocks out of their lists to split, merge or move them (a miss
	 * that would grow waits for them: pool.c await_moves). */
	_Atomic unsigned moving;
	_Atomic uint64_t remaps, remapped_bytes, movable_bytes;
	_Atomic uint64_t trims, trimmed_bytes; /* cfg.remap_trim's give-backs (trim.c) */
	_Atomic uint64_t trim_owed; /* bytes the age kept from a trim (trim.c) */
	/* cfg.remap_trim: the pool made new memory since the device last went quiet (trim.c), and
	 * the stripes' in-use peaks of the windows before that one (their sum, at most: the peak in
	 * use since the start is the larger of this and the stripes' peaks now). */
	_Atomic int grew;
	_Atomic uint64_t peak_live_before;
	_Atomic uint64_t last_window_peak; /* requested: the window before the one being taken */
	_Atomic uint64_t held_bytes, held_blocks; /* of the live ones, held for a graph */
	_Atomic uint64_t stale_evictions; /* records dropped: the driver reused their address */
	_Atomic uint64_t cap;      /* bytes of cache allowed, 0 = no cap */
	_Atomic int cap_notified;  /* over_cap was called and no release ran since */
};

/* What threads write starts on a GP_LINE boundary (lock.h): the allocations round up to it. */
_Static_assert(_Alignof(struct gp_block) == GP_LINE, "block records are GP_LINE units");
_Static_assert(sizeof(struct gp_block) == GP_LINE, "a block record fills one GP_LINE unit");
_Static_assert(MAX_CLASSES <= UINT16_MAX, "a class fits gp_block.cls");
_Static_assert(_Alignof(struct gp_list) == GP_LINE, "lists are GP_LINE units");
_Static_assert(offsetof(struct gp_list, in_epoch) + sizeof(uint64_t) <= 128,
	       "what a hit and a free write of a list lies in its first 128 bytes");
_Static_assert(_Alignof(struct gp_stripe_acct) == GP_LINE, "stripe counters are GP_LINE units");

/* ---- thread caches (tcache.c) ---------------------------------------------------------- */

/* Blocks of one class a thread cache holds at most. */
#define TC_CLASS_MAX 4

/* A thread's own cache of blocks it freed, served to its own allocations with no locked
 * instruction: only while reuse needs no fence (ordered mode), of one device, bounded by
 * cfg.tcache_bytes. Its owner works on it inside a section marked by `busy`, checking `steal`
 * first; a thief (a release, a stale claim, a miss about to grow, forget_device) takes `lock`,
 * sets `steal`, makes every thread of the process pass a full memory barrier (membarrier), then
 * waits for `busy` to be 0: from then on the owner stays out until `steal` is 0 again, and the
 * thief has the cache alone (tcache.c). Counters are the owner's (or a thief's while it has the
 * cache), read by stats without a lock. A record is never freed while its pool lives: a thread
 * that exits leaves it empty for the next thread (tcache.c). */
struct gp_tcache {
	_Atomic int busy;  /* owner: 1 inside a section */
	_Atomic int steal; /* a thief has the cache (lock held) */
	/* Owner: 1 from the section of a free that pushed the class's oldest blocks out of the cache
	 * until they are back on their lists, after it (tc_pushed); a thief waits for it before it
	 * lists the cache's newer blocks, so that each list stays in free order. */
	_Atomic int relisting;
	int device;        /* the device of its blocks, for good */
	_Atomic uint64_t bytes; /* cached in it (its blocks: tc_blocks) */
	/* What its hits and frees did to the pool's figures (modulo 2^64, summed by stats; the
	 * blocks in use: allocs - frees - retired, retired counting those a device reset took): */
	_Atomic uint64_t allocs, frees, retired, live_bytes, requested_bytes;
	struct gp_block *head[MAX_CLASSES]; /* per class, the newest freed first (by next) */
	_Atomic uint8_t n[MAX_CLASSES];     /* blocks per class; read by thieves without lock */
	pthread_mutex_t lock; /* thieves, and the owner outside its sections */
	struct gp_tcache *next; /* the pool's registry (pushed under tc_lock, read without) */
	_Atomic int owned;      /* a thread has it (changed under the pool's tc_lock) */
	_Atomic int refs;       /* the pool's and the owning thread's: the last one frees it */
	_Atomic int pool_gone;  /* gp_pool_destroy ran: the owner must not touch the pool */
	/* Another thread had to change the state of a block the cache owns (gp_tc_revoke): from
	 * then on, for good, its owner frees with the compare-and-swap as every other thread. Set
	 * only while the owner is kept out of its sections; read by the owner inside one. */
	_Atomic int shared;
} __attribute__((aligned(GP_LINE)));

/* The blocks tc holds, from its classes' counts (for stats and tests: the hit and the free keep
 * no total). */
static inline uint64_t tc_blocks(struct gp_tcache *tc)
{
	uint64_t n = 0;

	for (unsigned c = 0; c < MAX_CLASSES; c++)
		n += atomic_load_explicit(&tc->n[c], memory_order_relaxed);
	return n;
}

struct fence_slot {
	void *handle;
	uint64_t num;  /* covers blocks whose epoch < num */
	uint64_t t_ns; /* when recorded (gp_fine_ns) */
};

struct gp_pool {
	struct gp_backend be;
	struct gp_pool_config cfg;
	_Atomic int ordered;
	struct gp_dev *_Atomic dev[GP_MAX_DEVICES];
	pthread_mutex_t dev_lock; /* creating a device's state */
	struct gp_ptrmap map;

	/* Fences. `epoch` counts fences recorded, `done_epoch` the prefix known complete: read by
	 * every free and fenced hit, written once per fence. `settled_epoch`, at most done_epoch:
	 * the prefix whose GPU work is known over (settled()). A join moves done_epoch on at once
	 * (later work is ordered after the earlier on the GPU), settled_epoch only once `settle`,
	 * an event the join recorded behind that work, completes (the driving thread's alone).
	 * `dirty`: a free happened since the last fence was recorded (written by the first free
	 * after each fence). One thread at a time drives fences (`driving`); fence_lock guards the
	 * ring only, never a backend call.
	 * Each on a cache line of its own: a thread that fails to take `driving`, or the free
	 * that sets `dirty`, takes no other line from the threads reading the epochs. */
	_Atomic uint64_t epoch __attribute__((aligned(GP_LINE))), done_epoch, settled_epoch;
	_Atomic int dirty __attribute__((aligned(GP_LINE)));
	_Atomic int driving __attribute__((aligned(GP_LINE)));
	pthread_mutex_t fence_lock __attribute__((aligned(GP_LINE)));
	struct fence_slot ring[MAX_FENCES];
	unsigned ring_head, ring_count;
	struct fence_slot settle; /* handle NULL: none pending */
	/* The driver's own (fences.c): fences to record before asking be.quiet again, and how
	 * many to skip after the next answer of 0. */
	unsigned quiet_skip, quiet_backoff;
	uint64_t drive_wait_ns; /* cfg.drive_wait_ns, or its default */
	/* Each class's fence batch (gp_pool_create: batch_for), read-only after create: on lines of
	 * its own, apart from the driver's fields above. */
	unsigned batch[MAX_CLASSES] __attribute__((aligned(GP_LINE)));

	_Atomic uint64_t rel_count[GP_CAUSE_COUNT], rel_bytes[GP_CAUSE_COUNT];

	/* Records of blocks given back, for the next new block. A lock-free reader of the pointer
	 * map may still hold one (ptrmap.h), so they are never freed while the pool lives: at most
	 * one record per block the pool ever held at once. */
	struct gp_lock spare_lock;
	struct gp_block *spare;
	struct gp_block *slab_next; /* uncarved records of the newest slab */
	unsigned slab_left;
	struct slab *slabs;         /* every slab, for gp_pool_destroy */

	/* Thread caches (tcache.c): `id` names this pool to a thread's cache (0: thread caches are
	 * off: cfg.tcache_bytes is 0 or the kernel has no expedited membarrier). */
	uint64_t id;
	/* Names this pool to the threads' free hints (pool.c): unique to each pool made, never 0. */
	uint64_t serial;
	_Atomic(struct gp_tcache *) tcs; /* every record, pushed under tc_lock, never unlinked */
	pthread_mutex_t tc_lock;         /* adoption and registration of records */
};

#define SLAB_RECORDS 63 /* and one record's room for the slab's header: 64 units */

struct slab {
	struct slab *next;
} GP_BLOCK_ALIGN;

static inline unsigned nlists(void)
{
	return gp_pool_class_count() * GP_STRIPES;
}

static inline uint64_t ld(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* Counter update by a thread that holds the lock guarding it: no read-modify-write needed. */
static inline void bump(_Atomic uint64_t *c, int64_t delta)
{
	atomic_store_explicit(c, ld(c) + (uint64_t)delta, memory_order_relaxed);
}

static inline void raise_peak(_Atomic uint64_t *peak, uint64_t v)
{
	uint64_t cur = ld(peak);
	while (v > cur && (gp_rmw_note(), !atomic_compare_exchange_weak_explicit(
						  peak, &cur, v, memory_order_relaxed,
						  memory_order_relaxed)))
		;
}

/* A fine monotonic clock, for waits and fence ages (the backend's now_ns may be coarse). */
static inline uint64_t gp_fine_ns(void)
{
	return gp_clock_ns(CLOCK_MONOTONIC);
}

uint64_t gp_fence_age_ns(struct gp_pool *p, uint64_t epoch);

static inline uint64_t now(struct gp_pool *p)
{
	if (__builtin_expect(p->be.now_ns == gp_pool_coarse_ns, 1))
		return gp_clock_ns(CLOCK_MONOTONIC_COARSE); /* a free into the lists reads it: no call */
	return p->be.now_ns ? p->be.now_ns(p->be.ctx) : 0;
}

static inline struct gp_dev *dev_get(struct gp_pool *p, int device, int create)
{
	struct gp_dev *d;

	if (device < 0 || device >= GP_MAX_DEVICES)
		return NULL;
	d = atomic_load_explicit(&p->dev[device], memory_order_acquire);
	if (d != NULL || !create)
		return d;
	gp_mutex_lock(&p->dev_lock);
	d = atomic_load_explicit(&p->dev[device], memory_order_acquire);
	if (d == NULL) {
		d = aligned_alloc(GP_LINE, sizeof(*d));
		if (d != NULL) {
			memset(d, 0, sizeof(*d));
			for (unsigned i = 0; i < nlists(); i++) {
				gp_lock_init(&d->list[i].lock);
				atomic_init(&d->list[i].in_epoch, UINT64_MAX);
			}
			for (unsigned i = 0; i < GP_STRIPES; i++)
				d->acct[i].count_req = p->cfg.remap_trim;
			atomic_store_explicit(&p->dev[device], d, memory_order_release);
		}
	}
	gp_mutex_unlock(&p->dev_lock);
	return d;
}

/* A record for a new block: a recycled one (its generation kept) or a new one. Only on a miss,
 * right after a real allocation: its malloc of a slab under the spare lock is no hot-path cost. */
static inline struct gp_block *new_block(struct gp_pool *p)
{
	struct gp_block *b;
	uint32_t word = 0;

	gp_lock(&p->spare_lock);
	b = p->spare;
	if (b != NULL) {
		p->spare = b->next;
		word = atomic_load_explicit(&b->state, memory_order_relaxed);
	} else {
		if (p->slab_left == 0) {
			struct slab *sl = aligned_alloc(GP_LINE, sizeof(*sl) + SLAB_RECORDS * sizeof(*b));
			if (sl != NULL) {
				sl->next = p->slabs;
				p->slabs = sl;
				p->slab_next = (struct gp_block *)(sl + 1);
				p->slab_left = SLAB_RECORDS;
			}
		}
		if (p->slab_left > 0) {
			b = p->slab_next++;
			p->slab_left--;
		}
	}
	gp_unlock(&p->spare_lock);
	if (b == NULL)
		return NULL;
	memset(b, 0, offsetof(struct gp_block, state));
	atomic_store_explicit(&b->state, word, memory_order_relaxed);
	return b;
}

/* Retire a record whose block is no longer in the pointer map (its next hand-out starts a new
 * generation). */
static inline void retire_block(struct gp_pool *p, struct gp_block *b)
{
	uint32_t word = atomic_load_explicit(&b->state, memory_order_relaxed);

	atomic_store_explicit(&b->state, with_state(word, BLOCK_UNUSED), memory_order_release);
	gp_lock(&p->spare_lock);
	b->next = p->spare;
	p->spare = b;
	gp_unlock(&p->spare_lock);
}

static inline void retire_list(struct gp_pool *p, struct gp_block *b)
{
	while (b != NULL) {
		struct gp_block *next = b->next;
		retire_block(p, b);
		b = next;
	}
}

/* Every record, live, cached or spare, at gp_pool_destroy. */
static inline void free_slabs(struct gp_pool *p)
{
	struct slab *sl = p->slabs;

	while (sl != NULL) {
		struct slab *next = sl->next;
		free(sl);
		sl = next;
	}
	p->slabs = NULL;
}

static inline uint64_t live_total(struct gp_dev *d)
{
	uint64_t sum = 0;
	for (unsigned s = 0; s < GP_STRIPES; s++)
		sum += ld(&d->acct[s].own) + ld(&d->acct[s].remote);
	return sum;
}

static inline uint64_t dev_cached(struct gp_dev *d)
{
	uint64_t reserved = ld(&d->reserved_bytes), live = live_total(d);
	return reserved > live ? reserved - live : 0;
}

/* ---- the hit and the miss (pool.c, miss.c) ------------------------------------------------ */

/* A class of at most 1 MiB: the driver packs such requests tightly, so one more block costs
 * little memory. Such a class batches its fences (cfg.fence_batch, cfg.fence_batch_bytes),
 * neither waits for the thread driving the fences nor for an old fence (cfg.drive_wait_ns,
 * cfg.reuse_age_ns), and takes no larger block (cfg.oversize_pct). */
#define SMALL_CLASS_MAX_BYTES ((size_t)1 << 20)

static inline int small_class(unsigned cls)
{
	return gp_pool_class_bytes(cls) <= SMALL_CLASS_MAX_BYTES;
}

static inline int reusable(struct gp_pool *p, const struct gp_block *b)
{
	return atomic_load_explicit(&p->ordered, memory_order_relaxed) ||
	       b->epoch < atomic_load_explicit(&p->done_epoch, memory_order_acquire);
}

/* Unlink b, the block after prev (NULL: the head), from list c (c's lock held): it leaves the
 * cached counters. */
static inline void unlink_cached(struct gp_list *c, struct gp_block *prev, struct gp_block *b)
{
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

/* Link cached block b into list c after prev (NULL: at the head), c's lock held: it joins the
 * cached counters (not the fence marks: see link_in_order). A block that becomes the head sets
 * the head-epoch hint (at most the head's epoch: it was freed no later than the blocks behind
 * it). */
static inline __attribute__((always_inline)) void link_cached(struct gp_list *c,
							      struct gp_block *prev,
							      struct gp_block *b)
{
	if (prev != NULL) {
		b->next = prev->next;
		prev->next = b;
	} else {
		b->next = c->head;
		c->head = b;
		atomic_store_explicit(&c->head_epoch, b->epoch, memory_order_relaxed);
	}
	if (c->tail == prev)
		c->tail = b;
	bump(&c->cached_blocks, 1);
	bump(&c->cached_bytes, (int64_t)b->bytes);
}

/* Whether cached block a was freed no later than b: the order of a list, by free epoch, then by
 * free time. */
static inline int freed_before(const struct gp_block *a, const struct gp_block *b)
{
	return a->epoch < b->epoch || (a->epoch == b->epoch && a->freed_ns <= b->freed_ns);
}

/* Whether list c's head is surely fenced (a hint read without the lock: head_epoch is at most the
 * head's free epoch): its blocks may not be reused yet, and the list is passed over without
 * writing to its lines. */
static inline int head_fenced(struct gp_pool *p, struct gp_list *c)
{
	return !atomic_load_explicit(&p->ordered, memory_order_relaxed) &&
	       ld(&c->head_epoch) >= atomic_load_explicit(&p->done_epoch, memory_order_acquire);
}

/* A cached block out of list c handed out to a request of `bytes` (c's lock held): its next
 * generation, live, counted as a hit on c. */
static inline void hand_out_locked(struct gp_list *c, struct gp_block *b, size_t bytes)
{
	b->requested = bytes;
	atomic_store_explicit(&b->owner, NULL, memory_order_relaxed);
	/* Release: a free that reads this word reads this generation's owner (none). */
	atomic_store_explicit(&b->state, next_live(atomic_load_explicit(&b->state, memory_order_relaxed)),
			      memory_order_release);
	bump(&c->live_blocks, 1);
	bump(&c->live_bytes, (int64_t)b->bytes);
	bump(&c->requested_bytes, (int64_t)bytes);
	bump(&c->allocs, 1);
	bump(&c->hits, 1);
}

/* List c's head, locked, when it may be reused now; else NULL, unlocked. *fenced: c holds a block
 * still fenced. The lock is taken only when the head may be reusable (head_epoch): a list of
 * another thread's stripe whose head is fenced is passed over without writing to its lines. A
 * head found fenced under the lock sets the hint, so that the list is passed over until the
 * fences move past it. The looks without the lock are racy, hints: a miss costs a real
 * allocation anyway. */
static inline __attribute__((always_inline)) struct gp_block *
lock_reusable_head(struct gp_pool *p, struct gp_list *c, int *fenced)
{
	struct gp_block *b;

	if (ld(&c->cached_blocks) == 0)
		return NULL;
	if (head_fenced(p, c)) {
		*fenced = 1;
		return NULL;
	}
	gp_lock(&c->lock);
	b = c->head;
	if (__builtin_expect(b != NULL && reusable(p, b), 1))
		return b;
	if (b != NULL) {
		*fenced = 1;
		atomic_store_explicit(&c->head_epoch, b->epoch, memory_order_relaxed);
	}
	gp_unlock(&c->lock);
	return NULL;
}

/* Pop the oldest cached block of a list if it may be reused, handed out to a request of
 * `bytes`. *waiting: one is cached there but still fenced. Always inline: the hit path (LTO
 * otherwise leaves it out of line, a call on every hit). */
static inline __attribute__((always_inline)) struct gp_block *
take_cached(struct gp_pool *p, struct gp_list *c, size_t bytes, int *waiting)
{
	struct gp_block *b = lock_reusable_head(p, c, waiting);

	if (b == NULL)
		return NULL;
	unlink_cached(c, NULL, b);
	hand_out_locked(c, b, bytes);
	gp_unlock(&c->lock);
	return b;
}

/* A miss on this thread's own list of class cls (stripe s0): a cached block of the class from
 * another list, a larger one, or a fenced one waited for (miss.c); NULL: make a real allocation.
 * own_fenced: the thread's own list holds a block still fenced. Out of line: the hit path in
 * gp_pool_alloc only calls it. */
struct gp_block *gp_pool_take_missed(struct gp_pool *p, struct gp_dev *d, unsigned cls,
				     unsigned s0, size_t bytes, int own_fenced) GP_MISS_PATH;

/* The largest class whose cached blocks may serve a miss of class cls for `bytes`
 * (cfg.oversize_pct; cls itself when no larger one may): what a miss takes from the lists, and
 * from the threads' caches before it grows (miss.c). */
unsigned gp_pool_larger_last(const struct gp_pool *p, unsigned cls, size_t bytes) GP_MISS_PATH;

/* A block's record made and entered: `real` bytes at ptr (at least the class's), asked for
 * `bytes`, in the pointer map, counted live on list `list` (pool.c). GP_ENOMEM: no record or map
 * room (the caller gives ptr back). */
int gp_pool_enter_block(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls,
			unsigned list, size_t bytes, size_t real, void *ptr, int movable,
			struct gp_block **out);

/* Forget the blocks of a detached list (linked by next) and give them to the backend, counted
 * in r (release.c). */
void gp_pool_free_blocks(struct gp_pool *p, struct gp_dev *d, struct gp_block *b,
			 struct gp_release_result *r);

/* A miss of class cls served by remapping cached movable blocks (remap.c): GP_OK with *out, else
 * the caller makes a real allocation. */
int gp_pool_remap(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls, unsigned s0,
		  size_t bytes, void **out);

/* Unlink from list c its oldest block that may move at time t (may_move), NULL when none may
 * (remap.c). */
struct gp_block *gp_pool_take_movable(struct gp_pool *p, struct gp_list *c, uint64_t t);

/* cfg.remap_trim: before a miss of class cls grows the pool by `need` bytes, idle blocks of other
 * classes that could not serve it given back, about `need` bytes of them (trim.c). */
void gp_pool_trim_others(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls,
			 size_t need) GP_MISS_PATH;

/* cfg.remap_trim: the pool made new memory on d (a real allocation, a remap's new handles): the
 * window since the device last went quiet has a peak to hold it to (gp_pool_take_quiet_excess);
 * the first growth of a window calls cfg.owed (trim.c). */
void gp_pool_note_growth(struct gp_pool *p, struct gp_dev *d, int device) GP_MISS_PATH;

/* The most the program had asked for at once on d (requested bytes, not the blocks' sizes) since
 * this was last called: the stripes' peaks, an upper bound with several threads; and a new window
 * begun at what is asked for and in use now (the in-use peak kept for the stats). pool.c; one
 * caller at a time. */
uint64_t gp_pool_window_peak(struct gp_dev *d);

/* gp_pool_advance(p, 0) for a miss that would otherwise move memory or grow the pool (split,
 * merge, remap): with no fence in flight the GPU is asked whether it is idle even while the
 * back-off skips the question; on a GPU gone idle a fence recorded now would complete only
 * microseconds after the miss had looked (fences.c). */
int gp_pool_advance_asking(struct gp_pool *p);

/* Whether a cached block's GPU work is known to be over: a fence after its free completed, or
 * the GPU was idle (neither ordered mode nor a join is enough for memory that is unmapped or
 * given back at once: the GPU may still be running its previous owner's kernel). */
static inline int settled(struct gp_pool *p, const struct gp_block *b)
{
	return b->epoch < atomic_load_explicit(&p->settled_epoch, memory_order_acquire);
}

/* A block out of the pointer map: before its address may go (a remap frees its range, a merge
 * joins it to another). Its own entry only: a block the driver gave its address to since (the
 * block is stale) keeps its entry. */
static inline void map_remove_block(struct gp_pool *p, struct gp_block *b)
{
	struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)b->ptr);

	gp_lock(&s->lock);
	gp_ptrmap_remove_entry(s, (uintptr_t)b->ptr, b);
	gp_unlock(&s->lock);
}

/* ---- stale records: the driver handed a block's address out again (pool.c) ---------------- */

/* The program freed a block the pool handed out through a path the pool does not see (or the
 * device forgot it), and the driver gave its address to a new block: the old block is gone. The
 * map entry goes to the new block (gp_pool_enter_block), and the old record is claimed there
 * under the map shard's lock: a block in use or held, by one compare-and-swap to BLOCK_UNUSED; a
 * cached one in its list, unlinked under the list's lock. A cached block out of its list (a free
 * or unhold between its state change and its list, a split, merge, remap or release working on
 * it) is marked BLOCK_UNUSED under its list's lock, and the thread that has it drops it when it
 * finds it so: wherever a block out of its list goes back into one (cache_block, push_cached,
 * remap's relist), is handed out (gp_pool_hand_out) or given to the backend
 * (gp_pool_free_blocks), its state is looked at first, under the lock the claim takes there.
 * Best effort where the driver's reuse races the pool's own use of the address (a split, merge or
 * remap of it already under way): the program freed memory twice. */
enum stale_from {
	STALE_LIVE,     /* in use (or between free and list): its in-use accounting to undo */
	STALE_HELD,     /* held for a graph: the same, and the held figures */
	STALE_UNLISTED, /* cached, out of its list: its cached counters are undone already */
};

/* A stale block's accounting undone (in use, reserved, movable), counted (stale_evictions), its
 * record retired, and cfg.stale told (no lock held: none may be when this is called). */
void gp_pool_drop_stale(struct gp_pool *p, struct gp_block *b, enum stale_from from) GP_MISS_PATH;

/* A block that a remap or split made for a request of `bytes` (class cls, stripe s0), `real`
 * bytes at ptr: entered live, or, with no record for it, given back (`settled`). */
static inline int enter_made(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls,
			     unsigned s0, size_t bytes, size_t real, void *ptr, int settled,
			     struct gp_block **nb)
{
	if (gp_pool_enter_block(p, d, device, cls, cls * GP_STRIPES + s0, bytes, real, ptr, 1, nb) ==
	    GP_OK)
		return GP_OK;
	p->be.free(p->be.ctx, device, ptr, real, settled);
	atomic_fetch_add(&d->real_frees, 1);
	return GP_ENOMEM;
}

/* A cached block into its list (list_of(b)) where its free belongs, with the list's lock: lists
 * are in free order (epochs nondecreasing from head to tail, and free times with them), which
 * take_cached, head_fenced and the releases by age rely on: the oldest block heads each list. A
 * block that a split, merge or remap hands back (as it was, smaller, or made of several: the
 * latest epoch and time of its parts) may have been freed later than blocks already there.
 * Looked for from the tail, the usual place, else from the head. */
static inline void link_in_order(struct gp_pool *p, struct gp_dev *d, struct gp_block *b)
{
	struct gp_list *c = &d->list[list_of(b)];
	struct gp_block *prev = NULL;

	gp_lock(&c->lock);
	/* Put back while fenced (ordered mode reuses such blocks): the marks cannot place it, so the
	 * list's cached blocks all count as fenced until its fence is done (struct gp_list). */
	if (b->epoch >= atomic_load_explicit(&p->done_epoch, memory_order_acquire) &&
	    b->epoch + 1 > ld(&c->pushed_epoch))
		atomic_store_explicit(&c->pushed_epoch, b->epoch + 1, memory_order_relaxed);
	if (c->tail != NULL && freed_before(c->tail, b))
		prev = c->tail;
	else
		for (struct gp_block *x = c->head; x != NULL && freed_before(x, b); x = x->next)
			prev = x;
	link_cached(c, prev, b);
	gp_unlock(&c->lock);
}

/* A cached block that a split, merge or remap took out of its list, back into it (link_in_order),
 * unless its address was handed out again meanwhile (stale: dropped). Under its map shard's lock,
 * which the claim of a stale record holds: either the claim finds it in its list, or it finds the
 * claim's mark here. */
static inline void push_cached(struct gp_pool *p, struct gp_dev *d, struct gp_block *b)
{
	struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)b->ptr);
	int gone;

	gp_lock(&s->lock);
	gone = block_state(b) != BLOCK_CACHED;
	if (!gone)
		link_in_order(p, d, b);
	gp_unlock(&s->lock);
	if (gone)
		gp_pool_drop_stale(p, b, STALE_UNLISTED);
}

/* A cached block that kept `bytes` of its memory (a remap or split took the rest): it serves the
 * largest class it holds, on its own stripe. */
static inline void shrink_block(struct gp_block *b, size_t bytes)
{
	b->bytes = bytes;
	b->cls = (uint16_t)gp_pool_class_floor(bytes);
	set_list(b, b->cls * GP_STRIPES + list_of(b) % GP_STRIPES);
}

/* Hand out a cached block this thread took out of its list (still cached) to a request of
 * `bytes`: live, counted a hit on its list (pool.c). GP_EINVAL: it was stale, and is dropped. */
int gp_pool_hand_out(struct gp_pool *p, struct gp_dev *d, struct gp_block *b, size_t bytes);

/* A miss of class cls served by the end of the smallest cached movable block of its class or a
 * larger one that may be reused now, or by all of it when it serves no more than cls (split.c):
 * GP_OK with *out, counted a hit. */
int gp_pool_split(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls, unsigned s0,
		  size_t bytes, void **out);

/* Cached neighbours that together hold class cls made one cached block (merge.c): GP_OK when
 * one was made, so that a look at the cache (and a split) can serve the miss. */
int gp_pool_coalesce(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls);

/* Around a miss's split, merge and remap (pool.c miss_movable): they take cached blocks out of
 * their lists while they work on them. */
static inline void moving_begin(struct gp_dev *d)
{
	atomic_fetch_add_explicit(&d->moving, 1, memory_order_acq_rel);
}

static inline void moving_end(struct gp_dev *d)
{
	atomic_fetch_sub_explicit(&d->moving, 1, memory_order_acq_rel);
}

/* Whether a miss of class cls may be served by a remap (cfg.remap_min_bytes). */
static inline int remaps_class(const struct gp_pool *p, unsigned cls)
{
	return p->cfg.remap_min_bytes != 0 && p->be.remap != NULL &&
	       gp_pool_class_bytes(cls) >= p->cfg.remap_min_bytes;
}

/* Whether real frees may happen now on this thread (see gp_backend.may_release). */
static inline int gp_may_release(struct gp_pool *p)
{
	return p->be.may_release == NULL || p->be.may_release(p->be.ctx);
}

/* Whether a cached block has been idle at least cfg.remap_age_ns at time t: old enough to move
 * (a remap) or to be given back (a trim). */
static inline int old_enough(const struct gp_pool *p, const struct gp_block *b, uint64_t t)
{
	uint64_t age = p->cfg.remap_age_ns;

	return age == 0 || (t > b->freed_ns && t - b->freed_ns >= age);
}

/* Whether a cached block may move now (a remap source): movable, its fence done, old enough. */
static inline int may_move(struct gp_pool *p, const struct gp_block *b, uint64_t t)
{
	return b->movable && settled(p, b) && old_enough(p, b, t);
}

/* ---- thread caches (tcache.c) ---- */

/* The calling thread's cache for pool p (the one pool its thread-locals name), else NULL. */
extern _Thread_local struct gp_tcache *gp_tc_mine __attribute__((tls_model("initial-exec")));
extern _Thread_local uint64_t gp_tc_pool __attribute__((tls_model("initial-exec")));

static inline struct gp_tcache *tc_of(struct gp_pool *p)
{
	return gp_tc_pool == p->id && p->id != 0 ? gp_tc_mine : NULL;
}

/* Set up thread caches for a new pool (its id, when cfg.tcache_bytes and the kernel allow), and
 * free the records at destroy (a record a thread still names is freed by that thread). */
void gp_tc_create(struct gp_pool *p);
void gp_tc_destroy(struct gp_pool *p);
/* The calling thread's cache for p on `device`, made or adopted (slow path: its first free);
 * NULL when thread caches are off, the thread is exiting, or its cache serves another device. */
struct gp_tcache *gp_tc_attach(struct gp_pool *p, int device) GP_MISS_PATH;
/* Blocks taken out of a cache (linked by next, oldest first, cached, on no list) into their lists,
 * each stamped freed now (a cache keeps no free times) unless its address was handed out again
 * meanwhile (push_cached: then dropped); with reuse behind fences, the next fence asked for. No
 * cache lock held: push_cached takes a shard's. */
void gp_tc_relist(struct gp_pool *p, struct gp_block *b) GP_MISS_PATH;
/* The owner's own cache out of the fast path: its blocks into their lists (when reuse needs
 * fences, or the thread leaves). */
void gp_tc_flush(struct gp_pool *p, struct gp_tcache *tc) GP_MISS_PATH;
/* Thieves: the blocks of every cache of `device` (< 0: all) into their lists, waiting for any
 * other thief; with cls < MAX_CLASSES only caches that hold a block of a class in [cls, last]
 * and no other thief holds (a miss's, which does not wait). 1 when any block moved. */
int gp_tc_drain(struct gp_pool *p, int device, unsigned cls, unsigned last) GP_MISS_PATH;
/* A stale claim (pool.c claim_stale, the map shard's lock held): `old`, cached, taken out of
 * whichever cache holds it (1), else 0. */
int gp_tc_claim(struct gp_pool *p, struct gp_block *old);
/* Every owner section under way has ended (a state changed before this call is seen by every
 * later one). */
void gp_tc_quiesce(struct gp_pool *p);
/* forget_device: every cache of `device` drained, its in-use figures zeroed, made shared. */
void gp_tc_forget(struct gp_pool *p, int device);
/* Before a thread other than tc's owner changes the state of a live block that tc owns (a free,
 * a hold, a stale claim): tc made shared, with its owner out of its sections (one membarrier,
 * once per cache), so that the owner's plain store of that state can no longer race the caller's
 * compare-and-swap. */
void gp_tc_revoke(struct gp_pool *p, struct gp_tcache *tc) GP_MISS_PATH;

#endif
