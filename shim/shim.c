/* shim.c — initialisation (at load: options and the signal only; at first CUDA use: the real
 * driver and runtime, the pool, the control thread) and what both doors' entry points do: pooled
 * allocations and frees, streams, captures, graphs and contexts noted for the fences.
 * Never aborts the program: anything unexpected falls back to the real driver or runtime. */
#define _GNU_SOURCE
#include "shim.h"
#include "capture.h"
#include "backend.h"
#include "ctx.h"
#include "door/lookup.h"
#include "door/static.h"
#include "control.h"
#include "fence.h"
#include "graphs.h"
#include "framework.h"
#include "log.h"
#include "observe.h"
#include "options.h"
#include "policy.h"
#include "suspend.h"
#include "trace.h"
#include "vmm.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Fence batches of sizes up to 1 MiB (gp_pool_config.fence_batch, fence_batch_bytes): 16
 * blocks, or as many as fit in 4 MiB up to 64. Larger batches of the smallest sizes pay fewer
 * fences for the same frees; a large batch for every small size holds more memory idle while it
 * fills (docs/BENCHMARKS.md has the figures). Build-time, for scripts/bench-variants:
 * -DGP_FENCE_BATCH=N. */
#ifndef GP_FENCE_BATCH
#define GP_FENCE_BATCH 16
#endif
#ifndef GP_FENCE_BATCH_BYTES
#define GP_FENCE_BATCH_BYTES ((uint64_t)4 << 20)
#endif

/* GPUPOOL_THREAD_CACHE where a percentage was given (a share of a device means nothing per
 * thread). */
#define GP_THREAD_CACHE_DEFAULT ((uint64_t)64 << 20)

/* The shim's state (state.h), with its start values that are not all zero bits. Those put it in
 * .data rather than .bss: a larger file, but a page of it costs a process only once touched. */
struct gp_shim_state gp_shim = {
	.life = { .state = GP_UNINIT, .ordered_from_start = 1,
		  .init_lock = PTHREAD_MUTEX_INITIALIZER },
	.door = { .resolve_lock = PTHREAD_MUTEX_INITIALIZER },
	.capture = { .lock = PTHREAD_MUTEX_INITIALIZER },
	.trace = { .flush_lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .shown_sec = -1 },
	.ctx = { .user_lock = PTHREAD_MUTEX_INITIALIZER },
	.fence = { .lock = PTHREAD_MUTEX_INITIALIZER },
	.graphs = { .lock = PTHREAD_MUTEX_INITIALIZER },
	.control = { .release_lock = PTHREAD_MUTEX_INITIALIZER },
	.obs = { .publish_lock = PTHREAD_MUTEX_INITIALIZER },
	.suspend = { .lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER },
	.real = { .once = PTHREAD_ONCE_INIT },
	.vmm = { .lock = PTHREAD_MUTEX_INITIALIZER },
	.park = { .lock = PTHREAD_MUTEX_INITIALIZER },
	.defer = { .lock = PTHREAD_MUTEX_INITIALIZER },
	.account = { .make_lock = PTHREAD_MUTEX_INITIALIZER },
};

/* What the constructor (or the handler, in a process that never uses CUDA) touches lives apart
 * from gp_shim, in .data beside it: zero-initialised (.bss) it would cost such a process two page
 * faults (a read of the zero page, then a copy on write), and inside gp_shim it could lie on any
 * of its pages. Beside it, it lies on the first page of .data, which the dynamic linker has
 * written while binding (.got.plt ends there), or on the last, whose rest it zeroes for .bss. */
#define LOAD_TIME __attribute__((section(".data")))
struct gp_shim_early gp_shim_early LOAD_TIME;

/* Per thread, so not in gp_shim: see pool.c on initial-exec. */
_Thread_local int gp_shim_in_real __attribute__((tls_model("initial-exec")));
static _Thread_local int in_init __attribute__((tls_model("initial-exec")));

/* A bad setting is the user's to fix: said even at the default level (errors only). */
static void warn_line(const char *line)
{
	gp_log(GP_LOG_ERROR, "%s", line);
}

static void on_fork_child(void)
{
	/* CUDA does not survive fork: the child passes everything through. */
	atomic_store(&gp_shim.life.state, GP_PASSTHROUGH);
	gp_control_forget();
	gp_suspend_forget();
}

static void on_exit_handler(void)
{
	gp_suspend_stop(); /* the runtime's teardown after us calls the driver */
	gp_control_stop();
	gp_obs_exit();
}

/* Whether any GPUPOOL_ variable is set, read from environ without calling libc: the first
 * getenv() of a process touches a page of libc that /bin/true never does, a cost every preloaded
 * process would pay. */
static int any_gpupool_variable(void)
{
	static const char prefix[] = "GPUPOOL_";
	extern char **environ;

	for (char **e = environ; e != NULL && *e != NULL; e++) {
		size_t i = 0;

		while (i < sizeof(prefix) - 1 && (*e)[i] == prefix[i])
			i++;
		if (i == sizeof(prefix) - 1)
			return 1;
	}
	return 0;
}

/* Only what cannot wait for the first CUDA call, touching few pages: every process pays for
 * this, CUDA or not. The rest of the options are read by init_locked. */
__attribute__((constructor)) static void gp_shim_load(void)
{
	static const char *const now[] = { "GPUPOOL_DISABLE", "GPUPOOL_SIGNAL", "GPUPOOL_TORCH",
					   "GPUPOOL_STATIC_RUNTIME" };
	struct gp_options early = GP_OPT_EARLY_DEFAULTS;

	gp_cu_constructed();
	if (any_gpupool_variable())
		gp_opt_load_only(&early, now, sizeof(now) / sizeof(now[0]));
	if (early.disable) {
		atomic_store(&gp_shim.life.state, GP_PASSTHROUGH);
		return;
	}
	if (early.torch == GP_TORCH_TAKEOVER)
		gp_framework_load_takeover(); /* before PyTorch reads it */
	if (early.static_runtime)
		gp_static_door_install(); /* before the program's code runs: one thread */
	gp_control_install_signal(early.signo);
}

/* The driver is needed by every path (the runtime door's misses and frees, the fences): a
 * program that has only called the runtime so far has not loaded it yet, or (linked to
 * libcuda.so.1 itself) has it loaded but not initialised; asking the runtime for the device count
 * makes it load and initialise the driver, through our dlsym. 0, -1 when there is no driver or
 * device (pass through for good), 1 when the driver is there but nobody initialised it yet (a
 * program of the driver alone whose first call came before its cuInit: ask again next call). */
static int find_driver(int *ndev)
{
	CUresult rc;

	if (gp_cu_resolve() != 0 && gp_real.GetDeviceCount != NULL) {
		gp_real.GetDeviceCount(ndev);
		gp_real.GetLastError();
	}
	if (gp_cu_resolve() != 0 || gp_cu.DeviceGetCount == NULL || gp_cu.MemAlloc_v2 == NULL ||
	    gp_cu.MemFree_v2 == NULL || gp_cu.CtxGetCurrent == NULL) {
		gp_log(GP_LOG_ERROR, "the CUDA driver (libcuda.so.1) was not found; passing through");
		return -1;
	}
	rc = gp_cu.DeviceGetCount(ndev);
	if (rc == CUDA_ERROR_NOT_INITIALIZED && gp_real.GetDeviceCount != NULL) {
		gp_real.GetDeviceCount(ndev);
		gp_real.GetLastError();
		rc = gp_cu.DeviceGetCount(ndev);
	}
	if (rc == CUDA_ERROR_NOT_INITIALIZED) {
		gp_log(GP_LOG_DEBUG, "the driver is not initialised yet: this call passes through");
		return 1;
	}
	if (rc != CUDA_SUCCESS || *ndev <= 0) {
		gp_log(GP_LOG_INFO, "no CUDA device: passing through");
		return -1;
	}
	return 0;
}

/* The pool dropped a block whose address the driver handed out again: the program freed it
 * through a path no door saw. Said once: every later one is the same story. */
static void stale_block(void *arg, int device, void *ptr, size_t bytes)
{
	(void)arg;
	if (!atomic_exchange(&gp_shim.life.said_stale, 1))
		gp_log(GP_LOG_WARN, "device %d: the driver handed out %p again while the pool still "
				    "held a block of %zu bytes there: it was freed by a call gpupool did "
				    "not see; the pool's record is dropped", device, ptr, bytes);
}

static int init_locked(void)
{
	struct gp_options *o = &gp_shim.life.opts;
	struct gp_backend be = { 0 };
	struct gp_pool_config cfg = { .ordered = 1, .over_cap = gp_control_over_cap,
				      .stale = stale_block, .owed = gp_control_owed, .arg = NULL };
	struct gp_pool *pool;
	int ndev = 0, observed;

	/* Here, not at load: a fork before the first CUDA call leaves nothing to undo (the child
	 * starts uninitialised), and a process that never uses CUDA pays nothing for it. */
	if (!atomic_exchange(&gp_shim.life.atfork_set, 1))
		pthread_atfork(NULL, NULL, on_fork_child);
	gp_real_resolve(); /* a shared runtime, if the program has one: optional */
	gp_opt_load(o, NULL);
	gp_log_set_level(o->log_level);
	gp_opt_load(o, warn_line); /* again, now that the level is known, to say what was wrong */
	if (o->disable) {
		gp_log(GP_LOG_INFO, "GPUPOOL_DISABLE is set: passing every call through");
		return GP_PASSTHROUGH;
	}
	o->signo = gp_control_signal(); /* what the handler was installed for at load, if it was */
	switch (find_driver(&ndev)) {
	case 0:
		break;
	case 1:
		return GP_UNINIT; /* not yet: the next call asks again */
	default:
		return GP_PASSTHROUGH;
	}
	atomic_store_explicit(&gp_shim.life.single_device, ndev == 1, memory_order_relaxed);
	gp_shim.fence.join_on = o->torch == GP_TORCH_TAKEOVER; /* fence.c: gp_fence_join */
	gp_vmm_init(o->vmm);
	gp_backend_fill(&be);
	cfg.reuse_wait_ns = o->reuse_wait_ns;
	cfg.reuse_poll_ns = o->reuse_poll_ns;
	cfg.reuse_age_ns = o->reuse_age_ns;
	cfg.oversize_pct = (unsigned)o->oversize_pct;
	cfg.tcache_bytes = o->thread_cache.percent > 0 ? GP_THREAD_CACHE_DEFAULT :
							  o->thread_cache.bytes;
	cfg.fence_batch = GP_FENCE_BATCH;
	cfg.fence_batch_bytes = GP_FENCE_BATCH_BYTES;
	if (be.remap != NULL) {
		cfg.remap_min_bytes = GP_VMM_MIN_BYTES + 1;
		cfg.remap_age_ns = o->vmm_age_ns;
		cfg.remap_trim = o->vmm_trim;
	}
	if (gp_pool_create(&be, &cfg, &gp_shim.life.pool) != GP_OK) {
		gp_log(GP_LOG_ERROR, "cannot create the pool; passing through");
		return GP_PASSTHROUGH;
	}
	pool = gp_shim.life.pool;
	atomic_store(&gp_shim.life.pool_made, pool);
	if (!atomic_load(&gp_shim.life.ordered_from_start))
		gp_pool_set_ordered(pool, 0);
	gp_framework_check_config(o->torch == GP_TORCH_TAKEOVER);
	gp_policy_init(pool, o);
	gp_control_configure(o->framework_flush == GP_FLUSH_AUTO);
	observed = gp_obs_start(pool, o, gp_control_wake);
	if (gp_control_auto_suspend(o) | observed || o->signo != 0 || gp_policy_needs_thread())
		gp_control_start(pool);
	atexit(on_exit_handler);
	gp_static_door_say();
	gp_log(GP_LOG_INFO, "active: %d device(s), release signal %d, %s", ndev, o->signo,
	       gp_real.Malloc != NULL ? "shared runtime and driver" : "driver only");
	return GP_ACTIVE;
}

int gp_shim_init_slow(void)
{
	int s;

	if (in_init)
		return 0; /* the runtime called back into us while we initialise: pass through */
	in_init = 1;
	pthread_mutex_lock(&gp_shim.life.init_lock);
	s = atomic_load(&gp_shim.life.state);
	if (s == GP_UNINIT) {
		s = init_locked();
		atomic_store_explicit(&gp_shim.life.state, s, memory_order_release);
	}
	pthread_mutex_unlock(&gp_shim.life.init_lock);
	in_init = 0;
	return s == GP_ACTIVE;
}

/* Reuse without fences is only sound while all work is in one stream order on one device. */
static void unordered(void)
{
	struct gp_pool *pool;

	atomic_store(&gp_shim.life.ordered_from_start, 0);
	pool = atomic_load(&gp_shim.life.pool_made);
	if (pool != NULL)
		gp_pool_set_ordered(pool, 0);
	if (!atomic_exchange(&gp_shim.life.said_unordered, 1))
		gp_log(GP_LOG_INFO, "GPU work is no longer in one stream order (a stream was created, "
				    "or a second device or a per-thread default stream is used): a "
				    "freed block is reused once an event fence shows its work is done");
}

/* A call of a _ptsz/_ptds flavour (per_thread), or one naming CU_STREAM_PER_THREAD, uses the
 * calling thread's per-thread default stream, whose work is not in the legacy stream's order. A
 * per-thread flavour counts whichever stream it names, as it always did: the mark is cheap, and
 * such code mostly queues on its default stream. */
static void per_thread_stream(CUstream s, int per_thread)
{
	if ((per_thread || s == CU_STREAM_PER_THREAD) &&
	    !atomic_load_explicit(&gp_shim.life.per_thread_stream, memory_order_relaxed) &&
	    gp_shim_tracking() && !atomic_exchange(&gp_shim.life.per_thread_stream, 1))
		unordered();
}

/* A device's first allocation (bit: its bit in seen_devices): its fences, and with a second
 * device, reuse behind fences. */
static __attribute__((noinline, cold)) void note_new_device(int dev, uint64_t bit)
{
	uint64_t seen;

	gp_fence_use_device(dev); /* before the bit: no fence may miss this device */
	seen = atomic_fetch_or(&gp_shim.life.seen_devices, bit);
	if (seen & bit)
		return; /* another thread got here first */
	seen |= bit;
	if (seen != bit)
		unordered();
}

/* Inline: an allocation on a device seen before costs a load and a branch. */
static inline __attribute__((always_inline)) void note_device(int dev)
{
	uint64_t bit = 1ULL << (dev & (GP_MAX_DEVICES - 1));

	if (__builtin_expect(!(atomic_load_explicit(&gp_shim.life.seen_devices, memory_order_relaxed) &
			       bit),
			     0))
		note_new_device(dev, bit);
}

/* ---- the runtime door ---- */

/* An allocation on the runtime's current device, asked of it: several devices seen. */
static __attribute__((noinline)) cudaError_t malloc_current(void **ptr, size_t size)
{
	cudaError_t rc;
	int dev;

	rc = gp_real.GetDevice(&dev);
	if (rc != cudaSuccess)
		return rc; /* the runtime's answer: it cannot tell the current device either */
	return gp_shim_malloc_on(dev, ptr, size);
}

/* With one device, a tail call: no frame of its own on the hit path. */
cudaError_t gp_shim_malloc(void **ptr, size_t size)
{
	if (ptr == NULL || size == 0 || !gp_shim_serves())
		return gp_real.Malloc(ptr, size);
	if (atomic_load_explicit(&gp_shim.life.single_device, memory_order_relaxed))
		return gp_shim_malloc_on(0, ptr, size);
	return malloc_current(ptr, size);
}

/* After a pooled allocation that was retried (the pool released and tried again) or failed:
 * what it says, and the trace of a failure. Out of line: a hit never gets here. */
static __attribute__((noinline, cold)) int pool_alloc_after(int rc, int retried, int dev,
							    void **ptr, size_t size)
{
	if (retried)
		gp_obs_oom_retry(dev);
	if (rc == GP_OK && retried && gp_backend_runtime_failed())
		gp_real.GetLastError(); /* the failed first try left the runtime's sticky error */
	if (rc == GP_OK)
		gp_trace(GP_TRACE_ALLOC, *ptr, size);
	else if (rc != GP_EINVAL)
		gp_trace(GP_TRACE_FAIL, NULL, size);
	return rc;
}

/* One pooled allocation; GP_EINVAL: a size the pool does not serve (the caller's real one).
 * Inline into both doors: a hit's cost is the pool's. */
static inline __attribute__((always_inline)) int pool_alloc(int dev, void **ptr, size_t size)
{
	int retried, rc;

	if (__builtin_expect(dev < 0 || dev >= GP_MAX_DEVICES, 0))
		return GP_EINVAL; /* not a device the pool (or a bit mask) can name: the caller's real one */
	note_device(dev);
	rc = gp_pool_alloc(gp_shim.life.pool, dev, size, ptr, &retried);
	if (__builtin_expect(rc != GP_OK || retried, 0))
		return pool_alloc_after(rc, retried, dev, ptr, size);
	gp_trace(GP_TRACE_ALLOC, *ptr, size);
	return GP_OK;
}

/* A thread's first call through the runtime door: a hit calls no runtime function, but the
 * program may count on the context the runtime makes current at its first call. The flag is per
 * thread, so not in gp_shim. */
static _Thread_local int runtime_started __attribute__((tls_model("initial-exec")));

static __attribute__((noinline, cold)) void runtime_thread_first(void)
{
	CUcontext c = NULL;

	runtime_started = 1;
	if (gp_cu.CtxGetCurrent(&c) == CUDA_SUCCESS && c == NULL) {
		gp_shim_in_real = 1;
		gp_real.Free(NULL);
		gp_shim_in_real = 0;
	}
}

/* Inline: a hit's only cost is the flag's load. */
static inline __attribute__((always_inline)) void runtime_thread_start(void)
{
	if (__builtin_expect(!runtime_started, 0))
		runtime_thread_first();
}

/* A runtime's own cudaMalloc (`runtime`) where the pool does not serve: the driver door passes
 * it through, and what it makes is counted as memory past the pool. */
static cudaError_t malloc_unpooled(cudaError_t (*runtime)(void **, size_t), int dev, void **ptr,
				   size_t size)
{
	cudaError_t rc;

	gp_shim_in_real = 1;
	rc = runtime(ptr, size);
	gp_shim_in_real = 0;
	if (rc == cudaSuccess)
		gp_account_add(GP_ACCOUNT_UNPOOLED, dev, (uint64_t)(uintptr_t)*ptr, size);
	return rc;
}

/* gp_shim_malloc_on's answer to a pooled allocation that did not succeed. */
static __attribute__((noinline)) cudaError_t malloc_not_pooled(int prc, int dev, void **ptr,
							       size_t size)
{
	switch (prc) {
	case GP_ENOMEM:
		return cudaErrorMemoryAllocation;
	case GP_EBACKEND:
		return (cudaError_t)gp_backend_last_error(); /* the same numbers for these */
	default: /* a size the pool does not serve */
		return malloc_unpooled(gp_real.Malloc, dev, ptr, size);
	}
}

__attribute__((flatten)) cudaError_t gp_shim_malloc_on(int dev, void **ptr, size_t size)
{
	int prc;

	runtime_thread_start();
	gp_backend_via_runtime = 1;
	prc = pool_alloc(dev, ptr, size);
	gp_backend_via_runtime = 0;
	if (__builtin_expect(prc == GP_OK, 1))
		return cudaSuccess;
	return malloc_not_pooled(prc, dev, ptr, size);
}

/* 1: held for a capture, 0: the pool took it back, GP_ENOTOWNED: not the pool's, GP_EINVAL: a
 * double free (the pool is unchanged). flatten: the pool's free is inlined here, so that the free
 * of a hit is one function with no call into the pool: this is the hit path. */
__attribute__((flatten)) static int pool_free(void *ptr)
{
	uint64_t traced = gp_trace_free_begin(); /* stamped before another thread can get it */
	int rc;

	if (gp_capture_active()) {
		int held = gp_graphs_hold(ptr);
		if (held != 0) {
			/* Kept for the graph being captured (graphs.h), or a double free. */
			gp_trace_free_end(traced, held > 0 ? ptr : NULL);
			return held > 0 ? 1 : GP_EINVAL;
		}
	}
	rc = gp_pool_free(gp_shim.life.pool, ptr);
	gp_trace_free_end(traced, rc == GP_OK ? ptr : NULL);
	return rc == GP_OK ? 0 : rc;
}

/* A free at the runtime door of a pointer not NULL: the pool's answer for a block it handed out
 * (a double free: cudaErrorInvalidValue), else `real` (cudaFree, cudaFreeAsync on stream s) for a
 * pointer allocated before us or by another allocator. Inlined with its `real`: the hit path is
 * the pool's free alone. */
static inline cudaError_t runtime_free(void *ptr, cudaError_t (*real)(void *, cudaStream_t),
				       cudaStream_t s)
{
	uint64_t token;
	cudaError_t rc;

	runtime_thread_start();
	switch (pool_free(ptr)) {
	case 0:
	case 1:
		return cudaSuccess;
	case GP_ENOTOWNED:
		/* Counted no more before the real free: once it returns, the address may be another
		 * thread's new allocation. */
		token = gp_account_take(0, (uint64_t)(uintptr_t)ptr);
		gp_shim_in_real = 1;
		rc = real(ptr, s);
		gp_shim_in_real = 0;
		if (rc != cudaSuccess)
			gp_account_put_back(0, (uint64_t)(uintptr_t)ptr, token);
		return rc;
	default:
		return cudaErrorInvalidValue;
	}
}

static cudaError_t real_free(void *ptr, cudaStream_t s)
{
	(void)s;
	return gp_real.Free(ptr);
}

/* A runtime without cudaFreeAsync (or its _ptsz flavour) has none to pass a pointer to. */
static cudaError_t no_real_free(void *ptr, cudaStream_t s)
{
	(void)ptr;
	(void)s;
	return cudaErrorInitializationError;
}

__attribute__((flatten)) cudaError_t gp_shim_free(void *ptr)
{
	if (ptr == NULL)
		return gp_real.Free(ptr); /* initialises the runtime, as the program expects */
	return runtime_free(ptr, real_free, NULL);
}

/* A block the pool handed out comes back to it at once, as from cudaFree: its reuse waits for
 * the fences, which cover the stream too. */
cudaError_t gp_shim_free_async(void *ptr, cudaStream_t s, int per_thread)
{
	cudaError_t (*real)(void *, cudaStream_t) = per_thread ? gp_real.FreeAsync_ptsz :
								 gp_real.FreeAsync;

	per_thread_stream(s, per_thread);
	if (real == NULL)
		real = no_real_free;
	if (ptr == NULL)
		return real(ptr, s);
	return runtime_free(ptr, real, s);
}

/* ---- the static runtime door ---- */

int gp_shim_static_alloc(void **ptr, size_t size)
{
	int rc;

	if (!atomic_load_explicit(&gp_shim.life.single_device, memory_order_relaxed))
		return -1; /* which device the runtime means: only it knows */
	rc = pool_alloc(0, ptr, size);
	if (__builtin_expect(rc == GP_OK, 1))
		return 0;
	return rc == GP_EINVAL ? -1 : 1;
}

cudaError_t gp_shim_static_failed(cudaError_t (*runtime)(void **, size_t), void **ptr,
				  size_t size)
{
	return malloc_unpooled(runtime, 0, ptr, size); /* the pool has tried */
}

int gp_shim_static_free(void *ptr)
{
	switch (pool_free(ptr)) {
	case 0:
	case 1:
		return 0;
	case GP_ENOTOWNED:
		return -1;
	default:
		return 1;
	}
}

/* Cached blocks are free memory for this process's next allocation (a miss releases them). */
static void add_cached(int dev, size_t *free_b, size_t *total_b)
{
	uint64_t cached;

	if (!gp_shim.life.opts.report_cached_as_free || free_b == NULL || total_b == NULL || dev < 0)
		return;
	cached = gp_pool_cached_bytes(gp_shim.life.pool, dev);
	*free_b = *free_b + cached > *total_b ? *total_b : *free_b + cached;
}

/* ---- the driver door ---- */

int gp_shim_driver_pooling_slow(void)
{
	return !atomic_load_explicit(&gp_shim.life.door_blind, memory_order_relaxed) &&
	       !gp_ctx_in_user();
}

static int cu_current_device(int *dev)
{
	CUdevice d;
	CUresult rc;

	if (atomic_load_explicit(&gp_shim.life.single_device, memory_order_relaxed)) {
		*dev = 0;
		return CUDA_SUCCESS;
	}
	rc = gp_cu.CtxGetDevice(&d);
	*dev = (int)d;
	return rc;
}

CUresult gp_shim_cu_alloc(CUdeviceptr *dptr, size_t size)
{
	CUresult rc;
	void *p = NULL;
	int dev;

	if (dptr == NULL || size == 0)
		return gp_cu.MemAlloc_v2(dptr, size);
	rc = cu_current_device(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	switch (pool_alloc(dev, &p, size)) {
	case GP_OK:
		*dptr = (CUdeviceptr)(uintptr_t)p;
		return CUDA_SUCCESS;
	case GP_ENOMEM:
		return CUDA_ERROR_OUT_OF_MEMORY;
	case GP_EBACKEND:
		return gp_backend_last_error();
	default:
		rc = gp_cu.MemAlloc_v2(dptr, size); /* a size the pool does not serve */
		if (rc == CUDA_SUCCESS)
			gp_account_add(GP_ACCOUNT_UNPOOLED, dev, *dptr, size);
		return rc;
	}
}

CUresult gp_shim_cu_passed(enum gp_account_kind kind, CUdeviceptr *dptr, size_t bytes, CUresult rc)
{
	int dev;

	if (rc != CUDA_SUCCESS || dptr == NULL || gp_shim_in_real || !gp_shim_active() ||
	    cu_current_device(&dev) != CUDA_SUCCESS)
		return rc;
	gp_account_add(kind, dev, *dptr, bytes);
	return rc;
}

/* The real free of a pointer the pool does not own, on stream s for cuMemFreeAsync: counted no
 * more before it (once it returns, the address may be another thread's new allocation), again
 * if the driver refused it. */
static CUresult passed_free(CUdeviceptr dptr, CUresult (*real)(CUdeviceptr, CUstream), CUstream s)
{
	uint64_t token = gp_account_take(0, dptr);
	CUresult rc = real(dptr, s);

	if (rc != CUDA_SUCCESS)
		gp_account_put_back(0, dptr, token);
	return rc;
}

/* The same at the driver door (a double free: CUDA_ERROR_INVALID_VALUE); `real` is cuMemFree or
 * cuMemFreeAsync on stream s. */
static inline CUresult driver_free(CUdeviceptr dptr, CUresult (*real)(CUdeviceptr, CUstream),
				   CUstream s)
{
	switch (pool_free((void *)(uintptr_t)dptr)) {
	case 0:
	case 1:
		return CUDA_SUCCESS;
	case GP_ENOTOWNED:
		return passed_free(dptr, real, s);
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult real_cu_free(CUdeviceptr dptr, CUstream s)
{
	(void)s;
	return gp_cu.MemFree_v2(dptr);
}

__attribute__((flatten)) CUresult gp_shim_cu_free(CUdeviceptr dptr)
{
	if (dptr == 0)
		return gp_cu.MemFree_v2(dptr);
	return driver_free(dptr, real_cu_free, NULL);
}

static CUresult real_cu_free_async(CUdeviceptr dptr, CUstream s)
{
	return gp_cu.MemFreeAsync(dptr, s);
}

static CUresult real_cu_free_async_ptsz(CUdeviceptr dptr, CUstream s)
{
	return gp_cu.MemFreeAsync_ptsz(dptr, s);
}

CUresult gp_shim_cu_free_passed(CUdeviceptr dptr, CUstream s, int how)
{
	CUresult (*const real[])(CUdeviceptr, CUstream) = { real_cu_free, real_cu_free_async,
							    real_cu_free_async_ptsz };

	return passed_free(dptr, real[how], s);
}

CUresult gp_shim_vmm_created(CUmemGenericAllocationHandle *h, size_t bytes,
			     const CUmemAllocationProp *prop, CUresult rc)
{
	if (rc == CUDA_SUCCESS && h != NULL && prop != NULL && gp_shim_active() &&
	    prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
		gp_account_add(GP_ACCOUNT_VMM, prop->location.id, *h, bytes);
	return rc;
}

CUresult gp_shim_vmm_release(CUmemGenericAllocationHandle h)
{
	uint64_t token = gp_account_take(1, h);
	CUresult rc = gp_cu.MemRelease(h);

	if (rc != CUDA_SUCCESS)
		gp_account_put_back(1, h, token);
	return rc;
}

/* As gp_shim_free_async; the entry point made sure the real function exists. */
CUresult gp_shim_cu_free_async(CUdeviceptr dptr, CUstream s, int per_thread)
{
	CUresult (*real)(CUdeviceptr, CUstream) = per_thread ? gp_cu.MemFreeAsync_ptsz :
							       gp_cu.MemFreeAsync;

	per_thread_stream(s, per_thread);
	if (dptr == 0)
		return real(dptr, s);
	return driver_free(dptr, real, s);
}

void gp_shim_cu_meminfo(size_t *free_b, size_t *total_b)
{
	int dev;

	if (cu_current_device(&dev) == CUDA_SUCCESS)
		add_cached(dev, free_b, total_b);
}

void gp_shim_vmm_seen(void)
{
	if (!atomic_exchange(&gp_shim.life.said_vmm, 1))
		gp_log(GP_LOG_INFO, "memory mapped with cuMemCreate (the driver's virtual memory "
				    "API: JAX, PyTorch's expandable segments) is not pooled");
}

/* PyTorch with its cache off (takeover mode: PYTORCH_NO_CUDA_MEMORY_CACHING=1) cannot share a
 * CUDA tensor with another process through torch.multiprocessing: the consumer never answers.
 * That is PyTorch's own limit, with or without gpupool; said once, at the first IPC handle, so
 * that a hang there has a name. */
void gp_shim_ipc_seen(const void *ptr)
{
	gp_vmm_ipc_seen(ptr);
	gp_suspend_note_ipc();
	if (gp_shim.life.opts.torch == GP_TORCH_TAKEOVER && !atomic_exchange(&gp_shim.life.said_ipc, 1))
		gp_log(GP_LOG_WARN, "an IPC memory handle was asked for in takeover mode "
				    "(GPUPOOL_TORCH=takeover): PyTorch with its cache off "
				    "(PYTORCH_NO_CUDA_MEMORY_CACHING=1) cannot share CUDA tensors with "
				    "another process through torch.multiprocessing (the consumer never "
				    "answers, with or without gpupool); the handle itself is the driver's");
}

/* Which library made the call: the first frame outside gpupool and the CUDA libraries, for
 * the log (the first streams only, at info: backtrace may allocate and load the unwinder). */
static const char *caller_object(void)
{
	void *frames[24];
	int n = backtrace(frames, 24);
	Dl_info info;

	for (int i = 1; i < n; i++) {
		const char *base;

		if (!dladdr(frames[i], &info) || info.dli_fname == NULL)
			continue;
		base = strrchr(info.dli_fname, '/');
		base = base ? base + 1 : info.dli_fname;
		if (strncmp(base, "libgpupool", 10) != 0 && strncmp(base, "libcudart", 9) != 0 &&
		    strncmp(base, "libcuda.", 8) != 0)
			return *base ? base : "the program";
	}
	return "an unknown caller";
}

void gp_shim_stream_created(CUstream s, unsigned flags)
{
	gp_fence_stream_created(s, flags);
	if (gp_log_enabled(GP_LOG_INFO) && atomic_fetch_add(&gp_shim.life.said_streams, 1) < 4)
		gp_log(GP_LOG_INFO, "a %s stream was created by %s",
		       (flags & CU_STREAM_NON_BLOCKING) ? "non-blocking" : "blocking", caller_object());
	unordered();
}

int gp_shim_stream_destroying(CUstream s)
{
	return gp_fence_stream_destroying(s);
}

/* The last capture ended: what waited for that is done now. */
static void captures_over(CUgraph g)
{
	gp_graphs_capture_end(g);
	if (!gp_capture_active()) {
		gp_fence_captures_over();
		gp_backend_captures_over();
	}
}

int gp_shim_capture_begin(CUstream s)
{
	if (!gp_shim_tracking() || !gp_capture_begin(s))
		return 0;
	gp_graphs_capture_begin();
	return 1;
}

CUresult gp_shim_capture_begun(CUstream s, int tracked, CUresult rc)
{
	if (tracked && rc != CUDA_SUCCESS && gp_capture_end(s))
		captures_over(NULL);
	return rc;
}

/* Ended on the wrong thread, the capture goes on; any other outcome ends it. */
CUresult gp_shim_capture_ended(CUstream s, CUgraph *g, CUresult rc)
{
	if (rc != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD && gp_capture_end(s))
		captures_over(rc == CUDA_SUCCESS && g != NULL ? *g : NULL);
	return rc;
}

void gp_shim_graph_link(const void *from, const void *to)
{
	if (gp_shim_tracking())
		gp_graphs_link(from, to);
}

void gp_shim_graph_gone(const void *handle)
{
	if (gp_shim_tracking())
		gp_graphs_gone(handle);
}

void gp_shim_device_reset(int dev)
{
	if (dev < 0 || dev >= GP_MAX_DEVICES)
		return;
	gp_fence_device_reset(dev);
	gp_graphs_device_reset(dev);
	if (gp_shim.life.pool != NULL)
		gp_pool_forget_device(gp_shim.life.pool, dev);
	gp_ctx_forget(dev);
}

/* The last reference destroyed the context: its memory went with it. */
void gp_shim_device_released(int dev)
{
	unsigned flags;
	int active = 1;

	if (gp_cu.DevicePrimaryCtxGetState != NULL &&
	    gp_cu.DevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active)
		gp_shim_device_reset(dev);
}

CUresult gp_shim_ctx_created(CUcontext *c, CUresult rc)
{
	if (rc == CUDA_SUCCESS && c != NULL && gp_shim_tracking()) {
		gp_ctx_user_created(*c);
		atomic_store(&gp_shim.life.driver_caution, 1);
		gp_shim_ctx_current();
	}
	return rc;
}

void gp_shim_ctx_destroying(CUcontext c)
{
	gp_ctx_user_destroyed(c);
}

void gp_shim_ctx_current(void)
{
	int dev;

	if (atomic_load_explicit(&gp_shim.life.single_device, memory_order_relaxed) ||
	    !gp_shim_tracking() || cu_current_device(&dev) != CUDA_SUCCESS)
		return;
	if (dev >= 0 && dev < GP_MAX_DEVICES)
		note_device(dev);
}

/* A _ptsz/_ptds flavour's NULL, and CU_STREAM_PER_THREAD in any flavour, is the calling thread's
 * per-thread default stream; a plain flavour's NULL and CU_STREAM_LEGACY the legacy one. */
void gp_shim_work(CUstream s, int per_thread)
{
	per_thread_stream(s, per_thread);
	if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
		gp_fence_note_legacy_work();
	else
		gp_fence_note_stream_work(s);
}

/* The driver door found a function it cannot vouch for (door/handout.c): allocations pass through
 * from now on, and blocks already cached are reused only after a real free. */
void gp_shim_door_blind(void)
{
	atomic_store(&gp_shim.life.door_blind, 1);
	atomic_store(&gp_shim.life.driver_caution, 1);
	gp_fence_blind();
}
