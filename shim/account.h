/* account.h — the device memory a program holds outside the pool's blocks, for the accounting
 * table (stats.h's GP_STATS_ACCOUNT): what it got past the pool (VMM handles of its own, managed
 * and pitched memory, cuMemAlloc the pool did not serve), counted by the doors as it passes, and
 * what the control thread measures (each device's default memory pool, PyTorch's and CuPy's
 * caches). Only pass-through calls pay: the pool's own allocations and frees never come here. */
#ifndef GPUPOOL_SHIM_ACCOUNT_H
#define GPUPOOL_SHIM_ACCOUNT_H

#include "stats.h"

#include <stdint.h>

enum gp_account_kind {
	GP_ACCOUNT_VMM,      /* a cuMemCreate handle, keyed by the handle */
	GP_ACCOUNT_MANAGED,  /* cuMemAllocManaged */
	GP_ACCOUNT_PITCHED,  /* cuMemAllocPitch */
	GP_ACCOUNT_UNPOOLED, /* cuMemAlloc (cudaMalloc) passed through */
};

/* An allocation passed through (any thread, after it succeeded): `key` (the pointer, or the
 * VMM handle) on `device`, `bytes` asked (counted as the driver charges them). A device the
 * table cannot name is not counted. */
void gp_account_add(enum gp_account_kind kind, int device, uint64_t key, uint64_t bytes);
/* Before the real free of a pointer the pool does not own (handle 0), or the release of a VMM
 * handle (handle 1): it is no longer counted. Returns what gp_account_put_back needs if the real
 * call fails (0: it was not counted). Never inlined: the frees that call them are flattened
 * around the pool's (shim.c), and these are off their hit path. */
uint64_t gp_account_take(int handle, uint64_t key) __attribute__((noinline));
void gp_account_put_back(int handle, uint64_t key, uint64_t token) __attribute__((noinline));

/* Control thread, before a publish: ask the driver for each active device's default memory
 * pool's reserved bytes (at most once a period). */
void gp_account_measure(void);
/* Control thread: 1 when the frameworks' caches are due to be read again (at most once a second:
 * it takes the GIL), and from now on not before the next period. */
int gp_account_frameworks_due(void);
/* Control thread: what PyTorch's and CuPy's caches hold unused per device (framework.c read it;
 * this file never reads them itself: observing drives nothing), n devices. */
void gp_account_frameworks(const uint64_t *cached_device, int n);
/* The devices with anything counted here, a bit each (any thread). */
uint64_t gp_account_devices(void);
/* Bytes live of one kind (enum gp_account_kind) on every device; kind -1: everything passed
 * through, the default memory pools' reserved bytes as last measured included (any thread). */
uint64_t gp_account_live_bytes(int kind);
/* The GP_STATS_ACCOUNT figures of `device` into e, and framework_read_ns into *read_ns. */
void gp_account_fill(int device, struct gp_stats_device *e, uint64_t *read_ns);

#endif
