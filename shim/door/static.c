/* static.c — the static runtime door. nvcc links the CUDA runtime into the program by default;
 * its cudaMalloc and cudaFree are then the program's own functions, which no LD_PRELOAD binding
 * reaches, and their calls come to the pool only through the driver door, behind the runtime's
 * own work on every call. At load, while the process runs one thread, the two are found in the
 * program's symbol table (elfsym.h) and their first instructions made a jump here (patch.h).
 * A call here is the driver door's pooled allocation or free; anything else (a thread's first
 * call, NULL, size 0, several devices, a pointer the pool does not own, a failure) is the
 * runtime's own function, which reaches the driver door as before; a double free gets the
 * runtime door's answer. GPUPOOL_STATIC_RUNTIME=0
 * leaves the program's code as it is. Never a decision of its own: that is shim.c's. */
#include "gate.h"
#include "elfsym.h"
#include "patch.h"
#include "static.h"
#include "../log.h"
#include "../shim.h"

#include <string.h>
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#endif

/* The runtime's own functions (their trampolines), set once at load before any call. */
static cudaError_t (*runtime_malloc)(void **, size_t);
static cudaError_t (*runtime_free)(void *);
/* What the load found or did, said once the log level is known (gp_static_door_say). */
static const char *outcome;
static int found, patched;

/* A call of the thread's to the runtime itself has worked: its first call makes the runtime set
 * the thread up (its device's context made current), which a pooled call would skip. Per thread, so
 * not in gp_shim; see pool.c on initial-exec. */
static _Thread_local int started __attribute__((tls_model("initial-exec")));

/* The runtime's own call; the thread counts as started once one of them worked (a runtime that
 * cannot start, say on a driver too old for it, keeps answering every call itself). */
static cudaError_t runtime_call_malloc(void **ptr, size_t size)
{
	cudaError_t rc = runtime_malloc(ptr, size);

	if (rc == cudaSuccess)
		started = 1;
	return rc;
}

static cudaError_t runtime_call_free(void *ptr)
{
	cudaError_t rc = runtime_free(ptr);

	if (rc == cudaSuccess)
		started = 1;
	return rc;
}

static cudaError_t static_malloc(void **ptr, size_t size)
{
	int rc;

	(void)GP_GATE(GP_GATE_WORK);
	if (__builtin_expect(started, 1) && ptr != NULL && size != 0 && gp_shim_pooling()) {
		rc = gp_shim_static_alloc(ptr, size);
		if (__builtin_expect(rc == 0, 1))
			return cudaSuccess;
		if (rc > 0) /* the pool failed: the runtime's own try says so, its error kept */
			return gp_shim_static_failed(runtime_malloc, ptr, size);
	}
	return runtime_call_malloc(ptr, size);
}

static cudaError_t static_free(void *ptr)
{
	int rc;

	(void)GP_GATE(GP_GATE_WORK);
	if (__builtin_expect(started, 1) && ptr != NULL && gp_shim_freeing()) {
		rc = gp_shim_static_free(ptr);
		if (__builtin_expect(rc == 0, 1))
			return cudaSuccess;
		if (rc > 0)
			return cudaErrorInvalidValue;
	}
	return runtime_call_free(ptr);
}

/* No other thread has ever run in the process, so none can be in the functions patched: true at
 * the start of a program gpupool is preloaded into; not where gpupool was loaded later (dlopen)
 * or another library's constructor started a thread first. */
static int only_thread(void)
{
#if __has_include(<sys/single_threaded.h>)
	return __libc_single_threaded != 0;
#else
	return 0; /* a C library before glibc 2.32 cannot say: the door stays shut */
#endif
}

void gp_static_door_install(void)
{
	static const char *const marks[] = { "libcudart_static_", "_ZN6cudart", NULL };
	struct gp_elf_fn fns[] = { { "cudaMalloc", NULL, 0 }, { "cudaFree", NULL, 0 } };
	struct gp_patch p[2];
	int marked;

#if !defined(__x86_64__)
	outcome = "the static runtime door is made for x86-64 only";
	return;
#endif
	/* A static runtime loads the driver with dlopen: a program that does not import it has no
	 * static runtime, and most small programs do not (their start pays for no file read). */
	if (!gp_elf_main_may_import("dlopen") ||
	    gp_elf_main_functions(fns, 2, marks, &marked) != 0 || !marked) {
		outcome = "no static CUDA runtime in the program's symbol table";
		return;
	}
	if (fns[0].addr == NULL || fns[1].addr == NULL) {
		outcome = "the program's static CUDA runtime: its cudaMalloc or cudaFree not found "
			  "once, as its file has it";
		return;
	}
	found = 1;
	if (!only_thread()) {
		outcome = "other threads run already (gpupool was not loaded at the program's start)";
		return;
	}
	p[0] = (struct gp_patch){ fns[0].addr, fns[0].size, NULL, NULL };
	p[1] = (struct gp_patch){ fns[1].addr, fns[1].size, NULL, NULL };
	memcpy(&p[0].target, &(cudaError_t (*)(void **, size_t)){ static_malloc }, sizeof(void *));
	memcpy(&p[1].target, &(cudaError_t (*)(void *)){ static_free }, sizeof(void *));
	if (gp_patch_apply(p, 2, &outcome) != 0)
		return;
	memcpy(&runtime_malloc, &p[0].orig, sizeof(runtime_malloc));
	memcpy(&runtime_free, &p[1].orig, sizeof(runtime_free));
	patched = 1;
}

void gp_static_door_say(void)
{
	if (patched)
		gp_log(GP_LOG_INFO, "the program's static CUDA runtime: its cudaMalloc and cudaFree "
				    "come to the pool directly");
	else if (found)
		gp_log(GP_LOG_INFO, "the program's static CUDA runtime: its cudaMalloc and cudaFree "
				    "left as they are (%s); its allocations come to the pool through "
				    "the driver", outcome);
	else if (outcome != NULL)
		gp_log(GP_LOG_DEBUG, "%s", outcome);
}
