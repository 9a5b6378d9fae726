/* static.h — the static runtime door (static.c): a static CUDA runtime's cudaMalloc and cudaFree
 * in the program's own code, sent to the pool. */
#ifndef GPUPOOL_DOOR_STATIC_H
#define GPUPOOL_DOOR_STATIC_H

/* At load, from the constructor, before the program's own code runs (patch.h: no other thread
 * may be in the functions patched). Does nothing when the program has no static runtime. */
void gp_static_door_install(void);

/* What the install found or did, said at the log level the options set (from the shim's start). */
void gp_static_door_say(void);

#endif
