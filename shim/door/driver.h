/* driver.h — our driver entry points, one per row of table.h's GP_DRIVER_OURS: exported under the
 * driver's exact symbol names, handed out by the door (handout.c) and bound by programs linked to
 * libcuda.so.1. Written by hand in driver.c, made from their rows in work.c. Never a logic of
 * their own: that is shim.c's. */
#ifndef GPUPOOL_DOOR_DRIVER_H
#define GPUPOOL_DOOR_DRIVER_H

#include "table.h"

#define GP_EXPORT __attribute__((visibility("default")))

/* cuda.h names the newest variant of these by their base name (cuStreamDestroy is
 * cuStreamDestroy_v2): here the base name is the first variant, a row of its own. */
#undef cuStreamDestroy
#undef cuMemPrefetchAsync
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync
#undef cuStreamWriteValue32
#undef cuStreamWaitValue32
#undef cuStreamWriteValue64
#undef cuStreamWaitValue64
#undef cuStreamBatchMemOp

/* Declared again (cuda.h declares most of them; a declaration that differs does not compile)
 * or for the first time (the per-thread flavours, the first variants). handout.c takes the
 * address of each: a row without its entry point fails to link (-Wl,--no-undefined). */
#define GP_DRIVER_PROTOTYPE(cls, name, base, version, flavour, params, args, stream)              \
	CUresult cu##name params;
GP_DRIVER_OURS(GP_DRIVER_PROTOTYPE)
#undef GP_DRIVER_PROTOTYPE

#endif
