/* fake_backend.c — the pool's backend table implemented on host memory for unit tests.
 * Every breach of the backend contract it can see (freeing what it did not hand out, the wrong
 * device or size, touching a destroyed fence) is counted in misuse so tests can assert zero.
 * It must never call the pool: only a test hook does that, and the hook runs with no lock held. */
#include "fake_backend.h"

#include <stdlib.h>
#include <string.h>

#ifdef GP_POOL_TEST_HOOKS
#include "hooks.h"
#endif

/* Host memory one or more blocks lie in (a split shares it): freed with the last of them. */
struct fake_mem {
	void *base;
	unsigned refs;
};

struct fake_block {
	struct fake_block *next;
	void *ptr;
	size_t bytes;
	int device;
	int movable;
	unsigned pieces; /* physical pieces: 1, or those of a remap's sources plus its new rest */
	struct fake_mem *mem;
};

/* A block record and its memory: `bytes` of new host memory, or NULL on failure. */
static struct fake_block *block_new(size_t bytes)
{
	struct fake_block *b = calloc(1, sizeof(*b));

	if (b == NULL)
		return NULL;
	b->mem = malloc(sizeof(*b->mem));
	if (b->mem == NULL || (b->mem->base = malloc(bytes ? bytes : 1)) == NULL) {
		free(b->mem);
		free(b);
		return NULL;
	}
	b->mem->refs = 1;
	b->ptr = b->mem->base;
	return b;
}

/* A block record gone: its memory with the last block in it. */
static void block_free(struct fake_block *b)
{
	if (--b->mem->refs == 0) {
		free(b->mem->base);
		free(b->mem);
	}
	free(b);
}

struct fake_fence {
	size_t seq;
	unsigned queries;
	int complete;
	int destroyed;
};

#define FAKE_NBUCKETS 8192

static size_t bucket_of(const struct fake_backend *f, const void *ptr)
{
	uintptr_t v = (uintptr_t)ptr >> 4;

	return (size_t)((v * UINT64_C(0x9E3779B97F4A7C15)) >> 17) % f->nbuckets;
}

static int valid_device(int device)
{
	return device >= 0 && device < GP_MAX_DEVICES;
}

/* A call made while the calling thread holds a pool lock (f->lock held): counted. Only the pool
 * built with its test hooks counts its locks; without them nothing is seen. */
static void check_unlocked(struct fake_backend *f, int op)
{
#ifdef GP_POOL_TEST_HOOKS
	if (gp_pool_test_locks_held() != 0 && f->counts.locked_calls++ == 0)
		f->counts.first_locked_op = op;
#else
	(void)f;
	(void)op;
#endif
}

static void run_hook(struct fake_backend *f, enum fake_op op)
{
	fake_hook_fn fn;
	void *arg;

	pthread_mutex_lock(&f->lock);
	check_unlocked(f, (int)op);
	f->counts.calls[op]++;
	fn = f->hook;
	arg = f->hook_arg;
	pthread_mutex_unlock(&f->lock);
	if (fn)
		fn(arg, op);
}

/* Unlink the block at ptr (f->lock held), or NULL. */
static struct fake_block *unlink_block(struct fake_backend *f, const void *ptr)
{
	struct fake_block **pp, *b;

	for (pp = &f->buckets[bucket_of(f, ptr)]; *pp; pp = &(*pp)->next) {
		if ((*pp)->ptr == ptr) {
			b = *pp;
			*pp = b->next;
			return b;
		}
	}
	return NULL;
}

static struct fake_block *find_block(struct fake_backend *f, const void *ptr)
{
	struct fake_block *b;

	for (b = f->buckets[bucket_of(f, ptr)]; b; b = b->next)
		if (b->ptr == ptr)
			return b;
	return NULL;
}

static int fake_alloc(void *ctx, int device, size_t bytes, void **out)
{
	struct fake_backend *f = ctx;
	struct fake_block *b = NULL;
	void *mem = NULL;
	int rc = GP_OK;

	run_hook(f, FAKE_OP_ALLOC);
	pthread_mutex_lock(&f->lock);
	if (!valid_device(device) || !out) {
		f->counts.misuse++;
		rc = GP_EINVAL;
		goto out;
	}
	f->last_alloc_bytes = bytes;
	f->last_alloc_device = device;
	if (f->capacity[device] != UINT64_MAX &&
	    (bytes > f->capacity[device] || f->used[device] > f->capacity[device] - bytes)) {
		f->counts.allocs_nomem++;
		rc = GP_ENOMEM;
		goto out;
	}
	if (f->reissue != NULL && f->reissue->device == device && f->reissue->bytes >= bytes) {
		b = f->reissue; /* its memory again, at its address */
		f->reissue = NULL;
		f->reissued++;
	} else {
		b = block_new(bytes);
	}
	if (!b) {
		f->counts.allocs_nomem++;
		rc = GP_ENOMEM;
		goto out;
	}
	mem = b->ptr;
	b->bytes = bytes;
	b->device = device;
	b->movable = f->movable_min != 0 && bytes >= f->movable_min;
	b->pieces = 1;
	b->next = f->buckets[bucket_of(f, mem)];
	f->buckets[bucket_of(f, mem)] = b;
	f->used[device] += bytes;
	f->blocks++;
	f->counts.allocs_ok++;
	*out = mem;
out:
	pthread_mutex_unlock(&f->lock);
	return rc;
}

static int fake_free(void *ctx, int device, void *ptr, size_t bytes, int settled)
{
	struct fake_backend *f = ctx;
	struct fake_block *b;
	int rc;

	run_hook(f, FAKE_OP_FREE);
	pthread_mutex_lock(&f->lock);
	b = unlink_block(f, ptr);
	if (!b) {
		f->counts.misuse++;
		rc = GP_EINVAL;
		goto out;
	}
	if (b->device != device || b->bytes != bytes)
		f->counts.misuse++;
	f->used[b->device] -= b->bytes;
	f->blocks--;
	f->counts.frees_ok++;
	if (!settled)
		f->counts.frees_unsettled++;
	f->counts.frees_by_dev[b->device]++;
	if (f->free_log_len < f->free_log_cap) {
		f->free_log[f->free_log_len] = ptr;
		f->free_log_dev[f->free_log_len] = device;
		f->free_log_len++;
	}
	block_free(b);
	rc = f->free_rc;
out:
	pthread_mutex_unlock(&f->lock);
	return rc;
}

/* A new fence, with f->lock held (a miss's record, or a join's settle fence). */
static int new_fence_locked(struct fake_backend *f, void **fence)
{
	struct fake_fence *fe;

	if (f->nfences == f->capfences) {
		size_t cap = f->capfences ? 2 * f->capfences : 64;
		struct fake_fence **n = realloc(f->fences, cap * sizeof(*n));

		if (!n)
			return GP_EBACKEND;
		f->fences = n;
		f->capfences = cap;
	}
	fe = calloc(1, sizeof(*fe));
	if (!fe)
		return GP_EBACKEND;
	fe->seq = f->nfences + 1;
	f->fences[f->nfences++] = fe;
	*fence = fe;
	return GP_OK;
}

static int fake_fence_record(void *ctx, void **fence)
{
	struct fake_backend *f = ctx;
	int rc;

	run_hook(f, FAKE_OP_FENCE_RECORD);
	pthread_mutex_lock(&f->lock);
	rc = f->fence_record_rc;
	if (rc == GP_OK)
		rc = new_fence_locked(f, fence);
	pthread_mutex_unlock(&f->lock);
	return rc;
}

static int fake_fence_query(void *ctx, void *fence)
{
	struct fake_backend *f = ctx;
	struct fake_fence *fe = fence;
	int rc;

	run_hook(f, FAKE_OP_FENCE_QUERY);
	pthread_mutex_lock(&f->lock);
	if (!fe || fe->destroyed) {
		f->counts.misuse++;
		rc = -1;
		goto out;
	}
	fe->queries++;
	if (f->fence_auto && fe->queries >= f->fence_auto)
		fe->complete = 1;
	rc = fe->complete;
out:
	pthread_mutex_unlock(&f->lock);
	return rc;
}

/* The fake cannot block for GPU work, so a wait completes the fence. */
static int fake_fence_wait(void *ctx, void *fence)
{
	struct fake_backend *f = ctx;
	struct fake_fence *fe = fence;
	int rc = GP_OK;

	run_hook(f, FAKE_OP_FENCE_WAIT);
	pthread_mutex_lock(&f->lock);
	if (!fe || fe->destroyed) {
		f->counts.misuse++;
		rc = GP_EINVAL;
		goto out;
	}
	fe->complete = 1;
out:
	pthread_mutex_unlock(&f->lock);
	return rc;
}

static void fake_fence_destroy(void *ctx, void *fence)
{
	struct fake_backend *f = ctx;
	struct fake_fence *fe = fence;

	run_hook(f, FAKE_OP_FENCE_DESTROY);
	pthread_mutex_lock(&f->lock);
	if (!fe || fe->destroyed)
		f->counts.misuse++;
	else
		fe->destroyed = 1;
	pthread_mutex_unlock(&f->lock);
}

static uint64_t fake_now_ns(void *ctx)
{
	struct fake_backend *f = ctx;
	uint64_t t;

	run_hook(f, FAKE_OP_NOW);
	pthread_mutex_lock(&f->lock);
	f->clock_ns += f->tick_ns;
	t = f->clock_ns;
	pthread_mutex_unlock(&f->lock);
	return t;
}

static int fake_may_release(void *ctx)
{
	struct fake_backend *f = ctx;
	int v;

	run_hook(f, FAKE_OP_MAY_RELEASE);
	pthread_mutex_lock(&f->lock);
	v = f->may_release;
	pthread_mutex_unlock(&f->lock);
	return v;
}

static void complete_all_locked(struct fake_backend *f)
{
	for (size_t i = 0; i < f->nfences; i++)
		f->fences[i]->complete = 1;
}

static int fake_quiet(void *ctx)
{
	struct fake_backend *f = ctx;
	int v;

	run_hook(f, FAKE_OP_QUIET);
	pthread_mutex_lock(&f->lock);
	v = f->quiet;
	if (v == 1) { /* an idle GPU has done everything recorded */
		f->quiet_yes++;
		complete_all_locked(f);
	}
	pthread_mutex_unlock(&f->lock);
	return v;
}

/* A join's settle fence is an ordinary fence of the fake's (completed as the others), not
 * counted as a fence_record call. */
static int fake_join(void *ctx, int inflight, void **settle)
{
	struct fake_backend *f = ctx;
	int v;

	run_hook(f, FAKE_OP_JOIN);
	pthread_mutex_lock(&f->lock);
	v = f->join;
	f->join_inflight = inflight;
	f->join_settle_asked += settle != NULL;
	if (v == 1 && settle != NULL && new_fence_locked(f, settle) != GP_OK)
		*settle = NULL;
	pthread_mutex_unlock(&f->lock);
	return v;
}

static int fake_movable(void *ctx, void *ptr)
{
	struct fake_backend *f = ctx;
	struct fake_block *b;
	int yes;

	pthread_mutex_lock(&f->lock);
	check_unlocked(f, FAKE_OP_COUNT); /* movable is not counted among the ops */
	b = find_block(f, ptr);
	yes = b != NULL && b->movable;
	pthread_mutex_unlock(&f->lock);
	return yes;
}

/* What a remap moves of source s asked for `take` bytes: all of it, or `take` rounded up to
 * the fake's piece size (fake_set_remap_piece), at most all. */
static size_t fake_moved(const struct fake_backend *f, const struct fake_block *s, size_t take)
{
	size_t piece = f->remap_piece ? f->remap_piece : 1, m;

	if (take >= s->bytes)
		return s->bytes;
	m = (take + piece - 1) / piece * piece;
	return m < s->bytes ? m : s->bytes;
}

/* New host memory for the block; each source's moved bytes (its end) are copied in at its
 * offset (as physical memory keeps its contents when it moves); a source that moved all of
 * itself goes, one that kept its head is that much smaller. */
static int fake_remap(void *ctx, int device, size_t bytes, struct gp_piece *src, unsigned n,
		      void **out, size_t *got, int *consumed)
{
	struct fake_backend *f = ctx;
	struct fake_block *b, *s;
	size_t want = 0, have = 0, off = 0, size;
	unsigned pieces = 0;
	int rc = GP_OK;

	run_hook(f, FAKE_OP_REMAP);
	*consumed = 0;
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < n; i++) {
		s = find_block(f, src[i].ptr);
		if (s == NULL || !s->movable || s->device != device || s->bytes != src[i].bytes ||
		    src[i].take == 0) {
			f->counts.misuse++;
			rc = GP_EINVAL;
			goto out;
		}
		want += src[i].take < s->bytes ? src[i].take : s->bytes;
		have += fake_moved(f, s, src[i].take);
		pieces += s->pieces;
		if (src[i].take < s->bytes)
			f->counts.remap_partial++;
	}
	if (!valid_device(device) || want > bytes || n == 0) {
		f->counts.misuse++;
		rc = GP_EINVAL;
		goto out;
	}
	if (f->remap_rc != GP_OK) {
		rc = f->remap_rc;
		*consumed = f->remap_consumes;
		if (*consumed)
			goto drop;
		goto out;
	}
	size = have > bytes ? have : bytes;
	if (f->capacity[device] != UINT64_MAX && f->used[device] + (size - have) > f->capacity[device]) {
		f->counts.allocs_nomem++;
		rc = GP_ENOMEM;
		goto out;
	}
	b = block_new(size);
	if (b == NULL) {
		rc = GP_ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < n; i++) {
		size_t m;

		s = find_block(f, src[i].ptr);
		m = fake_moved(f, s, src[i].take);
		memcpy((char *)b->ptr + off, (char *)s->ptr + (s->bytes - m), m);
		off += m;
		src[i].take = m;
	}
	b->bytes = size;
	b->device = device;
	b->movable = 1;
	b->pieces = pieces + (have < size);
	b->next = f->buckets[bucket_of(f, b->ptr)];
	f->buckets[bucket_of(f, b->ptr)] = b;
	f->used[device] += size;
	f->blocks++;
	f->counts.remaps_ok++;
	f->counts.remapped_bytes += have;
	*out = b->ptr;
	*got = size;
	for (unsigned i = 0; i < n; i++) {
		s = find_block(f, src[i].ptr);
		f->used[device] -= src[i].take;
		if (src[i].take < s->bytes) {
			s->bytes -= src[i].take; /* the head stays, at its address */
			continue;
		}
		s = unlink_block(f, src[i].ptr);
		f->blocks--;
		block_free(s);
	}
	goto out;
drop:
	for (unsigned i = 0; i < n; i++) {
		s = unlink_block(f, src[i].ptr);
		f->used[device] -= s->bytes;
		f->blocks--;
		block_free(s);
	}
	f->counts.remap_dropped += n;
out:
	pthread_mutex_unlock(&f->lock);
	return rc;
}

/* The end of a movable block, its take rounded up to the fake's pieces, becomes a block of its
 * own in the same host memory. */
static int fake_split(void *ctx, int device, void *ptr, size_t bytes, size_t take, size_t *tail)
{
	struct fake_backend *f = ctx;
	struct fake_block *b, *nb;
	size_t t;
	int rc = GP_OK;

	run_hook(f, FAKE_OP_SPLIT);
	*tail = 0;
	pthread_mutex_lock(&f->lock);
	b = find_block(f, ptr);
	if (b == NULL || !b->movable || b->device != device || b->bytes != bytes || take == 0) {
		f->counts.misuse++;
		rc = GP_EINVAL;
		goto out;
	}
	t = fake_moved(f, b, take);
	if (t >= b->bytes || f->split_rc != GP_OK) {
		rc = f->split_rc != GP_OK ? f->split_rc : GP_EINVAL;
		goto out;
	}
	nb = calloc(1, sizeof(*nb));
	if (nb == NULL) {
		rc = GP_ENOMEM;
		goto out;
	}
	nb->ptr = (char *)b->ptr + (b->bytes - t);
	nb->bytes = t;
	nb->device = device;
	nb->movable = 1;
	nb->pieces = 1;
	nb->mem = b->mem;
	b->mem->refs++;
	b->bytes -= t;
	nb->next = f->buckets[bucket_of(f, nb->ptr)];
	f->buckets[bucket_of(f, nb->ptr)] = nb;
	f->blocks++;
	f->counts.splits_ok++;
	*tail = t;
out:
	pthread_mutex_unlock(&f->lock);
	return rc;
}

/* Neighbours in one host allocation (made by splits) become one block: the first's record grows. */
static int fake_merge(void *ctx, int device, void *const *ptr, const size_t *bytes, unsigned n)
{
	struct fake_backend *f = ctx;
	struct fake_block *b[64], *s;
	int rc = GP_OK;

	run_hook(f, FAKE_OP_MERGE);
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < n && rc == GP_OK; i++) {
		b[i] = n <= 64 ? find_block(f, ptr[i]) : NULL;
		if (b[i] == NULL || !b[i]->movable || b[i]->device != device || b[i]->bytes != bytes[i] ||
		    (i > 0 && (char *)b[i - 1]->ptr + b[i - 1]->bytes != (char *)b[i]->ptr)) {
			f->counts.misuse++;
			rc = GP_EINVAL;
		} else if (i > 0 && b[i]->mem != b[0]->mem) {
			rc = GP_EINVAL; /* neighbours, but not of one allocation: refused, as allowed */
		}
	}
	if (n < 2 || rc != GP_OK) {
		rc = GP_EINVAL;
		goto out;
	}
	for (unsigned i = 1; i < n; i++) {
		s = unlink_block(f, ptr[i]);
		b[0]->bytes += s->bytes;
		b[0]->pieces += s->pieces;
		f->blocks--;
		block_free(s);
	}
	f->counts.merges_ok++;
out:
	pthread_mutex_unlock(&f->lock);
	return rc;
}

static int fake_joinable(void *ctx, void *a, void *b)
{
	struct fake_backend *f = ctx;
	struct fake_block *x, *y;
	int yes;

	run_hook(f, FAKE_OP_JOINABLE);
	pthread_mutex_lock(&f->lock);
	x = find_block(f, a);
	y = find_block(f, b);
	yes = x != NULL && y != NULL && x->mem == y->mem && (char *)x->ptr + x->bytes == (char *)y->ptr;
	f->counts.joinable_calls++;
	pthread_mutex_unlock(&f->lock);
	return yes;
}

void fake_set_split(struct fake_backend *f, int on, int rc)
{
	pthread_mutex_lock(&f->lock);
	f->be.split = on ? fake_split : NULL;
	f->be.merge = on ? fake_merge : NULL;
	f->be.joinable = on ? fake_joinable : NULL;
	f->split_rc = rc;
	pthread_mutex_unlock(&f->lock);
}

void fake_set_movable(struct fake_backend *f, size_t min_bytes)
{
	pthread_mutex_lock(&f->lock);
	f->movable_min = min_bytes;
	f->be.movable = min_bytes ? fake_movable : NULL;
	f->be.remap = min_bytes ? fake_remap : NULL;
	pthread_mutex_unlock(&f->lock);
}

void fake_set_remap_piece(struct fake_backend *f, size_t bytes)
{
	pthread_mutex_lock(&f->lock);
	f->remap_piece = bytes;
	pthread_mutex_unlock(&f->lock);
}

void fake_set_remap_rc(struct fake_backend *f, int rc, int consumes)
{
	pthread_mutex_lock(&f->lock);
	f->remap_rc = rc;
	f->remap_consumes = consumes;
	pthread_mutex_unlock(&f->lock);
}

unsigned fake_pieces(struct fake_backend *f, const void *ptr)
{
	struct fake_block *b;
	unsigned n;

	pthread_mutex_lock(&f->lock);
	b = find_block(f, ptr);
	n = b ? b->pieces : 0;
	pthread_mutex_unlock(&f->lock);
	return n;
}

void fake_init(struct fake_backend *f)
{
	int i;

	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
	for (i = 0; i < GP_MAX_DEVICES; i++)
		f->capacity[i] = UINT64_MAX;
	f->nbuckets = FAKE_NBUCKETS;
	f->buckets = calloc(f->nbuckets, sizeof(*f->buckets));
	f->free_log_cap = 4096;
	f->free_log = calloc(f->free_log_cap, sizeof(*f->free_log));
	f->free_log_dev = calloc(f->free_log_cap, sizeof(*f->free_log_dev));
	if (!f->buckets || !f->free_log || !f->free_log_dev)
		abort();
	f->clock_ns = 1000000000ull;
	f->fence_record_rc = GP_OK;
	f->free_rc = GP_OK;
	f->remap_rc = GP_OK;
	f->may_release = 1;
	f->counts.first_locked_op = -1;
	f->be.ctx = f;
	f->be.alloc = fake_alloc;
	f->be.free = fake_free;
	f->be.fence_record = fake_fence_record;
	f->be.fence_query = fake_fence_query;
	f->be.fence_wait = fake_fence_wait;
	f->be.fence_destroy = fake_fence_destroy;
	f->be.now_ns = fake_now_ns;
	f->be.may_release = fake_may_release;
	f->be.quiet = fake_quiet;
	f->be.join = fake_join;
}

void fake_fini(struct fake_backend *f)
{
	size_t i;

	for (i = 0; i < f->nbuckets; i++) {
		struct fake_block *b = f->buckets[i];

		while (b) {
			struct fake_block *next = b->next;

			block_free(b);
			b = next;
		}
	}
	if (f->reissue != NULL)
		block_free(f->reissue);
	for (i = 0; i < f->nfences; i++)
		free(f->fences[i]);
	free(f->fences);
	free(f->buckets);
	free(f->free_log);
	free(f->free_log_dev);
	pthread_mutex_destroy(&f->lock);
	memset(f, 0, sizeof(*f));
}

void fake_set_capacity(struct fake_backend *f, int device, uint64_t bytes)
{
	pthread_mutex_lock(&f->lock);
	f->capacity[device] = bytes;
	pthread_mutex_unlock(&f->lock);
}

uint64_t fake_used(struct fake_backend *f, int device)
{
	uint64_t v;

	pthread_mutex_lock(&f->lock);
	v = f->used[device];
	pthread_mutex_unlock(&f->lock);
	return v;
}

uint64_t fake_used_total(struct fake_backend *f)
{
	uint64_t v = 0;
	int i;

	pthread_mutex_lock(&f->lock);
	for (i = 0; i < GP_MAX_DEVICES; i++)
		v += f->used[i];
	pthread_mutex_unlock(&f->lock);
	return v;
}

uint64_t fake_blocks(struct fake_backend *f)
{
	uint64_t v;

	pthread_mutex_lock(&f->lock);
	v = f->blocks;
	pthread_mutex_unlock(&f->lock);
	return v;
}

int fake_holds(struct fake_backend *f, const void *ptr, int *device, size_t *bytes)
{
	struct fake_block *b;
	int found = 0;

	pthread_mutex_lock(&f->lock);
	b = find_block(f, ptr);
	if (b != NULL) {
		found = 1;
		if (device)
			*device = b->device;
		if (bytes)
			*bytes = b->bytes;
	}
	pthread_mutex_unlock(&f->lock);
	return found;
}

void fake_get_counts(struct fake_backend *f, struct fake_counts *out)
{
	pthread_mutex_lock(&f->lock);
	*out = f->counts;
	pthread_mutex_unlock(&f->lock);
}

uint64_t fake_calls(struct fake_backend *f, enum fake_op op)
{
	uint64_t v;

	pthread_mutex_lock(&f->lock);
	v = f->counts.calls[op];
	pthread_mutex_unlock(&f->lock);
	return v;
}

uint64_t fake_misuse(struct fake_backend *f)
{
	uint64_t v;

	pthread_mutex_lock(&f->lock);
	v = f->counts.misuse;
	pthread_mutex_unlock(&f->lock);
	return v;
}

uint64_t fake_locked_calls(struct fake_backend *f, int *op)
{
	uint64_t v;

	pthread_mutex_lock(&f->lock);
	v = f->counts.locked_calls;
	if (op)
		*op = f->counts.first_locked_op;
	pthread_mutex_unlock(&f->lock);
	return v;
}

size_t fake_fences_recorded(struct fake_backend *f)
{
	size_t v;

	pthread_mutex_lock(&f->lock);
	v = f->nfences;
	pthread_mutex_unlock(&f->lock);
	return v;
}

void fake_complete_fence(struct fake_backend *f, size_t seq)
{
	pthread_mutex_lock(&f->lock);
	if (seq >= 1 && seq <= f->nfences)
		f->fences[seq - 1]->complete = 1;
	pthread_mutex_unlock(&f->lock);
}

void fake_complete_all_fences(struct fake_backend *f)
{
	pthread_mutex_lock(&f->lock);
	complete_all_locked(f);
	pthread_mutex_unlock(&f->lock);
}

int fake_fence_complete(struct fake_backend *f, size_t seq)
{
	int v = 0;

	pthread_mutex_lock(&f->lock);
	if (seq >= 1 && seq <= f->nfences)
		v = f->fences[seq - 1]->complete;
	pthread_mutex_unlock(&f->lock);
	return v;
}

int fake_fence_destroyed(struct fake_backend *f, size_t seq)
{
	int v = 0;

	pthread_mutex_lock(&f->lock);
	if (seq >= 1 && seq <= f->nfences)
		v = f->fences[seq - 1]->destroyed;
	pthread_mutex_unlock(&f->lock);
	return v;
}

void fake_set_fence_record_rc(struct fake_backend *f, int rc)
{
	pthread_mutex_lock(&f->lock);
	f->fence_record_rc = rc;
	pthread_mutex_unlock(&f->lock);
}

void fake_set_fence_auto(struct fake_backend *f, unsigned polls)
{
	pthread_mutex_lock(&f->lock);
	f->fence_auto = polls;
	pthread_mutex_unlock(&f->lock);
}

void fake_set_free_rc(struct fake_backend *f, int rc)
{
	pthread_mutex_lock(&f->lock);
	f->free_rc = rc;
	pthread_mutex_unlock(&f->lock);
}

uint64_t fake_quiet_yes(struct fake_backend *f)
{
	uint64_t n;

	pthread_mutex_lock(&f->lock);
	n = f->quiet_yes;
	pthread_mutex_unlock(&f->lock);
	return n;
}

void fake_set_quiet(struct fake_backend *f, int idle)
{
	pthread_mutex_lock(&f->lock);
	f->quiet = idle;
	pthread_mutex_unlock(&f->lock);
}

void fake_set_join(struct fake_backend *f, int joins)
{
	pthread_mutex_lock(&f->lock);
	f->join = joins;
	pthread_mutex_unlock(&f->lock);
}

void fake_set_may_release(struct fake_backend *f, int yes)
{
	pthread_mutex_lock(&f->lock);
	f->may_release = yes;
	pthread_mutex_unlock(&f->lock);
}

void fake_set_clock(struct fake_backend *f, uint64_t ns)
{
	pthread_mutex_lock(&f->lock);
	f->clock_ns = ns;
	pthread_mutex_unlock(&f->lock);
}

void fake_advance_clock(struct fake_backend *f, uint64_t ns)
{
	pthread_mutex_lock(&f->lock);
	f->clock_ns += ns;
	pthread_mutex_unlock(&f->lock);
}

void fake_set_tick(struct fake_backend *f, uint64_t ns)
{
	pthread_mutex_lock(&f->lock);
	f->tick_ns = ns;
	pthread_mutex_unlock(&f->lock);
}

uint64_t fake_clock(struct fake_backend *f)
{
	uint64_t v;

	pthread_mutex_lock(&f->lock);
	v = f->clock_ns;
	pthread_mutex_unlock(&f->lock);
	return v;
}

size_t fake_free_log_len(struct fake_backend *f)
{
	size_t v;

	pthread_mutex_lock(&f->lock);
	v = f->free_log_len;
	pthread_mutex_unlock(&f->lock);
	return v;
}

void *fake_free_log_at(struct fake_backend *f, size_t i, int *device)
{
	void *p = NULL;

	pthread_mutex_lock(&f->lock);
	if (i < f->free_log_len) {
		p = f->free_log[i];
		if (device)
			*device = f->free_log_dev[i];
	}
	pthread_mutex_unlock(&f->lock);
	return p;
}

long fake_free_log_find(struct fake_backend *f, const void *ptr)
{
	long pos = -1;
	size_t i;

	pthread_mutex_lock(&f->lock);
	for (i = f->free_log_len; i > 0; i--) {
		if (f->free_log[i - 1] == ptr) {
			pos = (long)(i - 1);
			break;
		}
	}
	pthread_mutex_unlock(&f->lock);
	return pos;
}

size_t fake_last_alloc_bytes(struct fake_backend *f, int *device)
{
	size_t v;

	pthread_mutex_lock(&f->lock);
	v = f->last_alloc_bytes;
	if (device)
		*device = f->last_alloc_device;
	pthread_mutex_unlock(&f->lock);
	return v;
}

int fake_free_behind(struct fake_backend *f, void *ptr)
{
	struct fake_block *b;

	pthread_mutex_lock(&f->lock);
	b = unlink_block(f, ptr);
	if (b != NULL) {
		f->used[b->device] -= b->bytes;
		f->blocks--;
		if (f->reissue != NULL)
			block_free(f->reissue);
		b->next = NULL;
		f->reissue = b;
	}
	pthread_mutex_unlock(&f->lock);
	return b != NULL ? 0 : -1;
}

uint64_t fake_reissued(struct fake_backend *f)
{
	uint64_t n;

	pthread_mutex_lock(&f->lock);
	n = f->reissued;
	pthread_mutex_unlock(&f->lock);
	return n;
}

void fake_reset_device(struct fake_backend *f, int device)
{
	pthread_mutex_lock(&f->lock);
	if (f->reissue != NULL && f->reissue->device == device) { /* nothing comes back after it */
		block_free(f->reissue);
		f->reissue = NULL;
	}
	for (size_t i = 0; i < f->nbuckets; i++) {
		struct fake_block **pp = &f->buckets[i];

		while (*pp) {
			struct fake_block *b = *pp;

			if (b->device != device) {
				pp = &b->next;
				continue;
			}
			*pp = b->next;
			f->used[b->device] -= b->bytes;
			f->blocks--;
			block_free(b);
		}
	}
	pthread_mutex_unlock(&f->lock);
}

void fake_set_hook(struct fake_backend *f, fake_hook_fn fn, void *arg)
{
	pthread_mutex_lock(&f->lock);
	f->hook = fn;
	f->hook_arg = arg;
	pthread_mutex_unlock(&f->lock);
}
