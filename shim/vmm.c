/* vmm.c — VMM-backed blocks (vmm.h): a registry of blocks (base address -> range and handles)
 * under one mutex, never held across a driver call, and the driver calls that make, move and give
 * back their physical memory. Only the backend calls it, on misses and releases: never on a hit.
 * Never legacy IPC on such memory (the driver refuses it): auto mode makes none in a PyTorch
 * process with its own cache, nor anywhere after the first IPC call. */
#define _GNU_SOURCE
#include "vmm.h"
#include "door/lookup.h"
#include "log.h"
#include "options.h"
#include "state.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define GRANULE ((size_t)2 << 20)
#define NBUCKETS 1024u

struct gp_vmm_piece {
	CUmemGenericAllocationHandle h;
	size_t bytes;
};

/* An address range reserved for a block: blocks split from it share it, and it is freed with
 * the last of them (refs, under V.lock). */
struct gp_vmm_range {
	CUdeviceptr va;
	size_t bytes;
	unsigned refs;
};

/* A block: pieces mapped one after another from va, `bytes` in all, inside its range. */
struct gp_vmm_block {
	struct gp_vmm_block *next;
	CUdeviceptr va;
	size_t bytes;
	struct gp_vmm_range *range;
	int device;
	/* Its physical memory given back by a park (gp_vmm_evict), its range kept: the pieces keep
	 * their sizes, their handles are 0 until gp_vmm_refill. No pool call sees such a block
	 * (the park holds the process still); the calls below that would move pieces refuse it. */
	int parked;
	unsigned n;
	struct gp_vmm_piece piece[];
};

#define V (gp_shim.vmm)

void gp_vmm_init(int mode)
{
	atomic_store(&V.on, mode != GP_VMM_OFF && gp_cu.MemCreate != NULL &&
				    gp_cu.MemAddressReserve != NULL && gp_cu.MemMap != NULL &&
				    gp_cu.MemSetAccess != NULL && gp_cu.MemUnmap != NULL &&
				    gp_cu.MemRelease != NULL && gp_cu.MemAddressFree != NULL);
	if (mode != GP_VMM_OFF && !atomic_load(&V.on))
		gp_log(GP_LOG_WARN, "GPUPOOL_VMM: this driver lacks the virtual memory API; "
				    "blocks are ordinary allocations");
}

static size_t bucket_of(CUdeviceptr va)
{
	return (size_t)((va >> 21) ^ (va >> 31)) % NBUCKETS;
}

/* Off for good: a call of the API failed for a reason other than memory. */
static void broken(const char *what, CUresult e)
{
	atomic_store(&V.on, 0);
	if (!atomic_exchange(&V.said_broken, 1))
		gp_log(GP_LOG_WARN, "GPUPOOL_VMM: %s failed (CUDA error %d); new blocks are ordinary "
				    "allocations from now on", what, (int)e);
}

static CUmemAllocationProp prop_of(int device, int rdma)
{
	CUmemAllocationProp p;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = device;
	p.allocFlags.gpuDirectRDMACapable = (unsigned char)rdma;
	return p;
}

/* What the device offers, looked at once (no lock across the driver calls: two threads may both
 * look; the first to finish stores it under the lock, `known` last, and it never changes after: a
 * reader that sees `known` reads the rest without a lock). */
static const struct gp_vmm_dev *dev_facts(int device)
{
	struct gp_vmm_dev f, *d = &V.dev[device];
	CUmemAllocationProp p;
	size_t gran = 0;
	int yes = 0, n = 0, can;

	if (__atomic_load_n(&d->known, __ATOMIC_ACQUIRE))
		return d;
	memset(&f, 0, sizeof(f));
	if (gp_cu.DeviceGetAttribute != NULL &&
	    gp_cu.DeviceGetAttribute(&yes, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
				     device) == CUDA_SUCCESS && yes) {
		yes = 0;
		gp_cu.DeviceGetAttribute(&yes,
					 CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
					 device);
		f.rdma = yes != 0;
		p = prop_of(device, f.rdma);
		f.usable = gp_cu.MemGetAllocationGranularity == NULL ||
			   (gp_cu.MemGetAllocationGranularity(&gran, &p,
							      CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
				    CUDA_SUCCESS &&
			    gran != 0 && GRANULE % gran == 0);
	}
	if (gp_cu.DeviceGetCount != NULL && gp_cu.DeviceGetCount(&n) == CUDA_SUCCESS &&
	    gp_cu.DeviceCanAccessPeer != NULL) {
		for (int o = 0; o < n && o < GP_MAX_DEVICES; o++)
			if (o != device && gp_cu.DeviceCanAccessPeer(&can, o, device) == CUDA_SUCCESS &&
			    can)
				f.peer[f.npeers++] = o;
	}
	pthread_mutex_lock(&V.lock);
	if (!__atomic_load_n(&d->known, __ATOMIC_RELAXED)) {
		/* Every field but `known`, which readers load without the lock: a copy of the whole
		 * struct would write it too, under their feet. */
		d->usable = f.usable;
		d->rdma = f.rdma;
		d->npeers = f.npeers;
		memcpy(d->peer, f.peer, sizeof(d->peer));
		__atomic_store_n(&d->known, 1, __ATOMIC_RELEASE); /* last: a reader that sees it sees all */
	}
	pthread_mutex_unlock(&V.lock);
	return d;
}

/* Whether PyTorch runs here with its own cache on (its default mode): such a process shares
 * tensors with others through legacy IPC handles (torch.multiprocessing), which the driver
 * refuses for VMM-backed memory, and a block already handed out cannot become ordinary. Its
 * libc10_cuda.so is loaded before its first allocation; takeover mode turns its cache off. */
static int torch_caching(void)
{
	const char *off = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
	void *h;

	if (gp_shim.life.opts.torch == GP_TORCH_TAKEOVER || (off != NULL && strcmp(off, "0") != 0))
		return 0;
	h = dlopen("libc10_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL) {
		(void)dlerror();
		return 0;
	}
	dlclose(h);
	return 1;
}

int gp_vmm_wanted(int device, size_t bytes)
{
	if (bytes <= GP_VMM_MIN_BYTES || bytes % GRANULE != 0 || device < 0 ||
	    device >= GP_MAX_DEVICES || !atomic_load_explicit(&V.on, memory_order_relaxed))
		return 0;
	/* auto: asked at every VMM block until it says yes (a miss that makes one pays for
	 * several driver calls; the look adds one dlopen). */
	if (gp_shim.life.opts.vmm == GP_VMM_AUTO && torch_caching()) {
		if (atomic_exchange(&V.on, 0))
			gp_log(GP_LOG_INFO, "GPUPOOL_VMM=auto: PyTorch keeps its own cache here and may "
					    "share tensors through IPC handles, which the driver refuses "
					    "for VMM-backed blocks: blocks are ordinary allocations");
		return 0;
	}
	return dev_facts(device)->usable;
}

/* Read and write for the device and the devices that can reach its memory (as cudaMalloc's
 * memory is, once peer access is enabled); the device alone if the driver refuses the peers. */
static CUresult grant(CUdeviceptr va, size_t bytes, int device)
{
	const struct gp_vmm_dev *f = &V.dev[device];
	CUmemAccessDesc desc[GP_MAX_DEVICES];
	size_t n = 0;
	CUresult e;

	desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	desc[n].location.id = device;
	desc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	for (int i = 0; i < f->npeers; i++) {
		desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		desc[n].location.id = f->peer[i];
		desc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	}
	e = gp_cu.MemSetAccess(va, bytes, desc, n);
	if (e != CUDA_SUCCESS && n > 1)
		e = gp_cu.MemSetAccess(va, bytes, desc, 1);
	return e;
}

/* Into its bucket (lock held, the buckets there). */
static void insert_locked(struct gp_vmm_block *b)
{
	b->next = V.bucket[bucket_of(b->va)];
	V.bucket[bucket_of(b->va)] = b;
	V.count++;
}

static void registry_add(struct gp_vmm_block *b)
{
	pthread_mutex_lock(&V.lock);
	if (V.bucket == NULL)
		__atomic_store_n(&V.bucket, calloc(NBUCKETS, sizeof(*V.bucket)), __ATOMIC_RELEASE);
	if (V.bucket != NULL)
		insert_locked(b);
	pthread_mutex_unlock(&V.lock);
}

/* Unlinks and returns the block whose base is va (NULL: none). Lock held. */
static struct gp_vmm_block *unlink_locked(CUdeviceptr va)
{
	struct gp_vmm_block **pp, *b;

	if (V.bucket == NULL)
		return NULL;
	for (pp = &V.bucket[bucket_of(va)]; (b = *pp) != NULL; pp = &b->next) {
		if (b->va == va) {
			*pp = b->next;
			b->next = NULL;
			V.count--;
			return b;
		}
	}
	return NULL;
}

/* One block less in range r: the range is freed with the last (no lock held here). */
static void range_put(struct gp_vmm_range *r)
{
	unsigned left;

	pthread_mutex_lock(&V.lock);
	left = --r->refs;
	pthread_mutex_unlock(&V.lock);
	if (left == 0) {
		gp_cu.MemAddressFree(r->va, r->bytes);
		free(r);
	}
}

static struct gp_vmm_block *find_locked(CUdeviceptr va)
{
	struct gp_vmm_block *b;

	if (V.bucket == NULL)
		return NULL;
	for (b = V.bucket[bucket_of(va)]; b != NULL && b->va != va; b = b->next)
		;
	return b;
}

/* No VMM-backed block was ever made: nothing to look up (the registry is allocated by the first). */
static int never_made(void)
{
	return __atomic_load_n(&V.bucket, __ATOMIC_ACQUIRE) == NULL;
}

int gp_vmm_owns(const void *ptr)
{
	int yes;

	if (never_made())
		return 0;
	pthread_mutex_lock(&V.lock);
	yes = find_locked((CUdeviceptr)(uintptr_t)ptr) != NULL;
	pthread_mutex_unlock(&V.lock);
	return yes;
}

size_t gp_vmm_blocks(void)
{
	size_t n;

	pthread_mutex_lock(&V.lock);
	n = V.count;
	pthread_mutex_unlock(&V.lock);
	return n;
}

/* A fresh range for `bytes`, aligned to the granule. */
static CUresult reserve(size_t bytes, CUdeviceptr *va)
{
	return gp_cu.MemAddressReserve(va, bytes, GRANULE, 0, 0);
}

/* Map the pieces of b one after another from b->va, then grant access. On failure every piece
 * mapped here is unmapped again. */
static CUresult map_all(struct gp_vmm_block *b, const char **what)
{
	size_t off = 0;
	unsigned i;
	CUresult e = CUDA_SUCCESS;

	for (i = 0; i < b->n; i++) {
		e = gp_cu.MemMap(b->va + off, b->piece[i].bytes, 0, b->piece[i].h, 0);
		if (e != CUDA_SUCCESS) {
			*what = "cuMemMap";
			break;
		}
		off += b->piece[i].bytes;
	}
	if (e == CUDA_SUCCESS) {
		e = grant(b->va, b->bytes, b->device);
		if (e == CUDA_SUCCESS)
			return e;
		*what = "cuMemSetAccess";
	}
	while (i-- > 0) {
		off -= b->piece[i].bytes;
		gp_cu.MemUnmap(b->va + off, b->piece[i].bytes);
	}
	return e;
}

/* Unmap b's pieces from `first` on, the first of them at offset `off` of the block (one call
 * per mapping, as each was mapped). */
static void unmap_pieces(const struct gp_vmm_block *b, unsigned first, size_t off)
{
	for (unsigned i = first; i < b->n; i++) {
		gp_cu.MemUnmap(b->va + off, b->piece[i].bytes);
		off += b->piece[i].bytes;
	}
}

/* The first of b's last pieces that hold `take` bytes (all of them when take is b's size or
 * more: 0); *moved: their bytes. */
static unsigned tail_pieces(const struct gp_vmm_block *b, size_t take, size_t *moved)
{
	unsigned k = b->n;

	*moved = 0;
	while (k > 0 && (*moved < take || take >= b->bytes))
		*moved += b->piece[--k].bytes;
	return k;
}

/* The size of the handles new memory of `fresh` bytes comes in: at most GP_VMM_PIECES of
 * them, each a multiple of the granule (the last may be smaller). */
static size_t piece_bytes(size_t fresh)
{
	size_t p = (fresh / GP_VMM_PIECES + GRANULE - 1) / GRANULE * GRANULE;

	return p < GRANULE ? GRANULE : p;
}

/* New handles for `fresh` bytes into b->piece[b->n...]. On failure those made are released. */
static CUresult create(struct gp_vmm_block *b, size_t fresh, const CUmemAllocationProp *p)
{
	size_t each = piece_bytes(fresh), k = b->n;
	CUresult e = CUDA_SUCCESS;

	while (fresh > 0) {
		size_t sz = fresh < each ? fresh : each;

		e = gp_cu.MemCreate(&b->piece[b->n].h, sz, p, 0);
		if (e != CUDA_SUCCESS)
			break;
		b->piece[b->n++].bytes = sz;
		fresh -= sz;
	}
	if (e != CUDA_SUCCESS)
		while (b->n > k)
			gp_cu.MemRelease(b->piece[--b->n].h);
	return e;
}

/* A source of a remap: its block, and the first of its pieces that move (0: all of them). */
struct source {
	struct gp_vmm_block *b;
	unsigned first;
	size_t moved;
};

/* A new block of at least `bytes` on `device`: the moving pieces of the sources src[0..n) (left
 * where they are too: their old ranges stay whole until the new one works), then new handles
 * for the rest, in a range of its own, mapped, access granted. `pieces`: how many move. A
 * failure leaves nothing behind (and the sources as they were); one for a reason other than
 * memory turns VMM off. */
static CUresult build(int device, size_t bytes, const struct source *src, unsigned n,
		      unsigned pieces, struct gp_vmm_block **out)
{
	const struct gp_vmm_dev *f = dev_facts(device);
	CUmemAllocationProp p = prop_of(device, f->rdma);
	struct gp_vmm_block *b = malloc(sizeof(*b) + (pieces + GP_VMM_PIECES) * sizeof(b->piece[0]));
	const char *what = "cuMemCreate";
	size_t have = 0;
	unsigned k = 0;
	CUresult e = CUDA_SUCCESS;

	if (b == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(b, 0, sizeof(*b));
	b->device = device;
	for (unsigned i = 0; i < n; i++) {
		for (unsigned j = src[i].first; j < src[i].b->n; j++)
			b->piece[k++] = src[i].b->piece[j];
		have += src[i].moved;
	}
	b->n = k;
	b->bytes = have > bytes ? have : bytes;
	b->range = malloc(sizeof(*b->range));
	if (b->range == NULL) {
		free(b);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*b->range = (struct gp_vmm_range){ 0, b->bytes, 1 };
	if (have < bytes)
		e = create(b, bytes - have, &p);
	if (e == CUDA_SUCCESS) {
		what = "cuMemAddressReserve";
		e = reserve(b->bytes, &b->va);
		if (e == CUDA_SUCCESS) {
			b->range->va = b->va;
			e = map_all(b, &what);
			if (e != CUDA_SUCCESS)
				gp_cu.MemAddressFree(b->va, b->bytes);
		}
		if (e != CUDA_SUCCESS)
			while (b->n > k)
				gp_cu.MemRelease(b->piece[--b->n].h);
	}
	if (e != CUDA_SUCCESS) {
		if (e != CUDA_ERROR_OUT_OF_MEMORY)
			broken(what, e);
		free(b->range);
		free(b);
		return e;
	}
	*out = b;
	return CUDA_SUCCESS;
}

CUresult gp_vmm_alloc(int device, size_t bytes, CUdeviceptr *out)
{
	struct gp_vmm_block *b;
	CUresult e = build(device, bytes, NULL, 0, 0, &b);

	if (e != CUDA_SUCCESS)
		return e;
	registry_add(b);
	*out = b->va;
	return CUDA_SUCCESS;
}

CUresult gp_vmm_free(const void *ptr, int settled)
{
	struct gp_vmm_block *b;
	CUresult e = CUDA_SUCCESS;

	pthread_mutex_lock(&V.lock);
	b = unlink_locked((CUdeviceptr)(uintptr_t)ptr);
	pthread_mutex_unlock(&V.lock);
	if (b == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!settled && !b->parked && gp_cu.CtxSynchronize != NULL)
		gp_cu.CtxSynchronize(); /* what cudaFree would wait for */
	if (!b->parked) {
		unmap_pieces(b, 0, 0);
		for (unsigned i = 0; i < b->n; i++)
			if (gp_cu.MemRelease(b->piece[i].h) != CUDA_SUCCESS)
				e = CUDA_ERROR_INVALID_VALUE;
	}
	range_put(b->range);
	free(b);
	return e;
}

CUresult gp_vmm_split(const void *ptr, size_t bytes, size_t take, size_t *tail)
{
	struct gp_vmm_block *b, *nb = NULL;
	CUresult e = CUDA_ERROR_INVALID_VALUE;
	unsigned k;
	size_t t = 0;

	*tail = 0;
	if (never_made())
		return e;
	pthread_mutex_lock(&V.lock);
	b = find_locked((CUdeviceptr)(uintptr_t)ptr);
	if (b == NULL || b->bytes != bytes || take == 0 || b->parked)
		goto out;
	k = tail_pieces(b, take, &t);
	if (k == 0)
		goto out; /* all of it: no split */
	nb = malloc(sizeof(*nb) + (b->n - k) * sizeof(nb->piece[0]));
	if (nb == NULL) {
		e = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	memset(nb, 0, sizeof(*nb));
	nb->va = b->va + (b->bytes - t);
	nb->bytes = t;
	nb->range = b->range;
	nb->device = b->device;
	nb->n = b->n - k;
	memcpy(nb->piece, &b->piece[k], nb->n * sizeof(nb->piece[0]));
	b->range->refs++;
	b->n = k;
	b->bytes -= t;
	insert_locked(nb);
	*tail = t;
	e = CUDA_SUCCESS;
out:
	pthread_mutex_unlock(&V.lock);
	return e;
}

int gp_vmm_joinable(const void *a, const void *b)
{
	struct gp_vmm_block *x, *y;
	int yes;

	if (never_made())
		return 0;
	pthread_mutex_lock(&V.lock);
	x = find_locked((CUdeviceptr)(uintptr_t)a);
	y = find_locked((CUdeviceptr)(uintptr_t)b);
	yes = x != NULL && y != NULL && x->range == y->range && x->va + x->bytes == y->va;
	pthread_mutex_unlock(&V.lock);
	return yes;
}

CUresult gp_vmm_merge(void *const *ptr, const size_t *bytes, unsigned n)
{
	struct gp_vmm_block *b[64], *nb = NULL;
	CUresult e = CUDA_ERROR_INVALID_VALUE;
	unsigned pieces = 0, k = 0;
	size_t sum = 0;

	if (n < 2 || n > 64 || never_made())
		return e;
	pthread_mutex_lock(&V.lock);
	for (unsigned i = 0; i < n; i++) {
		b[i] = find_locked((CUdeviceptr)(uintptr_t)ptr[i]);
		if (b[i] == NULL || b[i]->bytes != bytes[i] || b[i]->parked ||
		    (i > 0 && (b[i]->range != b[0]->range || b[i]->device != b[0]->device ||
			       b[i - 1]->va + b[i - 1]->bytes != b[i]->va)))
			goto out;
		pieces += b[i]->n;
		sum += b[i]->bytes;
	}
	nb = malloc(sizeof(*nb) + pieces * sizeof(nb->piece[0]));
	if (nb == NULL) {
		e = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*nb = *b[0];
	nb->next = NULL;
	nb->bytes = sum;
	for (unsigned i = 0; i < n; i++) {
		memcpy(&nb->piece[k], b[i]->piece, b[i]->n * sizeof(nb->piece[0]));
		k += b[i]->n;
		unlink_locked(b[i]->va);
	}
	nb->n = k;
	nb->range->refs -= n - 1;
	insert_locked(nb);
	e = CUDA_SUCCESS;
out:
	pthread_mutex_unlock(&V.lock);
	if (e == CUDA_SUCCESS)
		for (unsigned i = 0; i < n; i++)
			free(b[i]);
	return e;
}

/* The registry's blocks for src[], in order, checked (all there, of the device, their sizes),
 * and what moves of each: all its pieces, or the fewest of its last ones that hold its take. */
static int sources(int device, const struct gp_piece *src, unsigned n, struct source *sb,
		   unsigned *pieces)
{
	int ok = 1;

	*pieces = 0;
	pthread_mutex_lock(&V.lock);
	for (unsigned i = 0; i < n && ok; i++) {
		struct gp_vmm_block *b = find_locked((CUdeviceptr)(uintptr_t)src[i].ptr);

		ok = b != NULL && b->device == device && b->bytes == src[i].bytes && src[i].take > 0 &&
		     !b->parked;
		if (!ok)
			break;
		sb[i].b = b;
		sb[i].first = tail_pieces(b, src[i].take, &sb[i].moved);
		*pieces += b->n - sb[i].first;
	}
	pthread_mutex_unlock(&V.lock);
	return ok;
}

/* After a remap: a source whose pieces all moved is gone (its range freed); one that kept some
 * has its moved pieces unmapped from its range and is that much smaller. */
static void shrink(const struct source *s)
{
	struct gp_vmm_block *b = s->b;

	unmap_pieces(b, s->first, b->bytes - s->moved);
	if (s->first == 0) {
		range_put(b->range);
		free(b);
		return;
	}
	pthread_mutex_lock(&V.lock);
	b->n = s->first;
	b->bytes -= s->moved;
	pthread_mutex_unlock(&V.lock);
}

CUresult gp_vmm_remap(int device, size_t bytes, struct gp_piece *src, unsigned n,
		      CUdeviceptr *out, size_t *got, int *consumed)
{
	struct source sb[64];
	struct gp_vmm_block *b;
	unsigned pieces;
	size_t want = 0, have = 0;
	CUresult e;

	*consumed = 0;
	if (n == 0 || n > 64 || !sources(device, src, n, sb, &pieces))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		want += src[i].take < src[i].bytes ? src[i].take : src[i].bytes;
		have += sb[i].moved;
	}
	if (want > bytes || bytes % GRANULE != 0 || have % GRANULE != 0)
		return CUDA_ERROR_INVALID_VALUE;
	e = build(device, bytes, sb, n, pieces, &b);
	if (e != CUDA_SUCCESS)
		return e;
	pthread_mutex_lock(&V.lock);
	for (unsigned i = 0; i < n; i++)
		if (sb[i].first == 0)
			unlink_locked(sb[i].b->va);
	pthread_mutex_unlock(&V.lock);
	for (unsigned i = 0; i < n; i++) {
		src[i].take = sb[i].moved;
		shrink(&sb[i]);
	}
	registry_add(b);
	*out = b->va;
	*got = b->bytes;
	return CUDA_SUCCESS;
}

/* The block that contains v, or NULL (lock held): a look at every block, for the rare calls
 * that ask about an inner pointer (IPC, address ranges). */
static struct gp_vmm_block *containing_locked(CUdeviceptr v)
{
	for (size_t i = 0; V.bucket != NULL && V.count != 0 && i < NBUCKETS; i++)
		for (struct gp_vmm_block *b = V.bucket[i]; b != NULL; b = b->next)
			if (v >= b->va && v - b->va < b->bytes)
				return b;
	return NULL;
}

void gp_vmm_address_range(CUdeviceptr dptr, CUdeviceptr *base, size_t *size)
{
	struct gp_vmm_block *b;

	if (never_made())
		return;
	pthread_mutex_lock(&V.lock);
	b = containing_locked(dptr);
	if (b != NULL && b->n > 1) {
		if (base)
			*base = b->va;
		if (size)
			*size = b->bytes;
	}
	pthread_mutex_unlock(&V.lock);
}

void gp_vmm_ipc_seen(const void *ptr)
{
	CUdeviceptr v = (CUdeviceptr)(uintptr_t)ptr;
	int inside = 0;

	if (gp_shim.life.opts.vmm == GP_VMM_AUTO && atomic_exchange(&V.on, 0))
		gp_log(GP_LOG_INFO, "GPUPOOL_VMM=auto: an IPC handle was asked for; new blocks are "
				    "ordinary allocations from now on");
	pthread_mutex_lock(&V.lock);
	inside = containing_locked(v) != NULL;
	pthread_mutex_unlock(&V.lock);
	/* The call fails: said at the default level, never silently. */
	if (inside && !atomic_exchange(&V.said_ipc, 1))
		gp_log(GP_LOG_ERROR, "an IPC handle was asked for memory of a VMM-backed block, which "
				     "the driver refuses (the call fails); run with GPUPOOL_VMM=off, or "
				     "auto (ordinary blocks in a PyTorch process with its own cache, and "
				     "everywhere after the first IPC call), to share memory this way");
}

/* ---- the park (park_vmm.c) ---- */

size_t gp_vmm_list(struct gp_vmm_seen *out, size_t max)
{
	size_t n = 0;

	if (never_made())
		return 0;
	pthread_mutex_lock(&V.lock);
	for (size_t i = 0; i < NBUCKETS; i++) {
		for (struct gp_vmm_block *b = V.bucket[i]; b != NULL; b = b->next) {
			if (n < max)
				out[n] = (struct gp_vmm_seen){ b->va, b->bytes, b->device, b->parked };
			n++;
		}
	}
	pthread_mutex_unlock(&V.lock);
	return n;
}

/* A copy of the block at va, pieces included, when its parked state is `parked`: the driver
 * calls work on the copy, without the lock. NULL: no such block, or no memory. */
static struct gp_vmm_block *copy_of(CUdeviceptr va, int parked)
{
	struct gp_vmm_block *b, *c = NULL;
	size_t sz;

	pthread_mutex_lock(&V.lock);
	b = find_locked(va);
	if (b != NULL && b->parked == parked) {
		sz = sizeof(*b) + b->n * sizeof(b->piece[0]);
		c = malloc(sz);
		if (c != NULL)
			memcpy(c, b, sz);
	}
	pthread_mutex_unlock(&V.lock);
	return c;
}

/* The registry's block at c->va takes c's handles (parked 0) or none (parked 1). */
static void settle(const struct gp_vmm_block *c, int parked)
{
	struct gp_vmm_block *b;

	pthread_mutex_lock(&V.lock);
	b = find_locked(c->va);
	if (b != NULL && b->n == c->n) {
		for (unsigned i = 0; i < b->n; i++)
			b->piece[i].h = parked ? 0 : c->piece[i].h;
		b->parked = parked;
	}
	pthread_mutex_unlock(&V.lock);
}

CUresult gp_vmm_evict(CUdeviceptr va)
{
	struct gp_vmm_block *c;
	size_t off = 0;
	unsigned i;
	CUresult e = CUDA_SUCCESS;

	if (never_made() || (c = copy_of(va, 0)) == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (i = 0; i < c->n; i++) {
		e = gp_cu.MemUnmap(c->va + off, c->piece[i].bytes);
		if (e != CUDA_SUCCESS)
			break;
		off += c->piece[i].bytes;
	}
	if (e != CUDA_SUCCESS) {
		/* The pieces unmapped so far go back where they were (their handles still hold the
		 * bytes), and the whole block gets its access again. */
		CUresult back = CUDA_SUCCESS;

		off = 0;
		for (unsigned j = 0; j < i && back == CUDA_SUCCESS; j++) {
			back = gp_cu.MemMap(c->va + off, c->piece[j].bytes, 0, c->piece[j].h, 0);
			off += c->piece[j].bytes;
		}
		if (back == CUDA_SUCCESS && i > 0)
			back = grant(c->va, c->bytes, c->device);
		if (back != CUDA_SUCCESS)
			gp_log(GP_LOG_ERROR, "a VMM-backed block could not be mapped again after a "
					     "failed unmap (CUDA error %d): its memory at %#llx is "
					     "unreachable", (int)back, (unsigned long long)c->va);
		free(c);
		return e;
	}
	/* Unmapped: a release the driver refuses leaves a handle that nothing maps (its memory
	 * stays charged), never bytes lost (the caller copied them out first). */
	for (i = 0; i < c->n; i++)
		if (gp_cu.MemRelease(c->piece[i].h) != CUDA_SUCCESS &&
		    !atomic_exchange(&V.said_release, 1))
			gp_log(GP_LOG_WARN, "cuMemRelease failed while parking a VMM-backed block: its "
					    "device memory stays allocated");
	settle(c, 1);
	free(c);
	return CUDA_SUCCESS;
}

CUresult gp_vmm_refill(CUdeviceptr va)
{
	struct gp_vmm_block *c;
	CUmemAllocationProp p;
	const char *what = "cuMemCreate";
	unsigned k;
	CUresult e = CUDA_SUCCESS;

	if (never_made() || (c = copy_of(va, 1)) == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	p = prop_of(c->device, dev_facts(c->device)->rdma);
	for (k = 0; k < c->n; k++) {
		e = gp_cu.MemCreate(&c->piece[k].h, c->piece[k].bytes, &p, 0);
		if (e != CUDA_SUCCESS)
			break;
	}
	if (e == CUDA_SUCCESS)
		e = map_all(c, &what);
	if (e != CUDA_SUCCESS) {
		while (k-- > 0)
			gp_cu.MemRelease(c->piece[k].h);
		free(c);
		return e;
	}
	settle(c, 0);
	free(c);
	return CUDA_SUCCESS;
}
