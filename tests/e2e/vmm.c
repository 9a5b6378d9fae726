/* vmm.c — GPUPOOL_VMM on the stand-in (STANDIN_CAPACITY=64 MiB). Modes (argv[1]):
 *   on     blocks above 1 MiB are VMM-backed (cuMemCreate, not cuMemAlloc), smaller ones are not;
 *          cuMemGetAddressRange inside a block of moved pieces answers the whole block;
 *          a miss takes the end of a larger idle block where it lies (no driver call; the rest
 *          stays cached, the two share a range freed with the last), or moves idle blocks of other
 *          sizes into its block: their bytes come along, the device holds no more than before;
 *          through the driver door too; a release gives every
 *          handle and range back; the OOM retry works on handles; cudaIpcGetMemHandle of such a
 *          block is refused by the driver (invalid value) and the program goes on.
 *   auto   VMM-backed until the first IPC call, ordinary blocks after it.
 *   torch LIB  auto in a process that loaded LIB, a stand-in for PyTorch's libc10_cuda.so
 *          (its default mode, which shares tensors through IPC handles): ordinary blocks from
 *          the first, whose IPC handles work; with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (takeover,
 *          which cannot share) VMM-backed.
 *   loud   on: the refused IPC handle of a VMM-backed block is said once on stderr at the
 *          default log level (a child of the test, its stderr read).
 *   novmm  a device without the API: ordinary blocks, nothing else changes.
 *   trim   with GPUPOOL_VMM_TRIM=1, a stream made (no thread cache) and an idle GPU: three sizes
 *          of 64 KiB to 1 MiB asked for in turn, 40 times. GPUPOOL_VMM_AGE=0: each miss gives
 *          back the block the next request needs (120 real allocations, 119 real frees); an age
 *          longer than the loop: nothing given back, and once each size holds its fence batch
 *          its blocks are reused (fewer than half as many real allocations).
 *   owed   with GPUPOOL_VMM_TRIM=1 and GPUPOOL_VMM_AGE (300 ms, scaled with the machine): idle
 *          8 and 4 MiB blocks freed a moment ago stay when a 16 MiB miss grows (too young);
 *          while the program goes on asking (16 MiB, a hit, every few ms) for three ages nothing
 *          is given back; once it stops, the control thread gives the 12 MiB back, no sooner
 *          than an age after the last request.
 *   quiet  the same settings, a stream made: 100 blocks of 48 KiB in use at once stay once the
 *          program is quiet (all of them were in use at once); then 100 of 32 KiB at once and
 *          100 of 16 KiB (new sizes: the pool grows; below 64 KiB a trim gives nothing back) and
 *          the program goes on asking for three ages: nothing given back; once it stops, what it
 *          holds beyond the most in use at once in its last two busy spells (4800 KiB: the first
 *          one's) goes, the blocks idle longest first, the 48 KiB ones, no sooner than an age
 *          after the last request; the 32 and 16 KiB ones stay.
 *   round  the same settings, a stream made: 8 requests of 3 MiB in use at once (blocks of 4
 *          MiB, whole pieces), freed: once the program is quiet, what the pool holds beyond the
 *          24 MiB it asked for at once goes (two blocks, the oldest); a peak of the blocks' bytes
 *          would keep all 32.
 *   threads  8 threads allocate and free random sizes (3-40 MiB) with a stream each
 *          (fences), while another thread asks for releases: every block keeps its owner's bytes
 *          while it is live, and at the end a release leaves no handle and no range behind.
 *          VMM_ROUNDS rounds a thread (150 by hand; ctest asks for fewer, fewer still under the
 *          sanitizers: nearly every round makes new memory and faults its pages in). */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "e2e.h"

static int vmm_backed(const void *p, uint64_t *range, uint64_t *handle)
{
	uint64_t start = 0, size = 0, hb = 0;
	int yes = standin_vmm_mapped(p, &start, &size, &hb);

	if (range)
		*range = size;
	if (handle)
		*handle = hb;
	return yes && start == (uint64_t)(uintptr_t)p;
}

static void *alloc(size_t bytes)
{
	void *p = NULL;

	e2e_cuda(cudaMalloc(&p, bytes), "cudaMalloc");
	return p;
}

/* The driver's cuMemGetAddressRange, through the shim. */
static int address_range(const void *p, CUdeviceptr *base, size_t *size)
{
	CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	int ok;

	*(void **)&range = h ? dlsym(h, "cuMemGetAddressRange_v2") : NULL;
	ok = range != NULL && range(base, size, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS;
	if (h)
		dlclose(h);
	return ok;
}

/* Idle 8 and 4 MiB blocks become one 12 MiB block: their bytes at offsets 0 and 8 MiB, no new
 * handle, no new device memory. */
static void remap(void)
{
	struct standin_counters c0, c;
	void *a = alloc(8 * E2E_MIB), *b = alloc(4 * E2E_MIB), *p;
	uint64_t range = 0, hb = 0, live0;
	int ok;

	e2e_fill(a, 8 * E2E_MIB, 81);
	e2e_fill(b, 4 * E2E_MIB, 41);
	e2e_cuda(cudaFree(a), "cudaFree(8 MiB)");
	e2e_cuda(cudaFree(b), "cudaFree(4 MiB)");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	c0 = e2e_counters();
	live0 = c0.live_bytes;
	p = alloc(12 * E2E_MIB);
	c = e2e_counters();
	ok = vmm_backed(p, &range, &hb);
	e2e_check(ok && range == 12 * E2E_MIB && hb == 2 * E2E_MIB,
		  "a 12 MiB miss is one 12 MiB range whose first piece is a 2 MiB handle of the idle "
		  "8 MiB block (range %llu, piece %llu)", (unsigned long long)range,
		  (unsigned long long)hb);
	ok = standin_vmm_mapped((char *)p + 8 * E2E_MIB, NULL, NULL, &hb);
	e2e_check(ok && hb == 2 * E2E_MIB,
		  "at 8 MiB, a 2 MiB handle of the idle 4 MiB block (%llu)", (unsigned long long)hb);
	e2e_check(c.vmm_creates == c0.vmm_creates && c.mallocs == c0.mallocs &&
			  c.live_bytes == live0,
		  "no new memory: %llu handles made, %llu allocations, %llu -> %llu bytes on the device",
		  (unsigned long long)(c.vmm_creates - c0.vmm_creates),
		  (unsigned long long)(c.mallocs - c0.mallocs), (unsigned long long)live0,
		  (unsigned long long)c.live_bytes);
	e2e_check(e2e_verify(p, 8 * E2E_MIB, 81) && e2e_verify((char *)p + 8 * E2E_MIB, 4 * E2E_MIB, 41),
		  "the physical memory moved with its bytes");
	e2e_check(!standin_vmm_mapped(a, NULL, NULL, NULL) || a == p,
		  "the old 8 MiB range is unmapped");
	{
		CUdeviceptr base = 0;
		size_t size = 0;

		ok = address_range((char *)p + 9 * E2E_MIB, &base, &size);
		e2e_check(ok && base == (CUdeviceptr)(uintptr_t)p && size == 12 * E2E_MIB,
			  "cuMemGetAddressRange inside the second piece answers the whole block "
			  "(+%lld, %zu B; the driver alone answers the piece)",
			  (long long)(base - (CUdeviceptr)(uintptr_t)p), size);
	}
	e2e_fill(p, 12 * E2E_MIB, 12);
	e2e_check(e2e_verify(p, 12 * E2E_MIB, 12), "the block is written and read across its pieces");
	c0 = e2e_counters();
	e2e_cuda(cudaMemset(p, 0, 12 * E2E_MIB), "cudaMemset across the pieces");
	e2e_cuda(cudaFree(p), "cudaFree(12 MiB)");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	/* A 16 MiB miss takes the 12 MiB block and makes two 2 MiB handles for the rest. */
	p = alloc(16 * E2E_MIB);
	c = e2e_counters();
	ok = vmm_backed(p, &range, NULL);
	e2e_check(ok && range == 16 * E2E_MIB &&
			  c.vmm_creates - c0.vmm_creates == 2 && c.live_bytes - c0.live_bytes == 4 * E2E_MIB,
		  "a 16 MiB miss reuses the idle 12 MiB and makes 4 MiB (%llu handles, %llu bytes more)",
		  (unsigned long long)(c.vmm_creates - c0.vmm_creates),
		  (unsigned long long)(c.live_bytes - c0.live_bytes));
	e2e_cuda(cudaFree(p), "cudaFree(16 MiB)");
}

/* A release of everything cached; returns the bytes given back. */
static unsigned long long release_all_but_live(void)
{
	unsigned long long bytes = 0;
	int rc = e2e_shim_release()(-1, &bytes);

	e2e_check(rc == 0, "gpupool_release gave %llu B back", bytes);
	return bytes;
}

/* ... with nothing live: the device then holds nothing. `given`: this release must be the one
 * that gave something back (the threads mode's own releaser may have given it all already). */
static void release_all_given(int given)
{
	unsigned long long bytes = release_all_but_live();
	struct standin_counters c;

	if (given)
		e2e_check(bytes > 0, "the release gave something back");
	c = e2e_counters();
	e2e_check(standin_vmm_handles(-1) == 0 && c.vmm_reserves == c.vmm_address_frees &&
			  c.live_bytes == 0,
		  "a release gives back every handle (%llu left) and range (%llu reserved, %llu freed); "
		  "the device holds %llu B",
		  (unsigned long long)standin_vmm_handles(-1), (unsigned long long)c.vmm_reserves,
		  (unsigned long long)c.vmm_address_frees, (unsigned long long)c.live_bytes);
}

static void release_all(void)
{
	release_all_given(1);
}

/* 40 MiB idle in 8 MiB blocks, 8 MiB live: 48 MiB of the device's 64 used. A 56 MiB miss moves
 * the 40 MiB and adds 16: the device is full, and nothing had to be given back first. Then beside
 * an idle 48 MiB block a 16 MiB miss takes 16 MiB of its handles (nothing new; the rest stays
 * cached, a 32 MiB block). Then beside 56 MiB of idle 1 MiB blocks (ordinary, they cannot move) a
 * 16 MiB miss does not fit, and the OOM retry gives them back and makes the block. */
static void oom(void)
{
	void *blocks[6], *big, *small[56];
	struct standin_counters c0, c;
	cudaError_t rc;

	for (int i = 0; i < 6; i++)
		blocks[i] = alloc(8 * E2E_MIB);
	e2e_fill(blocks[0], 8 * E2E_MIB, 5);
	for (int i = 1; i < 6; i++)
		e2e_cuda(cudaFree(blocks[i]), "cudaFree(8 MiB)");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	c0 = e2e_counters();
	rc = cudaMalloc(&big, 56 * E2E_MIB);
	c = e2e_counters();
	e2e_check(rc == cudaSuccess && c.live_bytes == 64 * E2E_MIB &&
			  standin_vmm_handles(-1) == 32 && c.vmm_failed_creates == c0.vmm_failed_creates,
		  "cudaMalloc(56 MiB) beside 8 MiB live and 40 idle on a 64 MiB device: the idle "
		  "handles move, 16 MiB is new, the device is full (%s, %llu B, %llu handles, %llu "
		  "failed creates)", cudaGetErrorName(rc), (unsigned long long)c.live_bytes,
		  (unsigned long long)standin_vmm_handles(-1),
		  (unsigned long long)(c.vmm_failed_creates - c0.vmm_failed_creates));
	e2e_cuda(cudaFree(big), "cudaFree(56 MiB)");
	release_all_but_live();
	big = alloc(48 * E2E_MIB);
	e2e_fill((char *)big + 32 * E2E_MIB, 16 * E2E_MIB, 48);
	e2e_cuda(cudaFree(big), "cudaFree(48 MiB)");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	c0 = e2e_counters();
	rc = cudaMalloc(&small[0], 16 * E2E_MIB);
	c = e2e_counters();
	e2e_check(rc == cudaSuccess && c.vmm_creates == c0.vmm_creates &&
			  c.live_bytes == c0.live_bytes && small[0] != big &&
			  e2e_verify(small[0], 16 * E2E_MIB, 48),
		  "cudaMalloc(16 MiB) beside an idle 48 MiB block gets its last 16 MiB of handles with "
		  "their bytes: no new memory (%s, %llu handles made)", cudaGetErrorName(rc),
		  (unsigned long long)(c.vmm_creates - c0.vmm_creates));
	rc = cudaMalloc(&small[1], 32 * E2E_MIB);
	e2e_check(rc == cudaSuccess && small[1] == big && e2e_counters().vmm_creates == c0.vmm_creates,
		  "... and the rest of that block serves a 32 MiB request at its old address (%s)",
		  cudaGetErrorName(rc));
	e2e_cuda(cudaFree(small[0]), "cudaFree(16 MiB)");
	e2e_cuda(cudaFree(small[1]), "cudaFree(32 MiB)");
	release_all_but_live();
	for (int i = 0; i < 56; i++)
		small[i] = alloc(E2E_MIB);
	for (int i = 0; i < 56; i++)
		e2e_cuda(cudaFree(small[i]), "cudaFree(1 MiB)");
	c0 = e2e_counters();
	rc = cudaMalloc(&big, 16 * E2E_MIB);
	c = e2e_counters();
	e2e_check(rc == cudaSuccess && cudaGetLastError() == cudaSuccess,
		  "cudaMalloc(16 MiB) beside 8 MiB live and 56 MiB of idle 1 MiB blocks succeeds (%s)",
		  cudaGetErrorName(rc));
	e2e_check(c.vmm_failed_creates - c0.vmm_failed_creates == 1 &&
			  c.live_bytes == 24 * E2E_MIB && standin_vmm_handles(-1) == 12,
		  "... after one failed cuMemCreate and the retry: 24 MiB in 12 handles (%llu B, %llu)",
		  (unsigned long long)c.live_bytes, (unsigned long long)standin_vmm_handles(-1));
	e2e_check(e2e_verify(blocks[0], 8 * E2E_MIB, 5), "the live block kept its bytes");
	e2e_cuda(cudaFree(big), "cudaFree(16 MiB)");
	e2e_cuda(cudaFree(blocks[0]), "cudaFree(8 MiB)");
}

/* An idle 32 MiB block (16 handles of 2 MiB) serves an 8 MiB miss with its last 8 MiB where they
 * lie: no driver call at all; the 24 MiB left serves a 24 MiB request at the block's address.
 * The two share the range: a release of one gives its handles back and keeps the range for the
 * other, which keeps its bytes; the range goes with the last. */
static void split(void)
{
	struct standin_counters c0, c;
	void *a, *p, *q;
	CUdeviceptr base = 0;
	size_t size = 0;
	uint64_t h0;
	int ok;

	release_all_but_live();
	a = alloc(32 * E2E_MIB);
	e2e_fill(a, 24 * E2E_MIB, 7);
	e2e_fill((char *)a + 24 * E2E_MIB, 8 * E2E_MIB, 24);
	e2e_cuda(cudaFree(a), "cudaFree(32 MiB)");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	c0 = e2e_counters();
	p = alloc(8 * E2E_MIB);
	c = e2e_counters();
	e2e_check(p == (char *)a + 24 * E2E_MIB && c.vmm_creates == c0.vmm_creates &&
			  c.vmm_maps == c0.vmm_maps && c.vmm_reserves == c0.vmm_reserves &&
			  c.vmm_set_access == c0.vmm_set_access && c.live_bytes == c0.live_bytes,
		  "an 8 MiB miss beside an idle 32 MiB block gets its last 8 MiB where they lie, with "
		  "no driver call (+%lld B; %llu creates, %llu maps)", (long long)((char *)p - (char *)a),
		  (unsigned long long)(c.vmm_creates - c0.vmm_creates),
		  (unsigned long long)(c.vmm_maps - c0.vmm_maps));
	e2e_check(e2e_verify(p, 8 * E2E_MIB, 24), "... with their bytes");
	ok = address_range((char *)p + 3 * E2E_MIB, &base, &size); /* before the message reads them */
	e2e_check(ok && base == (CUdeviceptr)(uintptr_t)p && size == 8 * E2E_MIB,
		  "cuMemGetAddressRange inside it answers the 8 MiB block (+%lld, %zu B)",
		  (long long)(base - (CUdeviceptr)(uintptr_t)p), size);
	q = alloc(24 * E2E_MIB);
	e2e_check(q == a && e2e_verify(q, 24 * E2E_MIB, 7),
		  "the 24 MiB left serves a 24 MiB request at the block's address, its bytes kept");
	h0 = standin_vmm_handles(-1);
	e2e_cuda(cudaFree(p), "cudaFree(8 MiB)");
	release_all_but_live();
	c = e2e_counters();
	e2e_check(standin_vmm_handles(-1) == h0 - 4 && c.vmm_address_frees == c0.vmm_address_frees &&
			  e2e_verify(q, 24 * E2E_MIB, 7),
		  "a release of the 8 MiB block gives its 4 handles back (%llu -> %llu) and keeps the "
		  "range for the 24 MiB block in it, whose bytes stay",
		  (unsigned long long)h0, (unsigned long long)standin_vmm_handles(-1));
	e2e_cuda(cudaFree(q), "cudaFree(24 MiB)");
	release_all_but_live();
	c = e2e_counters();
	e2e_check(c.vmm_address_frees == c0.vmm_address_frees + 1 && standin_vmm_handles(-1) == h0 - 16,
		  "the range goes with the last block in it (%llu freed, %llu handles)",
		  (unsigned long long)(c.vmm_address_frees - c0.vmm_address_frees),
		  (unsigned long long)standin_vmm_handles(-1));
}

/* The driver door's allocations are VMM-backed too, and one pool with the runtime's. */
static void driver_door(void)
{
	CUresult (*drv_alloc)(CUdeviceptr *, size_t);
	CUresult (*drv_free)(CUdeviceptr);
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD), *r;
	CUdeviceptr q = 0;

	if (h == NULL)
		e2e_fail("the runtime has not loaded libcuda.so.1");
	*(void **)&drv_alloc = dlsym(h, "cuMemAlloc_v2");
	*(void **)&drv_free = dlsym(h, "cuMemFree_v2");
	e2e_check(drv_alloc(&q, 6 * E2E_MIB) == CUDA_SUCCESS && vmm_backed((void *)(uintptr_t)q, NULL, NULL),
		  "cuMemAlloc(6 MiB) gets a VMM-backed block");
	e2e_check(drv_free(q) == CUDA_SUCCESS, "cuMemFree takes it back");
	r = alloc(6 * E2E_MIB);
	e2e_check(r == (void *)(uintptr_t)q, "cudaMalloc(6 MiB) gets that block from the cache");
	e2e_cuda(cudaFree(r), "cudaFree");
	dlclose(h);
}

static void ipc_refused(void)
{
	cudaIpcMemHandle_t handle;
	void *p = alloc(8 * E2E_MIB), *q;
	cudaError_t rc = cudaIpcGetMemHandle(&handle, p);

	e2e_check(rc == cudaErrorInvalidValue,
		  "cudaIpcGetMemHandle of a VMM-backed block: the driver's invalid value (%s)",
		  cudaGetErrorName(rc));
	(void)cudaGetLastError();
	q = alloc(8 * E2E_MIB);
	e2e_check(vmm_backed(q, NULL, NULL), "with GPUPOOL_VMM=on later blocks are still VMM-backed");
	e2e_cuda(cudaFree(p), "cudaFree");
	e2e_cuda(cudaFree(q), "cudaFree");
}

static void mode_on(void)
{
	struct standin_counters c0 = e2e_counters(), c;
	void *big = alloc(8 * E2E_MIB), *two = alloc(2 * E2E_MIB), *small = alloc(E2E_MIB);

	c = e2e_counters();
	e2e_check(vmm_backed(big, NULL, NULL) && vmm_backed(two, NULL, NULL) &&
			  c.vmm_creates - c0.vmm_creates == 5,
		  "8 and 2 MiB blocks are made with cuMemCreate, in 2 MiB handles (%llu)",
		  (unsigned long long)(c.vmm_creates - c0.vmm_creates));
	e2e_check(standin_owns(small) && c.mallocs - c0.mallocs == 1,
		  "a 1 MiB block is an ordinary allocation");
	e2e_cuda(cudaFree(big), "cudaFree");
	e2e_cuda(cudaFree(two), "cudaFree");
	e2e_cuda(cudaFree(small), "cudaFree");
	release_all();
	remap();
	release_all();
	split();
	oom();
	release_all();
	driver_door();
	ipc_refused();
	release_all();
}

static void mode_auto(void)
{
	cudaIpcMemHandle_t handle;
	void *before = alloc(8 * E2E_MIB), *small = alloc(E2E_MIB), *after;
	cudaError_t rc;

	e2e_check(vmm_backed(before, NULL, NULL), "auto: VMM-backed before any IPC call");
	rc = cudaIpcGetMemHandle(&handle, small);
	e2e_check(rc == cudaSuccess, "an IPC handle of an ordinary block (%s)", cudaGetErrorName(rc));
	after = alloc(16 * E2E_MIB);
	e2e_check(standin_owns(after) && !vmm_backed(after, NULL, NULL),
		  "auto: after the first IPC call a new block is an ordinary allocation");
	rc = cudaIpcGetMemHandle(&handle, after);
	e2e_check(rc == cudaSuccess, "... whose IPC handle works (%s)", cudaGetErrorName(rc));
	e2e_cuda(cudaFree(before), "cudaFree");
	e2e_cuda(cudaFree(small), "cudaFree");
	e2e_cuda(cudaFree(after), "cudaFree");
	release_all();
}

#define THREADS 8
#define THREAD_ROUNDS 150 /* unless VMM_ROUNDS says */
#define THREAD_LIVE 4

static atomic_int workers_left;
static atomic_int broken;
static int thread_rounds = THREAD_ROUNDS;

static void *worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
	void *live[THREAD_LIVE] = { 0 };
	size_t bytes[THREAD_LIVE] = { 0 };
	uint64_t tag[THREAD_LIVE] = { 0 };
	cudaStream_t s;

	if (cudaStreamCreate(&s) != cudaSuccess)
		atomic_store(&broken, 1);
	for (int r = 0; r < thread_rounds; r++) {
		int k;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		k = (int)((seed >> 33) % THREAD_LIVE);
		if (live[k] != NULL) {
			if (!e2e_verify(live[k], bytes[k], tag[k]))
				atomic_store(&broken, 1);
			cudaFree(live[k]);
			live[k] = NULL;
			continue;
		}
		bytes[k] = (3 + (seed >> 40) % 38) * E2E_MIB;
		if (cudaMalloc(&live[k], bytes[k]) != cudaSuccess) {
			live[k] = NULL;
			(void)cudaGetLastError();
			continue;
		}
		tag[k] = seed;
		e2e_fill(live[k], bytes[k], tag[k]);
	}
	for (int k = 0; k < THREAD_LIVE; k++)
		if (live[k] != NULL)
			cudaFree(live[k]);
	cudaStreamDestroy(s);
	atomic_fetch_sub(&workers_left, 1);
	return NULL;
}

static void *releaser(void *arg)
{
	unsigned long long bytes;

	(void)arg;
	while (atomic_load(&workers_left) > 0) {
		e2e_shim_release()(-1, &bytes);
		e2e_sleep_ms(2);
	}
	return NULL;
}

static void mode_threads(void)
{
	int n = THREADS;
	pthread_t tid[THREADS], rel;
	struct standin_counters c;
	const char *rounds = getenv("VMM_ROUNDS");

	if (rounds != NULL && atoi(rounds) > 0)
		thread_rounds = atoi(rounds);
	atomic_store(&workers_left, n);
	for (int i = 0; i < n; i++)
		if (pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)(i + 1)) != 0)
			e2e_fail("pthread_create");
	if (pthread_create(&rel, NULL, releaser, NULL) != 0)
		e2e_fail("pthread_create");
	for (int i = 0; i < n; i++)
		pthread_join(tid[i], NULL);
	pthread_join(rel, NULL);
	c = e2e_counters();
	e2e_check(!atomic_load(&broken), "%d threads, %d rounds each: every block kept its bytes", n,
		  thread_rounds);
	e2e_check(c.vmm_creates > 0 && c.vmm_maps > c.vmm_creates,
		  "VMM-backed blocks were made (%llu handles) and moved (%llu maps)",
		  (unsigned long long)c.vmm_creates, (unsigned long long)c.vmm_maps);
	release_all_given(0);
}

static void mode_novmm(void)
{
	struct standin_counters c0 = e2e_counters(), c;
	void *big = alloc(8 * E2E_MIB);

	c = e2e_counters();
	e2e_check(standin_owns(big) && c.vmm_creates == c0.vmm_creates,
		  "a device without the API: an ordinary 8 MiB allocation");
	e2e_cuda(cudaFree(big), "cudaFree");
	release_all();
}

static void mode_trim(void)
{
	const size_t sizes[] = { 96 * 1024, 256 * 1024, 512 * 1024 };
	const char *age = getenv("GPUPOOL_VMM_AGE");
	int aged = age != NULL && strcmp(age, "0") != 0, passes = 40;
	struct standin_counters c0, c;
	unsigned long long made, given;
	cudaStream_t s;

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	c0 = e2e_counters();
	for (int pass = 0; pass < passes; pass++)
		for (int i = 0; i < 3; i++)
			e2e_cuda(cudaFree(alloc(sizes[i])), "cudaFree");
	c = e2e_counters();
	made = c.mallocs - c0.mallocs;
	given = c.frees - c0.frees;
	if (aged)
		e2e_check(given == 0 && made < 3ull * passes / 2,
			  "GPUPOOL_VMM_AGE=%s: three sizes in turn give nothing back and reuse their "
			  "blocks (%llu real allocations for %d requests, %llu real frees)", age, made,
			  3 * passes, given);
	else
		e2e_check(made == 3ull * passes && given == made - 1,
			  "no age: each miss gives back the block the next request needs (%llu real "
			  "allocations for %d requests, %llu real frees)", made, 3 * passes, given);
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	release_all();
}

static int live_at_most(void *arg)
{
	return e2e_counters().live_bytes <= *(const uint64_t *)arg;
}

static char owed_age[32]; /* GPUPOOL_VMM_AGE, set before the first CUDA call (which reads it) */

static int owed_setup(void)
{
	int age_ms = e2e_scaled_ms(300);

	snprintf(owed_age, sizeof(owed_age), "%dms", age_ms);
	setenv("GPUPOOL_VMM_AGE", owed_age, 1);
	return age_ms;
}

static void mode_owed(int age_ms)
{
	uint64_t t0, last, quiet_ms, want = 16 * E2E_MIB;
	const char *age = owed_age;
	void *a, *b, *c;
	int ok;

	a = alloc(8 * E2E_MIB);
	b = alloc(4 * E2E_MIB);
	e2e_cuda(cudaFree(a), "cudaFree");
	e2e_cuda(cudaFree(b), "cudaFree");
	c = alloc(16 * E2E_MIB);
	e2e_check(e2e_counters().live_bytes == 28 * E2E_MIB,
		  "the 8 and 4 MiB blocks, too young to go, stay beside the new 16 MiB one (%llu MiB "
		  "on the device)", (unsigned long long)(e2e_counters().live_bytes / E2E_MIB));
	t0 = e2e_now_ms();
	while (e2e_now_ms() - t0 < 3ull * (uint64_t)age_ms) {
		e2e_cuda(cudaFree(c), "cudaFree");
		c = alloc(16 * E2E_MIB);
		e2e_sleep_ms(2);
	}
	last = e2e_now_ms();
	e2e_check(e2e_counters().live_bytes == 28 * E2E_MIB,
		  "a program that goes on asking for %d ms (GPUPOOL_VMM_AGE=%s) pays nothing of the "
		  "debt (%llu MiB on the device)", 3 * age_ms, age,
		  (unsigned long long)(e2e_counters().live_bytes / E2E_MIB));
	ok = e2e_poll(live_at_most, &want, 10 * age_ms + e2e_scaled_ms(5000));
	quiet_ms = e2e_now_ms() - last;
	e2e_check(ok && e2e_counters().live_bytes == 16 * E2E_MIB,
		  "quiet: the 12 MiB the age kept are given back, the live block stays (%llu MiB on "
		  "the device)", (unsigned long long)(e2e_counters().live_bytes / E2E_MIB));
	e2e_check(quiet_ms + 5 >= (uint64_t)age_ms,
		  "no sooner than an age after the last request (%llu ms, the age %d ms)",
		  (unsigned long long)quiet_ms, age_ms);
	e2e_cuda(cudaFree(c), "cudaFree");
	release_all();
}

/* n blocks of `bytes` in use at once, then all freed. */
static void at_once(size_t bytes, int n)
{
	void *p[100];

	for (int i = 0; i < n; i++)
		p[i] = alloc(bytes);
	for (int i = 0; i < n; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
}

static void mode_quiet(int age_ms)
{
	uint64_t l0 = e2e_counters().live_bytes, l1, l2, want, t0, last, quiet_ms;
	cudaStream_t s;
	void *p;
	int ok;

	/* A stream, as PyTorch makes: reuse waits for fences, and no thread cache serves hits. */
	e2e_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
	at_once(48 << 10, 100);
	l1 = e2e_counters().live_bytes;
	e2e_sleep_ms(3 * age_ms);
	e2e_check(e2e_counters().live_bytes == l1,
		  "100 blocks of 48 KiB, all in use at once, stay once the program is quiet (%llu KiB "
		  "on the device, %llu before)", (unsigned long long)(e2e_counters().live_bytes >> 10),
		  (unsigned long long)(l1 >> 10));
	at_once(32 << 10, 100);
	at_once(16 << 10, 100);
	l2 = e2e_counters().live_bytes;
	t0 = e2e_now_ms();
	while (e2e_now_ms() - t0 < 3ull * (uint64_t)age_ms) {
		p = alloc(32 << 10);
		e2e_cuda(cudaFree(p), "cudaFree");
		e2e_sleep_ms(2);
	}
	last = e2e_now_ms();
	e2e_check(e2e_counters().live_bytes == l2,
		  "then 100 of 32 KiB at once, and 100 of 16 KiB: while the program goes on asking "
		  "for %d ms nothing is "
		  "given back (%llu KiB on the device, %llu before)", 3 * age_ms,
		  (unsigned long long)(e2e_counters().live_bytes >> 10), (unsigned long long)(l2 >> 10));
	want = l0 + (l2 - l1);
	ok = e2e_poll(live_at_most, &want, 10 * age_ms + e2e_scaled_ms(5000));
	quiet_ms = e2e_now_ms() - last;
	e2e_check(ok && e2e_counters().live_bytes == want,
		  "quiet: beyond the most in use at once in its last two busy spells (the 48 KiB ones'), "
		  "the oldest blocks, the 48 KiB ones, are given back; the 32 and 16 KiB ones stay "
		  "(%llu KiB on the device, want %llu)",
		  (unsigned long long)(e2e_counters().live_bytes >> 10), (unsigned long long)(want >> 10));
	e2e_check(quiet_ms + 5 >= (uint64_t)age_ms,
		  "no sooner than an age after the last request (%llu ms, the age %d ms)",
		  (unsigned long long)quiet_ms, age_ms);
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	release_all();
}

static void mode_round(int age_ms)
{
	uint64_t l0 = e2e_counters().live_bytes, l1, want;
	cudaStream_t s;
	int ok;

	e2e_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
	at_once(3 * E2E_MIB, 8);
	l1 = e2e_counters().live_bytes;
	e2e_check(l1 - l0 == 32 * E2E_MIB,
		  "8 requests of 3 MiB in use at once made 8 blocks of 4 MiB (%llu KiB more on the "
		  "device)", (unsigned long long)((l1 - l0) >> 10));
	want = l0 + 24 * E2E_MIB;
	ok = e2e_poll(live_at_most, &want, 10 * age_ms + e2e_scaled_ms(5000));
	e2e_check(ok && e2e_counters().live_bytes == want,
		  "quiet: what the pool holds beyond the 24 MiB asked for at once goes, two blocks "
		  "(%llu KiB on the device, want %llu)",
		  (unsigned long long)(e2e_counters().live_bytes >> 10), (unsigned long long)(want >> 10));
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	release_all();
}

/* PyTorch's cache on: torch.multiprocessing shares tensors, so auto makes no VMM block. */
static void mode_torch(const char *lib)
{
	const char *uncached = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
	cudaIpcMemHandle_t handle;
	void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL), *p;
	cudaError_t rc;

	if (h == NULL)
		e2e_fail("cannot load %s: %s", lib, dlerror());
	p = alloc(8 * E2E_MIB);
	if (uncached != NULL) {
		e2e_check(vmm_backed(p, NULL, NULL),
			  "auto, PyTorch with its cache off (takeover, no IPC there): VMM-backed");
	} else {
		e2e_check(standin_owns(p) && !vmm_backed(p, NULL, NULL),
			  "auto, PyTorch with its own cache: an ordinary block before any IPC call");
		rc = cudaIpcGetMemHandle(&handle, p);
		e2e_check(rc == cudaSuccess, "whose IPC handle works (%s)", cudaGetErrorName(rc));
	}
	e2e_cuda(cudaFree(p), "cudaFree");
	release_all();
}

static void mode_loud_child(void)
{
	cudaIpcMemHandle_t handle;
	void *p = alloc(8 * E2E_MIB), *q = alloc(8 * E2E_MIB);

	e2e_check(cudaIpcGetMemHandle(&handle, p) == cudaErrorInvalidValue &&
			  cudaIpcGetMemHandle(&handle, q) == cudaErrorInvalidValue,
		  "IPC handles of VMM-backed blocks are refused");
	e2e_cuda(cudaFree(p), "cudaFree");
	e2e_cuda(cudaFree(q), "cudaFree");
}

static void mode_loud(void)
{
	static const char *const args[] = { "loud-child", NULL };
	static const char *const env[] = { "GPUPOOL_LOG", NULL };
	struct e2e_child child;
	const char *at;
	int n = 0;

	if (e2e_run_self(args, env, 20000, &child) != 0)
		e2e_fail("cannot start the child");
	if (!WIFEXITED(child.status) || WEXITSTATUS(child.status) != 0)
		e2e_fail("the child failed: %s", child.err);
	for (at = child.err; (at = strstr(at, "IPC handle")) != NULL; at++)
		n++;
	e2e_check(n == 1, "the refused IPC handles are said once at the default level (%d lines)", n);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "on";
	int age_ms = strcmp(mode, "owed") == 0 || strcmp(mode, "quiet") == 0 ||
				     strcmp(mode, "round") == 0
			     ? owed_setup()
			     : 0;

	e2e_start("e2e_vmm");
	e2e_cuda(cudaFree(NULL), "cudaFree(0)");
	if (strcmp(mode, "on") == 0)
		mode_on();
	else if (strcmp(mode, "auto") == 0)
		mode_auto();
	else if (strcmp(mode, "novmm") == 0)
		mode_novmm();
	else if (strcmp(mode, "threads") == 0)
		mode_threads();
	else if (strcmp(mode, "trim") == 0)
		mode_trim();
	else if (strcmp(mode, "owed") == 0)
		mode_owed(age_ms);
	else if (strcmp(mode, "quiet") == 0)
		mode_quiet(age_ms);
	else if (strcmp(mode, "round") == 0)
		mode_round(age_ms);
	else if (strcmp(mode, "torch") == 0 && argc > 2)
		mode_torch(argv[2]);
	else if (strcmp(mode, "loud") == 0)
		mode_loud();
	else if (strcmp(mode, "loud-child") == 0)
		mode_loud_child();
	else
		e2e_fail("mode: on, auto, novmm, threads, trim, owed, quiet, round, torch LIB or loud, "
			 "not %s",
			 mode);
	return 0;
}
