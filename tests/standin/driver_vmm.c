/* driver_vmm.c — the stand-in driver's virtual memory management (VMM): physical allocations
 * (cuMemCreate: a memfd of the size, charged against the device like cuMemAlloc_v2 of that size),
 * address reservations (cuMemAddressReserve: PROT_NONE anonymous memory, 2 MiB aligned, free of
 * charge), mappings of an allocation into a reservation (cuMemMap: the memfd mapped MAP_SHARED |
 * MAP_FIXED over it, PROT_NONE until cuMemSetAccess), and what the rest of the driver asks about
 * such memory: which mapping a pointer lies in, whether a copy may touch it, its pointer
 * attributes. Every check is strict (a misuse the real driver might tolerate fails here with
 * CUDA_ERROR_INVALID_VALUE), so tests catch it. Never: exporting or importing shareable handles,
 * cuMemRetainAllocationHandle, host or managed locations, sparse or compressible memory, per-device
 * protection (the host sees the union of the access granted to all devices), checkpointing VMM
 * memory, or hiding it from a forked child (the memfd is shared with it). Test-only. */
#define _GNU_SOURCE
#include "driver.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define VMM_GRANULE (2 * MIB)

struct vmm_handle {
	struct vmm_handle *next;
	CUmemGenericAllocationHandle id;
	int fd;
	size_t size;
	int device;
	int released; /* cuMemRelease was called: the id is no longer valid */
	int maps;     /* mappings of it: its memory goes when released and this reaches 0 */
};

struct vmm_reserve {
	struct vmm_reserve *next;
	uintptr_t base;
	size_t size;
};

struct vmm_mapping {
	struct vmm_mapping *next;
	uintptr_t va;
	size_t size;
	size_t offset;
	struct vmm_handle *h;
	struct vmm_reserve *r;
	unsigned access[STANDIN_MAX_DEVICES]; /* CU_MEM_ACCESS_FLAGS_PROT_* per device */
	int prot;                              /* the union, as mprotect'ed */
};

/* All guarded by st.lock. */
static struct vmm_handle *handles;
static struct vmm_reserve *reserves;
static struct vmm_mapping *mappings;
static CUmemGenericAllocationHandle next_id = 0x5000;

static int aligned(uint64_t v)
{
	return v % VMM_GRANULE == 0;
}

static int device_valid(const CUmemLocation *loc)
{
	return loc->type == CU_MEM_LOCATION_TYPE_DEVICE && loc->id >= 0 && loc->id < st.ndevices;
}

static int prop_valid(const CUmemAllocationProp *prop)
{
	return prop != NULL && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
	       device_valid(&prop->location);
}

static struct vmm_handle *handle_find(CUmemGenericAllocationHandle id)
{
	struct vmm_handle *h;

	for (h = handles; h != NULL; h = h->next)
		if (h->id == id && !h->released)
			return h;
	return NULL;
}

static struct vmm_reserve *reserve_containing(uintptr_t v)
{
	struct vmm_reserve *r;

	for (r = reserves; r != NULL; r = r->next)
		if (v >= r->base && v - r->base < r->size)
			return r;
	return NULL;
}

static struct vmm_mapping *mapping_containing(uintptr_t v)
{
	struct vmm_mapping *m;

	for (m = mappings; m != NULL; m = m->next)
		if (v >= m->va && v - m->va < m->size)
			return m;
	return NULL;
}

/* The memory of a handle goes: its charge is given back. */
static void handle_free(struct vmm_handle *h)
{
	struct vmm_handle **link;
	struct device *d = &st.dev[h->device];

	for (link = &handles; *link != h; link = &(*link)->next)
		;
	*link = h->next;
	d->used -= h->size;
	d->c.live_bytes -= h->size;
	d->c.live_allocs--;
	close(h->fd);
	free(h);
}

/* ---- granularity, physical allocations ---- */

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
				       CUmemAllocationGranularity_flags option)
{
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (granularity == NULL || !prop_valid(prop) ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		*granularity = VMM_GRANULE;
	leave();
	return rc;
}

static CUresult create(CUmemGenericAllocationHandle *handle, size_t size, int device)
{
	struct device *d = &st.dev[device];
	struct vmm_handle *h;
	int fd;

	if (size > d->capacity || d->used + size > d->capacity) /* first test: no overflow */
		return CUDA_ERROR_OUT_OF_MEMORY;
	h = calloc(1, sizeof(*h));
	if (h == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fd = memfd_create("standin-vmm", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
		if (fd >= 0)
			close(fd);
		free(h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	h->id = next_id++;
	h->fd = fd;
	h->size = size;
	h->device = device;
	h->next = handles;
	handles = h;
	d->used += size;
	d->c.live_bytes += size;
	d->c.live_allocs++;
	*handle = h->id;
	return CUDA_SUCCESS;
}

/* Charged like cuMemAlloc_v2 of `size` (a multiple of 2 MiB costs itself); the MALLOC fault
 * kind fails it too. */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
		     const CUmemAllocationProp *prop, unsigned long long flags)
{
	CUresult rc = enter();
	int dev;

	if (rc != CUDA_SUCCESS)
		return rc;
	dev = prop_valid(prop) ? prop->location.id : here(0);
	if (handle == NULL || !prop_valid(prop) || flags != 0 || size == 0 || !aligned(size))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		rc = inject(STANDIN_FAULT_MALLOC);
	if (rc == CUDA_SUCCESS)
		rc = create(handle, size, dev);
	if (rc == CUDA_SUCCESS)
		st.dev[dev].c.vmm_creates++;
	else
		st.dev[dev].c.vmm_failed_creates++;
	leave();
	return rc;
}

/* The id is invalid at once; the memory goes with the last mapping. */
CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct vmm_handle *h;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	h = handle_find(handle);
	if (h == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	h->released = 1;
	st.dev[h->device].c.vmm_releases++;
	if (h->maps == 0)
		handle_free(h);
out:
	leave();
	return rc;
}

/* ---- address reservations ---- */

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
			     unsigned long long flags)
{
	struct vmm_reserve *r;
	size_t align = alignment > VMM_GRANULE ? alignment : VMM_GRANULE, span;
	uintptr_t raw, base;
	void *p;
	CUresult rc = enter();

	(void)addr; /* a hint only: the stand-in never honours it */
	if (rc != CUDA_SUCCESS)
		return rc;
	if (ptr == NULL || size == 0 || !aligned(size) || flags != 0 ||
	    (alignment & (alignment - 1)) != 0 || size + align < size) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	span = size + align;
	p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	r = malloc(sizeof(*r));
	if (p == MAP_FAILED || r == NULL) {
		if (p != MAP_FAILED)
			munmap(p, span);
		free(r);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	raw = (uintptr_t)p;
	base = (raw + align - 1) / align * align;
	if (base > raw)
		munmap(p, base - raw);
	if (raw + span > base + size)
		munmap((void *)(base + size), raw + span - (base + size));
	r->base = base;
	r->size = size;
	r->next = reserves;
	reserves = r;
	st.dev[here(0)].c.vmm_reserves++;
	*ptr = (CUdeviceptr)base;
out:
	leave();
	return rc;
}

/* Strict: the exact reservation, and nothing of it mapped any more. */
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct vmm_reserve **link, *r = NULL;
	struct vmm_mapping *m;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	for (link = &reserves; *link != NULL; link = &(*link)->next)
		if ((*link)->base == (uintptr_t)ptr) {
			r = *link;
			break;
		}
	if (r == NULL || r->size != size) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	for (m = mappings; m != NULL; m = m->next)
		if (m->r == r) {
			rc = CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
	*link = r->next;
	munmap((void *)r->base, r->size);
	free(r);
	st.dev[here(0)].c.vmm_address_frees++;
out:
	leave();
	return rc;
}

/* ---- mappings ---- */

/* [v, v + size) lies in one reservation and overlaps no mapping. */
static struct vmm_reserve *free_range(uintptr_t v, size_t size)
{
	struct vmm_reserve *r = reserve_containing(v);
	struct vmm_mapping *m;

	if (r == NULL || size > r->size - (v - r->base))
		return NULL;
	for (m = mappings; m != NULL; m = m->next)
		if (v < m->va + m->size && m->va < v + size)
			return NULL;
	return r;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
		  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	struct vmm_handle *h;
	struct vmm_reserve *r;
	struct vmm_mapping *m;
	uintptr_t v = (uintptr_t)ptr;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	h = handle_find(handle);
	r = free_range(v, size);
	if (h == NULL || r == NULL || flags != 0 || size == 0 || !aligned(v) || !aligned(size) ||
	    !aligned(offset) || offset > h->size || size > h->size - offset) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	rc = inject(STANDIN_FAULT_VMM_MAP);
	if (rc != CUDA_SUCCESS)
		goto out;
	m = calloc(1, sizeof(*m));
	if (m == NULL) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (mmap((void *)v, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, (off_t)offset) ==
	    MAP_FAILED) {
		free(m);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	m->va = v;
	m->size = size;
	m->offset = offset;
	m->h = h;
	m->r = r;
	m->prot = PROT_NONE;
	m->next = mappings;
	mappings = m;
	h->maps++;
	st.dev[h->device].c.vmm_maps++;
out:
	leave();
	return rc;
}

/* [v, v + size) is exactly covered by whole mappings, back to back. */
static int whole_mappings(uintptr_t v, size_t size)
{
	uintptr_t cur = v, end = v + size;
	struct vmm_mapping *m;

	if (size == 0 || end < v)
		return 0;
	while (cur < end) {
		m = mapping_containing(cur);
		if (m == NULL || m->va != cur || m->size > end - cur)
			return 0;
		cur += m->size;
	}
	return 1;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	struct vmm_mapping **link, *m;
	uintptr_t v = (uintptr_t)ptr;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!whole_mappings(v, size)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	rc = inject(STANDIN_FAULT_VMM_UNMAP);
	if (rc != CUDA_SUCCESS)
		goto out;
	mmap((void *)v, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	link = &mappings;
	while (*link != NULL) {
		m = *link;
		if (m->va < v || m->va - v >= size) {
			link = &m->next;
			continue;
		}
		*link = m->next;
		st.dev[m->h->device].c.vmm_unmaps++;
		if (--m->h->maps == 0 && m->h->released)
			handle_free(m->h);
		free(m);
	}
out:
	leave();
	return rc;
}

/* ---- access ---- */

static int prot_of(unsigned flags)
{
	if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
		return PROT_READ | PROT_WRITE;
	return flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_NONE;
}

/* Granted per device, as a whole mapping at a time (the range must consist of whole mappings);
 * the host sees the union of all devices' access. */
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	struct vmm_mapping *m;
	uintptr_t v = (uintptr_t)ptr;
	size_t i;
	int d, prot;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (desc == NULL || count == 0 || !whole_mappings(v, size)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	for (i = 0; i < count; i++)
		if (!device_valid(&desc[i].location) ||
		    (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
		     desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		     desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
			rc = CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
	for (m = mappings; m != NULL; m = m->next) {
		if (m->va < v || m->va - v >= size)
			continue;
		for (i = 0; i < count; i++)
			m->access[desc[i].location.id] = (unsigned)desc[i].flags;
		prot = PROT_NONE;
		for (d = 0; d < STANDIN_MAX_DEVICES; d++)
			prot |= prot_of(m->access[d]);
		if (mprotect((void *)m->va, m->size, prot) == 0)
			m->prot = prot;
		else
			rc = CUDA_ERROR_INVALID_VALUE;
	}
	st.dev[here(0)].c.vmm_set_access++;
out:
	leave();
	return rc;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
	struct vmm_mapping *m;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	m = mapping_containing((uintptr_t)ptr);
	if (flags == NULL || location == NULL || !device_valid(location) || m == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		*flags = m->access[location->id];
	leave();
	return rc;
}

/* ---- what the rest of the driver asks (st.lock held) ---- */

int vmm_find(const void *p, struct vmm_where *w)
{
	struct vmm_mapping *m = mapping_containing((uintptr_t)p);

	if (m == NULL)
		return 0;
	w->range_start = m->r->base;
	w->range_size = m->r->size;
	w->map_start = m->va;
	w->map_size = m->size;
	w->device = m->h->device;
	w->handle = m->h->id;
	w->handle_size = m->h->size;
	w->prot = m->prot;
	return 1;
}

/* A copy or memset over [p, p + n): fine if it touches no reservation; else it must lie in one
 * reservation, fully mapped with the access it needs (the union over devices). */
CUresult vmm_check(const void *p, size_t n, int write)
{
	uintptr_t v = (uintptr_t)p, cur, end = v + n;
	struct vmm_reserve *r;
	struct vmm_mapping *m;
	int need = write ? PROT_WRITE : PROT_READ;

	if (n == 0 || reserves == NULL)
		return CUDA_SUCCESS;
	if (end < v)
		return CUDA_ERROR_INVALID_VALUE;
	for (r = reserves; r != NULL; r = r->next) {
		if (!(v < r->base + r->size && r->base < end))
			continue;
		if (v < r->base || end - r->base > r->size)
			return CUDA_ERROR_INVALID_VALUE;
		for (cur = v; cur < end; cur = m->va + m->size) {
			m = mapping_containing(cur);
			if (m == NULL || !(m->prot & need))
				return CUDA_ERROR_INVALID_VALUE;
		}
		return CUDA_SUCCESS;
	}
	return CUDA_SUCCESS;
}

int vmm_reserved(const void *p)
{
	return reserve_containing((uintptr_t)p) != NULL;
}

/* ---- inspection (standin.h) ---- */

int standin_vmm_mapped(const void *p, uint64_t *range_start, uint64_t *range_size,
		       uint64_t *handle_bytes)
{
	struct vmm_where w;
	int found;

	lock_state();
	found = vmm_find(p, &w);
	leave();
	if (!found)
		return 0;
	if (range_start != NULL)
		*range_start = w.range_start;
	if (range_size != NULL)
		*range_size = w.range_size;
	if (handle_bytes != NULL)
		*handle_bytes = w.handle_size;
	return 1;
}

uint64_t standin_vmm_handles(int device)
{
	struct vmm_handle *h;
	uint64_t n = 0;

	lock_state();
	for (h = handles; h != NULL; h = h->next)
		if (device < 0 || h->device == device)
			n++;
	leave();
	return n;
}
