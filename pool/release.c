/* release.c — giving cached blocks back to the backend: to a target (oldest first), by age,
 * on out-of-memory; and forgetting a device after a reset. Backend frees never run with a pool
 * lock held. */
#define _POSIX_C_SOURCE 200809L
#include "pool_impl.h"

/* ---- release --------------------------------------------------------------------------- */

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

/* Forget the blocks of a detached list and give them to the backend. Each is claimed from the
 * cached state first: one whose address the driver has handed out again meanwhile (stale,
 * pool_impl.h) is dropped, not freed (the new block's memory is at that address). */
void gp_pool_free_blocks(struct gp_pool *p, struct gp_dev *d, struct gp_block *b,
			 struct gp_release_result *r)
{
	while (b != NULL) {
		struct gp_block *next = b->next;
		uint32_t word = atomic_load_explicit(&b->state, memory_order_acquire);

		map_remove_block(p, b);
		if (state_of(word) != BLOCK_CACHED ||
		    !atomic_compare_exchange_strong(&b->state, &word, with_state(word, BLOCK_UNUSED))) {
			gp_pool_drop_stale(p, b, STALE_UNLISTED);
			b = next;
			continue;
		}
		if (p->be.free(p->be.ctx, b->device, b->ptr, b->bytes, settled(p, b)) != GP_OK)
			r->errors++;
		atomic_fetch_add(&d->real_frees, 1);
		atomic_fetch_sub(&d->reserved_bytes, b->bytes);
		if (b->movable)
			atomic_fetch_sub(&d->movable_bytes, b->bytes);
		r->bytes += b->bytes;
		r->blocks++;
		retire_block(p, b);
		b = next;
	}
}

/* Of the lists idx[0..*n) (those that held cached blocks when the release began; every list
 * when idx is NULL), the index of the one whose head was freed longest ago, or -1 when none
 * holds any now; lists found empty are dropped from idx. Lists that got blocks only after the
 * release began are not looked at: it gives back what was over the target then. */
static int oldest_list(struct gp_dev *d, unsigned *idx, unsigned *n)
{
	uint64_t best_t = UINT64_MAX, best_e = UINT64_MAX;
	int best = -1;

	for (unsigned j = 0; j < *n;) {
		unsigned i = idx ? idx[j] : j;
		struct gp_list *c = &d->list[i];
		if (ld(&c->cached_blocks) == 0) {
			if (idx)
				idx[j] = idx[--*n];
			else
				j++;
			continue;
		}
		gp_lock(&c->lock);
		if (c->head != NULL &&
		    (c->head->freed_ns < best_t ||
		     (c->head->freed_ns == best_t && c->head->epoch < best_e))) {
			best_t = c->head->freed_ns;
			best_e = c->head->epoch;
			best = (int)i;
		}
		gp_unlock(&c->lock);
		j++;
	}
	return best;
}

/* Everything that was cached when the release began, and no more (as a release to a target):
 * each list gives at most the blocks it held then, oldest first, and blocks freed meanwhile
 * into a list not reached yet stay (a list's blocks are all one size, so no more bytes go than
 * were cached). Without memory for the counts, every block found goes. */
static void release_all(struct gp_pool *p, struct gp_dev *d, struct gp_release_result *r)
{
	size_t *held = malloc(nlists() * sizeof(*held));

	for (unsigned i = 0; held != NULL && i < nlists(); i++)
		held[i] = (size_t)ld(&d->list[i].cached_blocks);
	for (unsigned i = 0; i < nlists(); i++) {
		size_t n = held != NULL ? held[i] : (size_t)ld(&d->list[i].cached_blocks);
		if (n != 0)
			gp_pool_free_blocks(p, d, detach(&d->list[i], held != NULL ? n : 0), r);
	}
	free(held);
}

/* Down to `target` cached bytes, oldest freed first. One pass over every list finds those with
 * cached blocks; each block given back then costs a look at those lists only (usually few,
 * against 273 classes x GP_STRIPES), and the cached total is reserved minus live (per stripe),
 * not a sum over every list: a release gives back many blocks, and a walk of every list per
 * block would make its cost the blocks times all the lists. */
static void release_dev(struct gp_pool *p, struct gp_dev *d, uint64_t target, uint64_t budget,
			struct gp_release_result *r)
{
	uint64_t cached, excess, start = r->bytes;
	unsigned *idx, n = 0;

	if (target == 0 && budget == 0) {
		release_all(p, d, r);
		return;
	}
	/* What is over the target now (or the budget), and no more: the frees that land meanwhile
	 * would keep the release going for as long as the program churns (the next over-cap free
	 * asks again). */
	cached = dev_cached(d);
	excess = budget != 0 ? budget : cached > target ? cached - target : 0;
	if (excess == 0)
		return;
	idx = malloc(nlists() * sizeof(*idx));
	if (idx == NULL) {
		n = nlists(); /* no memory for the plan: look at every list each time */
	} else {
		for (unsigned i = 0; i < nlists(); i++)
			if (ld(&d->list[i].cached_blocks) != 0)
				idx[n++] = i;
	}
	while (r->bytes - start < excess && dev_cached(d) > target) {
		int i = oldest_list(d, idx, &n);
		if (i < 0)
			break;
		gp_pool_free_blocks(p, d, detach(&d->list[i], 1), r);
	}
	free(idx);
}

/* Each list is in free order: the blocks freed before `before` are at its head. */
static void release_older(struct gp_pool *p, struct gp_dev *d, uint64_t before,
			  struct gp_release_result *r)
{
	for (unsigned i = 0; i < nlists(); i++)
		if (ld(&d->list[i].cached_blocks) != 0)
			gp_pool_free_blocks(p, d, detach_older(&d->list[i], SIZE_MAX, before), r);
}

/* What a release keeps: by size, at most `target` cached bytes per device (oldest go first), or,
 * with `budget`, all but about `budget` bytes given back (oldest first); by age, the blocks freed
 * at or after `before_ns`. */
struct keep {
	int by_age;
	uint64_t target, before_ns, budget;
};

static int release_devices(struct gp_pool *p, int device, const struct keep *k,
			   enum gp_release_cause cause, struct gp_release_result *res)
{
	struct gp_release_result r = { 0, 0, 0, 0 };
	uint64_t t0 = now(p);

	if (cause >= GP_CAUSE_COUNT || device >= GP_MAX_DEVICES)
		return GP_EINVAL;
	/* Fences driven first, without waiting: on a GPU that is done (quiet), every cached block
	 * settles, and the backend gives it back without waiting for the device. */
	gp_pool_advance(p, 0);
	/* Every thread's cache into the lists first: the release sees all that is cached. */
	gp_tc_drain(p, device, MAX_CLASSES, MAX_CLASSES);
	for (int i = 0; i < GP_MAX_DEVICES; i++) {
		struct gp_dev *d = device >= 0 && i != device ? NULL : dev_get(p, i, 0);
		if (d == NULL)
			continue;
		if (k->by_age) {
			release_older(p, d, k->before_ns, &r);
		} else {
			atomic_store(&d->cap_notified, 0);
			release_dev(p, d, k->target, k->budget, &r);
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

GP_MISS_PATH int gp_pool_release(struct gp_pool *p, int device, uint64_t target,
				 enum gp_release_cause cause, struct gp_release_result *res)
{
	struct keep k = { 0, target, 0, 0 };
	return release_devices(p, device, &k, cause, res);
}

int gp_pool_release_bytes(struct gp_pool *p, int device, uint64_t bytes,
			  enum gp_release_cause cause, struct gp_release_result *res)
{
	struct keep k = { 0, 0, 0, bytes };

	if (bytes == 0) {
		if (res)
			*res = (struct gp_release_result){ 0, 0, 0, 0 };
		return cause < GP_CAUSE_COUNT && device < GP_MAX_DEVICES ? GP_OK : GP_EINVAL;
	}
	return release_devices(p, device, &k, cause, res);
}

int gp_pool_release_idle(struct gp_pool *p, int device, uint64_t freed_before_ns,
			 enum gp_release_cause cause, struct gp_release_result *res)
{
	struct keep k = { 1, 0, freed_before_ns, 0 };
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

struct forget {
	struct gp_pool *p;
	int device;
};

static int keep_other_device(void *val, void *arg)
{
	struct forget *f = arg;
	struct gp_block *b = val;
	if (b->device != f->device)
		return 1;
	if (block_state(b) == BLOCK_LIVE || block_state(b) == BLOCK_HELD)
		retire_block(f->p, b);
	return 0;
}

void gp_pool_forget_device(struct gp_pool *p, int device)
{
	struct gp_dev *d = dev_get(p, device, 0);

	if (d == NULL)
		return;
	gp_tc_forget(p, device); /* the threads' caches of it into the lists */
	/* Cached blocks first (their metadata is freed from the lists), then the live ones. */
	for (unsigned i = 0; i < nlists(); i++) {
		struct gp_list *c = &d->list[i];
		struct gp_block *list = detach(c, 0);
		for (struct gp_block *b = list; b != NULL; b = b->next)
			map_remove_block(p, b);
		retire_list(p, list);
	}
	for (int i = 0; i < GP_PTRMAP_SHARDS; i++) {
		struct gp_ptrmap_shard *s = &p->map.shard[i];
		struct forget f = { p, device };
		gp_lock(&s->lock);
		gp_ptrmap_filter(s, keep_other_device, &f);
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
	for (unsigned i = 0; i < GP_STRIPES; i++) {
		atomic_store(&d->acct[i].own, 0);
		atomic_store(&d->acct[i].remote, 0);
		atomic_store(&d->acct[i].req, 0);
		atomic_store(&d->acct[i].req_remote, 0);
	}
	atomic_store(&d->reserved_bytes, 0);
	atomic_store(&d->movable_bytes, 0);
	atomic_store(&d->held_bytes, 0);
	atomic_store(&d->held_blocks, 0);
}
