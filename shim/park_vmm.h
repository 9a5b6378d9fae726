/* park_vmm.h — the fast park of VMM-backed blocks (GPUPOOL_VMM) for auto-suspend: their bytes
 * copied to host memory through a pinned staging ring made once, their physical memory given
 * back, their virtual ranges kept; at the wake new memory mapped at the same addresses and the
 * bytes copied back. What the pool does not back with VMM is left to the checkpoint API.
 *
 * The caller's side of the contract, for every function here: no pool lock held, the GPU idle
 * (every stream's work done), and no other thread of the program in a CUDA call or entering one
 * (all held at the gate) from before gp_park_vmm until gp_unpark_vmm returned 0. A park goes
 * before the checkpoint API's lock; its unpark after the restore and the unlock. */
#ifndef GPUPOOL_PARK_VMM_H
#define GPUPOOL_PARK_VMM_H

#include <stddef.h>
#include <stdint.h>

/* What one call moved. A park: the blocks and bytes it parked and how long it took (park_ns);
 * an unpark: those it brought back and how long it took (unpark_ns). Fields a call does not
 * fill are left as they were. */
struct gp_park_figures {
	uint64_t bytes;     /* bytes */
	uint64_t blocks;
	uint64_t park_ns;   /* ns */
	uint64_t unpark_ns; /* ns */
};

/* Moves every VMM-backed block's bytes to host memory and releases its physical handles, its
 * virtual range kept reserved (its address unchanged). 0: all parked, or nothing to park. Else
 * the error (a CUresult; CUDA_ERROR_OUT_OF_MEMORY when the host memory could not be mapped:
 * nothing parked) after putting back what it had parked: new memory mapped, the bytes copied
 * back. Should that put-back fail too, the blocks not back stay parked, their host copies kept,
 * and gp_park_vmm_parked() says so: the caller then calls gp_unpark_vmm until it returns 0, as
 * after a suspend. CUDA_ERROR_ILLEGAL_STATE while blocks of an earlier park are not yet back. f
 * may be NULL. */
int gp_park_vmm(struct gp_park_figures *f);

/* Brings every parked block back: new physical memory of the same properties mapped at the
 * same addresses, the same access (its device and the peers), the bytes copied in; the host
 * copies are freed once all are back. 0 (also when nothing is parked), or the error: the blocks
 * back stay back, the others stay parked with their host copies, and a later call carries on
 * (the caller retries; until a call returns 0 no block may be used: a block is counted back
 * only once its bytes are in). f may be NULL. */
int gp_unpark_vmm(struct gp_park_figures *f);

/* Bytes a park would move now (VMM-backed blocks not parked); *host_bytes, if not NULL: the host
 * memory it needs for them, the staging ring included while it is not made yet (for the caller's
 * host-memory check). */
size_t gp_park_vmm_bytes(size_t *host_bytes);

/* Bytes of blocks off their device now (parked, or not yet back): 0 when nothing waits for an
 * unpark. */
size_t gp_park_vmm_parked(void);

/* The ring and the workers: `slots` slots (2 to GP_PARK_MAX_SLOTS) of slot_bytes (a multiple of
 * 2 MiB) each, `threads` memcpy workers (0 to GP_PARK_MAX_THREADS; 0: the parking thread copies).
 * Only before the ring is made (the first park that moves anything): 0, else -1 and nothing
 * changed. Without a call, the defaults (park_vmm.c says how they were chosen). */
int gp_park_vmm_tune(unsigned slots, size_t slot_bytes, unsigned threads);

#endif
