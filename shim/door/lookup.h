/* lookup.h — the real functions behind the doors, found once in what the process has loaded, each
 * into one typed table made from table.h: the driver's in the libcuda.so.1 the runtime or the
 * program loaded, the shared runtime's where the program has one (programs with the static
 * runtime have none); and the dlsym behind ours. Never loads a CUDA library itself. A function
 * not found stays NULL: its callers pass through or return the native error, never call it. */
#ifndef GPUPOOL_DOOR_LOOKUP_H
#define GPUPOOL_DOOR_LOOKUP_H

#include "table.h"

/* ---- the driver ---- */

/* One field per row of the driver table, named by its exact symbol (gp_cu.MemAlloc_v2 is the
 * driver's cuMemAlloc_v2). */
#define GP_CU_FIELD(cls, name, base, version, flavour, params, args, stream)                       \
	CUresult (*name) params;
struct gp_cu {
	GP_DRIVER_ALL(GP_CU_FIELD)
};
#undef GP_CU_FIELD

extern struct gp_cu gp_cu;

/* Fill the table from the driver the process has loaded, once it has one (thread-safe; cheap
 * after the first success), and keep that driver loaded from then on: its owner may unload it
 * (a runtime does with a driver older than itself), and the table points into it. 0, or -1
 * when no libcuda.so.1 is loaded yet. */
int gp_cu_resolve(void);

/* One driver function by its exact symbol, for an exported stub (named.c): where the program's
 * own binding would have found it without us (RTLD_NEXT: after this library), else in the
 * libcuda.so.1 the process loaded. Never ours, never a lookup that starts before us. NULL when
 * neither has it. */
void *gp_cu_find(const char *sym);

/* 1 (after saying so once) when the real function in `slot` (a field of gp_cu, for the driver
 * symbol `name`) cannot be found: the caller returns CUDA_ERROR_NOT_FOUND, as a lookup would. */
int gp_cu_missing(void **slot, const char *name);
#define GP_MISSING(field) gp_cu_missing((void **)&gp_cu.field, "cu" #field)

/* ---- the shared runtime ---- */

/* One field per row of the runtime table (gp_real.Malloc is the runtime's cudaMalloc): the
 * runtime door's misses on a thread with no context, and the pass-through of what the pool does
 * not serve. Found with dlsym(RTLD_NEXT) first, then in an already-loaded libcudart.so.13/.12
 * by soname (RTLD_NOLOAD: never a second copy); a result that points back into this library is
 * refused. */
#define GP_REAL_FIELD(name, params) cudaError_t (*name) params;
struct gp_real {
	GP_RUNTIME_ALL(GP_REAL_FIELD)
};
#undef GP_REAL_FIELD

extern struct gp_real gp_real;

/* Each row declared as the runtime declares it: a row whose parameters differ does not compile.
 * (cudaFreeAsync_ptsz, which cuda_runtime_api.h declares only for per-thread code, is declared
 * here for the first time.) */
#define GP_REAL_PROTOTYPE(name, params) cudaError_t cuda##name params;
GP_RUNTIME_ALL(GP_REAL_PROTOTYPE)
#undef GP_REAL_PROTOTYPE

/* Resolve every entry once (thread-safe). Returns 0 when at least cudaMalloc, cudaFree,
 * cudaGetDevice, cudaSetDevice and cudaGetLastError were found (else every field is NULL); the
 * others may be NULL and their callers check. */
int gp_real_resolve(void);

/* After a dlsym or dlopen of ours that failed: drop the error it left (glibc keeps a small
 * per-thread record until dlerror() has returned it and is called again). Else the program's
 * next dlerror() reports our lookup, and a thread of ours that exits leaves the record behind
 * (a leak to LeakSanitizer, allocated in _dlerror_run). */
void gp_dl_forget_error(void);

/* ---- the dlsym behind ours, and ourselves ---- */

/* For code that may run while a sanitizer's runtime initialises (before its shadow memory
 * exists): no instrumentation. */
#define GP_NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

/* Our constructor has run: from now on the next dlsym may be looked for among the loaded
 * objects (another tool's hook after ours). */
void gp_cu_constructed(void);
/* The next dlsym after ours (handout.c): another tool's hook loaded after us, else libc's; NULL
 * if none. */
void *(*gp_real_dlsym_fn(void))(void *, const char *);
void *gp_real_dlsym(void *handle, const char *name);
/* Whether `p` points into this library (then it is one of our entry points, never the real). */
int gp_is_ours(const void *p);

#endif
