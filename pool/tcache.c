/* tcache.c — each thread's own cache of blocks it freed (struct gp_tcache): made, adopted and
 * handed back (a thread's exit), taken from under its owner by thieves (releases, a miss about to
 * grow, a stale claim, a device reset), and made shared by the first other thread that changes
 * the state of a block it owns (a revoke). The owner's hit and free (pool.c) make no locked
 * instruction; a thief or a revoke pays for both sides with one membarrier system call. Never a
 * backend call, and never a map shard's lock taken with a cache's lock held (claim_stale holds
 * one while it takes a cache's). */
#define _GNU_SOURCE
#include "pool_impl.h"
#include "hooks.h"

#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Thread_local struct gp_tcache *gp_tc_mine __attribute__((tls_model("initial-exec")));
_Thread_local uint64_t gp_tc_pool __attribute__((tls_model("initial-exec")));
/* The thread runs its key destructors: it makes no cache any more. */
static _Thread_local int exiting __attribute__((tls_model("initial-exec")));

/* Pools are numbered for the thread-locals above (a pool's address may be reused by the next);
 * the key hands a thread's cache back at its exit. They number and find caches, and hold no pool
 * state. */
static _Atomic uint64_t next_id;
static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static int key_made;

static long membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

/* Every running thread of the process passes a full memory barrier before this returns. */
static int barrier_all(void)
{
	return membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0 ? 0 : -1;
}

static void thread_exit(void *arg);

static void make_key(void)
{
	key_made = pthread_key_create(&key, thread_exit) == 0;
}

void gp_tc_create(struct gp_pool *p)
{
	long cmds;

	p->id = 0;
	pthread_mutex_init(&p->tc_lock, NULL);
	atomic_init(&p->tcs, NULL);
	if (p->cfg.tcache_bytes == 0)
		return;
	cmds = membarrier(MEMBARRIER_CMD_QUERY);
	if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) ||
	    membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0)
		return;
	pthread_once(&key_once, make_key);
	if (!key_made)
		return;
	p->id = atomic_fetch_add(&next_id, 1) + 1;
}

static void tc_free(struct gp_tcache *tc)
{
	pthread_mutex_destroy(&tc->lock);
	free(tc);
}

/* One reference less (the pool's or the owner's): the last one frees the record. */
static void tc_unref(struct gp_tcache *tc)
{
	if (atomic_fetch_sub(&tc->refs, 1) == 1)
		tc_free(tc);
}

void gp_tc_destroy(struct gp_pool *p)
{
	struct gp_tcache *tc = atomic_load(&p->tcs), *next;

	for (; tc != NULL; tc = next) {
		next = tc->next;
		atomic_store(&tc->pool_gone, 1);
		tc_unref(tc);
	}
	pthread_mutex_destroy(&p->tc_lock);
}

/* ---- taking blocks out of a cache ----------------------------------------------------- */

/* Every block of tc unlinked into one chain (by next), its cached figures 0: tc is the caller's
 * alone (the owner with tc's lock, or a thief that has stopped it). */
static struct gp_block *detach_all(struct gp_tcache *tc)
{
	struct gp_block *chain = NULL;

	for (unsigned c = 0; c < MAX_CLASSES; c++) {
		struct gp_block *b = tc->head[c];

		while (b != NULL) {
			struct gp_block *next = b->next;
			b->next = chain;
			chain = b;
			b = next;
		}
		tc->head[c] = NULL;
		atomic_store_explicit(&tc->n[c], 0, memory_order_relaxed);
	}
	atomic_store_explicit(&tc->bytes, 0, memory_order_relaxed);
	return chain;
}

void gp_tc_relist(struct gp_pool *p, struct gp_block *b)
{
	uint64_t t;

	if (b == NULL)
		return;
	t = now(p); /* their free time (tc_put reads no clock): no earlier than any of their frees */
	while (b != NULL) {
		struct gp_block *next = b->next;
		struct gp_dev *d = dev_get(p, b->device, 0);

		b->next = NULL;
		b->freed_ns = t;
		push_cached(p, d, b);
		b = next;
	}
	/* A free that saw ordered mode may have stamped its block after the fence that
	 * gp_pool_set_ordered asked for was recorded: the next fence must cover it. */
	if (!atomic_load_explicit(&p->ordered, memory_order_relaxed) &&
	    !atomic_load_explicit(&p->dirty, memory_order_relaxed))
		atomic_store(&p->dirty, 1);
}

void gp_tc_flush(struct gp_pool *p, struct gp_tcache *tc)
{
	struct gp_block *chain;

	if (atomic_load_explicit(&tc->bytes, memory_order_relaxed) == 0) /* no block */
		return;
	gp_mutex_lock(&tc->lock);
	chain = detach_all(tc);
	gp_mutex_unlock(&tc->lock);
	gp_tc_relist(p, chain);
}

/* Until the owner of tc is out of the section it is in, if any. A section is a few dozen
 * instructions with no lock, call or wait in them: it ends within the owner's time slice, so
 * the wait has no bound (a bound would let a release skip idle blocks, and a device reset leave
 * blocks of the old context in a cache). A thread that a fork left behind never ends one, but
 * the pool is never used in a fork's child (the shim passes through there). */
static void await_owner(struct gp_tcache *tc)
{
	while (atomic_load_explicit(&tc->busy, memory_order_acquire))
		sched_yield();
}

/* Until the owner has put back on their lists the blocks its last free pushed out of tc (older
 * than every block tc still holds): listed after them, tc's blocks keep each list in free order,
 * which releases by age and to a target rely on. Called by a thief that has stopped the owner.
 * The owner's relist takes list locks only, which no thief holds while it waits here; bounded
 * all the same (a second), as only the order of a release depends on it. */
static void await_relisted(struct gp_tcache *tc)
{
	uint64_t t0 = 0;

	while (atomic_load_explicit(&tc->relisting, memory_order_acquire)) {
		if (t0 == 0)
			t0 = gp_fine_ns();
		else if (gp_fine_ns() - t0 > 1000000000ull)
			return;
		sched_yield();
	}
}

/* A thief's hold on tc: its lock, then the owner kept out of its sections. 0, or -1 (lock given
 * back) when the barrier failed; with `try`, also when another thief has the cache (a miss does
 * not wait for it). */
static int stop(struct gp_tcache *tc, int try)
{
	if (try) {
		if (pthread_mutex_trylock(&tc->lock) != 0)
			return -1;
		gp_lock_note(1);
	} else {
		gp_mutex_lock(&tc->lock);
	}
	atomic_store(&tc->steal, 1);
	/* From here, an owner section that began before has stored busy = 1 where we see it, and
	 * one that begins after sees steal = 1 and keeps out. */
	if (barrier_all() != 0) {
		atomic_store_explicit(&tc->steal, 0, memory_order_release);
		gp_mutex_unlock(&tc->lock);
		return -1;
	}
	await_owner(tc);
	return 0;
}

static void go_on(struct gp_tcache *tc)
{
	atomic_store_explicit(&tc->steal, 0, memory_order_release);
	gp_mutex_unlock(&tc->lock);
}

/* Whether tc holds blocks of `device` (< 0: any) of a class in [cls, last] (cls >= MAX_CLASSES:
 * any class). */
static int holds(struct gp_tcache *tc, int device, unsigned cls, unsigned last)
{
	if (atomic_load_explicit(&tc->bytes, memory_order_relaxed) == 0) /* no block */
		return 0;
	if (device >= 0 && tc->device != device)
		return 0;
	if (cls >= MAX_CLASSES)
		return 1;
	for (unsigned c = cls; c <= last && c < MAX_CLASSES; c++)
		if (atomic_load_explicit(&tc->n[c], memory_order_relaxed) != 0)
			return 1;
	return 0;
}

int gp_tc_drain(struct gp_pool *p, int device, unsigned cls, unsigned last)
{
	int moved = 0;

	if (p->id == 0)
		return 0;
	for (struct gp_tcache *tc = atomic_load(&p->tcs); tc != NULL; tc = tc->next) {
		struct gp_block *chain;

		/* Racy looks: a cache filled after them is as a free made after the drain began. */
		if (!holds(tc, device, cls, last) || stop(tc, cls < MAX_CLASSES) != 0)
			continue;
		await_relisted(tc);
#ifdef GP_POOL_TEST_HOOKS
		if (gp_pool_test_in_steal != NULL)
			gp_pool_test_in_steal(p);
#endif
		chain = detach_all(tc);
		go_on(tc);
		moved |= chain != NULL;
		gp_tc_relist(p, chain);
	}
	return moved;
}

int gp_tc_claim(struct gp_pool *p, struct gp_block *old)
{
	if (p->id == 0)
		return 0;
	for (struct gp_tcache *tc = atomic_load(&p->tcs); tc != NULL; tc = tc->next) {
		struct gp_block **at;
		int found = 0;

		if (!holds(tc, old->device, old->cls, old->cls) || stop(tc, 0) != 0)
			continue;
		for (at = &tc->head[old->cls]; *at != NULL; at = &(*at)->next) {
			if (*at == old) {
				*at = old->next;
				old->next = NULL;
				atomic_store_explicit(&tc->n[old->cls], tc->n[old->cls] - 1,
						      memory_order_relaxed);
				bump(&tc->bytes, -(int64_t)old->bytes);
				found = 1;
				break;
			}
		}
		go_on(tc);
		if (found)
			return 1;
	}
	return 0;
}

void gp_tc_quiesce(struct gp_pool *p)
{
	if (p->id == 0 || barrier_all() != 0)
		return;
	for (struct gp_tcache *tc = atomic_load(&p->tcs); tc != NULL; tc = tc->next)
		await_owner(tc);
}

void gp_tc_forget(struct gp_pool *p, int device)
{
	if (p->id == 0)
		return;
	gp_tc_drain(p, device, MAX_CLASSES, MAX_CLASSES);
	for (struct gp_tcache *tc = atomic_load(&p->tcs); tc != NULL; tc = tc->next) {
		if (tc->device != device || stop(tc, 0) != 0)
			continue;
		atomic_store(&tc->retired, ld(&tc->allocs) - ld(&tc->frees));
		atomic_store(&tc->live_bytes, 0);
		atomic_store(&tc->requested_bytes, 0);
		atomic_store(&tc->shared, 1); /* its live blocks are retired under its owner's frees */
		go_on(tc);
	}
}

void gp_tc_revoke(struct gp_pool *p, struct gp_tcache *tc)
{
	struct timespec ts = { 0, 1000000 };

	(void)p;
	if (atomic_load_explicit(&tc->shared, memory_order_acquire))
		return;
	if (stop(tc, 0) == 0) {
		atomic_store(&tc->shared, 1);
		go_on(tc);
		return;
	}
	/* The barrier refused after the pool registered for it (never seen): shared at once, then
	 * time for a section under way, whose store may still sit in its processor's store buffer,
	 * to show and end. */
	atomic_store(&tc->shared, 1);
	nanosleep(&ts, NULL);
	await_owner(tc);
}

/* ---- a thread's own cache: made, adopted, handed back ---------------------------------- */

/* The thread leaves tc: its blocks back into their lists, the record free for the next thread
 * of its device (its figures stay: stats sum every record). */
static void leave(struct gp_tcache *tc, struct gp_pool *p)
{
	gp_tc_flush(p, tc);
	gp_mutex_lock(&p->tc_lock);
	atomic_store(&tc->owned, 0);
	gp_mutex_unlock(&p->tc_lock);
}

/* The pool of the thread's cache: used only while the record says the pool lives. */
static _Thread_local struct gp_pool *mine_pool __attribute__((tls_model("initial-exec")));

static void drop_mine(void)
{
	struct gp_tcache *tc = gp_tc_mine;

	if (tc == NULL)
		return;
	if (!atomic_load(&tc->pool_gone))
		leave(tc, mine_pool);
	gp_tc_mine = NULL;
	gp_tc_pool = 0;
	mine_pool = NULL;
	tc_unref(tc);
}

static void thread_exit(void *arg)
{
	(void)arg;
	exiting = 1;
	drop_mine();
}

struct gp_tcache *gp_tc_attach(struct gp_pool *p, int device)
{
	struct gp_tcache *tc;

	if (p->id == 0 || exiting)
		return NULL;
	tc = tc_of(p);
	if (tc != NULL)
		return tc->device == device ? tc : NULL;
	drop_mine(); /* another pool's */
	gp_mutex_lock(&p->tc_lock);
	for (tc = atomic_load(&p->tcs); tc != NULL; tc = tc->next)
		if (!atomic_load(&tc->owned) && tc->device == device)
			break;
	if (tc == NULL) {
		tc = aligned_alloc(GP_LINE, (sizeof(*tc) + GP_LINE - 1) / GP_LINE * GP_LINE);
		if (tc != NULL) {
			memset(tc, 0, sizeof(*tc));
			pthread_mutex_init(&tc->lock, NULL);
			tc->device = device;
			atomic_init(&tc->refs, 1);
			tc->next = atomic_load(&p->tcs);
			atomic_store(&p->tcs, tc);
		}
	}
	if (tc != NULL) {
		atomic_store(&tc->owned, 1);
		atomic_fetch_add(&tc->refs, 1);
	}
	gp_mutex_unlock(&p->tc_lock);
	if (tc == NULL)
		return NULL;
	gp_tc_mine = tc;
	gp_tc_pool = p->id;
	mine_pool = p;
	pthread_setspecific(key, tc);
	return tc;
}
