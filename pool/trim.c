/* trim.c — cfg.remap_trim: a miss that must still grow the pool first gives back idle blocks of
 * other sizes that could not serve it, as many bytes as it grows by, so that a process holds
 * about what it uses. Movable blocks first (settled, as old as cfg.remap_age_ns, the largest
 * first): giving them back waits for nothing. Then blocks of classes of at most 1 MiB, the
 * largest classes first, each list oldest first (then those in the threads' caches): real
 * allocations of their own that no other size can use. Those go only while the GPU is idle
 * (backend quiet): giving one back waits for the whole device (cudaFree's wait), which then costs
 * nothing; a miss of such a class gives back only such blocks (a movable one would be far more
 * than it grows by), and below 64 KiB nothing is given back or made room for. Every block given
 * back has been idle at least cfg.remap_age_ns: a loop that asks for several sizes in turn would
 * otherwise trade its blocks back and forth, each miss giving back the block the next one needs,
 * a real allocation and a real free per size per pass. What the age kept is owed: the bytes of
 * idle blocks too young to go that the miss grew by instead (d->trim_owed, at most what they
 * hold). The shim's control thread takes the debt once the process has allocated nothing for
 * the age (gp_pool_take_owed) and gives back that many bytes, the blocks idle longest first: a
 * loop that goes on asking never pays it; a client gone quiet holds about what a trim without an
 * age would have left it. Never a backend call under a pool lock. */
#define _POSIX_C_SOURCE 200809L
#include "pool_impl.h"

/* Unlink the oldest block of list c that may go: a movable one that may move now
 * (gp_pool_take_movable, which holds it to the same age); else the head when it is an ordinary
 * block idle long enough (the GPU is idle: whatever its fence says, its work is done; the list is
 * in free order, so a younger head means no block of it is old enough). NULL when none may. */
static struct gp_block *take_one(struct gp_pool *p, struct gp_list *c, int movable, uint64_t t)
{
	struct gp_block *b;

	if (movable)
		return gp_pool_take_movable(p, c, t);
	if (ld(&c->cached_blocks) == 0)
		return NULL;
	gp_lock(&c->lock);
	b = c->head;
	if (b != NULL && !b->movable && old_enough(p, b, t))
		unlink_cached(c, NULL, b);
	else
		b = NULL;
	gp_unlock(&c->lock);
	return b;
}

/* Blocks of classes [lo, hi) other than cls, the largest classes first, taken until `need`
 * bytes are gathered on *list; returns the bytes. *kept (when not NULL) adds the bytes the lists
 * it looked at still cache after it: blocks too young to go (or still fenced). */
static size_t gather(struct gp_pool *p, struct gp_dev *d, unsigned lo, unsigned hi, unsigned cls,
		     size_t need, int movable, struct gp_block **list, size_t *kept)
{
	uint64_t t = now(p);
	size_t got = 0;
	struct gp_block *b;

	for (unsigned c = hi; c-- > lo && got < need;) {
		if (c == cls)
			continue;
		for (unsigned i = 0; i < GP_STRIPES && got < need; i++) {
			struct gp_list *l = &d->list[c * GP_STRIPES + i];

			while (got < need && (b = take_one(p, l, movable, t))) {
				b->next = *list;
				*list = b;
				got += b->bytes;
			}
			if (kept != NULL && got < need)
				*kept += ld(&l->cached_bytes);
		}
	}
	return got;
}

/* Small blocks below this are neither given back nor make room for themselves: they cost little
 * memory (the driver packs them), and scalars and little buffers of many sizes that a loop
 * allocates in turn would trade their blocks back and forth, each trade a real allocation. */
#define TRIM_SMALL_MIN ((size_t)64 << 10)

/* The first class above SMALL_CLASS_MAX_BYTES. */
static unsigned first_large_class(void)
{
	return gp_pool_class_of(SMALL_CLASS_MAX_BYTES) + 1;
}

/* A miss grows by `grows` bytes where `kept` bytes of idle blocks were too young to go: the debt
 * goes up by what they could have covered, and never above what they hold (the next miss looks
 * at the same blocks). */
static void owe(struct gp_pool *p, struct gp_dev *d, int device, uint64_t grows, uint64_t kept)
{
	uint64_t was = ld(&d->trim_owed), want;

	do {
		want = was + grows < kept ? was + grows : kept;
		if (want <= was)
			return;
	} while (!atomic_compare_exchange_weak(&d->trim_owed, &was, want));
	gp_pool_note_growth(p, d, device); /* the miss grows: cfg.owed, once a window */
}

void gp_pool_trim_others(struct gp_pool *p, struct gp_dev *d, int device, unsigned cls,
			 size_t need)
{
	struct gp_release_result r = { 0, 0, 0, 0 };
	struct gp_block *list = NULL;
	unsigned mid = first_large_class();
	size_t got = 0, kept = 0;

	if (!p->cfg.remap_trim || need == 0 || gp_pool_class_bytes(cls) < TRIM_SMALL_MIN ||
	    !gp_may_release(p))
		return;
	if (!small_class(cls))
		got = gather(p, d, mid, gp_pool_class_count(), cls, need, 1, &list, &kept);
	if (got < need && p->be.quiet != NULL && p->be.quiet(p->be.ctx) == 1) {
		unsigned lo = gp_pool_class_of(TRIM_SMALL_MIN);

		got += gather(p, d, lo, mid, cls, need - got, 0, &list, &kept);
		/* The threads' caches hold such blocks too (never movable ones), stamped freed as
		 * they leave (a cache keeps no free times): none of them is old enough with an age. */
		if (got < need && p->cfg.remap_age_ns == 0 && gp_tc_drain(p, device, lo, mid - 1))
			gather(p, d, lo, mid, cls, need - got, 0, &list, NULL);
	}
	if (list != NULL) {
		gp_pool_free_blocks(p, d, list, &r);
		atomic_fetch_add(&d->trims, r.blocks);
		atomic_fetch_add(&d->trimmed_bytes, r.bytes);
	}
	if (got < need && kept > 0 && p->cfg.remap_age_ns > 0)
		owe(p, d, device, need - got, kept);
}

uint64_t gp_pool_take_owed(struct gp_pool *p, int device)
{
	struct gp_dev *d = dev_get(p, device, 0);

	return d != NULL && ld(&d->trim_owed) != 0 ? atomic_exchange(&d->trim_owed, 0) : 0;
}

void gp_pool_note_growth(struct gp_pool *p, struct gp_dev *d, int device)
{
	if (atomic_load_explicit(&d->grew, memory_order_relaxed) || atomic_exchange(&d->grew, 1))
		return;
	if (p->cfg.owed != NULL)
		p->cfg.owed(p->cfg.arg, device);
}

/* What a quiet device holds beyond what its program asked for at its busiest that is worth a
 * release: less than a granule of the driver's is left (a release gives back whole blocks, and
 * would take a block the next request needs for a few bytes). */
#define QUIET_EXCESS_MIN ((uint64_t)2 << 20)

uint64_t gp_pool_take_quiet_excess(struct gp_pool *p, int device)
{
	struct gp_dev *d = dev_get(p, device, 0);
	uint64_t held, peak, last;

	if (d == NULL || !atomic_load(&d->grew) || !atomic_exchange(&d->grew, 0))
		return 0;
	held = ld(&d->reserved_bytes); /* before the peak: a growth after it is its window's */
	peak = gp_pool_window_peak(d);
	last = atomic_exchange(&d->last_window_peak, peak);
	if (last > peak)
		peak = last; /* a short spell after a long one keeps what the long one used */
	return peak < held && held - peak >= QUIET_EXCESS_MIN ? held - peak : 0;
}
