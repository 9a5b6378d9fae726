/* pool.c — the caching block pool: per-device size-class free lists, fences, release.
 * One block is one backend allocation (no splitting). A cache hit takes one class lock and
 * makes no backend call; frees look the block up in the sharded pointer map. Backend calls
 * (alloc, free, fences) are always made with no pool lock held. */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"
#include "lock.h"
#include "ptrmap.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_FENCES 64 /* fences in flight */

enum block_state { BLOCK_LIVE = 1, BLOCK_CACHED = 2 };

struct gp_block {
	void *ptr;
	size_t bytes;         /* real allocation size (the class size) */
	size_t requested;     /* bytes the owner asked for */
	uint64_t epoch;       /* fence count when freed: reusable once done_epoch > epoch */
	uint64_t freed_ns;    /* when freed (backend clock) */
	struct gp_block *next; /* class free list, oldest first */
	int device;
	unsigned cls;
	unsigned list;        /* index of its home list in the device (class and stripe) */
	_Atomic int state;
};

/* Each size class has GP_STRIPES lists; a thread uses the stripe its id hashes to, so threads
 * allocating the same size rarely share a lock. A block goes back to the list it came from.
 * Counters are atomics so stats can read them without the lock; writers hold the list lock. */
#define GP_STRIPES 8
#define MAX_CLASSES 288 /* >= gp_pool_class_count(), checked at create */

struct gp_list {
	struct gp_lock lock;
	struct gp_block *head, *tail; /* cached blocks in free order */
	_Atomic uint64_t cached_blocks, cached_bytes;
	_Atomic uint64_t live_blocks, live_bytes, requested_bytes;
	_Atomic uint64_t allocs, hits, frees;
} __attribute__((aligned(64)));

/* Bytes in use, per stripe, so that threads do not share one counter's cache line. */
struct gp_stripe_acct {
	_Atomic uint64_t live, peak;
} __attribute__((aligned(64)));

struct gp_dev {
	struct gp_list list[MAX_CLASSES * GP_STRIPES]; /* class c, stripe s: [c * GP_STRIPES + s] */
	struct gp_stripe_acct acct[GP_STRIPES];
	_Atomic uint64_t reserved_bytes; /* live + cached, real bytes */
	_Atomic uint64_t peak_reserved;
	_Atomic uint64_t real_allocs, real_frees, failed_allocs, bad_frees;
	_Atomic uint64_t fence_waits, fence_wait_timeouts, oversize_hits; /* misses only */
	_Atomic uint64_t cap;      /* bytes of cache allowed, 0 = no cap */
	_Atomic int cap_notified;  /* over_cap was called and no release ran since */
};

struct fence_slot {
	void *handle;
	uint64_t num; /* covers blocks whose epoch < num */
};

struct gp_pool {
	struct gp_backend be;
	struct gp_pool_config cfg;
	_Atomic int ordered;
	struct gp_dev *_Atomic dev[GP_MAX_DEVICES];
	pthread_mutex_t dev_lock; /* creating a device's state */
	struct gp_ptrmap map;

	/* Fences. `epoch` counts fences recorded, `done_epoch` the prefix known complete.
	 * `dirty`: a free happened since the last fence was recorded. One thread at a time
	 * drives fences (`driving`); fence_lock guards the ring only, never a backend call. */
	_Atomic uint64_t epoch, done_epoch;
	_Atomic int dirty, driving;
	pthread_mutex_t fence_lock;
	struct fence_slot ring[MAX_FENCES];
	unsigned ring_head, ring_count;

	_Atomic uint64_t rel_count[GP_CAUSE_COUNT], rel_bytes[GP_CAUSE_COUNT];
};

static unsigned nlists(void)
{
	return gp_pool_class_count() * GP_STRIPES;
}

/* The calling thread's stripe, handed out round-robin at its first allocation, so that up to
 * GP_STRIPES threads never share one (hashing thread ids collides for a few threads). These two
 * are the pool's only statics: they number threads, they hold no pool state. */
static _Atomic unsigned next_stripe;
/* initial-exec: an offset from the thread pointer, not a __tls_get_addr call per access (the
 * library is preloaded, or dlopened with a few bytes of TLS, which the loader's reserve holds). */
static _Thread_local unsigned stripe_plus_one __attribute__((tls_model("initial-exec")));

static unsigned my_stripe(void)
{
	unsigned s = stripe_plus_one;

	if (__builtin_expect(s != 0, 1))
		return s - 1;
	s = atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) % GP_STRIPES;
	stripe_plus_one = s + 1;
	return s;
}

static uint64_t ld(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* Counter update by a thread that holds the lock guarding it: no read-modify-write needed. */
static void bump(_Atomic uint64_t *c, int64_t delta)
{
	atomic_store_explicit(c, ld(c) + (uint64_t)delta, memory_order_relaxed);
}

static void raise_peak(_Atomic uint64_t *peak, uint64_t v)
{
	uint64_t cur = ld(peak);
	while (v > cur && !atomic_compare_exchange_weak_explicit(peak, &cur, v, memory_order_relaxed,
								 memory_order_relaxed))
		;
}

static uint64_t now(struct gp_pool *p)
{
	return p->be.now_ns ? p->be.now_ns(p->be.ctx) : 0;
}

static struct gp_dev *dev_get(struct gp_pool *p, int device, int create)
{
	struct gp_dev *d;

	if (device < 0 || device >= GP_MAX_DEVICES)
		return NULL;
	d = atomic_load_explicit(&p->dev[device], memory_order_acquire);
	if (d != NULL || !create)
		return d;
	pthread_mutex_lock(&p->dev_lock);
	d = atomic_load_explicit(&p->dev[device], memory_order_acquire);
	if (d == NULL) {
		d = aligned_alloc(64, sizeof(*d));
		if (d != NULL) {
			memset(d, 0, sizeof(*d));
			for (unsigned i = 0; i < nlists(); i++)
				gp_lock_init(&d->list[i].lock);
			atomic_store_explicit(&p->dev[device], d, memory_order_release);
		}
	}
	pthread_mutex_unlock(&p->dev_lock);
	return d;
}

int gp_pool_create(const struct gp_backend *backend, const struct gp_pool_config *cfg,
		   struct gp_pool **out)
{
	struct gp_pool *p;

	if (backend == NULL || backend->alloc == NULL || backend->free == NULL || out == NULL)
		return GP_EINVAL;
	if (gp_pool_class_count() > MAX_CLASSES)
		return GP_EINVAL;
	p = aligned_alloc(64, (sizeof(*p) + 63) / 64 * 64);
	if (p == NULL)
		return GP_ENOMEM;
	memset(p, 0, sizeof(*p));
	p->be = *backend;
	if (cfg)
		p->cfg = *cfg;
	atomic_store(&p->ordered, p->cfg.ordered);
	if (gp_ptrmap_init(&p->map) != 0) {
		free(p);
		return GP_ENOMEM;
	}
	pthread_mutex_init(&p->dev_lock, NULL);
	pthread_mutex_init(&p->fence_lock, NULL);
	*out = p;
	return GP_OK;
}

static void free_list(struct gp_block *b)
{
	while (b != NULL) {
		struct gp_block *next = b->next;
		free(b);
		b = next;
	}
}

static int drop_all(void *val, void *arg)
{
	(void)arg;
	struct gp_block *b = val;
	if (atomic_load(&b->state) == BLOCK_LIVE)
		free(b); /* cached blocks are freed through their class lists */
	return 0;
}

void gp_pool_destroy(struct gp_pool *p)
{
	if (p == NULL)
		return;
	for (int i = 0; i < GP_PTRMAP_SHARDS; i++)
		gp_ptrmap_filter(&p->map.shard[i], drop_all, NULL);
	for (int i = 0; i < GP_MAX_DEVICES; i++) {
		struct gp_dev *d = atomic_load(&p->dev[i]);
		if (d == NULL)
			continue;
		for (unsigned i = 0; i < nlists(); i++)
			free_list(d->list[i].head);
		free(d);
	}
	/* Fences still in flight are abandoned: their handles belong to the backend. */
	gp_ptrmap_fini(&p->map);
	pthread_mutex_destroy(&p->dev_lock);
	pthread_mutex_destroy(&p->fence_lock);
	free(p);
}

/* ---- fences ---------------------------------------------------------------------------- */

static int try_drive(struct gp_pool *p)
{
	int expected = 0;
	return atomic_compare_exchange_strong(&p->driving, &expected, 1);
}

/* Poll (or wait for) fences in order; a fence counts only once all earlier ones have. */
static void reap_fences(struct gp_pool *p, int wait)
{
	for (;;) {
		struct fence_slot f;
		int done;

		pthread_mutex_lock(&p->fence_lock);
		if (p->ring_count == 0) {
			pthread_mutex_unlock(&p->fence_lock);
			return;
		}
		f = p->ring[p->ring_head];
		pthread_mutex_unlock(&p->fence_lock);

		if (wait && p->be.fence_wait)
			done = p->be.fence_wait(p->be.ctx, f.handle) == GP_OK;
		else
			done = p->be.fence_query(p->be.ctx, f.handle) == 1;
		if (!done)
			return;

		pthread_mutex_lock(&p->fence_lock);
		p->ring_head = (p->ring_head + 1) % MAX_FENCES;
		p->ring_count--;
		pthread_mutex_unlock(&p->fence_lock);
		atomic_store_explicit(&p->done_epoch, f.num, memory_order_release);
		if (p->be.fence_destroy)
			p->be.fence_destroy(p->be.ctx, f.handle);
	}
}

/* Record a fence covering every free made so far, if any free is not yet covered. */
static int record_fence(struct gp_pool *p)
{
	void *handle = NULL;
	uint64_t num;
	int full;

	if (!atomic_load(&p->dirty))
		return GP_OK;
	pthread_mutex_lock(&p->fence_lock);
	full = p->ring_count == MAX_FENCES;
	pthread_mutex_unlock(&p->fence_lock);
	if (full)
		return GP_EAGAIN;
	/* Clear `dirty` and advance the epoch before recording: a free that stamped the old epoch
	 * happened before this point, so the events recorded next are behind its GPU work. */
	atomic_store(&p->dirty, 0);
	num = atomic_fetch_add(&p->epoch, 1) + 1;
	if (p->be.fence_record(p->be.ctx, &handle) != GP_OK) {
		atomic_store(&p->dirty, 1);
		/* The number is used up; the next fence covers its blocks (its number is larger). */
		return GP_EAGAIN;
	}
	pthread_mutex_lock(&p->fence_lock);
	p->ring[(p->ring_head + p->ring_count) % MAX_FENCES] = (struct fence_slot){ handle, num };
	p->ring_count++;
	pthread_mutex_unlock(&p->fence_lock);
	return GP_OK;
}

int gp_pool_advance(struct gp_pool *p, int wait)
{
	int rc = GP_OK;

	if (p->be.fence_record == NULL || p->be.fence_query == NULL)
		return GP_OK;
	while (!try_drive(p)) {
		if (!wait)
			return GP_EAGAIN;
		sched_yield();
	}
	reap_fences(p, 0);
	rc = record_fence(p);
	reap_fences(p, wait);
	atomic_store(&p->driving, 0);
	return rc;
}

void gp_pool_set_ordered(struct gp_pool *p, int ordered)
{
	atomic_store(&p->ordered, ordered);
	if (!ordered)
		atomic_store(&p->dirty, 1); /* blocks freed while ordered now need a fence */
}

/* ---- alloc / free ---------------------------------------------------------------------- */

static int reusable(struct gp_pool *p, const struct gp_block *b)
{
	return atomic_load_explicit(&p->ordered, memory_order_relaxed) ||
	       b->epoch < atomic_load_explicit(&p->done_epoch, memory_order_acquire);
}

/* Pop the oldest cached block of a list if it may be reused. *waiting: one is cached there
 * but still fenced. */
static struct gp_block *take_cached(struct gp_pool *p, struct gp_list *c, size_t bytes,
				    int *waiting)
{
	struct gp_block *b;

	if (ld(&c->cached_blocks) == 0)
		return NULL; /* racy peek: a miss costs a real allocation anyway */
	gp_lock(&c->lock);
	b = c->head;
	*waiting |= b != NULL;
	if (b != NULL && reusable(p, b)) {
		c->head = b->next;
		if (c->head == NULL)
			c->tail = NULL;
		b->next = NULL;
		b->requested = bytes;
		atomic_store_explicit(&b->state, BLOCK_LIVE, memory_order_relaxed);
		bump(&c->cached_blocks, -1);
		bump(&c->cached_bytes, -(int64_t)b->bytes);
		bump(&c->live_blocks, 1);
		bump(&c->live_bytes, (int64_t)b->bytes);
		bump(&c->requested_bytes, (int64_t)bytes);
		bump(&c->allocs, 1);
		bump(&c->hits, 1);
	} else {
		b = NULL;
	}
	gp_unlock(&c->lock);
	return b;
}

/* This thread's stripe of the class first, then the others. A block taken from another
 * stripe moves to this thread's stripe (its counters with it), so that its next free and
 * reuse stay on this thread's lock. */
static struct gp_block *take_any(struct gp_pool *p, struct gp_dev *d, unsigned cls, unsigned s0,
				 size_t bytes, int *waiting)
{
	struct gp_list *base = &d->list[cls * GP_STRIPES], *own = &base[s0], *src;
	struct gp_block *b = take_cached(p, own, bytes, waiting);

	for (unsigned i = 1; b == NULL && i < GP_STRIPES; i++) {
		src = &base[(s0 + i) % GP_STRIPES];
		b = take_cached(p, src, bytes, waiting);
		if (b == NULL)
			continue;
		gp_lock(&src->lock);
		bump(&src->live_blocks, -1);
		bump(&src->live_bytes, -(int64_t)b->bytes);
		bump(&src->requested_bytes, -(int64_t)bytes);
		gp_unlock(&src->lock);
		gp_lock(&own->lock);
		bump(&own->live_blocks, 1);
		bump(&own->live_bytes, (int64_t)b->bytes);
		bump(&own->requested_bytes, (int64_t)bytes);
		gp_unlock(&own->lock);
		b->list = cls * GP_STRIPES + s0;
	}
	return b;
}

static uint64_t live_total(struct gp_dev *d)
{
	uint64_t sum = 0;
	for (unsigned s = 0; s < GP_STRIPES; s++)
		sum += ld(&d->acct[s].live);
	return sum;
}

/* In-use bytes are counted per stripe (each on its own cache line) and so is their peak; the
 * device's peak is the sum of the stripes' peaks: exact while one thread allocates, an upper
 * bound when several do. */
static void account_live(struct gp_dev *d, unsigned stripe, int64_t bytes)
{
	struct gp_stripe_acct *a = &d->acct[stripe];
	uint64_t v = atomic_fetch_add_explicit(&a->live, (uint64_t)bytes, memory_order_relaxed) +
		     (uint64_t)bytes;
	if (bytes > 0)
		raise_peak(&a->peak, v);
}

static int real_alloc(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls,
		      unsigned s0, size_t bytes, void **out)
{
	unsigned list = cls * GP_STRIPES + s0;
	struct gp_list *c = &d->list[list];
	size_t cbytes = gp_pool_class_bytes(cls);
	struct gp_ptrmap_shard *s;
	struct gp_block *b;
	void *ptr = NULL;
	int rc;

	rc = p->be.alloc(p->be.ctx, device, cbytes, &ptr);
	if (rc != GP_OK)
		return rc == GP_ENOMEM ? GP_ENOMEM : GP_EBACKEND;
	b = calloc(1, sizeof(*b));
	if (b == NULL)
		goto undo;
	b->ptr = ptr;
	b->bytes = cbytes;
	b->requested = bytes;
	b->device = device;
	b->cls = cls;
	b->list = list;
	atomic_store(&b->state, BLOCK_LIVE);
	s = gp_ptrmap_shard(&p->map, (uintptr_t)ptr);
	gp_lock(&s->lock);
	rc = gp_ptrmap_insert(s, (uintptr_t)ptr, b);
	gp_unlock(&s->lock);
	if (rc != 0)
		goto undo;

	gp_lock(&c->lock);
	bump(&c->live_blocks, 1);
	bump(&c->live_bytes, (int64_t)cbytes);
	bump(&c->requested_bytes, (int64_t)bytes);
	bump(&c->allocs, 1);
	gp_unlock(&c->lock);
	atomic_fetch_add(&d->real_allocs, 1);
	raise_peak(&d->peak_reserved, atomic_fetch_add(&d->reserved_bytes, cbytes) + cbytes);
	account_live(d, s0, (int64_t)cbytes);
	*out = ptr;
	return GP_OK;
undo:
	free(b);
	p->be.free(p->be.ctx, device, ptr, cbytes);
	return GP_ENOMEM;
}

#define FENCE_BATCH_MAX_BYTES ((size_t)1 << 20)
#define WAIT_MIN_FENCED 2
#define WAIT_MIN_FENCED_BYTES ((uint64_t)64 << 20)

#define OVERSIZE_MIN ((size_t)1 << 20) /* at or below, the driver packs requests tightly */

/* A reusable cached block of a larger class, at most cfg.oversize_pct of the request: memory
 * the pool holds anyway, where a real allocation would add to it (see struct gp_pool_config).
 * It stays in its own class: its free returns it there. */
static struct gp_block *take_larger(struct gp_pool *p, struct gp_dev *d, unsigned cls,
				    unsigned s0, size_t bytes)
{
	uint64_t limit = (uint64_t)bytes * p->cfg.oversize_pct / 100;
	unsigned n = gp_pool_class_count();
	struct gp_block *b = NULL;
	int waiting = 0;

	if (p->cfg.oversize_pct <= 100 || gp_pool_class_bytes(cls) <= OVERSIZE_MIN)
		return NULL;
	for (unsigned c = cls + 1; b == NULL && c < n && gp_pool_class_bytes(c) <= limit; c++)
		b = take_any(p, d, c, s0, bytes, &waiting);
	if (b != NULL)
		atomic_fetch_add_explicit(&d->oversize_hits, 1, memory_order_relaxed);
	return b;
}

static uint64_t fine_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Cached blocks of a class, over its stripes (racy: a hint). When the head of each list is
 * still fenced, so are the blocks behind it (freed later). */
static uint64_t class_cached_blocks(struct gp_dev *d, unsigned cls)
{
	uint64_t n = 0;

	for (unsigned s = 0; s < GP_STRIPES; s++)
		n += ld(&d->list[cls * GP_STRIPES + s].cached_blocks);
	return n;
}

/* Whether a miss whose class holds only fenced blocks should wait for them rather than grow
 * the pool: once the class holds WAIT_MIN_FENCED of them and WAIT_MIN_FENCED_BYTES. Below, a
 * new block costs little memory, and a loop that frees and allocates one size rotates through
 * as many blocks as hide the fences' latency (one per iteration the GPU lags behind), at the
 * speed of a hit instead of a wait per allocation. */
static int worth_waiting(struct gp_dev *d, unsigned cls)
{
	uint64_t n = class_cached_blocks(d, cls);

	return n >= WAIT_MIN_FENCED && n * gp_pool_class_bytes(cls) >= WAIT_MIN_FENCED_BYTES;
}

/* See cfg.fence_batch. At most fence_batch extra blocks of at most 1 MiB per class. */
static int batching(struct gp_pool *p, struct gp_dev *d, unsigned cls)
{
	return p->cfg.fence_batch > 1 && gp_pool_class_bytes(cls) <= FENCE_BATCH_MAX_BYTES &&
	       class_cached_blocks(d, cls) < p->cfg.fence_batch;
}

/* Every cached block of the class is still fenced: drive the fences (record one for recent
 * frees, poll) until one of those blocks may be reused, the class has none left, or
 * cfg.reuse_wait_ns has passed (see struct gp_pool_config). No lock is held between polls. */
static struct gp_block *wait_for_reuse(struct gp_pool *p, struct gp_dev *d, unsigned cls,
				       unsigned s0, size_t bytes)
{
	uint64_t deadline = 0, t;
	struct gp_block *b;
	int waiting;

	for (;;) {
		waiting = 0;
		if (gp_pool_advance(p, 0) == GP_EAGAIN && deadline != 0)
			sched_yield(); /* another thread drives the fences: let it run */
		b = take_any(p, d, cls, s0, bytes, &waiting);
		if (b != NULL || !waiting || p->cfg.reuse_wait_ns == 0)
			return b;
		if (deadline == 0 && !worth_waiting(d, cls))
			return NULL;
		t = fine_ns();
		if (deadline == 0) {
			deadline = t + p->cfg.reuse_wait_ns;
			atomic_fetch_add_explicit(&d->fence_waits, 1, memory_order_relaxed);
		} else if (t >= deadline) {
			atomic_fetch_add_explicit(&d->fence_wait_timeouts, 1, memory_order_relaxed);
			return NULL;
		}
	}
}

int gp_pool_alloc(struct gp_pool *p, int device, size_t bytes, void **out, int *retried)
{
	unsigned cls = gp_pool_class_of(bytes), s0 = my_stripe();
	struct gp_dev *d;
	struct gp_block *b;
	int waiting = 0, rc;

	if (retried)
		*retried = 0;
	if (out == NULL || cls >= gp_pool_class_count())
		return GP_EINVAL;
	d = dev_get(p, device, 1);
	if (d == NULL)
		return device < 0 || device >= GP_MAX_DEVICES ? GP_EINVAL : GP_ENOMEM;

	b = take_any(p, d, cls, s0, bytes, &waiting);
	if (b == NULL)
		b = take_larger(p, d, cls, s0, bytes);
	if (b == NULL && waiting && !batching(p, d, cls))
		b = wait_for_reuse(p, d, cls, s0, bytes);
	if (b != NULL) {
		account_live(d, b->list % GP_STRIPES, (int64_t)b->bytes);
		*out = b->ptr;
		return GP_OK;
	}

	rc = real_alloc(p, d, device, cls, s0, bytes, out);
	if (rc == GP_ENOMEM && (p->be.may_release == NULL || p->be.may_release(p->be.ctx))) {
		/* Give this device's cache back (backend free waits for pending work) and retry. */
		gp_pool_release(p, device, 0, GP_CAUSE_OOM, NULL);
		if (retried)
			*retried = 1;
		rc = real_alloc(p, d, device, cls, s0, bytes, out);
	}
	if (rc != GP_OK)
		atomic_fetch_add(&d->failed_allocs, 1);
	return rc;
}

static uint64_t dev_cached(struct gp_dev *d)
{
	uint64_t reserved = ld(&d->reserved_bytes), live = live_total(d);
	return reserved > live ? reserved - live : 0;
}

static void check_cap(struct gp_pool *p, struct gp_dev *d, int device)
{
	uint64_t cap = ld(&d->cap);

	if (cap == 0 || p->cfg.over_cap == NULL || dev_cached(d) <= cap)
		return;
	if (atomic_load_explicit(&d->cap_notified, memory_order_relaxed) ||
	    atomic_exchange(&d->cap_notified, 1))
		return;
	p->cfg.over_cap(p->cfg.arg, device);
}

int gp_pool_free(struct gp_pool *p, void *ptr)
{
	struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)ptr);
	struct gp_block *b;
	struct gp_list *c;
	struct gp_dev *d;
	int expected = BLOCK_LIVE, device;
	unsigned list;
	uint64_t t;
	size_t bytes;

	if (ptr == NULL)
		return GP_ENOTOWNED;
	gp_lock(&s->lock);
	b = gp_ptrmap_find(s, (uintptr_t)ptr);
	if (b == NULL) {
		gp_unlock(&s->lock);
		return GP_ENOTOWNED;
	}
	if (!atomic_compare_exchange_strong(&b->state, &expected, BLOCK_CACHED)) {
		d = dev_get(p, b->device, 0);
		gp_unlock(&s->lock);
		if (d != NULL)
			atomic_fetch_add(&d->bad_frees, 1);
		return GP_EINVAL;
	}
	gp_unlock(&s->lock);

	/* The block is ours alone now: cached but on no list, invisible to alloc and release.
	 * Once it is on the list it may be reused or released at once: read it before that. */
	device = b->device;
	bytes = b->bytes;
	list = b->list;
	d = dev_get(p, device, 0);
	c = &d->list[list];
	t = now(p);
	gp_lock(&c->lock);
	b->epoch = atomic_load(&p->epoch);
	b->freed_ns = t;
	b->next = NULL;
	if (c->tail)
		c->tail->next = b;
	else
		c->head = b;
	c->tail = b;
	bump(&c->live_blocks, -1);
	bump(&c->live_bytes, -(int64_t)b->bytes);
	bump(&c->requested_bytes, -(int64_t)b->requested);
	bump(&c->cached_blocks, 1);
	bump(&c->cached_bytes, (int64_t)b->bytes);
	bump(&c->frees, 1);
	gp_unlock(&c->lock);
	if (!atomic_load_explicit(&p->dirty, memory_order_relaxed))
		atomic_store(&p->dirty, 1);
	account_live(d, list % GP_STRIPES, -(int64_t)bytes);
	check_cap(p, d, device);
	return GP_OK;
}

size_t gp_pool_block_size(struct gp_pool *p, const void *ptr, int *device)
{
	struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)ptr);
	struct gp_block *b;
	size_t n = 0;

	gp_lock(&s->lock);
	b = gp_ptrmap_find(s, (uintptr_t)ptr);
	if (b != NULL && atomic_load(&b->state) == BLOCK_LIVE) {
		n = b->bytes;
		if (device)
			*device = b->device;
	}
	gp_unlock(&s->lock);
	return n;
}

/* ---- release --------------------------------------------------------------------------- */

static uint64_t cached_bytes(struct gp_dev *d)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < nlists(); i++)
		sum += ld(&d->list[i].cached_bytes);
	return sum;
}

/* Unlink the first `n` blocks of a class (all when n is 0); caller frees them. */
static struct gp_block *detach(struct gp_list *c, size_t n)
{
	struct gp_block *first, *last;
	size_t k = 1;

	gp_lock(&c->lock);
	first = c->head;
	if (first == NULL) {
		gp_unlock(&c->lock);
		return NULL;
	}
	last = first;
	bump(&c->cached_blocks, -1);
	bump(&c->cached_bytes, -(int64_t)first->bytes);
	while (last->next != NULL && (n == 0 || k < n)) {
		last = last->next;
		bump(&c->cached_blocks, -1);
		bump(&c->cached_bytes, -(int64_t)last->bytes);
		k++;
	}
	c->head = last->next;
	if (c->head == NULL)
		c->tail = NULL;
	last->next = NULL;
	gp_unlock(&c->lock);
	return first;
}

/* Unlink up to `n` head blocks freed before `before`. */
static struct gp_block *detach_older(struct gp_list *c, size_t n, uint64_t before)
{
	struct gp_block *first = NULL, **tail = &first;

	gp_lock(&c->lock);
	while (n-- > 0 && c->head != NULL && c->head->freed_ns < before) {
		struct gp_block *b = c->head;
		c->head = b->next;
		b->next = NULL;
		*tail = b;
		tail = &b->next;
		bump(&c->cached_blocks, -1);
		bump(&c->cached_bytes, -(int64_t)b->bytes);
	}
	if (c->head == NULL)
		c->tail = NULL;
	gp_unlock(&c->lock);
	return first;
}

/* Forget the blocks of a detached list and give them to the backend. */
static void free_blocks(struct gp_pool *p, struct gp_dev *d, struct gp_block *b,
			struct gp_release_result *r)
{
	while (b != NULL) {
		struct gp_block *next = b->next;
		struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)b->ptr);

		gp_lock(&s->lock);
		gp_ptrmap_remove(s, (uintptr_t)b->ptr);
		gp_unlock(&s->lock);
		if (p->be.free(p->be.ctx, b->device, b->ptr, b->bytes) != GP_OK)
			r->errors++;
		atomic_fetch_add(&d->real_frees, 1);
		atomic_fetch_sub(&d->reserved_bytes, b->bytes);
		r->bytes += b->bytes;
		r->blocks++;
		free(b);
		b = next;
	}
}

/* Index of the list whose head was freed longest ago, or -1 when nothing is cached. */
static int oldest_list(struct gp_dev *d)
{
	uint64_t best_t = UINT64_MAX, best_e = UINT64_MAX;
	int best = -1;

	for (unsigned i = 0; i < nlists(); i++) {
		struct gp_list *c = &d->list[i];
		if (ld(&c->cached_blocks) == 0)
			continue;
		gp_lock(&c->lock);
		if (c->head != NULL &&
		    (c->head->freed_ns < best_t ||
		     (c->head->freed_ns == best_t && c->head->epoch < best_e))) {
			best_t = c->head->freed_ns;
			best_e = c->head->epoch;
			best = (int)i;
		}
		gp_unlock(&c->lock);
	}
	return best;
}

static void release_dev(struct gp_pool *p, struct gp_dev *d, uint64_t target,
			struct gp_release_result *r)
{
	uint64_t cached, excess, start = r->bytes;

	if (target == 0) {
		for (unsigned i = 0; i < nlists(); i++)
			if (ld(&d->list[i].cached_blocks) != 0)
				free_blocks(p, d, detach(&d->list[i], 0), r);
		return;
	}
	/* What is over the target now, and no more: the frees that land meanwhile would keep the
	 * release going for as long as the program churns (the next over-cap free asks again). */
	cached = cached_bytes(d);
	excess = cached > target ? cached - target : 0;
	while (r->bytes - start < excess && cached_bytes(d) > target) {
		int i = oldest_list(d);
		if (i < 0)
			break;
		free_blocks(p, d, detach(&d->list[i], 1), r);
	}
}

/* Each list is in free order: the blocks freed before `before` are at its head. */
static void release_older(struct gp_pool *p, struct gp_dev *d, uint64_t before,
			  struct gp_release_result *r)
{
	for (unsigned i = 0; i < nlists(); i++)
		if (ld(&d->list[i].cached_blocks) != 0)
			free_blocks(p, d, detach_older(&d->list[i], SIZE_MAX, before), r);
}

/* What a release keeps: by size, at most `target` cached bytes per device (oldest go first);
 * by age, the blocks freed at or after `before_ns`. */
struct keep {
	int by_age;
	uint64_t target, before_ns;
};

static int release_devices(struct gp_pool *p, int device, const struct keep *k,
			   enum gp_release_cause cause, struct gp_release_result *res)
{
	struct gp_release_result r = { 0, 0, 0, 0 };
	uint64_t t0 = now(p);

	if (cause >= GP_CAUSE_COUNT || device >= GP_MAX_DEVICES)
		return GP_EINVAL;
	for (int i = 0; i < GP_MAX_DEVICES; i++) {
		struct gp_dev *d = device >= 0 && i != device ? NULL : dev_get(p, i, 0);
		if (d == NULL)
			continue;
		if (k->by_age) {
			release_older(p, d, k->before_ns, &r);
		} else {
			atomic_store(&d->cap_notified, 0);
			release_dev(p, d, k->target, &r);
		}
	}
	r.duration_ns = now(p) - t0;
	if (!k->by_age || r.blocks > 0) {
		atomic_fetch_add(&p->rel_count[cause], 1);
		atomic_fetch_add(&p->rel_bytes[cause], r.bytes);
	}
	if (res)
		*res = r;
	return r.errors ? GP_EBACKEND : GP_OK;
}

int gp_pool_release(struct gp_pool *p, int device, uint64_t target, enum gp_release_cause cause,
		    struct gp_release_result *res)
{
	struct keep k = { 0, target, 0 };
	return release_devices(p, device, &k, cause, res);
}

int gp_pool_release_idle(struct gp_pool *p, int device, uint64_t freed_before_ns,
			 enum gp_release_cause cause, struct gp_release_result *res)
{
	struct keep k = { 1, 0, freed_before_ns };
	return release_devices(p, device, &k, cause, res);
}

void gp_pool_set_cap(struct gp_pool *p, int device, uint64_t bytes)
{
	struct gp_dev *d = dev_get(p, device, 1);
	if (d != NULL)
		atomic_store(&d->cap, bytes);
}

uint64_t gp_pool_cap(struct gp_pool *p, int device)
{
	struct gp_dev *d = dev_get(p, device, 0);
	return d ? ld(&d->cap) : 0;
}

uint64_t gp_pool_cached_bytes(struct gp_pool *p, int device)
{
	struct gp_dev *d = dev_get(p, device, 0);
	return d ? dev_cached(d) : 0;
}

/* ---- device reset ---------------------------------------------------------------------- */

static int keep_other_device(void *val, void *arg)
{
	struct gp_block *b = val;
	if (b->device != *(int *)arg)
		return 1;
	if (atomic_load(&b->state) == BLOCK_LIVE)
		free(b);
	return 0;
}

void gp_pool_forget_device(struct gp_pool *p, int device)
{
	struct gp_dev *d = dev_get(p, device, 0);

	if (d == NULL)
		return;
	/* Cached blocks first (their metadata is freed from the lists), then the live ones. */
	for (unsigned i = 0; i < nlists(); i++) {
		struct gp_list *c = &d->list[i];
		struct gp_block *list = detach(c, 0);
		for (struct gp_block *b = list; b != NULL; b = b->next) {
			struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)b->ptr);
			gp_lock(&s->lock);
			gp_ptrmap_remove(s, (uintptr_t)b->ptr);
			gp_unlock(&s->lock);
		}
		free_list(list);
	}
	for (int i = 0; i < GP_PTRMAP_SHARDS; i++) {
		struct gp_ptrmap_shard *s = &p->map.shard[i];
		gp_lock(&s->lock);
		gp_ptrmap_filter(s, keep_other_device, &device);
		gp_unlock(&s->lock);
	}
	for (unsigned i = 0; i < nlists(); i++) {
		struct gp_list *c = &d->list[i];
		gp_lock(&c->lock);
		atomic_store(&c->live_blocks, 0);
		atomic_store(&c->live_bytes, 0);
		atomic_store(&c->requested_bytes, 0);
		gp_unlock(&c->lock);
	}
	for (unsigned i = 0; i < GP_STRIPES; i++)
		atomic_store(&d->acct[i].live, 0);
	atomic_store(&d->reserved_bytes, 0);
}

/* ---- stats ----------------------------------------------------------------------------- */

uint64_t gp_pool_devices(struct gp_pool *p)
{
	uint64_t mask = 0;
	for (int i = 0; i < GP_MAX_DEVICES; i++)
		if (atomic_load(&p->dev[i]) != NULL)
			mask |= 1ULL << i;
	return mask;
}

int gp_pool_dev_stats(struct gp_pool *p, int device, struct gp_pool_dev_stats *o)
{
	struct gp_dev *d = dev_get(p, device, 0);
	int ordered = atomic_load(&p->ordered);

	memset(o, 0, sizeof(*o));
	if (d == NULL)
		return device >= 0 && device < GP_MAX_DEVICES ? GP_OK : GP_EINVAL;
	for (unsigned i = 0; i < nlists(); i++) {
		struct gp_list *c = &d->list[i];
		o->live_bytes += ld(&c->live_bytes);
		o->live_blocks += ld(&c->live_blocks);
		o->requested_bytes += ld(&c->requested_bytes);
		o->allocs += ld(&c->allocs);
		o->hits += ld(&c->hits);
		o->frees += ld(&c->frees);
		if (ld(&c->cached_blocks) == 0)
			continue;
		gp_lock(&c->lock);
		uint64_t done = atomic_load(&p->done_epoch);
		for (struct gp_block *b = c->head; b != NULL; b = b->next) {
			if (ordered || b->epoch < done) {
				o->idle_bytes += b->bytes;
				o->idle_blocks++;
			} else {
				o->pending_bytes += b->bytes;
				o->pending_blocks++;
			}
		}
		gp_unlock(&c->lock);
	}
	for (unsigned i = 0; i < GP_STRIPES; i++)
		o->peak_live_bytes += ld(&d->acct[i].peak);
	o->peak_reserved_bytes = ld(&d->peak_reserved);
	o->real_allocs = ld(&d->real_allocs);
	o->real_frees = ld(&d->real_frees);
	o->failed_allocs = ld(&d->failed_allocs);
	o->bad_frees = ld(&d->bad_frees);
	o->fence_waits = ld(&d->fence_waits);
	o->fence_wait_timeouts = ld(&d->fence_wait_timeouts);
	o->oversize_hits = ld(&d->oversize_hits);
	return GP_OK;
}

void gp_pool_release_counts(struct gp_pool *p, uint64_t counts[GP_CAUSE_COUNT],
			    uint64_t bytes[GP_CAUSE_COUNT])
{
	for (int i = 0; i < GP_CAUSE_COUNT; i++) {
		if (counts)
			counts[i] = ld(&p->rel_count[i]);
		if (bytes)
			bytes[i] = ld(&p->rel_bytes[i]);
	}
}
