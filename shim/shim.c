/* shim.c — initialisation (at load: options and the signal only; at first CUDA use: the real
 * runtime, the pool, the control thread) and the pooled cudaMalloc/cudaFree.
 * Never aborts the program: anything unexpected falls back to the real runtime. */
#define _GNU_SOURCE
#include "shim.h"
#include "capture.h"
#include "backend.h"
#include "control.h"
#include "fence.h"
#include "graphs.h"
#include "framework.h"
#include "log.h"
#include "observe.h"
#include "options.h"
#include "policy.h"
#include "real.h"
#include "trace.h"

#include <pthread.h>
#include <stdlib.h>

/* Fence batches of sizes up to 1 MiB (gp_pool_config.fence_batch, fence_batch_bytes): 16
 * blocks, or as many as fit in 4 MiB up to 64. On the H200, batches of 64 at 64 KiB and below
 * took the fenced pair from 150 to 100 ns and one size at 16 threads from 61 to 85 M pairs/s;
 * 64 for every small size also cost sizes up to 1 MiB 6% more peak memory
 * (docs/BENCHMARKS.md). Build-time, for scripts/bench-variants: -DGP_FENCE_BATCH=N. */
#ifndef GP_FENCE_BATCH
#define GP_FENCE_BATCH 16
#endif
#ifndef GP_FENCE_BATCH_BYTES
#define GP_FENCE_BATCH_BYTES ((uint64_t)4 << 20)
#endif

_Atomic int gp_shim_state = GP_UNINIT;
struct gp_pool *gp_shim_pool;

static struct gp_options opts;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int in_init __attribute__((tls_model("initial-exec"))); /* see pool.c */
static int single_device; /* one visible device: the current device is always 0 */
static _Atomic uint64_t seen_devices;

/* A bad setting is the user's to fix: said even at the default level (errors only). */
static void warn_line(const char *line)
{
	gp_log(GP_LOG_ERROR, "%s", line);
}

static void on_fork_child(void)
{
	/* CUDA does not survive fork: the child passes everything through. */
	atomic_store(&gp_shim_state, GP_PASSTHROUGH);
	gp_control_forget();
}

static void on_exit_handler(void)
{
	gp_control_stop();
	gp_obs_exit();
}

/* Whether any GPUPOOL_ variable is set, read from environ without calling libc: the first
 * getenv() of a process touches a page of libc that /bin/true never does (about 20 µs on the
 * build machine). */
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
 * this, CUDA or not (docs/BENCHMARKS.md). The rest of the options are read by init_locked. */
__attribute__((constructor)) static void gp_shim_load(void)
{
	static const char *const now[] = { "GPUPOOL_DISABLE", "GPUPOOL_SIGNAL", "GPUPOOL_TORCH" };
	struct gp_options early = GP_OPT_EARLY_DEFAULTS;

	if (any_gpupool_variable())
		gp_opt_load_only(&early, now, sizeof(now) / sizeof(now[0]));
	if (early.disable)
		return;
	if (early.torch == GP_TORCH_TAKEOVER)
		gp_framework_load_takeover(); /* before PyTorch reads it */
	gp_control_install_signal(early.signo);
}

static int init_locked(void)
{
	struct gp_backend be;
	struct gp_pool_config cfg = { .ordered = 1, .over_cap = gp_control_over_cap, .arg = NULL };
	int ndev = 0, observed;

	/* Here, not at load: a fork before the first CUDA call leaves nothing to undo (the child
	 * starts uninitialised), and a process that never uses CUDA pays nothing for it. */
	pthread_atfork(NULL, NULL, on_fork_child);
	if (gp_real_resolve() != 0) {
		gp_log(GP_LOG_ERROR, "the CUDA runtime (libcudart) was not found; passing through");
		return GP_PASSTHROUGH;
	}
	gp_opt_load(&opts, NULL);
	gp_log_set_level(opts.log_level);
	gp_opt_load(&opts, warn_line); /* again, now that the level is known, to say what was wrong */
	if (opts.disable) {
		gp_log(GP_LOG_INFO, "GPUPOOL_DISABLE is set: passing every call through");
		return GP_PASSTHROUGH;
	}
	opts.signo = gp_control_signal(); /* what the handler was installed for at load, if it was */
	if (gp_real.GetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
		gp_real.GetLastError();
		gp_log(GP_LOG_INFO, "no CUDA device: passing through");
		return GP_PASSTHROUGH;
	}
	single_device = ndev == 1;
	gp_backend_fill(&be);
	cfg.reuse_wait_ns = opts.reuse_wait_ns;
	cfg.reuse_poll_ns = opts.reuse_poll_ns;
	cfg.reuse_age_ns = opts.reuse_age_ns;
	cfg.oversize_pct = (unsigned)opts.oversize_pct;
	cfg.fence_batch = GP_FENCE_BATCH;
	cfg.fence_batch_bytes = GP_FENCE_BATCH_BYTES;
	if (gp_pool_create(&be, &cfg, &gp_shim_pool) != GP_OK) {
		gp_log(GP_LOG_ERROR, "cannot create the pool; passing through");
		return GP_PASSTHROUGH;
	}
	gp_framework_check_config();
	gp_policy_init(gp_shim_pool, &opts);
	gp_control_configure(opts.framework_flush == GP_FLUSH_AUTO);
	observed = gp_obs_start(gp_shim_pool, &opts, gp_control_wake); /* live view, trace: the thread refreshes them */
	if (observed || opts.signo != 0 || gp_policy_needs_thread())
		gp_control_start(gp_shim_pool);
	atexit(on_exit_handler);
	gp_log(GP_LOG_INFO, "active: %d device(s), release signal %d", ndev, opts.signo);
	return GP_ACTIVE;
}

int gp_shim_init_slow(void)
{
	int s;

	if (in_init)
		return 0; /* the runtime called back into us while we initialise: pass through */
	in_init = 1;
	pthread_mutex_lock(&init_lock);
	s = atomic_load(&gp_shim_state);
	if (s == GP_UNINIT) {
		s = init_locked();
		atomic_store_explicit(&gp_shim_state, s, memory_order_release);
	}
	pthread_mutex_unlock(&init_lock);
	in_init = 0;
	return s == GP_ACTIVE;
}

/* Reuse without fences is only sound while all work is in one stream order on one device. */
void gp_shim_unordered(void)
{
	static _Atomic int said;

	gp_pool_set_ordered(gp_shim_pool, 0);
	if (!atomic_exchange(&said, 1))
		gp_log(GP_LOG_INFO, "GPU work is no longer in one stream order (a stream was created, "
				    "or a second device or the per-thread default stream is used): a "
				    "freed block is reused once an event fence shows its work is done");
}

static void note_device(int dev)
{
	uint64_t bit = 1ULL << (dev & 63);
	uint64_t seen = atomic_load_explicit(&seen_devices, memory_order_relaxed);

	if (seen & bit)
		return;
	gp_fence_use_device(dev); /* before the bit: no fence may miss this device */
	seen = atomic_fetch_or(&seen_devices, bit);
	if (seen & bit)
		return; /* another thread got here first */
	seen |= bit;
	gp_policy_device_seen(dev);
	if (seen != bit)
		gp_shim_unordered();
}

void gp_shim_device_set(int device)
{
	if (device >= 0 && device < GP_MAX_DEVICES)
		note_device(device);
}

static cudaError_t current_device(int *dev)
{
	if (single_device) {
		*dev = 0;
		return cudaSuccess;
	}
	return gp_real.GetDevice(dev);
}

cudaError_t gp_shim_malloc(void **ptr, size_t size)
{
	cudaError_t rc;
	int dev;

	if (ptr == NULL || size == 0)
		return gp_real.Malloc(ptr, size);
	rc = current_device(&dev);
	if (rc != cudaSuccess)
		return rc; /* the runtime's answer: it cannot tell the current device either */
	return gp_shim_malloc_on(dev, ptr, size);
}

cudaError_t gp_shim_malloc_on(int dev, void **ptr, size_t size)
{
	int retried, rc;

	note_device(dev);
	rc = gp_pool_alloc(gp_shim_pool, dev, size, ptr, &retried);
	if (retried)
		gp_obs_oom_retry(dev);
	switch (rc) {
	case GP_OK:
		if (retried)
			gp_real.GetLastError(); /* the failed first try left a sticky error */
		gp_trace(GP_TRACE_ALLOC, *ptr, size);
		return cudaSuccess;
	case GP_ENOMEM:
		gp_trace(GP_TRACE_FAIL, NULL, size);
		return cudaErrorMemoryAllocation;
	case GP_EBACKEND:
		gp_trace(GP_TRACE_FAIL, NULL, size);
		return gp_backend_last_error();
	default:
		return gp_real.Malloc(ptr, size); /* a size the pool does not serve */
	}
}

/* flatten: the pool's free is inlined here, as when this was its only caller (graphs.c calls it
 * too, on a cold path); about 35 instructions less per pair on the hit path (callgrind). */
__attribute__((flatten)) cudaError_t gp_shim_free(void *ptr)
{
	uint64_t traced;
	int rc;

	if (ptr == NULL)
		return cudaSuccess;
	traced = gp_trace_free_begin(); /* stamped before another thread can get the block */
	if (gp_capture_active()) {
		int held = gp_graphs_hold(ptr);
		if (held != 0) {
			/* Kept for the graph being captured (graphs.h), or a double free. */
			gp_trace_free_end(traced, held > 0 ? ptr : NULL);
			return held > 0 ? cudaSuccess : cudaErrorInvalidValue;
		}
	}
	rc = gp_pool_free(gp_shim_pool, ptr);
	gp_trace_free_end(traced, rc == GP_OK ? ptr : NULL);
	switch (rc) {
	case GP_OK:
		return cudaSuccess;
	case GP_ENOTOWNED:
		return gp_real.Free(ptr); /* allocated before us, or by another allocator */
	default:
		return cudaErrorInvalidValue; /* double free: the pool is unchanged */
	}
}

void gp_shim_stream_created(cudaError_t rc, cudaStream_t *s, unsigned flags)
{
	if (rc != cudaSuccess || s == NULL)
		return;
	gp_fence_stream_created(*s, flags);
	gp_shim_unordered();
}

/* Cached blocks are free memory for this process's next cudaMalloc (a miss releases them). */
void gp_shim_adjust_meminfo(size_t *free_b, size_t *total_b)
{
	int dev;
	uint64_t cached;

	if (!opts.report_cached_as_free || free_b == NULL || total_b == NULL ||
	    current_device(&dev) != cudaSuccess)
		return;
	cached = gp_pool_cached_bytes(gp_shim_pool, dev);
	*free_b = *free_b + cached > *total_b ? *total_b : *free_b + cached;
}

void gp_shim_device_reset(void)
{
	int dev;

	if (current_device(&dev) == cudaSuccess) {
		gp_fence_device_reset(dev);
		gp_graphs_device_reset(dev);
		gp_pool_forget_device(gp_shim_pool, dev);
		return;
	}
	/* Which device is reset is unknown: forget them all rather than ever hand out a block the
	 * reset freed (the other devices' cached blocks stay allocated, unused). */
	gp_graphs_device_reset(-1);
	for (dev = 0; dev < GP_MAX_DEVICES; dev++) {
		gp_fence_device_reset(dev);
		gp_pool_forget_device(gp_shim_pool, dev);
	}
}
