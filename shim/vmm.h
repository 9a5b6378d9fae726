/* vmm.h — VMM-backed blocks (GPUPOOL_VMM): device memory made with the driver's virtual memory
 * API (cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess), a few physical handles per
 * block (GP_VMM_PIECES), which a remap moves, whole, from idle blocks into a new range. The
 * backend's calls for such blocks; every one runs in the block's device's context (the caller
 * enters it) and never with a pool lock held. Never on the hit path. */
#ifndef GPUPOOL_VMM_H
#define GPUPOOL_VMM_H

#include "pool.h"

#include <cuda.h>
#include <stddef.h>

/* Requests above this (the pool's classes of 2 MiB and more) are VMM-backed while VMM is on: at
 * or below it the driver packs requests tightly, where a block of its own would take a 2 MiB
 * granule; above it the driver charges whole 2 MiB granules either way. */
#define GP_VMM_MIN_BYTES ((size_t)1 << 20)

/* Set up from GPUPOOL_VMM (enum gp_vmm_mode) at init. */
void gp_vmm_init(int mode);

/* Whether a new block of `bytes` on `device` should be VMM-backed now (cheap after the first
 * look at the device). */
int gp_vmm_wanted(int device, size_t bytes);

/* New memory comes in at most this many handles of a multiple of 2 MiB each: a block can give a
 * part of itself to another (gp_vmm_remap) in such pieces. Smaller pieces would fit such parts
 * more closely, but every piece costs driver calls of its own (create, map, unmap, release) on
 * the miss that makes or moves it. */
#ifndef GP_VMM_PIECES
#define GP_VMM_PIECES 16u
#endif

/* A new block of `bytes` (a multiple of 2 MiB): up to GP_VMM_PIECES handles, a range, mapped,
 * read/write for the device and its peers. A failure leaves nothing behind. */
CUresult gp_vmm_alloc(int device, size_t bytes, CUdeviceptr *out);

/* The block at ptr of `bytes` becomes two where it lies (no driver call): the fewest of its last
 * handles that hold `take` bytes, *tail bytes, are a new block at ptr + bytes - *tail; it keeps
 * the others. Invalid value, nothing changed, when that would be all of it. The two share the
 * block's range, which is freed with the last block in it. */
CUresult gp_vmm_split(const void *ptr, size_t bytes, size_t take, size_t *tail);

/* The n blocks at ptr[] of bytes[], each beginning where the one before ends, in one range (made
 * by splits), become one block at ptr[0] (no driver call). Invalid value, nothing changed,
 * otherwise. */
CUresult gp_vmm_merge(void *const *ptr, const size_t *bytes, unsigned n);

/* 1 when the block at b begins where the block at a ends, in one range (merge would join them). */
int gp_vmm_joinable(const void *a, const void *b);

/* Whether ptr is the base of a VMM-backed block. */
int gp_vmm_owns(const void *ptr);

/* Give a block back: its range unmapped and freed, its handles released. `settled`: no GPU work
 * uses it any more; else the device's context is synchronised first, as cudaFree would (an
 * unmap does not wait for the device). */
CUresult gp_vmm_free(const void *ptr, int settled);

/* One block of at least `bytes` (*got: its size) made of handles of the blocks src[] (settled)
 * plus new handles for the rest: all the handles of a source whose take is its size, else the
 * fewest of its last handles that hold `take` bytes (the source keeps the others, mapped where
 * they were: a smaller block). src[i].take says what moved. The handles are mapped into the new
 * range first, and only then unmapped from their old ones, so a failure leaves the sources as
 * they were (*consumed = 0). */
CUresult gp_vmm_remap(int device, size_t bytes, struct gp_piece *src, unsigned n,
		      CUdeviceptr *out, size_t *got, int *consumed);

/* The first IPC handle asked for: in auto mode, no new VMM-backed blocks from now on. Says once
 * (warn) when ptr lies in a VMM-backed block, whose IPC handle the driver refuses. */
void gp_vmm_ipc_seen(const void *ptr);

/* The driver's answer to cuMemGetAddressRange for dptr (*base, *size: the piece it lies in),
 * made the whole block's when dptr lies in a VMM-backed block. */
void gp_vmm_address_range(CUdeviceptr dptr, CUdeviceptr *base, size_t *size);

/* Bytes of VMM-backed blocks and their handles now (for tests and the log). */
size_t gp_vmm_blocks(void);

/* ---- the park (park_vmm.c) ----
 * A block's physical memory given back and made again at the same addresses, its range kept
 * reserved throughout. The caller copies the bytes out before an evict and in after a refill,
 * in the block's device's context, and makes sure no pool call and no GPU work touches the
 * blocks meanwhile; while parked, split, merge and remap refuse the block, and a free gives back
 * its range only. */

/* A block as the park sees it. */
struct gp_vmm_seen {
	CUdeviceptr va;
	size_t bytes;
	int device;
	int parked; /* evicted, not yet refilled */
};

/* The blocks now, the first `max` of them into out[]; returns how many there are (more than
 * max: ask again with more room). In no particular order. */
size_t gp_vmm_list(struct gp_vmm_seen *out, size_t max);

/* The block at va unmapped and its handles released; its pieces' sizes are kept for the refill.
 * Invalid value for no block there or one already parked. A failed unmap leaves it mapped as it
 * was (the pieces unmapped so far mapped again, access granted) and returns the error; a release
 * the driver refuses only leaves that memory allocated (said once). */
CUresult gp_vmm_evict(CUdeviceptr va);

/* New handles for a parked block at va, of its pieces' sizes and with the properties of its
 * making (device, GPUDirect RDMA), mapped where the old ones were, with the same access (the
 * device and its peers). The new memory holds garbage until the caller copies the bytes in. A
 * failure leaves it parked, nothing of the attempt kept. */
CUresult gp_vmm_refill(CUdeviceptr va);

#endif
