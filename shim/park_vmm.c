/* park_vmm.c — the fast park of VMM-backed blocks (park_vmm.h): their bytes through a pinned
 * staging ring, made once, to pageable host memory and back, the driver's copies on a private
 * stream overlapped with worker threads' memcpy; the handles given back and made again by vmm.c
 * (gp_vmm_evict, gp_vmm_refill). Only real driver functions (gp_cu), each in the block's device's
 * context, never under a pool lock. Never decides when to park: auto-suspend does. */
#define _GNU_SOURCE
#include "park_vmm.h"
#include "ctx.h"
#include "door/lookup.h"
#include "log.h"
#include "state.h"
#include "vmm.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define P (gp_shim.park)
#define MIB ((size_t)1 << 20)

/* The defaults, until bench/park_vmm.cu's measurements on a GPU say otherwise: enough slots that
 * the GPU always has the next copy queued while the workers empty or fill the others, slots
 * large enough that a copy's fixed cost is small beside its transfer, and few enough workers
 * that a park does not take every core. The ring is pinned host memory for the process's life
 * (slots x slot_bytes), pinned once: pinning is slower than the copies themselves. */
#define DEFAULT_SLOTS 4u
#define DEFAULT_SLOT_BYTES (32 * MIB)
#define DEFAULT_THREADS 4u
/* A worker's share of a slot is never smaller: below it the hand-over costs more than the
 * memcpy saves. */
#define MIN_PART (1 * MIB)

/* Where a parked block's bytes are. */
enum where {
	ON_DEVICE, /* in its own memory (not yet evicted, or copied back) */
	ON_HOST,   /* only in the host copy: its handles released */
	MAPPED,    /* new memory mapped, the bytes not yet copied in */
};

struct gp_park_held {
	CUdeviceptr va;
	size_t bytes;
	size_t host_off; /* bytes: its copy in P.host */
	int device;
	enum where where;
};

/* One copy of at most a slot: between the device at d and the host at h. */
struct chunk {
	CUdeviceptr d;
	char *h;
	size_t n; /* bytes */
};

/* ---- the workers: memcpy out of and into the ring's slots ---- */

struct part {
	char *dst;
	const char *src;
	size_t n; /* bytes */
	unsigned slot;
};

/* Started per call, joined before it returns: nothing of the park runs while the process is
 * checkpointed or running. */
struct crew {
	pthread_mutex_t m;
	pthread_cond_t work, done;
	struct part q[GP_PARK_MAX_SLOTS * GP_PARK_MAX_THREADS]; /* a slot's parts at most per slot */
	unsigned head, count;                                    /* the queue: q[head], count of them */
	unsigned left[GP_PARK_MAX_SLOTS];                        /* parts of a slot not yet copied */
	int stop;
	unsigned n; /* workers started (0: the caller copies) */
	pthread_t t[GP_PARK_MAX_THREADS];
};

static void *worker(void *arg)
{
	struct crew *c = arg;
	struct part p;

	pthread_mutex_lock(&c->m);
	for (;;) {
		while (c->count == 0 && !c->stop)
			pthread_cond_wait(&c->work, &c->m);
		if (c->count == 0)
			break;
		p = c->q[c->head];
		c->head = (c->head + 1) % (sizeof(c->q) / sizeof(c->q[0]));
		c->count--;
		pthread_mutex_unlock(&c->m);
		memcpy(p.dst, p.src, p.n);
		pthread_mutex_lock(&c->m);
		if (--c->left[p.slot] == 0)
			pthread_cond_broadcast(&c->done);
	}
	pthread_mutex_unlock(&c->m);
	return NULL;
}

/* Workers with every signal blocked (the program's handlers never run on them). Those that
 * cannot be started are done without: the caller copies. */
static void crew_start(struct crew *c, unsigned threads)
{
	sigset_t all, old;

	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->m, NULL);
	pthread_cond_init(&c->work, NULL);
	pthread_cond_init(&c->done, NULL);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (c->n < threads && pthread_create(&c->t[c->n], NULL, worker, c) == 0)
		c->n++;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void crew_stop(struct crew *c)
{
	pthread_mutex_lock(&c->m);
	c->stop = 1;
	pthread_cond_broadcast(&c->work);
	pthread_mutex_unlock(&c->m);
	for (unsigned i = 0; i < c->n; i++)
		pthread_join(c->t[i], NULL);
	pthread_cond_destroy(&c->done);
	pthread_cond_destroy(&c->work);
	pthread_mutex_destroy(&c->m);
}

/* n bytes from src to dst, for `slot`, split among the workers. */
static void crew_post(struct crew *c, unsigned slot, char *dst, const char *src, size_t n)
{
	size_t parts = (n + MIN_PART - 1) / MIN_PART, each, off = 0;
	const size_t qcap = sizeof(c->q) / sizeof(c->q[0]);

	if (c->n == 0) {
		memcpy(dst, src, n);
		return;
	}
	if (parts > c->n)
		parts = c->n;
	if (parts == 0)
		parts = 1;
	each = (n + parts - 1) / parts;
	pthread_mutex_lock(&c->m);
	for (; off < n; off += each) {
		struct part *p = &c->q[(c->head + c->count++) % qcap];

		*p = (struct part){ dst + off, src + off, n - off < each ? n - off : each, slot };
		c->left[slot]++;
	}
	pthread_cond_broadcast(&c->work);
	pthread_mutex_unlock(&c->m);
}

static void crew_wait(struct crew *c, unsigned slot)
{
	pthread_mutex_lock(&c->m);
	while (c->left[slot] != 0)
		pthread_cond_wait(&c->done, &c->m);
	pthread_mutex_unlock(&c->m);
}

static void crew_wait_all(struct crew *c)
{
	for (unsigned s = 0; s < GP_PARK_MAX_SLOTS; s++)
		crew_wait(c, s);
}

/* ---- the ring, the streams and the events ---- */

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static unsigned resets_of(int device)
{
	return atomic_load_explicit(&gp_shim.fence.resets[device], memory_order_relaxed);
}

static void defaults(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (P.slots != 0)
		return;
	P.slots = DEFAULT_SLOTS;
	P.slot_bytes = DEFAULT_SLOT_BYTES;
	/* One core left to the thread that drives the copies. */
	P.threads = cpus > 1 && (unsigned long)cpus - 1 < DEFAULT_THREADS ? (unsigned)cpus - 1 :
									   DEFAULT_THREADS;
	if (cpus <= 1)
		P.threads = 0;
}

int gp_park_vmm_tune(unsigned slots, size_t slot_bytes, unsigned threads)
{
	int rc = -1;

	pthread_mutex_lock(&P.lock);
	if (P.ring == NULL && slots >= 2 && slots <= GP_PARK_MAX_SLOTS && slot_bytes != 0 &&
	    slot_bytes % (2 * MIB) == 0 && threads <= GP_PARK_MAX_THREADS) {
		P.slots = slots;
		P.slot_bytes = slot_bytes;
		P.threads = threads;
		rc = 0;
	}
	pthread_mutex_unlock(&P.lock);
	return rc;
}

/* The ring, made in `device`'s context (current) if it is not there: portable pinned memory,
 * which every context may copy from and to. A reset of the device it was made on freed it. */
static CUresult ring_ready(int device)
{
	void *p = NULL;
	CUresult e;

	if (P.ring != NULL && resets_of(P.ring_device) == P.ring_resets)
		return CUDA_SUCCESS;
	P.ring = NULL;
	if (gp_cu.MemHostAlloc == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	e = gp_cu.MemHostAlloc(&p, P.slots * P.slot_bytes, CU_MEMHOSTALLOC_PORTABLE);
	if (e != CUDA_SUCCESS)
		return e;
	P.ring = p;
	P.ring_device = device;
	P.ring_resets = resets_of(device);
	return CUDA_SUCCESS;
}

/* The device's stream and events (its context current), made at its first park and again after
 * a reset (which destroyed them). Non-blocking: the program's legacy stream never orders them. */
static CUresult device_ready(int device)
{
	CUstream s = NULL;
	CUresult e;
	unsigned k = 0;

	if (P.made_at[device] == resets_of(device) + 1)
		return CUDA_SUCCESS;
	if (gp_cu.StreamCreate == NULL || gp_cu.EventCreate == NULL || gp_cu.MemcpyAsync == NULL ||
	    gp_cu.EventRecord == NULL || gp_cu.EventSynchronize == NULL ||
	    gp_cu.StreamSynchronize == NULL || gp_cu.EventDestroy_v2 == NULL ||
	    gp_cu.StreamDestroy_v2 == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	e = gp_cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING);
	for (; e == CUDA_SUCCESS && k < P.slots; k++)
		e = gp_cu.EventCreate(&P.ev[device][k], CU_EVENT_DISABLE_TIMING);
	if (e != CUDA_SUCCESS) {
		while (k-- > 0)
			gp_cu.EventDestroy_v2(P.ev[device][k]);
		if (s != NULL)
			gp_cu.StreamDestroy_v2(s);
		return e;
	}
	P.stream[device] = s;
	P.made_at[device] = resets_of(device) + 1;
	return CUDA_SUCCESS;
}

static char *slot_at(unsigned s)
{
	return (char *)P.ring + (size_t)s * P.slot_bytes;
}

/* ---- the copies (the device's context current, its stream and events ready) ---- */

static CUresult queue_copy(int device, unsigned s, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult e = gp_cu.MemcpyAsync(dst, src, n, P.stream[device]);

	return e == CUDA_SUCCESS ? gp_cu.EventRecord(P.ev[device][s], P.stream[device]) : e;
}

/* Device to host: chunk i goes to slot i % slots; the GPU copies chunk i + 1 while the workers
 * empty chunk i's slot, and a slot is used again once its last chunk is out. Returns with no
 * copy of ours in flight and the workers idle, failed or not. */
static CUresult copy_out(struct crew *c, int device, const struct chunk *k, size_t n)
{
	const unsigned S = P.slots;
	CUresult e;
	size_t i;

	if (n == 0)
		return CUDA_SUCCESS;
	e = queue_copy(device, 0, (CUdeviceptr)(uintptr_t)slot_at(0), k[0].d, k[0].n);
	for (i = 0; e == CUDA_SUCCESS && i < n; i++) {
		if (i + 1 < n) {
			crew_wait(c, (unsigned)((i + 1) % S));
			e = queue_copy(device, (unsigned)((i + 1) % S),
				       (CUdeviceptr)(uintptr_t)slot_at((unsigned)((i + 1) % S)),
				       k[i + 1].d, k[i + 1].n);
			if (e != CUDA_SUCCESS)
				break;
		}
		e = gp_cu.EventSynchronize(P.ev[device][i % S]);
		if (e == CUDA_SUCCESS)
			crew_post(c, (unsigned)(i % S), k[i].h, slot_at((unsigned)(i % S)), k[i].n);
	}
	if (e != CUDA_SUCCESS)
		gp_cu.StreamSynchronize(P.stream[device]);
	crew_wait_all(c);
	return e;
}

/* Host to device: the workers fill the slots ahead (chunk i into slot i % slots); the GPU copies
 * chunk i while chunk i - 1's slot, once its copy is done, is filled with chunk i - 1 + slots.
 * Success only once every copy is complete. Returns with no copy of ours in flight and the
 * workers idle. */
static CUresult copy_in(struct crew *c, int device, const struct chunk *k, size_t n)
{
	const unsigned S = P.slots;
	CUresult e = CUDA_SUCCESS, last;
	size_t i;

	for (i = 0; i < n && i < S; i++)
		crew_post(c, (unsigned)i, slot_at((unsigned)i), k[i].h, k[i].n);
	for (i = 0; e == CUDA_SUCCESS && i < n; i++) {
		crew_wait(c, (unsigned)(i % S));
		e = queue_copy(device, (unsigned)(i % S), k[i].d,
			       (CUdeviceptr)(uintptr_t)slot_at((unsigned)(i % S)), k[i].n);
		if (e != CUDA_SUCCESS || i == 0 || i - 1 + S >= n)
			continue;
		e = gp_cu.EventSynchronize(P.ev[device][(i - 1) % S]);
		if (e == CUDA_SUCCESS)
			crew_post(c, (unsigned)((i - 1) % S), slot_at((unsigned)((i - 1) % S)),
				  k[i - 1 + S].h, k[i - 1 + S].n);
	}
	last = gp_cu.StreamSynchronize(P.stream[device]);
	crew_wait_all(c);
	return e != CUDA_SUCCESS ? e : last;
}

/* The chunks of the held blocks of `device` that are in state `w`, in order; NULL with *n 0 when
 * there are none, or (*n != 0) no memory. */
static struct chunk *chunks_of(int device, enum where w, size_t *n)
{
	struct chunk *k;
	size_t m = 0;

	*n = 0;
	for (size_t i = 0; i < P.nheld; i++)
		if (P.held[i].device == device && P.held[i].where == w)
			m += (P.held[i].bytes + P.slot_bytes - 1) / P.slot_bytes;
	if (m == 0)
		return NULL;
	*n = m;
	k = malloc(m * sizeof(*k));
	if (k == NULL)
		return NULL;
	m = 0;
	for (size_t i = 0; i < P.nheld; i++) {
		const struct gp_park_held *h = &P.held[i];

		if (h->device != device || h->where != w)
			continue;
		for (size_t off = 0; off < h->bytes; off += P.slot_bytes) {
			size_t left = h->bytes - off;

			k[m++] = (struct chunk){ h->va + off, P.host + h->host_off + off,
						 left < P.slot_bytes ? left : P.slot_bytes };
		}
	}
	return k;
}

/* A bitmask of the devices that have held blocks in state w. */
static uint64_t devices_with(enum where w)
{
	uint64_t m = 0;

	for (size_t i = 0; i < P.nheld; i++)
		if (P.held[i].where == w)
			m |= 1ull << P.held[i].device;
	return m;
}

static void count_off_device(void)
{
	uint64_t b = 0;

	for (size_t i = 0; i < P.nheld; i++)
		if (P.held[i].where != ON_DEVICE)
			b += P.held[i].bytes;
	atomic_store_explicit(&P.off_device, b, memory_order_relaxed);
}

/* Every held block that is not on its device brought back, device by device: refilled (new
 * memory mapped), then its bytes copied in. Stops at the first failure; what got back stays back.
 * *bytes, *blocks: what came back. */
static CUresult bring_back(struct crew *c, uint64_t *bytes, uint64_t *blocks)
{
	uint64_t devs = devices_with(ON_HOST) | devices_with(MAPPED);
	CUresult e = CUDA_SUCCESS;

	for (int d = 0; d < GP_MAX_DEVICES && e == CUDA_SUCCESS; d++) {
		struct chunk *k;
		size_t n;
		int pushed;

		if (!(devs & (1ull << d)))
			continue;
		if (gp_ctx_enter(d, &pushed) != 0) {
			e = CUDA_ERROR_INVALID_CONTEXT;
			break;
		}
		e = device_ready(d);
		for (size_t i = 0; i < P.nheld && e == CUDA_SUCCESS; i++) {
			struct gp_park_held *h = &P.held[i];

			if (h->device != d || h->where != ON_HOST)
				continue;
			e = gp_vmm_refill(h->va);
			if (e == CUDA_SUCCESS) {
				h->where = MAPPED;
			} else if (!gp_vmm_owns((const void *)(uintptr_t)h->va)) {
				/* Freed while parked (against the contract): nothing to bring
				 * back, and never a reason to fail every retry. */
				h->where = ON_DEVICE;
				e = CUDA_SUCCESS;
			}
		}
		/* Whatever was mapped gets its bytes, even after a failed refill: fewer to do
		 * on the retry. */
		k = chunks_of(d, MAPPED, &n);
		if (k == NULL && n != 0) {
			e = e != CUDA_SUCCESS ? e : CUDA_ERROR_OUT_OF_MEMORY;
		} else if (n != 0) {
			CUresult ec = copy_in(c, d, k, n);

			if (ec == CUDA_SUCCESS) {
				for (size_t i = 0; i < P.nheld; i++) {
					if (P.held[i].device == d && P.held[i].where == MAPPED) {
						P.held[i].where = ON_DEVICE;
						*bytes += P.held[i].bytes;
						(*blocks)++;
					}
				}
			}
			e = e != CUDA_SUCCESS ? e : ec;
		}
		free(k);
		gp_ctx_leave(pushed);
	}
	count_off_device();
	return e;
}

/* Nothing held any more: the host copies go. */
static void forget_held(void)
{
	if (P.host != NULL)
		munmap(P.host, P.host_bytes);
	free(P.held);
	P.held = NULL;
	P.nheld = 0;
	P.host = NULL;
	P.host_bytes = 0;
	atomic_store_explicit(&P.off_device, 0, memory_order_relaxed);
}

static int by_device_then_address(const void *a, const void *b)
{
	const struct gp_park_held *x = a, *y = b;

	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	return x->va < y->va ? -1 : x->va > y->va;
}

/* The VMM-backed blocks not parked, into P.held (sorted by device and address), their host
 * offsets laid out; *total: their bytes. 0, or no memory. */
static CUresult gather(size_t *total)
{
	struct gp_vmm_seen *seen = NULL;
	size_t n = 0, cap = 0;
	CUresult e = CUDA_SUCCESS;

	*total = 0;
	do {
		void *more;

		cap = n + 16;
		more = realloc(seen, cap * sizeof(*seen));
		if (more == NULL) {
			free(seen);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		seen = more;
		n = gp_vmm_list(seen, cap);
	} while (n > cap);
	P.held = n != 0 ? calloc(n, sizeof(*P.held)) : NULL;
	if (n != 0 && P.held == NULL) {
		e = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (seen[i].parked || seen[i].device < 0 || seen[i].device >= GP_MAX_DEVICES)
			continue;
		P.held[P.nheld++] = (struct gp_park_held){ seen[i].va, seen[i].bytes, 0,
							   seen[i].device, ON_DEVICE };
	}
	if (P.nheld > 1)
		qsort(P.held, P.nheld, sizeof(*P.held), by_device_then_address);
	for (size_t i = 0; i < P.nheld; i++) {
		P.held[i].host_off = *total;
		*total += P.held[i].bytes;
	}
out:
	free(seen);
	return e;
}

/* Phase 1 of a park: every held block's bytes copied to the host, nothing released yet (so a
 * failure here has nothing to put back). */
static CUresult copy_all_out(struct crew *c)
{
	uint64_t devs = devices_with(ON_DEVICE);
	CUresult e = CUDA_SUCCESS;

	for (int d = 0; d < GP_MAX_DEVICES && e == CUDA_SUCCESS; d++) {
		struct chunk *k;
		size_t n;
		int pushed;

		if (!(devs & (1ull << d)))
			continue;
		if (gp_ctx_enter(d, &pushed) != 0)
			return CUDA_ERROR_INVALID_CONTEXT;
		e = ring_ready(d);
		if (e == CUDA_SUCCESS)
			e = device_ready(d);
		if (e == CUDA_SUCCESS) {
			k = chunks_of(d, ON_DEVICE, &n);
			e = k == NULL && n != 0 ? CUDA_ERROR_OUT_OF_MEMORY : copy_out(c, d, k, n);
			free(k);
		}
		gp_ctx_leave(pushed);
	}
	return e;
}

/* Phase 2: every block's physical memory given back, once all the bytes are out (a release
 * between copies would stall the pipeline, and a failure in the copies would then have blocks
 * to put back). */
static CUresult evict_all(void)
{
	CUresult e = CUDA_SUCCESS;

	for (size_t i = 0; i < P.nheld && e == CUDA_SUCCESS; i++) {
		int pushed;

		if (gp_ctx_enter(P.held[i].device, &pushed) != 0)
			return CUDA_ERROR_INVALID_CONTEXT;
		e = gp_vmm_evict(P.held[i].va);
		if (e == CUDA_SUCCESS)
			P.held[i].where = ON_HOST;
		gp_ctx_leave(pushed);
	}
	return e;
}

int gp_park_vmm(struct gp_park_figures *f)
{
	uint64_t t0 = now_ns(), back_bytes = 0, back_blocks = 0;
	size_t total = 0;
	struct crew c;
	CUresult e;

	pthread_mutex_lock(&P.lock);
	if (P.nheld != 0) {
		pthread_mutex_unlock(&P.lock);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	defaults();
	e = gather(&total);
	if (e != CUDA_SUCCESS || P.nheld == 0) {
		forget_held();
		pthread_mutex_unlock(&P.lock);
		if (f != NULL && e == CUDA_SUCCESS)
			*f = (struct gp_park_figures){ 0, 0, now_ns() - t0, f->unpark_ns };
		return e;
	}
	/* Pageable, so that it costs no pinning; huge pages where the kernel has them, so that the
	 * workers' first writes fault once per 2 MiB rather than per 4 KiB. Not MAP_NORESERVE: a
	 * kernel that counts commitments refuses it here, before anything moved. */
	P.host = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (P.host == MAP_FAILED) {
		P.host = NULL;
		forget_held();
		pthread_mutex_unlock(&P.lock);
		gp_log(GP_LOG_WARN, "parking VMM-backed blocks: no %zu bytes of host memory to map",
		       total);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	P.host_bytes = total;
	madvise(P.host, total, MADV_HUGEPAGE);
	crew_start(&c, P.threads);
	e = copy_all_out(&c);
	if (e == CUDA_SUCCESS)
		e = evict_all();
	count_off_device();
	if (e != CUDA_SUCCESS) {
		CUresult back = bring_back(&c, &back_bytes, &back_blocks);

		if (back != CUDA_SUCCESS)
			gp_log(GP_LOG_ERROR, "parking VMM-backed blocks failed (CUDA error %d) and "
					     "putting them back failed too (CUDA error %d): %zu bytes "
					     "stay in host memory until the unpark",
			       (int)e, (int)back, gp_park_vmm_parked());
	}
	crew_stop(&c);
	if (e != CUDA_SUCCESS) {
		if (atomic_load_explicit(&P.off_device, memory_order_relaxed) == 0)
			forget_held();
		pthread_mutex_unlock(&P.lock);
		return e;
	}
	if (f != NULL)
		*f = (struct gp_park_figures){ total, P.nheld, now_ns() - t0, f->unpark_ns };
	pthread_mutex_unlock(&P.lock);
	return CUDA_SUCCESS;
}

int gp_unpark_vmm(struct gp_park_figures *f)
{
	uint64_t t0 = now_ns(), bytes = 0, blocks = 0;
	struct crew c;
	CUresult e = CUDA_SUCCESS;

	pthread_mutex_lock(&P.lock);
	if (P.nheld != 0) {
		crew_start(&c, P.threads);
		e = bring_back(&c, &bytes, &blocks);
		crew_stop(&c);
		if (e == CUDA_SUCCESS)
			forget_held();
	}
	pthread_mutex_unlock(&P.lock);
	if (f != NULL) {
		f->bytes = bytes;
		f->blocks = blocks;
		f->unpark_ns = now_ns() - t0;
	}
	return e;
}

size_t gp_park_vmm_bytes(size_t *host_bytes)
{
	struct gp_vmm_seen few[64], *all = few;
	size_t cap = 64, n, bytes = 0;

	n = gp_vmm_list(few, cap);
	if (n > cap && (all = malloc(n * sizeof(*all))) != NULL) {
		cap = n;
		n = gp_vmm_list(all, cap);
	} else if (all == NULL) {
		all = few; /* no memory for the list: the first ones only */
	}
	for (size_t i = 0; i < n && i < cap; i++)
		if (!all[i].parked)
			bytes += all[i].bytes;
	if (all != few)
		free(all);
	if (host_bytes != NULL) {
		pthread_mutex_lock(&P.lock);
		defaults();
		*host_bytes = bytes + (P.ring == NULL && bytes != 0 ? P.slots * P.slot_bytes : 0);
		pthread_mutex_unlock(&P.lock);
	}
	return bytes;
}

size_t gp_park_vmm_parked(void)
{
	return (size_t)atomic_load_explicit(&P.off_device, memory_order_relaxed);
}
