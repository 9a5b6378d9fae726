/* fake_backend.h — a stand-in device for pool unit tests: host memory from malloc, call counters,
 * a per-device capacity that makes alloc answer GP_ENOMEM, fences completed by hand (or after a
 * number of polls), a clock the test moves, and a hook run inside every backend call. Built
 * against the pool's test hooks, it counts every call made while a pool lock is held.
 * It never calls the pool itself; only a test's hook may. Thread-safe: one mutex, never held
 * while the hook runs. */
#ifndef GPUPOOL_FAKE_BACKEND_H
#define GPUPOOL_FAKE_BACKEND_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "pool.h"

enum fake_op {
	FAKE_OP_ALLOC = 0,
	FAKE_OP_FREE,
	FAKE_OP_FENCE_RECORD,
	FAKE_OP_FENCE_QUERY,
	FAKE_OP_FENCE_WAIT,
	FAKE_OP_FENCE_DESTROY,
	FAKE_OP_NOW,
	FAKE_OP_MAY_RELEASE,
	FAKE_OP_QUIET,
	FAKE_OP_REMAP,
	FAKE_OP_SPLIT,
	FAKE_OP_MERGE,
	FAKE_OP_JOINABLE,
	FAKE_OP_JOIN,
	FAKE_OP_COUNT
};

/* Runs at the start of a backend call, in the calling thread, with no fake lock held. */
typedef void (*fake_hook_fn)(void *arg, enum fake_op op);

/* Counters since fake_init (or fake_reset_counts). */
struct fake_counts {
	uint64_t calls[FAKE_OP_COUNT]; /* every call, successful or not */
	uint64_t allocs_ok;            /* alloc calls that returned GP_OK */
	uint64_t allocs_nomem;         /* alloc calls answered GP_ENOMEM */
	uint64_t frees_ok;             /* free calls of a block the fake had handed out */
	uint64_t frees_by_dev[GP_MAX_DEVICES];
	uint64_t frees_unsettled;      /* free calls told the block may still be in use */
	uint64_t remaps_ok;            /* remap calls that made a block */
	uint64_t remapped_bytes;       /* bytes of sources they moved */
	uint64_t remap_dropped;        /* sources a failed remap gave back (fake_set_remap_rc) */
	uint64_t remap_partial;        /* sources a remap was asked for part of */
	uint64_t splits_ok;            /* split calls that made a block */
	uint64_t merges_ok;            /* merge calls that made one block of several */
	uint64_t joinable_calls;       /* joinable questions asked */
	uint64_t misuse;               /* contract breaches seen: unknown or double free, wrong
					* device or size on free, use of a destroyed fence, bad device */
	uint64_t locked_calls;         /* calls made while the calling thread held a pool lock
					* (pool built with GP_POOL_TEST_HOOKS; pool.h forbids it) */
	int first_locked_op;           /* the op of the first such call (-1: none) */
};

struct fake_block;
struct fake_fence;

struct fake_backend {
	struct gp_backend be; /* pass &fake.be to gp_pool_create */

	pthread_mutex_t lock;
	uint64_t capacity[GP_MAX_DEVICES]; /* bytes; UINT64_MAX = unlimited */
	uint64_t used[GP_MAX_DEVICES];     /* bytes held by blocks not yet freed */
	uint64_t blocks;                   /* blocks held, all devices */
	struct fake_block **buckets;       /* pointer -> block hash */
	size_t nbuckets;
	struct fake_counts counts;

	int fence_record_rc;    /* what fence_record answers; GP_OK records a fence */
	unsigned fence_auto;    /* >0: a fence completes on its fence_auto-th query */
	int free_rc;            /* what free answers (the memory is freed either way) */
	size_t movable_min;     /* blocks of at least this many bytes are movable (0: none) */
	int remap_rc;           /* what remap answers; GP_OK remaps */
	int remap_consumes;     /* with remap_rc set: whether the failure gives the sources back */
	size_t remap_piece;     /* a partial source moves its take rounded up to this (0: exact) */
	int split_rc;           /* what split answers when it could split (fake_set_split) */
	int may_release;        /* what may_release answers; 1 unless a test sets it */
	int quiet;              /* what quiet answers: 0 (the GPU is never idle) unless set; 1 also
				 * completes every fence recorded so far */
	uint64_t quiet_yes;     /* quiet calls answered 1 */
	int join;               /* what join answers: 0 unless set (fake_set_join) */
	int join_inflight;      /* the last join call's `inflight` */
	int join_settle_asked;  /* join calls that asked for a settle fence */
	struct fake_fence **fences; /* every fence recorded, by sequence - 1 */
	size_t nfences, capfences;

	uint64_t clock_ns;
	uint64_t tick_ns;       /* added to the clock on every now_ns call */

	void **free_log;        /* pointers freed, in call order (first free_log_cap kept) */
	int *free_log_dev;
	size_t free_log_len, free_log_cap;

	size_t last_alloc_bytes;
	int last_alloc_device;

	fake_hook_fn hook;
	void *hook_arg;

	struct fake_block *reissue; /* freed behind the pool's back, for the next alloc it fits */
	uint64_t reissued;          /* allocs answered with such an address */
};

void fake_init(struct fake_backend *f);
/* Frees whatever host memory and fences are still held (a pool destroyed with blocks). */
void fake_fini(struct fake_backend *f);

void fake_set_capacity(struct fake_backend *f, int device, uint64_t bytes);
uint64_t fake_used(struct fake_backend *f, int device);
uint64_t fake_used_total(struct fake_backend *f);
uint64_t fake_blocks(struct fake_backend *f);
/* 1 if ptr is a block the fake handed out and has not had back; fills device and bytes. */
int fake_holds(struct fake_backend *f, const void *ptr, int *device, size_t *bytes);
void fake_get_counts(struct fake_backend *f, struct fake_counts *out);
uint64_t fake_calls(struct fake_backend *f, enum fake_op op);
uint64_t fake_misuse(struct fake_backend *f);
/* Calls made while the calling thread held a pool lock (0 unless the pool broke its contract);
 * *op: the first one's (may be NULL). */
uint64_t fake_locked_calls(struct fake_backend *f, int *op);

/* Fences are numbered 1, 2, ... in recording order. */
size_t fake_fences_recorded(struct fake_backend *f);
void fake_complete_fence(struct fake_backend *f, size_t seq);
void fake_complete_all_fences(struct fake_backend *f);
int fake_fence_complete(struct fake_backend *f, size_t seq);
int fake_fence_destroyed(struct fake_backend *f, size_t seq);
void fake_set_fence_record_rc(struct fake_backend *f, int rc);
void fake_set_fence_auto(struct fake_backend *f, unsigned polls);

void fake_set_free_rc(struct fake_backend *f, int rc);
/* Blocks of at least min_bytes are movable and the backend offers remap (0: neither, the
 * default). A remap checks its sources (movable blocks of the fake, of the device, what is
 * wanted of them at most the size together; misuse otherwise), charges only the rest against
 * the capacity, and copies the bytes each source moves (all, or the end of it: its take, see
 * fake_set_remap_piece; the source keeps its head) to their offset in the new block. */
void fake_set_movable(struct fake_backend *f, size_t min_bytes);
/* A partial source moves its take rounded up to `bytes` (0, the default: exactly its take);
 * a split makes the end of that size a block. */
void fake_set_remap_piece(struct fake_backend *f, size_t bytes);
/* The backend offers split, merge and joinable (on, after fake_set_movable, which leaves them
 * off): the end of a movable block (its take, rounded as a remap's partial source) becomes a block
 * of its own in the same memory, and neighbours in one memory become one block again; rc: what a
 * split that could be made answers instead (GP_OK: makes it). */
void fake_set_split(struct fake_backend *f, int on, int rc);
/* remap fails with rc (GP_OK: works again); consumes: the failure gives the sources back. */
void fake_set_remap_rc(struct fake_backend *f, int rc, int consumes);
/* Physical pieces of the block at ptr: 1 for an allocation, the sum of its sources' plus one
 * for the new rest for a remap; 0 for a pointer the fake does not hold. */
unsigned fake_pieces(struct fake_backend *f, const void *ptr);
void fake_set_may_release(struct fake_backend *f, int yes);
void fake_set_quiet(struct fake_backend *f, int idle);
/* What join answers from now on (1: the streams now wait for everything issued so far). */
void fake_set_join(struct fake_backend *f, int joins);
uint64_t fake_quiet_yes(struct fake_backend *f);

void fake_set_clock(struct fake_backend *f, uint64_t ns);
void fake_advance_clock(struct fake_backend *f, uint64_t ns);
void fake_set_tick(struct fake_backend *f, uint64_t ns);
/* The clock as it stands, without ticking it or counting a call. */
uint64_t fake_clock(struct fake_backend *f);

size_t fake_free_log_len(struct fake_backend *f);
void *fake_free_log_at(struct fake_backend *f, size_t i, int *device);
/* Position of the last free of ptr in the log (host addresses get reused), or -1. */
long fake_free_log_find(struct fake_backend *f, const void *ptr);

size_t fake_last_alloc_bytes(struct fake_backend *f, int *device);

void fake_set_hook(struct fake_backend *f, fake_hook_fn fn, void *arg);

/* The program frees the block at ptr straight through the driver, past the pool: the fake forgets
 * it (no free call is counted), and, as a driver reuses a range just freed, the next alloc on
 * its device of at most its size gets its address. 0, or -1 when the fake does not hold ptr. */
int fake_free_behind(struct fake_backend *f, void *ptr);
/* Allocs answered with an address freed behind the pool's back. */
uint64_t fake_reissued(struct fake_backend *f);

/* cudaDeviceReset: every block on `device` is gone, without a free call (nothing is counted), and
 * an address of the device freed behind the pool's back is not handed out again. */
void fake_reset_device(struct fake_backend *f, int device);

#endif
