/* driver_mem.c — the stand-in driver's "device" memory: host memory behind a pointer map, charged
 * against each device's capacity as the real driver rounds allocations, with the allocation and
 * free entry points (fault injection, the free delay, cuMemFree_v2's wait for the device and
 * cuMemFreeAsync's stream order included), memsets and copies (queued on a stream: driver_work.c),
 * pointer attributes and the default memory pools. VMM memory (driver_vmm.c) is no allocation
 * here: a free or an IPC handle of it fails with CUDA_ERROR_INVALID_VALUE, copies and memsets
 * check that the range they touch is mapped with access, and its pointer attributes are a
 * mapping's. Test-only. */
#define _GNU_SOURCE
#include "driver.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define STANDIN_ALIGN 256

static void *ptr_of(CUdeviceptr d)
{
	return (void *)(uintptr_t)d;
}

static CUdeviceptr dptr_of(const void *p)
{
	return (CUdeviceptr)(uintptr_t)p;
}

/* ---- the pointer map (st.lock held) ---- */

static size_t bucket(const void *p)
{
	uintptr_t v = (uintptr_t)p;

	return (size_t)((v >> 8) ^ (v >> 20)) % STANDIN_MAP_BUCKETS;
}

struct alloc *map_find(const void *p)
{
	struct alloc *a;

	for (a = st.map[bucket(p)]; a != NULL; a = a->next)
		if (a->ptr == p)
			return a;
	return NULL;
}

/* The allocation p points into: its start first (cheap), else every one (the rare case). */
static struct alloc *map_containing(const void *p)
{
	uintptr_t v = (uintptr_t)p;
	struct alloc *a = map_find(p);
	size_t b;

	for (b = 0; a == NULL && b < STANDIN_MAP_BUCKETS; b++)
		for (a = st.map[b]; a != NULL; a = a->next)
			if (v >= (uintptr_t)a->ptr && v - (uintptr_t)a->ptr < a->size)
				return a;
	return a;
}

static struct alloc *map_remove(const void *p)
{
	struct alloc **link = &st.map[bucket(p)];
	struct alloc *a;

	for (; *link != NULL; link = &(*link)->next) {
		a = *link;
		if (a->ptr == p) {
			*link = a->next;
			return a;
		}
	}
	return NULL;
}

/* ---- blocks ---- */

/* A record and the block it describes; NULL when host memory ran out. */
static struct alloc *alloc_new(size_t size)
{
	struct alloc *a;

	if (st.use_mmap) {
		size_t page = 4096, span = page + (size + page - 1) / page * page;
		void *base = mmap(NULL, span, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (base == MAP_FAILED)
			return NULL;
		a = base;
		a->ptr = (char *)base + page;
		a->span = span;
		return a;
	}
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return NULL;
	a->ptr = aligned_alloc(STANDIN_ALIGN, (size + STANDIN_ALIGN - 1) / STANDIN_ALIGN * STANDIN_ALIGN);
	if (a->ptr == NULL) {
		free(a);
		return NULL;
	}
	return a;
}

static void alloc_delete(struct alloc *a)
{
	if (st.use_mmap) {
		munmap(a, a->span);
		return;
	}
	free(a->ptr);
	free(a);
}

static void account(struct alloc *a, int sign)
{
	struct device *d = &st.dev[a->device];
	uint64_t n = a->charged;

	d->used = sign > 0 ? d->used + n : d->used - n;
	d->c.live_bytes = sign > 0 ? d->c.live_bytes + n : d->c.live_bytes - n;
	d->c.live_allocs = sign > 0 ? d->c.live_allocs + 1 : d->c.live_allocs - 1;
	if (a->async)
		d->async_used = sign > 0 ? d->async_used + n : d->async_used - n;
}

static CUresult do_malloc(CUdeviceptr *dptr, size_t size, int device, int async)
{
	struct device *d = &st.dev[device];
	struct alloc *a = NULL;
	uint64_t charged = charge(size);
	CUresult rc = CUDA_SUCCESS;

	if (dptr == NULL || size == 0) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (size > d->capacity || d->used + charged > d->capacity) { /* first test: no overflow */
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	a = alloc_new(size);
	if (a == NULL) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	a->size = size;
	a->charged = charged;
	a->device = device;
	a->async = async;
	a->next = st.map[bucket(a->ptr)];
	st.map[bucket(a->ptr)] = a;
	account(a, 1);
	*dptr = dptr_of(a->ptr);
out:
	if (rc != CUDA_SUCCESS)
		d->c.failed_mallocs++;
	else if (async)
		d->c.async_mallocs++;
	else
		d->c.mallocs++;
	return rc;
}

/* Frees a live allocation; counts a bad free on `device` (the caller's) otherwise. */
static CUresult do_free(void *p, int device, int async)
{
	struct alloc *a = map_remove(p);
	struct device *d;

	if (a == NULL) {
		st.dev[device].c.bad_frees++;
		return CUDA_ERROR_INVALID_VALUE;
	}
	d = &st.dev[a->device];
	account(a, -1);
	if (async)
		d->c.async_frees++;
	else
		d->c.frees++;
	if (!async && a->device != device)
		d->c.frees_off_device++; /* legal in CUDA; gpupool promises not to do it */
	alloc_delete(a);
	return CUDA_SUCCESS;
}

/* cudaDeviceReset's work: every allocation of the device goes. */
void free_device_memory(int device)
{
	struct alloc **link, *a;
	struct device *d = &st.dev[device];
	size_t b;

	for (b = 0; b < STANDIN_MAP_BUCKETS; b++) {
		link = &st.map[b];
		while (*link != NULL) {
			a = *link;
			if (a->device != device) {
				link = &a->next;
				continue;
			}
			*link = a->next;
			alloc_delete(a);
		}
	}
	d->used = 0;
	d->async_used = 0;
	d->c.live_allocs = 0;
	d->c.live_bytes = 0;
}

/* ---- allocation and free ---- */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	CUresult rc;
	int dev;

	rc = enter_ctx(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = check_unsafe_call(__func__);
	if (rc == CUDA_SUCCESS)
		rc = inject(STANDIN_FAULT_MALLOC);
	if (rc != CUDA_SUCCESS)
		st.dev[dev].c.failed_mallocs++;
	else
		rc = do_malloc(dptr, bytesize, dev, 0);
	leave();
	return rc;
}

/* Managed memory: host memory here as all of it, charged to the current context's device like
 * cuMemAlloc_v2 (counted in mallocs; the MALLOC fault kind fails it too). */
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	CUresult rc;
	int dev;

	rc = enter_ctx(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		rc = inject(STANDIN_FAULT_MALLOC);
	if (rc != CUDA_SUCCESS)
		st.dev[dev].c.failed_mallocs++;
	else
		rc = do_malloc(dptr, bytesize, dev, 0);
	leave();
	return rc;
}

#define PITCH_ALIGN 512 /* bytes: rows start at multiples of this */

/* Pitched memory: rows of width bytes rounded up to PITCH_ALIGN, one allocation of pitch x
 * height bytes, charged like cuMemAlloc_v2 of that size. */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
			    unsigned int element_bytes)
{
	CUresult rc;
	size_t p;
	int dev;

	rc = enter_ctx(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	p = (width + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
	if (pitch == NULL || width == 0 || height == 0 ||
	    (element_bytes != 4 && element_bytes != 8 && element_bytes != 16) ||
	    p > SIZE_MAX / height)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		rc = inject(STANDIN_FAULT_MALLOC);
	if (rc != CUDA_SUCCESS)
		st.dev[dev].c.failed_mallocs++;
	else
		rc = do_malloc(dptr, p * height, dev, 0);
	if (rc == CUDA_SUCCESS)
		*pitch = p;
	leave();
	return rc;
}

static void free_delay(void)
{
	unsigned delay = atomic_load(&st_free_delay_us);
	struct timespec ts = { (time_t)(delay / 1000000u), (long)(delay % 1000000u) * 1000L };

	if (delay == 0)
		return;
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Like the real one, it waits for the device first: the work queued on its streams before the
 * call completes (and every held event is done). An injected failure frees the allocation all
 * the same (unless STANDIN_FAIL_FREE_KEEPS) and reports the error, as a free does with the error
 * of an earlier asynchronous launch. */
CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	CUresult rc, fault = CUDA_SUCCESS;
	struct alloc *a;
	void *p = ptr_of(dptr);
	int dev;

	rc = check_call();
	if (rc != CUDA_SUCCESS || p == NULL)
		return rc;
	free_delay(); /* before the lock: a slow device, not a stalled driver */
	rc = enter_ctx(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = check_unsafe_call(__func__);
	if (rc != CUDA_SUCCESS)
		goto out;
	a = map_find(p);
	if (a != NULL) {
		wait_device(a->device);
		a = map_find(p); /* the lock was dropped: another thread may have freed it */
	}
	if (a != NULL)
		fault = inject(STANDIN_FAULT_FREE);
	if (fault != CUDA_SUCCESS && atomic_load(&st_free_keeps)) {
		rc = fault;
		goto out;
	}
	rc = do_free(p, dev, 0);
	if (rc == CUDA_SUCCESS)
		complete_all(-1);
	if (fault != CUDA_SUCCESS)
		rc = fault;
out:
	leave();
	return rc;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	CUresult rc;
	int dev;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!stream_valid(s)) {
		st.dev[here(dev)].c.failed_mallocs++;
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else {
		rc = do_malloc(dptr, bytesize, stream_device(s, dev), 1);
	}
	leave();
	return rc;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_async(dptr, bytesize, hStream);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_async(dptr, bytesize, hStream != NULL ? hStream : CU_STREAM_PER_THREAD);
}

/* A stream-ordered free reached by its stream's worker (st.lock held). */
static void free_in_order(void *p, int device)
{
	(void)do_free(p, device, 1);
}

/* cuMemFreeAsync frees at once when its stream has nothing to wait for (or is capturing: the
 * capture rules are unchanged), else when the stream's worker gets there; a pointer that is not
 * live fails at once. */
static CUresult free_ordered(void *p, CUstream s, int dev)
{
	struct work_args a = { .kind = WORK_LOCKED, .locked = free_in_order, .arg = p };
	struct CUstream_st *t;
	int sdev = stream_device(s, dev);

	if (map_find(p) == NULL || (!is_default_stream(s) && s->capturing))
		return do_free(p, here(sdev), 1);
	t = stream_of(s, sdev, 1);
	if (t == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (stream_settled(t))
		return do_free(p, here(sdev), 1);
	return queue_work(t, &a, NULL);
}

static CUresult free_async(CUdeviceptr dptr, CUstream s)
{
	CUresult rc;
	int dev;

	rc = check_call();
	if (rc != CUDA_SUCCESS || dptr == 0)
		return rc;
	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!stream_valid(s))
		rc = CUDA_ERROR_INVALID_HANDLE;
	else
		rc = free_ordered(ptr_of(dptr), s, dev);
	leave();
	return rc;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(dptr, hStream);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(dptr, hStream != NULL ? hStream : CU_STREAM_PER_THREAD);
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
	struct device *d;
	CUresult rc;
	int dev;

	rc = enter_ctx(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	d = &st.dev[dev];
	d->c.mem_get_info++;
	if (free_bytes == NULL || total_bytes == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	*free_bytes = (size_t)(d->capacity > d->used ? d->capacity - d->used : 0);
	*total_bytes = (size_t)d->capacity;
out:
	leave();
	return rc;
}

/* ---- memset and copies: work on a stream ---- */

/* value < 0: a copy from src, else a memset to value. */
static struct work_args copy_or_set(void *dst, const void *src, int value, size_t n)
{
	struct work_args a = { .kind = value < 0 ? WORK_COPY : WORK_MEMSET };

	a.dst = dst;
	a.src = src;
	a.value = value;
	a.n = n;
	return a;
}

/* Whether a copy or memset may be queued (st.lock held). */
static CUresult check_op(void *dst, const void *src, int value, size_t n)
{
	CUresult rc = CUDA_SUCCESS;

	if ((dst == NULL || (src == NULL && value < 0)) && n > 0)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		rc = vmm_check(dst, n, 1);
	if (rc == CUDA_SUCCESS && value < 0)
		rc = vmm_check(src, n, 0);
	return rc;
}

/* The synchronous ones: queued on the legacy stream (legacy) or this thread's per-thread one,
 * and waited for, as with pageable host memory on a GPU. From a kernel or host function, done
 * at once: queued, it would wait for the caller (CUDA forbids the call there). */
static CUresult sync_op(const char *fn, void *dst, const void *src, int value, size_t n,
			int legacy)
{
	struct work_args a = copy_or_set(dst, src, value, n);
	struct CUstream_st *t;
	uint64_t seq = 0;
	CUresult rc;
	int dev;

	rc = enter_ctx(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = check_unsafe_call(fn);
	if (rc == CUDA_SUCCESS && legacy && legacy_stream_blocked(dev))
		rc = capture_error(fn, dev, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	if (rc == CUDA_SUCCESS)
		rc = check_op(dst, src, value, n);
	if (rc != CUDA_SUCCESS || n == 0)
		goto out;
	if (in_worker()) {
		if (value < 0)
			memmove(dst, src, n);
		else
			memset(dst, value, n);
		goto out;
	}
	t = stream_of(legacy ? CU_STREAM_LEGACY : CU_STREAM_PER_THREAD, dev, 1);
	rc = t != NULL ? queue_work(t, &a, &seq) : CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS)
		wait_stream(t, seq);
out:
	leave();
	return rc;
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return sync_op(__func__, ptr_of(dstDevice), NULL, uc, N, 1);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return sync_op(__func__, ptr_of(dstDevice), NULL, uc, N, 0);
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return sync_op(__func__, ptr_of(dst), ptr_of(src), -1, ByteCount, 1);
}

CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return sync_op(__func__, ptr_of(dst), ptr_of(src), -1, ByteCount, 0);
}

/* The stream-ordered ones: queued (captured, not done, on a capturing stream). */
static CUresult async_op(const char *fn, void *dst, const void *src, int value, size_t n,
			 CUstream s)
{
	struct work_args a = copy_or_set(dst, src, value, n);
	struct CUstream_st *t;
	CUresult rc;
	int dev, run = 0;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = stream_work(fn, s, &dev, &run);
	if (rc == CUDA_SUCCESS)
		rc = check_op(dst, src, value, n);
	a.delayed = 1;
	if (rc == CUDA_SUCCESS && run && n > 0) {
		t = stream_of(s, dev, 1);
		rc = t != NULL ? queue_work(t, &a, NULL) : CUDA_ERROR_OUT_OF_MEMORY;
	}
	leave();
	return rc;
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	return async_op(__func__, ptr_of(dstDevice), NULL, uc, N, hStream);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	return async_op(__func__, ptr_of(dstDevice), NULL, uc, N,
			hStream != NULL ? hStream : CU_STREAM_PER_THREAD);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return async_op(__func__, ptr_of(dst), ptr_of(src), -1, ByteCount, hStream);
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return async_op(__func__, ptr_of(dst), ptr_of(src), -1, ByteCount,
			hStream != NULL ? hStream : CU_STREAM_PER_THREAD);
}

/* ---- pinned host memory ---- */

/* What cuMemHostAlloc gave out and cuMemFreeHost has not taken back (st.lock). */
struct pinned {
	struct pinned *next;
	void *p;
	size_t span; /* bytes mapped */
};
static struct pinned *pinned;

/* Host memory like any other here (nothing to pin): mapped, so that it is page-aligned. */
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	struct pinned *k;
	CUresult rc;
	int dev;

	(void)Flags;
	rc = enter_ctx(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (pp == NULL || bytesize == 0) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	k = malloc(sizeof(*k));
	if (k != NULL) {
		k->span = (bytesize + 4095) / 4096 * 4096;
		k->p = mmap(NULL, k->span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	if (k == NULL || k->p == MAP_FAILED) {
		free(k);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	k->next = pinned;
	pinned = k;
	*pp = k->p;
	st.dev[dev].c.pinned_allocs++;
out:
	leave();
	return rc;
}

CUresult cuMemFreeHost(void *p)
{
	struct pinned **link, *k;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = CUDA_ERROR_INVALID_VALUE;
	for (link = &pinned; (k = *link) != NULL; link = &k->next) {
		if (k->p == p) {
			*link = k->next;
			munmap(k->p, k->span);
			free(k);
			st.dev[here(0)].c.pinned_frees++;
			rc = CUDA_SUCCESS;
			break;
		}
	}
	leave();
	return rc;
}

/* ---- pointers ---- */

/* A legacy IPC handle: the address itself, for tests that check the caller gets the driver's
 * answer unchanged. No other process can open it. VMM memory has none (as on a GPU). */
CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	int vmm;

	if (pHandle == NULL || dptr == 0)
		return CUDA_ERROR_INVALID_VALUE;
	lock_state();
	vmm = vmm_reserved(ptr_of(dptr));
	leave();
	if (vmm)
		return CUDA_ERROR_INVALID_VALUE;
	memset(pHandle, 0, sizeof(*pHandle));
	memcpy(pHandle->reserved, &dptr, sizeof(dptr));
	return CUDA_SUCCESS;
}

/* For VMM memory, as on a GPU: the one mapping dptr lies in, not the whole reservation. */
CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	struct vmm_where w;
	struct alloc *a;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	a = map_containing(ptr_of(dptr));
	if (a == NULL && vmm_find(ptr_of(dptr), &w)) {
		if (pbase != NULL)
			*pbase = (CUdeviceptr)w.map_start;
		if (psize != NULL)
			*psize = (size_t)w.map_size;
		goto out;
	}
	if (a == NULL) {
		rc = CUDA_ERROR_NOT_FOUND;
		goto out;
	}
	if (pbase != NULL)
		*pbase = dptr_of(a->ptr);
	if (psize != NULL)
		*psize = (size_t)a->size;
out:
	leave();
	return rc;
}

/* One attribute of the memory ptr lies in, as vmm_find describes it (an ordinary allocation: its
 * range is its one mapping; vmm = 0). VMM memory belongs to no context and has no legacy IPC
 * handle; the mapping's own attributes are VMM memory's alone. st.lock held. */
static CUresult attribute(void *data, CUpointer_attribute attr, const struct vmm_where *w, int vmm,
			  CUdeviceptr ptr)
{
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = vmm ? NULL : &st.dev[w->device].ctx;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = w->device;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = (CUdeviceptr)w->range_start;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = (size_t)w->range_size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		if (!vmm)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)(uintptr_t)w->map_start;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
		if (!vmm)
			return CUDA_ERROR_INVALID_VALUE;
		*(size_t *)data = (size_t)w->map_size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPED:
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		if (!vmm)
			return CUDA_ERROR_INVALID_VALUE;
		*(int *)data = attr == CU_POINTER_ATTRIBUTE_MAPPED;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* One attribute of whatever ptr points into; CUDA_ERROR_NOT_FOUND if nothing (st.lock held). */
static CUresult any_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
	struct alloc *a = map_containing(ptr_of(ptr));
	struct vmm_where w;

	if (a != NULL) {
		memset(&w, 0, sizeof(w));
		w.range_start = w.map_start = (uint64_t)(uintptr_t)a->ptr;
		w.range_size = w.map_size = a->size;
		w.device = a->device;
		return attribute(data, attr, &w, 0, ptr);
	}
	if (vmm_find(ptr_of(ptr), &w))
		return attribute(data, attr, &w, 1, ptr);
	return CUDA_ERROR_NOT_FOUND;
}

/* A pointer that is not the driver's (host memory, or VMM space not mapped):
 * CUDA_ERROR_INVALID_VALUE, as on a GPU. */
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute_, CUdeviceptr ptr)
{
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = data == NULL ? CUDA_ERROR_INVALID_VALUE : any_attribute(data, attribute_, ptr);
	if (rc == CUDA_ERROR_NOT_FOUND)
		rc = CUDA_ERROR_INVALID_VALUE;
	leave();
	return rc;
}

/* The size of what an attribute writes, 0 for those the stand-in does not answer. */
static size_t attribute_size(CUpointer_attribute attr)
{
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		return sizeof(void *);
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		return sizeof(unsigned int);
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
	case CU_POINTER_ATTRIBUTE_MAPPED:
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		return sizeof(int);
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		return sizeof(CUdeviceptr);
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
		return sizeof(size_t);
	default:
		return 0;
	}
}

/* As the real one: a pointer the driver does not know is no error, each attribute then reads as
 * zero. An attribute the stand-in does not answer, or one that does not apply to the memory,
 * fails the call. */
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
				void **data, CUdeviceptr ptr)
{
	unsigned int i;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (attributes == NULL || data == NULL || numAttributes == 0) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	for (i = 0; i < numAttributes && rc == CUDA_SUCCESS; i++) {
		if (data[i] == NULL || attribute_size(attributes[i]) == 0) {
			rc = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		rc = any_attribute(data[i], attributes[i], ptr);
		if (rc != CUDA_ERROR_NOT_FOUND)
			continue;
		memset(data[i], 0, attribute_size(attributes[i]));
		rc = CUDA_SUCCESS;
	}
out:
	leave();
	return rc;
}

/* ---- the default memory pools (cuMemAllocAsync's) ---- */

static struct CUmemPoolHandle_st *pool_of(CUmemoryPool pool)
{
	int d;

	for (d = 0; d < st.ndevices; d++)
		if (pool == &st.dev[d].pool)
			return &st.dev[d].pool;
	return NULL;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (pool_out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= st.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	*pool_out = &st.dev[dev].pool;
	return CUDA_SUCCESS;
}

/* Nothing is cached by the pool here: trimming only counts. */
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	struct CUmemPoolHandle_st *p;
	CUresult rc = enter();

	(void)minBytesToKeep;
	if (rc != CUDA_SUCCESS)
		return rc;
	p = pool_of(pool);
	if (p == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		st.dev[p->device].c.pool_trims++;
	leave();
	return rc;
}

/* One attribute of pool p read into, or (set) written from, value. The pool holds exactly its
 * live allocations: reserved and used are the same, and read-only; the release threshold is kept
 * (and read back); the reuse policies are always on, and a set is accepted. */
static CUresult pool_attr(struct CUmemPoolHandle_st *p, CUmemPool_attribute attr, void *value,
		     int set)
{
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		if (!set)
			*(int *)value = 1;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		if (set)
			p->release_threshold = *(const cuuint64_t *)value;
		else
			*(cuuint64_t *)value = p->release_threshold;
		return CUDA_SUCCESS;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		if (set)
			return CUDA_ERROR_INVALID_VALUE;
		*(cuuint64_t *)value = st.dev[p->device].async_used;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* An attribute of a pool, read or set, under the state lock. */
static CUresult pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value, int set)
{
	struct CUmemPoolHandle_st *p;
	CUresult rc = enter();

	if (rc != CUDA_SUCCESS)
		return rc;
	p = pool_of(pool);
	rc = p == NULL || value == NULL ? CUDA_ERROR_INVALID_VALUE : pool_attr(p, attr, value, set);
	leave();
	return rc;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	return pool_attribute(pool, attr, value, 1);
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	return pool_attribute(pool, attr, value, 0);
}
