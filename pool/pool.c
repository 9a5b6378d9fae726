/* pool.c — the pool's hot path: create, allocate (the hit; a miss asks miss.c, then allocates),
 * free, hold and unhold (frees during a graph capture), stale records (an address the driver
 * handed out again), statistics. A hit takes one class lock and makes no backend call, a free
 * finds its block in the pointer map. Never a backend call with a pool lock held; never CUDA,
 * getenv or logging. Fences: fences.c; releases: release.c; shared internals: pool_impl.h. */
#define _POSIX_C_SOURCE 200809L
#include "pool_impl.h"
#include "hooks.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The calling thread's stripe, handed out round-robin at its first allocation, so that up to
 * GP_STRIPES threads never share one (hashing thread ids collides for a few threads). The first
 * thread of a stripe owns it: only it writes the stripe's own in-use count (account_live). These
 * two and tcache.c's are the pool's only statics: they number threads and pools and find a
 * thread's cache, they hold no pool state. */
static _Atomic uint64_t next_stripe;
/* The stripe + 1 (0: none yet), with SHARED set for a thread that came after the stripe's owner.
 * initial-exec: an offset from the thread pointer, not a __tls_get_addr call per access (the
 * library is preloaded, or dlopened with a few bytes of TLS, which the loader's reserve holds). */
static _Thread_local unsigned stripe_tag __attribute__((tls_model("initial-exec")));
#define SHARED (1u << 31)

static unsigned my_stripe(void)
{
	unsigned t = stripe_tag;
	uint64_t n;

	if (__builtin_expect(t == 0, 0)) {
		n = atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed);
		t = ((unsigned)(n % GP_STRIPES) + 1) | (n >= GP_STRIPES ? SHARED : 0);
		stripe_tag = t;
	}
	return (t & ~SHARED) - 1;
}

static int owns_stripe(unsigned stripe)
{
	return stripe_tag == stripe + 1;
}

/* A class's fence batch: cfg.fence_batch, or for a small class more blocks up to
 * cfg.fence_batch_bytes (at most FENCE_BATCH_MAX_FACTOR times as many). */
static unsigned batch_for(const struct gp_pool_config *cfg, unsigned cls)
{
	uint64_t n = cfg->fence_batch, fit;

	if (n <= 1 || cfg->fence_batch_bytes == 0 || !small_class(cls))
		return cfg->fence_batch;
	fit = cfg->fence_batch_bytes / gp_pool_class_bytes(cls);
	if (fit > n * FENCE_BATCH_MAX_FACTOR)
		fit = n * FENCE_BATCH_MAX_FACTOR;
	return (unsigned)(fit > n ? fit : n);
}

static _Atomic uint64_t pool_serials;

uint64_t gp_pool_coarse_ns(void *ctx)
{
	(void)ctx;
	return gp_clock_ns(CLOCK_MONOTONIC_COARSE);
}

/* A thread's free hints: the blocks its last allocations handed out, by address, so that the
 * free of one finds its block without the map. A hint is only a guess, checked as the map's
 * seqlock checks a lookup: the block's state word, its address, the word again. A record's address
 * is written only while the record is unused (before the word that makes it live: enter_block),
 * so the same live word on both sides means the address read is that incarnation's: the block
 * was ptr's, in use, when the word was read, as a lookup's answer says, and the free goes on from
 * that word exactly as from a lookup's (a failed swap is a double free). Anything else asks the
 * map. Records are never freed while their pool lives, and a hint of another pool (by serial) is
 * not looked at. */
#define HINTS 8
static _Thread_local struct {
	uint64_t serial;
	struct gp_block *b[HINTS];
} hints __attribute__((tls_model("initial-exec")));

static inline unsigned hint_slot(const void *ptr)
{
	uintptr_t a = (uintptr_t)ptr;

	return (unsigned)((a >> 9) ^ (a >> 21)) & (HINTS - 1);
}

static inline void hint_set(struct gp_pool *p, struct gp_block *b, void *ptr)
{
	if (__builtin_expect(hints.serial != p->serial, 0)) {
		memset(hints.b, 0, sizeof(hints.b));
		hints.serial = p->serial;
	}
	hints.b[hint_slot(ptr)] = b;
}

/* The hinted block of ptr and its live state word, or NULL (ask the map). */
static inline struct gp_block *hint_find(struct gp_pool *p, const void *ptr, uint32_t *word)
{
	struct gp_block *b = hints.b[hint_slot(ptr)];

	if (b == NULL || hints.serial != p->serial)
		return NULL;
	*word = atomic_load_explicit(&b->state, memory_order_acquire);
	if (state_of(*word) != BLOCK_LIVE || __atomic_load_n(&b->ptr, __ATOMIC_ACQUIRE) != ptr ||
	    atomic_load_explicit(&b->state, memory_order_relaxed) != *word)
		return NULL;
	return b;
}

int gp_pool_create(const struct gp_backend *backend, const struct gp_pool_config *cfg,
		   struct gp_pool **out)
{
	struct gp_pool *p;

	if (backend == NULL || backend->alloc == NULL || backend->free == NULL || out == NULL)
		return GP_EINVAL;
	if (gp_pool_class_count() > MAX_CLASSES)
		return GP_EINVAL;
	p = aligned_alloc(GP_LINE, (sizeof(*p) + GP_LINE - 1) / GP_LINE * GP_LINE);
	if (p == NULL)
		return GP_ENOMEM;
	memset(p, 0, sizeof(*p));
	p->be = *backend;
	if (cfg)
		p->cfg = *cfg;
	atomic_store(&p->ordered, p->cfg.ordered);
	p->quiet_backoff = 1;
	p->drive_wait_ns = p->cfg.drive_wait_ns ? p->cfg.drive_wait_ns : DRIVE_WAIT_DEFAULT_NS;
	for (unsigned c = 0; c < gp_pool_class_count(); c++)
		p->batch[c] = batch_for(&p->cfg, c);
	if (gp_ptrmap_init(&p->map) != 0) {
		free(p);
		return GP_ENOMEM;
	}
	pthread_mutex_init(&p->dev_lock, NULL);
	pthread_mutex_init(&p->fence_lock, NULL);
	gp_tc_create(p);
	p->serial = atomic_fetch_add(&pool_serials, 1) + 1;
	*out = p;
	return GP_OK;
}

void gp_pool_destroy(struct gp_pool *p)
{
	if (p == NULL)
		return;
	for (int i = 0; i < GP_MAX_DEVICES; i++) {
		struct gp_dev *d = atomic_load(&p->dev[i]);
		if (d == NULL)
			continue;
		free(d);
	}
	gp_tc_destroy(p);
	free_slabs(p);
	/* Fences still in flight are abandoned: their handles belong to the backend. */
	gp_ptrmap_fini(&p->map);
	pthread_mutex_destroy(&p->dev_lock);
	pthread_mutex_destroy(&p->fence_lock);
	free(p);
}

/* ---- alloc / free ---------------------------------------------------------------------- */

/* In-use and requested bytes are counted per stripe (each on lines of its own) and so are their
 * peaks; the device's peak is the sum of the stripes' peaks, at most the reserved peak: exact
 * while one thread allocates, an upper bound when several do. The stripe's owner, which does
 * nearly all of its counting (its allocations, and the frees of what it allocated), adds without
 * a locked instruction; any other thread adds atomically to `remote` and `req_remote`. A hit does
 * little else, so a locked add on every one would be a sizeable part of its cost. `req`: the
 * bytes asked for, of an allocation (+) or of the block's allocation that a free ends (-). */
static inline __attribute__((always_inline)) void add_counted(_Atomic uint64_t *mine,
							_Atomic uint64_t *others, int own,
							int64_t delta, _Atomic uint64_t *peak)
{
	uint64_t v;

	if (own) {
		v = ld(mine) + (uint64_t)delta;
		atomic_store_explicit(mine, v, memory_order_relaxed);
		v += ld(others);
	} else {
		gp_rmw_note();
		v = atomic_fetch_add_explicit(others, (uint64_t)delta, memory_order_relaxed) +
		    (uint64_t)delta + ld(mine);
	}
	if (delta > 0)
		raise_peak(peak, v);
}

/* The requested count, out of the hit's inline code (only with cfg.remap_trim). */
static __attribute__((noinline)) void account_req(struct gp_stripe_acct *a, int own, int64_t req)
{
	add_counted(&a->req, &a->req_remote, own, req, &a->req_peak);
}

static inline __attribute__((always_inline)) void account_live(struct gp_dev *d, unsigned stripe,
							 int64_t bytes, int64_t req)
{
	struct gp_stripe_acct *a = &d->acct[stripe];
	int own = owns_stripe(stripe);

	add_counted(&a->own, &a->remote, own, bytes, &a->peak);
	if (__builtin_expect(a->count_req, 0))
		account_req(a, own, req);
}

/* ---- the thread's own cache (struct gp_tcache; tcache.c has the rest) ------------------ */

/* The owner's section on its cache: entered (1) unless a thief has the cache. A plain store and a
 * plain load: the thief's membarrier is what keeps the two sides apart (tcache.c stop). */
static inline __attribute__((always_inline)) int tc_enter(struct gp_tcache *tc)
{
	atomic_store_explicit(&tc->busy, 1, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
	if (__builtin_expect(!atomic_load_explicit(&tc->steal, memory_order_acquire), 1))
		return 1;
	atomic_store_explicit(&tc->busy, 0, memory_order_release);
	return 0;
}

static inline __attribute__((always_inline)) void tc_leave(struct gp_tcache *tc)
{
	atomic_store_explicit(&tc->busy, 0, memory_order_release);
}

static inline __attribute__((always_inline)) void tc_count(_Atomic uint8_t *n, int delta)
{
	atomic_store_explicit(n, (uint8_t)(atomic_load_explicit(n, memory_order_relaxed) + delta),
			      memory_order_relaxed);
}

/* A hit in the calling thread's own cache: the block of class cls it freed last on `device`, while
 * reuse needs no fence. No lock, no locked instruction. A block a stale claim marked meanwhile
 * is dropped (NULL: the caller goes on to the lists). When reuse has come to need fences, the
 * cache's blocks go to their lists (fenced there) and NULL. */
static inline __attribute__((always_inline)) struct gp_block *
tc_take(struct gp_pool *p, int device, unsigned cls, size_t bytes)
{
	struct gp_tcache *tc = tc_of(p);
	struct gp_block *b;
	uint32_t word;

	if (tc == NULL || tc->device != device || !tc_enter(tc))
		return NULL;
	b = tc->head[cls];
	if (__builtin_expect(b == NULL || !atomic_load_explicit(&p->ordered, memory_order_relaxed),
			     0)) {
		tc_leave(tc);
		if (!atomic_load_explicit(&p->ordered, memory_order_relaxed))
			gp_tc_flush(p, tc); /* every class: none of them is served from here now */
		return NULL;
	}
	tc->head[cls] = b->next;
	b->next = NULL;
	tc_count(&tc->n[cls], -1);
	bump(&tc->bytes, -(int64_t)b->bytes);
	word = atomic_load_explicit(&b->state, memory_order_relaxed);
	if (__builtin_expect(state_of(word) != BLOCK_CACHED, 0)) {
		tc_leave(tc);
		gp_pool_drop_stale(p, b, STALE_UNLISTED);
		return NULL;
	}
#ifdef GP_POOL_TEST_HOOKS
	if (gp_pool_test_in_section != NULL)
		gp_pool_test_in_section(p);
#endif
	b->requested = bytes;
	atomic_store_explicit(&b->owner, tc, memory_order_relaxed);
	/* Its fields before its state: a free that finds it in use reads them. */
	atomic_store_explicit(&b->state, next_live(word), memory_order_release);
	bump(&tc->allocs, 1);
	bump(&tc->live_bytes, (int64_t)b->bytes);
	bump(&tc->requested_bytes, (int64_t)bytes);
	tc_leave(tc);
	return b;
}

static void check_cap(struct gp_pool *p, struct gp_dev *d, int device);

/* The blocks of class cls that a free of `bytes` more must push out of tc (inside the owner's
 * section): the oldest of the class, as few as leave it at most TC_CLASS_MAX blocks and the
 * cache within `limit` bytes, unlinked into a chain (by next) with the cached figures that
 * went with them; NULL with *fits 0 when even all of them would not make room (other classes
 * fill the cache). The cache keeps the newest frees: a block of the class in the lists was freed
 * before any in the cache, so that when the cache goes back to the lists (oldest first, at the
 * tails) each list stays in free order, which releases by age rely on even where free times
 * tie (a coarse clock). Out of line: a full class only. */
static __attribute__((noinline)) struct gp_block *tc_evict(struct gp_tcache *tc, unsigned cls,
							   size_t bytes, uint64_t limit, int *fits)
{
	struct gp_block *x[TC_CLASS_MAX + 1], *chain;
	uint64_t have = ld(&tc->bytes) + bytes, gone = 0;
	unsigned n = 0, k = 0;

	for (struct gp_block *b = tc->head[cls]; b != NULL && n <= TC_CLASS_MAX; b = b->next)
		x[n++] = b;
	/* x[0] the newest; the oldest go first. */
	while (n - k >= TC_CLASS_MAX || have - gone > limit) {
		if (k == n) {
			*fits = 0;
			return NULL;
		}
		gone += x[n - 1 - k]->bytes;
		k++;
	}
	*fits = 1;
	if (k == 0)
		return NULL;
	chain = x[n - k];
	if (n - k == 0)
		tc->head[cls] = NULL;
	else
		x[n - k - 1]->next = NULL;
	tc_count(&tc->n[cls], -(int)k);
	bump(&tc->bytes, -(int64_t)gone);
	return chain;
}

/* A chain newest first, reversed: oldest first, the order gp_tc_relist appends in. */
static struct gp_block *oldest_first(struct gp_block *b)
{
	struct gp_block *r = NULL;

	while (b != NULL) {
		struct gp_block *next = b->next;
		b->next = r;
		r = b;
		b = next;
	}
	return r;
}

/* Inside the owner's section on tc: block b (cached, ours alone, on no list, on the thread's
 * stripe) onto its class, newest first; a full class pushes its oldest blocks out into *out
 * (tc_evict). 0 when even all of them would not make room (other classes fill the cache). */
static inline __attribute__((always_inline)) int tc_push(struct gp_pool *p, struct gp_tcache *tc,
							 struct gp_block *b, struct gp_block **out)
{
	unsigned cls = b->cls;
	size_t bytes = b->bytes;
	int fits = 1;

	if (__builtin_expect(atomic_load_explicit(&tc->n[cls], memory_order_relaxed) >=
					     TC_CLASS_MAX ||
				     ld(&tc->bytes) + bytes > p->cfg.tcache_bytes,
			     0)) {
		*out = tc_evict(tc, cls, bytes, p->cfg.tcache_bytes, &fits);
		if (!fits)
			return 0;
		if (*out != NULL) /* seen by a thief once the section is over (tc_leave's release) */
			atomic_store_explicit(&tc->relisting, 1, memory_order_relaxed);
	}
#ifdef GP_POOL_TEST_HOOKS
	if (gp_pool_test_in_section != NULL)
		gp_pool_test_in_section(p);
#endif
	b->epoch = atomic_load_explicit(&p->epoch, memory_order_relaxed);
	b->next = tc->head[cls];
	tc->head[cls] = b;
	tc_count(&tc->n[cls], 1);
	bump(&tc->bytes, (int64_t)bytes);
	bump(&tc->frees, 1);
	bump(&tc->live_bytes, -(int64_t)bytes);
	bump(&tc->requested_bytes, -(int64_t)b->requested);
	return 1;
}

/* After the section of a tc_push of a block of `bytes` on `device` (asked for: `req`), whose list
 * was `home`: what it pushed out into the lists, and the bytes out of home's in-use and requested
 * counts. The block itself is not looked at: once the section is over, a thief may have taken
 * it, and its record may serve another block. */
static inline __attribute__((always_inline)) void tc_pushed(struct gp_pool *p,
							    struct gp_tcache *tc, int device,
							    size_t bytes, size_t req, unsigned home,
							    struct gp_block *out)
{
	struct gp_dev *d;

	if (__builtin_expect(out != NULL, 0)) {
#ifdef GP_POOL_TEST_HOOKS
		if (gp_pool_test_after_evict != NULL)
			gp_pool_test_after_evict(p);
#endif
		gp_tc_relist(p, oldest_first(out));
		atomic_store_explicit(&tc->relisting, 0, memory_order_release);
	}
	d = dev_get(p, device, 0);
	account_live(d, home % GP_STRIPES, -(int64_t)bytes, -(int64_t)req);
	check_cap(p, d, device);
}

/* A block this thread's free has just made cached (ours alone, on no list) into the thread's own
 * cache when reuse needs no fence, the cache serves its device, the block is not movable and fits
 * the cache's bytes: 1, else 0 (the caller lists it). It moves to the thread's stripe, whose
 * in-use count its next hit adds to without a locked instruction. No clock is read: a cached
 * block's free time is only ever looked at in a list, and gp_tc_relist stamps it on the way there
 * with its own reading, which is no earlier than the free (an age counted from it is never too
 * old: a release by age may come later than from the free itself, never earlier). */
static inline __attribute__((always_inline)) int tc_put(struct gp_pool *p, struct gp_block *b)
{
	struct gp_tcache *tc = tc_of(p);
	unsigned home = list_of(b);
	size_t bytes = b->bytes, req = b->requested;
	int device = b->device;
	struct gp_block *out = NULL;

	if (!atomic_load_explicit(&p->ordered, memory_order_relaxed) || b->movable || p->id == 0)
		return 0;
	if (__builtin_expect(tc == NULL, 0) && (tc = gp_tc_attach(p, device)) == NULL)
		return 0;
	if (tc->device != device || bytes > p->cfg.tcache_bytes)
		return 0;
	set_list(b, b->cls * GP_STRIPES + my_stripe());
	if (!tc_enter(tc)) {
		set_list(b, home);
		return 0;
	}
	if (!tc_push(p, tc, b, &out)) {
		tc_leave(tc);
		set_list(b, home);
		return 0;
	}
	tc_leave(tc);
	tc_pushed(p, tc, device, bytes, req, home, out);
	return 1;
}

/* The free of live block b (state word `word`) by the owner of tc, the cache it came from, while
 * reuse needs no fence: in one section on tc, its state made cached with a plain store and the
 * block put back in tc (1). Else nothing changed (0: the caller takes the compare-and-swap and
 * the usual way): tc shared, a thief on it, or the state not `word` any more. No other thread
 * changes the state of a live block a cache owns without first making the cache shared, with its
 * owner out of its sections (gp_tc_revoke): seen not shared inside a section (looked at again
 * there: a revoke may have ended just before it began), the block's state is the section's alone
 * until it ends. A block a cache owns went into it once, so its device is the cache's, it is not
 * movable and it fits. */
static inline __attribute__((always_inline)) int own_free(struct gp_pool *p, struct gp_tcache *tc,
							  struct gp_block *b, uint32_t word)
{
	unsigned home = list_of(b);
	size_t bytes = b->bytes, req = b->requested;
	struct gp_block *out = NULL;

	/* Shared is looked at inside the section only (a revoke may end just before it begins). */
	if (!atomic_load_explicit(&p->ordered, memory_order_relaxed) || !tc_enter(tc))
		return 0;
	if (__builtin_expect(atomic_load_explicit(&tc->shared, memory_order_relaxed) ||
				     atomic_load_explicit(&b->state, memory_order_relaxed) != word,
			     0)) {
		tc_leave(tc);
		return 0;
	}
#ifdef GP_POOL_TEST_HOOKS
	if (gp_pool_test_in_own_free != NULL)
		gp_pool_test_in_own_free(b->ptr);
#endif
	set_list(b, b->cls * GP_STRIPES + my_stripe());
	if (__builtin_expect(!tc_push(p, tc, b, &out), 0)) {
		set_list(b, home);
		tc_leave(tc);
		return 0;
	}
	atomic_store_explicit(&b->state, with_state(word, BLOCK_CACHED), memory_order_relaxed);
	tc_leave(tc);
	tc_pushed(p, tc, tc->device, bytes, req, home, out);
	return 1;
}

/* Before the calling thread changes the state of live block b (anything but its own cache's free):
 * the cache that owns b, if another thread's, made shared (gp_tc_revoke). */
static inline void revoke_owner(struct gp_pool *p, struct gp_block *b)
{
	struct gp_tcache *owner = atomic_load_explicit(&b->owner, memory_order_relaxed);

	if (__builtin_expect(owner != NULL, 0) && owner != tc_of(p))
		gp_tc_revoke(p, owner);
}

/* The state is looked at under the list's lock, where the claim of a stale record marks a block
 * out of its list (pool_impl.h). */
int gp_pool_hand_out(struct gp_pool *p, struct gp_dev *d, struct gp_block *b, size_t bytes)
{
	struct gp_list *c = &d->list[list_of(b)];
	int gone;

	gp_lock(&c->lock);
	gone = state_of(atomic_load_explicit(&b->state, memory_order_relaxed)) != BLOCK_CACHED;
	if (!gone)
		hand_out_locked(c, b, bytes);
	gp_unlock(&c->lock);
	if (gone) {
		gp_pool_drop_stale(p, b, STALE_UNLISTED);
		return GP_EINVAL;
	}
	account_live(d, list_of(b) % GP_STRIPES, (int64_t)b->bytes, (int64_t)bytes);
	return GP_OK;
}

void gp_pool_drop_stale(struct gp_pool *p, struct gp_block *b, enum stale_from from)
{
	struct gp_dev *d = dev_get(p, b->device, 0);
	unsigned list = list_of(b);
	int device = b->device;
	size_t bytes = b->bytes, req = b->requested;
	void *ptr = b->ptr;

	if (from != STALE_UNLISTED) {
		struct gp_list *c = &d->list[list];

		gp_lock(&c->lock);
		bump(&c->live_blocks, -1);
		bump(&c->live_bytes, -(int64_t)bytes);
		bump(&c->requested_bytes, -(int64_t)req);
		gp_unlock(&c->lock);
		account_live(d, list % GP_STRIPES, -(int64_t)bytes, -(int64_t)req);
	}
	if (from == STALE_HELD) {
		atomic_fetch_sub(&d->held_bytes, bytes);
		atomic_fetch_sub(&d->held_blocks, 1);
	}
	atomic_fetch_sub(&d->reserved_bytes, bytes);
	if (b->movable)
		atomic_fetch_sub(&d->movable_bytes, bytes);
	atomic_fetch_add(&d->stale_evictions, 1);
	retire_block(p, b);
	if (p->cfg.stale != NULL)
		p->cfg.stale(p->cfg.arg, device, ptr, bytes);
}

/* The record `old` that the map held for an address a new block has just taken (the shard's lock
 * held, so that no one relists the record meanwhile): claimed for this thread to drop, and where
 * it was; -1 when another thread has it (a release giving it back, which accounts for it; or a
 * thread with it out of its list, which drops it when it finds it marked). See enum stale_from. */
static int claim_stale(struct gp_pool *p, struct gp_block *old)
{
	for (;;) {
		uint32_t word = atomic_load_explicit(&old->state, memory_order_acquire);
		struct gp_block *prev = NULL, *x;
		struct gp_list *c;
		int claimed;

		if (state_of(word) == BLOCK_LIVE || state_of(word) == BLOCK_HELD) {
			if (state_of(word) == BLOCK_LIVE)
				revoke_owner(p, old);
			if (atomic_compare_exchange_strong(&old->state, &word,
							   with_state(word, BLOCK_UNUSED)))
				return state_of(word) == BLOCK_HELD ? STALE_HELD : STALE_LIVE;
			continue;
		}
		if (state_of(word) != BLOCK_CACHED)
			return -1; /* a release has it */
		c = &dev_get(p, old->device, 0)->list[list_of(old)];
		gp_lock(&c->lock);
		for (x = c->head; x != NULL && x != old; x = x->next)
			prev = x;
		if (x != NULL) {
			unlink_cached(c, prev, old);
			atomic_store(&old->state, with_state(word, BLOCK_UNUSED));
			gp_unlock(&c->lock);
			return STALE_UNLISTED;
		}
		/* In a thread's cache: taken out of it. */
		if (gp_tc_claim(p, old)) {
			atomic_store(&old->state, with_state(word, BLOCK_UNUSED));
			gp_unlock(&c->lock);
			return STALE_UNLISTED;
		}
		/* Out of its list: a hit took it (in use now: looked at again), or a thread has it. */
		claimed = atomic_compare_exchange_strong(&old->state, &word,
							 with_state(word, BLOCK_UNUSED));
		gp_unlock(&c->lock);
		if (!claimed)
			continue;
		/* A free on its way into its thread's cache, whose owner's next hit would store over
		 * the mark with a plain store: once every owner section under way is over, such a hit
		 * shows (in use again: claimed as such), and later ones see the mark. */
		gp_tc_quiesce(p);
		if (state_of(atomic_load(&old->state)) == BLOCK_UNUSED)
			return -1;
	}
}

int gp_pool_enter_block(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls,
			unsigned list, size_t bytes, size_t cbytes, void *ptr, int movable,
			struct gp_block **out)
{
	struct gp_list *c = &d->list[list];
	struct gp_ptrmap_shard *s;
	struct gp_block *b = new_block(p), *old = NULL;
	int rc, from = -1;

	if (b == NULL)
		return GP_ENOMEM;
	__atomic_store_n(&b->ptr, ptr, __ATOMIC_RELEASE); /* after the unused word (hint_find) */
	b->bytes = cbytes;
	b->requested = bytes;
	b->device = device;
	b->cls = (uint16_t)cls;
	b->movable = movable != 0;
	set_list(b, list);
	atomic_store(&b->state, next_live(atomic_load(&b->state)));
	s = gp_ptrmap_shard(&p->map, (uintptr_t)ptr);
	gp_lock(&s->lock);
	rc = gp_ptrmap_insert(s, (uintptr_t)ptr, b, (void **)&old);
	if (rc == 0 && old != NULL) /* the driver reused the address of a block the pool knew */
		from = claim_stale(p, old);
	gp_unlock(&s->lock);
	if (rc != 0) {
		retire_block(p, b);
		return GP_ENOMEM;
	}
	if (from >= 0)
		gp_pool_drop_stale(p, old, (enum stale_from)from);
	gp_lock(&c->lock);
	bump(&c->live_blocks, 1);
	bump(&c->live_bytes, (int64_t)cbytes);
	bump(&c->requested_bytes, (int64_t)bytes);
	bump(&c->allocs, 1);
	gp_unlock(&c->lock);
	raise_peak(&d->peak_reserved, atomic_fetch_add(&d->reserved_bytes, cbytes) + cbytes);
	if (b->movable)
		atomic_fetch_add(&d->movable_bytes, cbytes);
	account_live(d, list % GP_STRIPES, (int64_t)cbytes, (int64_t)bytes);
	*out = b;
	return GP_OK;
}

static GP_MISS_PATH int real_alloc(struct gp_pool *p, struct gp_dev *d, int device,
				   unsigned cls, unsigned s0, size_t bytes, void **out)
{
	size_t cbytes = gp_pool_class_bytes(cls);
	struct gp_block *b;
	void *ptr = NULL;
	int rc, movable;

	rc = p->be.alloc(p->be.ctx, device, cbytes, &ptr);
	if (rc != GP_OK)
		return rc == GP_ENOMEM ? GP_ENOMEM : GP_EBACKEND;
	movable = p->be.movable != NULL && p->be.movable(p->be.ctx, ptr);
	if (gp_pool_enter_block(p, d, device, cls, cls * GP_STRIPES + s0, bytes, cbytes, ptr,
				movable, &b) != GP_OK) {
		p->be.free(p->be.ctx, device, ptr, cbytes, 1);
		return GP_ENOMEM;
	}
	atomic_fetch_add(&d->real_allocs, 1);
	if (p->cfg.remap_trim)
		gp_pool_note_growth(p, d, device);
	*out = ptr;
	hint_set(p, b, ptr);
	return GP_OK;
}

/* Only a miss makes a device's footprint (live + cached bytes) grow. With a cap on its cached
 * bytes (gp_pool_set_cap), a miss first brings the cache down to the cap, in this thread: the
 * footprint then never passes the live bytes plus the cap. The over_cap notice alone comes too
 * late for a program that allocates in a burst: it frees and misses again before the release. */
static GP_MISS_PATH void trim_to_cap(struct gp_pool *p, struct gp_dev *d, int device)
{
	uint64_t cap = ld(&d->cap);

	if (cap != 0 && dev_cached(d) > cap && gp_may_release(p))
		gp_pool_release(p, device, cap, GP_CAUSE_CAP, NULL);
}

/* Until no other thread has blocks out of their lists to split, merge or move them (their
 * blocks are in no list meanwhile: a miss that does not wait grows the pool by what is in
 * transit), for at most MOVE_WAIT_NS. 1 when there were such blocks. */
#define MOVE_WAIT_NS 2000000u

static int await_moves(struct gp_dev *d)
{
	uint64_t t0;

	if (atomic_load_explicit(&d->moving, memory_order_acquire) == 0)
		return 0;
	t0 = gp_fine_ns();
	while (atomic_load_explicit(&d->moving, memory_order_acquire) != 0 &&
	       gp_fine_ns() - t0 < MOVE_WAIT_NS)
		sched_yield();
	return 1;
}

/* A miss of a class that remaps (cfg.remap_min_bytes), its own class's blocks looked at: the end
 * of a larger idle block, idle neighbours made one; when neither serves and another thread has
 * blocks in transit, the cache and a split once more after it is done; then idle blocks moved
 * (with new memory for what they lack). GP_OK with *out, else the caller makes a real
 * allocation. */
static __attribute__((noinline)) int miss_movable(struct gp_pool *p, struct gp_dev *d, int device,
						  unsigned cls, unsigned s0, size_t bytes,
						  void **out)
{
	struct gp_block *b;
	int rc = GP_ENOMEM;

	moving_begin(d);
	if (p->be.split != NULL) {
		rc = gp_pool_split(p, d, device, cls, s0, bytes, out);
		if (rc != GP_OK && p->be.merge != NULL && gp_pool_coalesce(p, d, device, cls) == GP_OK)
			rc = gp_pool_split(p, d, device, cls, s0, bytes, out);
	}
	moving_end(d);
	if (rc == GP_OK)
		return GP_OK;
	if (await_moves(d)) { /* the cache again, with what was in transit */
		b = gp_pool_take_missed(p, d, cls, s0, bytes, 0);
		if (b != NULL) {
			account_live(d, list_of(b) % GP_STRIPES, (int64_t)b->bytes, (int64_t)bytes);
			*out = b->ptr;
			return GP_OK;
		}
		moving_begin(d);
		if (p->be.split != NULL)
			rc = gp_pool_split(p, d, device, cls, s0, bytes, out);
		moving_end(d);
		if (rc == GP_OK)
			return GP_OK;
	}
	moving_begin(d);
	if (gp_may_release(p)) {
		rc = gp_pool_remap(p, d, device, cls, s0, bytes, out);
		if (rc == GP_OK)
			trim_to_cap(p, d, device); /* what stays cached keeps within the cap too */
	}
	moving_end(d);
	return rc == GP_OK ? GP_OK : GP_ENOMEM;
}

int gp_pool_alloc(struct gp_pool *p, int device, size_t bytes, void **out, int *retried)
{
	unsigned cls = gp_pool_class_of(bytes), s0;
	struct gp_dev *d;
	struct gp_block *b;
	int waiting = 0, rc;

	if (retried)
		*retried = 0;
	if (__builtin_expect(out == NULL || cls >= gp_pool_class_count(), 0))
		return GP_EINVAL;
	/* The hit: the thread's own cache (which serves one device, one the pool has), */
	b = tc_take(p, device, cls, bytes);
	if (b != NULL) {
		account_live(dev_get(p, device, 0), list_of(b) % GP_STRIPES, (int64_t)b->bytes,
			     (int64_t)bytes);
		*out = b->ptr;
		hint_set(p, b, b->ptr);
		return GP_OK;
	}
	d = dev_get(p, device, 1);
	if (d == NULL)
		return device < 0 || device >= GP_MAX_DEVICES ? GP_EINVAL : GP_ENOMEM;
	/* else the oldest block of the thread's own list of the class. */
	s0 = my_stripe();
	b = take_cached(p, &d->list[cls * GP_STRIPES + s0], bytes, &waiting);
	if (b == NULL)
		b = gp_pool_take_missed(p, d, cls, s0, bytes, waiting);
	/* Before the pool grows: blocks of the class in other threads' caches. */
	if (b == NULL && gp_tc_drain(p, device, cls, gp_pool_larger_last(p, cls, bytes)))
		b = gp_pool_take_missed(p, d, cls, s0, bytes, 0);
	if (b != NULL) {
		account_live(d, list_of(b) % GP_STRIPES, (int64_t)b->bytes, (int64_t)bytes);
		*out = b->ptr;
		hint_set(p, b, b->ptr);
		return GP_OK;
	}

	if (remaps_class(p, cls) && miss_movable(p, d, device, cls, s0, bytes, out) == GP_OK)
		return GP_OK;
	if (p->cfg.remap_trim && small_class(cls)) /* a larger class's miss trims in its remap */
		gp_pool_trim_others(p, d, device, cls, gp_pool_class_bytes(cls));
	trim_to_cap(p, d, device);
	rc = real_alloc(p, d, device, cls, s0, bytes, out);
	if (rc == GP_ENOMEM && gp_may_release(p)) {
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

uint64_t gp_pool_window_peak(struct gp_dev *d)
{
	uint64_t sum = 0, req = 0, top = ld(&d->peak_reserved);
	int sane = 1;

	for (unsigned i = 0; i < GP_STRIPES; i++) {
		struct gp_stripe_acct *a = &d->acct[i];

		/* A stripe's count is exact only summed with the others (modulo 2^64): one that ever
		 * read above the reserved peak would make the sum wrap, to a peak too low. */
		sane &= ld(&a->peak) <= top && ld(&a->req_peak) <= top;
		sum += ld(&a->peak);
		req += ld(&a->req_peak);
		/* The new window begins at what the stripe has in use; an allocation racing these
		 * stores counts in one window or the other (the policy's figure, not an account). */
		atomic_store_explicit(&a->peak, ld(&a->own) + ld(&a->remote), memory_order_relaxed);
		atomic_store_explicit(&a->req_peak, ld(&a->req) + ld(&a->req_remote),
				      memory_order_relaxed);
	}
	if (sane)
		raise_peak(&d->peak_live_before, sum);
	return sane ? req : UINT64_MAX; /* not known: as if all of it had been asked for */
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

#ifdef GP_POOL_TEST_HOOKS
/* Unit tests only (hooks.h); the rest of the hooks are at the end of this file. */
void (*gp_pool_test_after_lookup)(struct gp_pool *p, void *ptr);
void (*gp_pool_test_before_list)(struct gp_pool *p, void *ptr);
void (*gp_pool_test_in_section)(struct gp_pool *p);
void (*gp_pool_test_in_steal)(struct gp_pool *p);
void (*gp_pool_test_in_own_free)(void *ptr);
void (*gp_pool_test_after_evict)(struct gp_pool *p);
#endif

/* The block of ptr and its state word, read together: while ptr -> b was in the map. Lock-free
 * (a seqlock read, ptrmap.h) unless a writer is busy on the shard twice in a row, then under
 * its lock. */
static struct gp_block *lookup(struct gp_pool *p, const void *ptr, uint32_t *word)
{
	struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)ptr);
	struct gp_block *b;

	for (int tries = 0; tries < 2; tries++) {
		unsigned seq = gp_ptrmap_read_begin(s);
		b = gp_ptrmap_find_racy(s, (uintptr_t)ptr);
		*word = b ? atomic_load_explicit(&b->state, memory_order_acquire) : 0;
		if (!gp_ptrmap_read_retry(s, seq))
			return b;
	}
	gp_lock(&s->lock);
	b = gp_ptrmap_find(s, (uintptr_t)ptr);
	*word = b ? atomic_load_explicit(&b->state, memory_order_acquire) : 0;
	gp_unlock(&s->lock);
	return b;
}

/* A free of a block that is not in use: counted against its device if the map still holds it
 * (looked at under the shard's lock, where no record can be recycled). */
static int bad_free(struct gp_pool *p, const void *ptr)
{
	struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)ptr);
	struct gp_block *b;
	struct gp_dev *d = NULL;

	gp_lock(&s->lock);
	b = gp_ptrmap_find(s, (uintptr_t)ptr);
	if (b != NULL)
		d = dev_get(p, b->device, 0);
	gp_unlock(&s->lock);
	if (d != NULL)
		atomic_fetch_add(&d->bad_frees, 1);
	return b != NULL ? GP_EINVAL : GP_ENOTOWNED;
}

/* The appends to list c of blocks freed in a new epoch begin here (c's lock held; struct
 * gp_list). Out of line: once per epoch and list. */
static __attribute__((noinline, cold)) void mark_epoch(struct gp_list *c, uint64_t epoch)
{
	uint64_t n = ld(&c->marks);
	struct gp_mark *m = &c->mark[n % LIST_MARKS];

	if (n >= LIST_MARKS) /* marks come in epoch order: the one overwritten is the newest lost */
		atomic_store_explicit(&c->lost_epoch, ld(&m->epoch) + 1, memory_order_relaxed);
	atomic_store_explicit(&m->epoch, epoch, memory_order_relaxed);
	atomic_store_explicit(&m->bytes, ld(&c->in_bytes), memory_order_relaxed);
	atomic_store_explicit(&m->blocks, ld(&c->frees), memory_order_relaxed);
	atomic_store_explicit(&c->marks, n + 1, memory_order_relaxed);
	atomic_store_explicit(&c->in_epoch, epoch, memory_order_relaxed);
}

/* A block just freed in `epoch` (the newest: no block of the list was freed later) onto the tail
 * of list c (c's lock held): it joins the cached counters and the fence marks. Always inline: the
 * free's path. */
static inline __attribute__((always_inline)) void append_cached(struct gp_list *c,
								struct gp_block *b, uint64_t epoch)
{
	b->epoch = epoch;
	b->next = NULL;
	if (c->tail != NULL) {
		c->tail->next = b;
	} else {
		c->head = b;
		atomic_store_explicit(&c->head_epoch, epoch, memory_order_relaxed);
	}
	c->tail = b;
	if (__builtin_expect(ld(&c->in_epoch) != epoch, 0))
		mark_epoch(c, epoch);
	bump(&c->in_bytes, (int64_t)b->bytes);
	bump(&c->cached_blocks, 1);
	bump(&c->cached_bytes, (int64_t)b->bytes);
}

/* A block whose free found it stale (its address handed out again: pool_impl.h) with its list's
 * lock held: dropped. Out of line, off the free's path. */
static __attribute__((noinline, cold)) void drop_unlisted_free(struct gp_pool *p, struct gp_list *c,
							       struct gp_block *b)
{
	gp_unlock(&c->lock);
	gp_pool_drop_stale(p, b, STALE_LIVE);
}

/* A block whose state this thread has just changed from in use to cached (a free, an unhold): ours
 * alone, on no list, invisible to alloc and release. Onto the tail of its list, freed at time t,
 * fenced by the next fence (its epoch): once there it may be reused or released at once, so what
 * is needed of it is read before. Always inline: the free's path. */
static inline __attribute__((always_inline)) void cache_block(struct gp_pool *p,
							       struct gp_block *b, uint64_t t)
{
	int device = b->device;
	size_t bytes = b->bytes, req = b->requested;
	unsigned list = list_of(b);
	struct gp_dev *d = dev_get(p, device, 0);
	struct gp_list *c = &d->list[list];

#ifdef GP_POOL_TEST_HOOKS
	if (gp_pool_test_before_list != NULL)
		gp_pool_test_before_list(p, b->ptr);
#endif
	gp_lock(&c->lock);
	if (__builtin_expect(state_of(atomic_load_explicit(&b->state, memory_order_relaxed)) !=
				     BLOCK_CACHED,
			     0)) {
		drop_unlisted_free(p, c, b);
		return;
	}
	/* The epoch read under the lock: no block of the list was freed in a later one. */
	b->freed_ns = t;
	append_cached(c, b, atomic_load(&p->epoch));
	bump(&c->live_blocks, -1);
	bump(&c->live_bytes, -(int64_t)b->bytes);
	bump(&c->requested_bytes, -(int64_t)req);
	bump(&c->frees, 1);
	gp_unlock(&c->lock);
	if (!atomic_load_explicit(&p->dirty, memory_order_relaxed))
		atomic_store(&p->dirty, 1);
	account_live(d, list % GP_STRIPES, -(int64_t)bytes, -(int64_t)req);
	check_cap(p, d, device);
}

int gp_pool_free(struct gp_pool *p, void *ptr)
{
	struct gp_block *b;
	struct gp_tcache *owner;
	uint32_t word;

	if (ptr == NULL)
		return GP_ENOTOWNED;
	/* The hint's answer is as good as the lookup's (hint_find). */
	b = hint_find(p, ptr, &word);
	if (b == NULL)
		b = lookup(p, ptr, &word);
	if (b == NULL)
		return GP_ENOTOWNED;
#ifdef GP_POOL_TEST_HOOKS
	if (gp_pool_test_after_lookup != NULL)
		gp_pool_test_after_lookup(p, ptr);
#endif
	/* From the word read with the lookup: fails if the block was freed already (a double
	 * free, or held for a graph), or has been handed out again since, from the cache or as a
	 * recycled record (a new generation: a free racing its own double free cannot free the
	 * next owner's block). A block from the thread's own cache: a plain store (own_free). */
	if (state_of(word) != BLOCK_LIVE)
		return bad_free(p, ptr);
	owner = atomic_load_explicit(&b->owner, memory_order_relaxed);
	if (owner != NULL) {
		if (owner != tc_of(p))
			gp_tc_revoke(p, owner);
		else if (own_free(p, owner, b, word))
			return GP_OK;
	}
	gp_rmw_note();
	if (!atomic_compare_exchange_strong(&b->state, &word, with_state(word, BLOCK_CACHED)))
		return bad_free(p, ptr);
	if (tc_put(p, b))
		return GP_OK;
	cache_block(p, b, now(p));
	return GP_OK;
}

int gp_pool_hold(struct gp_pool *p, void *ptr, uint32_t *ticket, size_t *bytes, int *device)
{
	struct gp_block *b;
	struct gp_dev *d;
	uint32_t word;

	if (ptr == NULL)
		return GP_ENOTOWNED;
	b = lookup(p, ptr, &word);
	if (b == NULL)
		return GP_ENOTOWNED;
	/* As a free: one compare-and-swap from the word the lookup read. */
	if (state_of(word) == BLOCK_LIVE)
		revoke_owner(p, b);
	if (state_of(word) != BLOCK_LIVE ||
	    !atomic_compare_exchange_strong(&b->state, &word, with_state(word, BLOCK_HELD)))
		return bad_free(p, ptr);
	/* Held: ours alone until its unhold, as a block between free and cache is. */
	d = dev_get(p, b->device, 0);
	atomic_fetch_add(&d->held_bytes, b->bytes);
	atomic_fetch_add(&d->held_blocks, 1);
	if (ticket)
		*ticket = with_state(word, BLOCK_HELD);
	if (bytes)
		*bytes = b->bytes;
	if (device)
		*device = b->device;
	return GP_OK;
}

int gp_pool_unhold(struct gp_pool *p, void *ptr, uint32_t ticket)
{
	struct gp_block *b;
	struct gp_dev *d;
	uint32_t word;

	if (ptr == NULL)
		return GP_ENOTOWNED;
	b = lookup(p, ptr, &word);
	if (b == NULL)
		return GP_ENOTOWNED;
	/* Only the held allocation the ticket names: after a device reset (gp_pool_forget_device)
	 * the address or the record may belong to another block by now. */
	if (word != ticket || state_of(word) != BLOCK_HELD ||
	    !atomic_compare_exchange_strong(&b->state, &word, with_state(word, BLOCK_CACHED)))
		return GP_EINVAL;
	d = dev_get(p, b->device, 0);
	atomic_fetch_sub(&d->held_bytes, b->bytes);
	atomic_fetch_sub(&d->held_blocks, 1);
	cache_block(p, b, now(p));
	return GP_OK;
}

size_t gp_pool_block_size(struct gp_pool *p, const void *ptr, int *device)
{
	struct gp_ptrmap_shard *s = gp_ptrmap_shard(&p->map, (uintptr_t)ptr);
	struct gp_block *b;
	size_t n = 0;

	gp_lock(&s->lock);
	b = gp_ptrmap_find(s, (uintptr_t)ptr);
	if (b != NULL && block_state(b) == BLOCK_LIVE) {
		n = b->bytes;
		if (device)
			*device = b->device;
	}
	gp_unlock(&s->lock);
	return n;
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

/* Of list c's cached blocks, those still fenced when done_epoch was `done`, from its counters and
 * fence marks, with no lock (struct gp_list): exact while the list's fenced blocks were freed in
 * at most LIST_MARKS epochs, else more. Racing writers may make one look wrong for a moment. */
static void list_fenced(struct gp_list *c, uint64_t done, uint64_t *bytes, uint64_t *blocks)
{
	uint64_t cb = ld(&c->cached_bytes), cn = ld(&c->cached_blocks), n = ld(&c->marks);

	*bytes = *blocks = 0;
	if (cn == 0)
		return;
	if (ld(&c->lost_epoch) > done || ld(&c->pushed_epoch) > done) {
		*bytes = cb;
		*blocks = cn;
		return;
	}
	for (uint64_t k = n > LIST_MARKS ? n - LIST_MARKS : 0; k < n; k++) {
		struct gp_mark *m = &c->mark[k % LIST_MARKS];

		if (ld(&m->epoch) >= done) {
			uint64_t pb = ld(&c->in_bytes) - ld(&m->bytes);
			uint64_t pn = ld(&c->frees) - ld(&m->blocks);

			*bytes = pb < cb ? pb : cb;
			*blocks = pn < cn ? pn : cn;
			return;
		}
	}
}

/* Counters only, no lock and no walk: the shim samples this every 200 ms beside allocating
 * threads, and a list walked under its lock would stall them. */
int gp_pool_dev_stats(struct gp_pool *p, int device, struct gp_pool_dev_stats *o)
{
	struct gp_dev *d = dev_get(p, device, 0);
	int ordered = atomic_load(&p->ordered);
	uint64_t done = atomic_load_explicit(&p->done_epoch, memory_order_acquire);

	memset(o, 0, sizeof(*o));
	if (d == NULL)
		return device >= 0 && device < GP_MAX_DEVICES ? GP_OK : GP_EINVAL;
	for (unsigned i = 0; i < nlists(); i++) {
		struct gp_list *c = &d->list[i];
		uint64_t cb, cn, fb = 0, fn = 0;

		o->live_bytes += ld(&c->live_bytes);
		o->live_blocks += ld(&c->live_blocks);
		o->requested_bytes += ld(&c->requested_bytes);
		o->allocs += ld(&c->allocs);
		o->hits += ld(&c->hits);
		o->frees += ld(&c->frees);
		cn = ld(&c->cached_blocks);
		if (cn == 0)
			continue;
		cb = ld(&c->cached_bytes);
		if (!ordered)
			list_fenced(c, done, &fb, &fn);
		fb = fb < cb ? fb : cb;
		fn = fn < cn ? fn : cn;
		o->pending_bytes += fb;
		o->pending_blocks += fn;
		o->idle_bytes += cb - fb;
		o->idle_blocks += cn - fn;
	}
	/* The threads' caches: their blocks idle (pending once reuse needs fences: their fences are
	 * not looked at), their hits and frees. */
	for (struct gp_tcache *tc = atomic_load(&p->tcs); tc != NULL; tc = tc->next) {
		uint64_t a = ld(&tc->allocs), f = ld(&tc->frees);

		if (tc->device != device)
			continue;
		if (atomic_load_explicit(&tc->owned, memory_order_relaxed)) {
			o->tcaches++;
			o->tcaches_shared += atomic_load_explicit(&tc->shared, memory_order_relaxed) != 0;
		}
		o->allocs += a;
		o->hits += a;
		o->frees += f;
		o->live_blocks += a - f - ld(&tc->retired);
		o->live_bytes += ld(&tc->live_bytes);
		o->requested_bytes += ld(&tc->requested_bytes);
		if (ordered) {
			o->idle_bytes += ld(&tc->bytes);
			o->idle_blocks += tc_blocks(tc);
		} else {
			o->pending_bytes += ld(&tc->bytes);
			o->pending_blocks += tc_blocks(tc);
		}
	}
	for (unsigned i = 0; i < GP_STRIPES; i++)
		o->peak_live_bytes += ld(&d->acct[i].peak);
	if (o->peak_live_bytes < ld(&d->peak_live_before)) /* windows gone (gp_pool_window_peak) */
		o->peak_live_bytes = ld(&d->peak_live_before);
	o->peak_reserved_bytes = ld(&d->peak_reserved);
	/* What is in use is also reserved, so the reserved peak bounds the stripes' sum. */
	if (o->peak_live_bytes > o->peak_reserved_bytes)
		o->peak_live_bytes = o->peak_reserved_bytes;
	o->real_allocs = ld(&d->real_allocs);
	o->real_frees = ld(&d->real_frees);
	o->failed_allocs = ld(&d->failed_allocs);
	o->bad_frees = ld(&d->bad_frees);
	o->fence_waits = ld(&d->fence_waits);
	o->fence_wait_timeouts = ld(&d->fence_wait_timeouts);
	o->oversize_hits = ld(&d->oversize_hits);
	o->splits = ld(&d->splits);
	o->merges = ld(&d->merges);
	o->remaps = ld(&d->remaps);
	o->remapped_bytes = ld(&d->remapped_bytes);
	o->trims = ld(&d->trims);
	o->trimmed_bytes = ld(&d->trimmed_bytes);
	o->trim_owed = ld(&d->trim_owed);
	o->movable_bytes = ld(&d->movable_bytes);
	o->held_bytes = ld(&d->held_bytes);
	o->held_blocks = ld(&d->held_blocks);
	o->stale_evictions = ld(&d->stale_evictions);
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

#ifdef GP_POOL_TEST_HOOKS
/* ---- unit tests' hooks (hooks.h) ------------------------------------------------------ */

_Thread_local unsigned gp_pool_test_held;
_Thread_local unsigned long gp_pool_test_taken;
_Thread_local unsigned long gp_pool_test_rmw;

unsigned long gp_pool_test_rmw_count(void)
{
	return gp_pool_test_rmw;
}

uint64_t gp_pool_test_tcache_blocks(struct gp_pool *p)
{
	struct gp_tcache *tc = tc_of(p);

	return tc != NULL ? tc_blocks(tc) : 0;
}

uint64_t gp_pool_test_tcaches_blocks(struct gp_pool *p)
{
	uint64_t n = 0;

	for (struct gp_tcache *tc = atomic_load(&p->tcs); tc != NULL; tc = tc->next)
		n += tc_blocks(tc);
	return n;
}

uint64_t gp_pool_test_tcache_bytes(struct gp_pool *p)
{
	struct gp_tcache *tc = tc_of(p);

	return tc != NULL ? ld(&tc->bytes) : 0;
}

int gp_pool_test_tcache_on(struct gp_pool *p)
{
	return p->id != 0;
}

unsigned gp_pool_test_locks_held(void)
{
	return gp_pool_test_held;
}

unsigned long gp_pool_test_locks_taken(void)
{
	return gp_pool_test_taken;
}

/* Of list c's cached blocks, those fenced at `done`, walked (c's lock held). */
static void list_fenced_walked(struct gp_list *c, uint64_t done, uint64_t *bytes, uint64_t *blocks)
{
	*bytes = *blocks = 0;
	for (struct gp_block *b = c->head; b != NULL; b = b->next) {
		if (b->epoch >= done) {
			*bytes += b->bytes;
			*blocks += 1;
		}
	}
}

/* Whether list c keeps its invariants (c's lock held), the fenced figures of its counters at
 * least those of a walk among them. */
static int list_ok(struct gp_list *c, uint64_t done)
{
	uint64_t n = 0, bytes = 0, e = 0, wb, wn, fb, fn;
	struct gp_block *last = NULL;

	if (c->head != NULL && ld(&c->head_epoch) > c->head->epoch)
		return 0;
	for (struct gp_block *b = c->head; b != NULL; last = b, b = b->next) {
		if (b->epoch < e || state_of(atomic_load(&b->state)) != BLOCK_CACHED)
			return 0;
		e = b->epoch;
		n++;
		bytes += b->bytes;
	}
	list_fenced_walked(c, done, &wb, &wn);
	list_fenced(c, done, &fb, &fn);
	return last == c->tail && n == ld(&c->cached_blocks) && bytes == ld(&c->cached_bytes) &&
	       fb >= wb && fn >= wn;
}

unsigned gp_pool_test_check_lists(struct gp_pool *p)
{
	unsigned bad = 0;

	for (int i = 0; i < GP_MAX_DEVICES; i++) {
		struct gp_dev *d = dev_get(p, i, 0);

		for (unsigned l = 0; d != NULL && l < nlists(); l++) {
			gp_lock(&d->list[l].lock);
			bad += !list_ok(&d->list[l], atomic_load(&p->done_epoch));
			gp_unlock(&d->list[l].lock);
		}
	}
	return bad;
}

int gp_pool_test_fenced(struct gp_pool *p, int device, uint64_t *bytes, uint64_t *blocks)
{
	struct gp_dev *d = dev_get(p, device, 0);

	*bytes = *blocks = 0;
	if (d == NULL)
		return device >= 0 && device < GP_MAX_DEVICES ? GP_OK : GP_EINVAL;
	for (unsigned l = 0; l < nlists(); l++) {
		uint64_t wb, wn;

		gp_lock(&d->list[l].lock);
		list_fenced_walked(&d->list[l], atomic_load(&p->done_epoch), &wb, &wn);
		gp_unlock(&d->list[l].lock);
		if (!atomic_load(&p->ordered)) {
			*bytes += wb;
			*blocks += wn;
		}
	}
	return GP_OK;
}

int gp_pool_test_list_lock(struct gp_pool *p, int device, size_t bytes, int lock)
{
	unsigned cls = gp_pool_class_of(bytes);
	struct gp_dev *d = dev_get(p, device, 1);
	struct gp_list *c;

	if (d == NULL || cls >= gp_pool_class_count())
		return GP_EINVAL;
	c = &d->list[cls * GP_STRIPES + my_stripe()];
	if (lock)
		gp_lock(&c->lock);
	else
		gp_unlock(&c->lock);
	return GP_OK;
}
#endif
