/* account.c — the device memory a program holds outside the pool's blocks, for the accounting
 * table. The doors' pass-through calls record each allocation (pointer or VMM handle -> kind,
 * device, bytes) in the pool's pointer map type (the value word carries all three: no record
 * to allocate) and keep live bytes per kind and device; a free takes its entry back. The control
 * thread asks the driver for each device's default memory pool and hands in the frameworks'
 * caches.
 * Never on the pool's path: its allocations and frees do not come here, and a pass-through free
 * looks at the map only while something is in it. */
#define _GNU_SOURCE
#include "account.h"
#include "clock.h"
#include "log.h"
#include "ptrmap.h"
#include "state.h"
#include "door/lookup.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ASYNC_PERIOD_NS 200000000ULL /* the driver's pools asked at most this often */
#define FW_PERIOD_NS 1000000000ULL   /* the frameworks read at most this often (the GIL) */
#define MIB (1024ULL * 1024ULL)

/* The value word: kind in the top 3 bits, device in the next 8, bytes below (8 PiB). */
#define KIND_SHIFT 61
#define DEV_SHIFT 53
#define BYTES_MASK ((1ULL << DEV_SHIFT) - 1)

_Static_assert(GP_ACCOUNT_UNPOOLED + 1 == GP_ACCOUNT_NKINDS, "state.h counts every kind");
_Static_assert(GP_MAX_DEVICES <= 256, "a device fits the value word's 8 bits");

#define A (gp_shim.account)

/* What the driver charges for `bytes`, as the pool's size classes assume it (sizeclass.c): whole
 * 2 MiB granules above 1 MiB; below, in 512-byte steps (the driver packs small allocations into
 * pages of its own, so there it is an estimate). */
static uint64_t charged(uint64_t bytes)
{
	if (bytes <= MIB)
		return (bytes + 511) / 512 * 512;
	return (bytes + 2 * MIB - 1) / (2 * MIB) * (2 * MIB);
}

static struct gp_ptrmap *map_of(int handle, int make)
{
	_Atomic(struct gp_ptrmap *) *slot = handle ? &A.handles : &A.ptrs;
	struct gp_ptrmap *m = atomic_load_explicit(slot, memory_order_acquire);

	if (m != NULL || !make)
		return m;
	pthread_mutex_lock(&A.make_lock);
	m = atomic_load_explicit(slot, memory_order_acquire);
	if (m == NULL) {
		m = aligned_alloc(GP_LINE, sizeof(*m));
		if (m != NULL && gp_ptrmap_init(m) != 0) {
			free(m);
			m = NULL;
		}
		if (m != NULL)
			atomic_store_explicit(slot, m, memory_order_release);
	}
	pthread_mutex_unlock(&A.make_lock);
	return m;
}

static void count(uint64_t word, int sign)
{
	unsigned kind = (unsigned)(word >> KIND_SHIFT), dev = (unsigned)(word >> DEV_SHIFT) & 0xff;
	uint64_t bytes = word & BYTES_MASK;

	if (kind >= GP_ACCOUNT_NKINDS || dev >= GP_MAX_DEVICES)
		return;
	if (sign > 0)
		atomic_fetch_add_explicit(&A.live[kind][dev], bytes, memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(&A.live[kind][dev], bytes, memory_order_relaxed);
}

static void no_memory(void)
{
	if (!atomic_exchange(&A.said_no_memory, 1))
		gp_log(GP_LOG_WARN, "no memory to count passed-through allocations: the accounting "
				    "table counts them in its rest from now on");
}

/* Put word under key; an entry the key already had (its free went unseen: the driver handed the
 * address out again) stops counting. */
static void put(int handle, uint64_t key, uint64_t word)
{
	struct gp_ptrmap *m = map_of(handle, 1);
	struct gp_ptrmap_shard *s;
	void *old = NULL;
	int rc;

	if (m == NULL) {
		no_memory();
		return;
	}
	s = gp_ptrmap_shard(m, (uintptr_t)key);
	gp_lock(&s->lock);
	rc = gp_ptrmap_insert(s, (uintptr_t)key, (void *)(uintptr_t)word, &old);
	gp_unlock(&s->lock);
	if (rc != 0) {
		no_memory();
		return;
	}
	count(word, 1);
	if (old != NULL)
		count((uint64_t)(uintptr_t)old, -1);
	else
		atomic_fetch_add_explicit(&A.entries, 1, memory_order_relaxed);
}

void gp_account_add(enum gp_account_kind kind, int device, uint64_t key, uint64_t bytes)
{
	uint64_t c = kind == GP_ACCOUNT_VMM ? bytes : charged(bytes);

	if (key == 0 || bytes == 0 || device < 0 || device >= GP_MAX_DEVICES || c > BYTES_MASK)
		return;
	put(kind == GP_ACCOUNT_VMM, key,
	    (uint64_t)kind << KIND_SHIFT | (uint64_t)device << DEV_SHIFT | c);
}

uint64_t gp_account_take(int handle, uint64_t key)
{
	struct gp_ptrmap *m;
	struct gp_ptrmap_shard *s;
	void *v;

	if (key == 0 || atomic_load_explicit(&A.entries, memory_order_relaxed) == 0 ||
	    (m = map_of(handle, 0)) == NULL)
		return 0;
	s = gp_ptrmap_shard(m, (uintptr_t)key);
	gp_lock(&s->lock);
	v = gp_ptrmap_remove(s, (uintptr_t)key);
	gp_unlock(&s->lock);
	if (v == NULL)
		return 0;
	atomic_fetch_sub_explicit(&A.entries, 1, memory_order_relaxed);
	count((uint64_t)(uintptr_t)v, -1);
	return (uint64_t)(uintptr_t)v;
}

void gp_account_put_back(int handle, uint64_t key, uint64_t token)
{
	if (token != 0)
		put(handle, key, token);
}

/* Each device whose primary context is active: its default memory pool's reserved bytes.
 * Asking never creates a context. */
static void measure_async(void)
{
	int n = 0;

	if (gp_cu.DeviceGetCount == NULL || gp_cu.DevicePrimaryCtxGetState == NULL ||
	    gp_cu.DeviceGetDefaultMemPool == NULL || gp_cu.MemPoolGetAttribute == NULL ||
	    gp_cu.DeviceGetCount(&n) != CUDA_SUCCESS)
		return;
	for (int d = 0; d < n && d < GP_MAX_DEVICES; d++) {
		cuuint64_t reserved = 0;
		CUmemoryPool pool;
		unsigned flags;
		int active = 0;

		if (gp_cu.DevicePrimaryCtxGetState(d, &flags, &active) != CUDA_SUCCESS || !active ||
		    gp_cu.DeviceGetDefaultMemPool(&pool, d) != CUDA_SUCCESS ||
		    gp_cu.MemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
					      &reserved) != CUDA_SUCCESS)
			reserved = 0;
		atomic_store_explicit(&A.async_reserved[d], (uint64_t)reserved,
				      memory_order_relaxed);
	}
}

void gp_account_measure(void)
{
	uint64_t now = gp_clock_ns(CLOCK_MONOTONIC);

	if (A.async_asked_ns == 0 || now - A.async_asked_ns >= ASYNC_PERIOD_NS) {
		A.async_asked_ns = now;
		measure_async();
	}
}

int gp_account_frameworks_due(void)
{
	uint64_t now = gp_clock_ns(CLOCK_MONOTONIC);

	if (A.fw_asked_ns != 0 && now - A.fw_asked_ns < FW_PERIOD_NS)
		return 0;
	A.fw_asked_ns = now;
	return 1;
}

void gp_account_frameworks(const uint64_t *cached_device, int n)
{
	for (int d = 0; d < GP_MAX_DEVICES; d++)
		atomic_store_explicit(&A.fw_cached[d], d < n ? cached_device[d] : 0,
				      memory_order_relaxed);
	atomic_store_explicit(&A.fw_read_ns, gp_clock_ns(CLOCK_REALTIME), memory_order_relaxed);
}

uint64_t gp_account_devices(void)
{
	uint64_t mask = 0;

	for (int d = 0; d < GP_MAX_DEVICES; d++) {
		uint64_t any = atomic_load_explicit(&A.async_reserved[d], memory_order_relaxed);

		for (int k = 0; k < GP_ACCOUNT_NKINDS; k++)
			any |= atomic_load_explicit(&A.live[k][d], memory_order_relaxed);
		if (any != 0)
			mask |= 1ULL << d;
	}
	return mask;
}

uint64_t gp_account_live_bytes(int kind)
{
	uint64_t n = 0;

	for (int d = 0; d < GP_MAX_DEVICES; d++) {
		if (kind >= 0 && kind < GP_ACCOUNT_NKINDS) {
			n += atomic_load_explicit(&A.live[kind][d], memory_order_relaxed);
			continue;
		}
		n += atomic_load_explicit(&A.async_reserved[d], memory_order_relaxed);
		for (int k = 0; k < GP_ACCOUNT_NKINDS; k++)
			n += atomic_load_explicit(&A.live[k][d], memory_order_relaxed);
	}
	return n;
}

void gp_account_fill(int device, struct gp_stats_device *e, uint64_t *read_ns)
{
	*read_ns = atomic_load_explicit(&A.fw_read_ns, memory_order_relaxed);
	if (device < 0 || device >= GP_MAX_DEVICES)
		return;
	e->framework_cached_bytes = atomic_load_explicit(&A.fw_cached[device],
							 memory_order_relaxed);
	e->passed_async_bytes = atomic_load_explicit(&A.async_reserved[device],
						     memory_order_relaxed);
	e->passed_vmm_bytes = atomic_load_explicit(&A.live[GP_ACCOUNT_VMM][device],
						   memory_order_relaxed);
	e->passed_managed_bytes = atomic_load_explicit(&A.live[GP_ACCOUNT_MANAGED][device],
						       memory_order_relaxed);
	e->passed_pitched_bytes = atomic_load_explicit(&A.live[GP_ACCOUNT_PITCHED][device],
						       memory_order_relaxed);
	e->passed_unpooled_bytes = atomic_load_explicit(&A.live[GP_ACCOUNT_UNPOOLED][device],
							memory_order_relaxed);
}
