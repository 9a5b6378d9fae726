/* framework.c — talking to Python frameworks from the control thread.
 * Python is found in the process with dlsym(RTLD_DEFAULT), never loaded. The GIL is taken with
 * PyGILState_Ensure, never during interpreter finalisation and never with a pool lock held; the
 * code runs in a fresh namespace so the program's __main__ is untouched. Never called on the
 * allocation path: PyTorch may call cudaMalloc with its own allocator lock held. */
#define _GNU_SOURCE
#include "framework.h"
#include "log.h"
#include "real.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* exec() in a new dict: no name lands in __main__; errors are swallowed, not printed. */
static const char flush_code[] =
	"exec('''\n"
	"import sys\n"
	"t = sys.modules.get('torch')\n"
	"try:\n"
	"    if t is not None and t.cuda.is_initialized():\n"
	"        t.cuda.empty_cache()\n"
	"except Exception:\n"
	"    pass\n"
	"c = sys.modules.get('cupy')\n"
	"try:\n"
	"    if c is not None:\n"
	"        c.get_default_memory_pool().free_all_blocks()\n"
	"        c.get_default_pinned_memory_pool().free_all_blocks()\n"
	"except Exception:\n"
	"    pass\n"
	"''', {})\n";

static int copy_fn(void *dst, const char *name)
{
	void *sym = dlsym(RTLD_DEFAULT, name);
	memcpy(dst, &sym, sizeof(sym));
	if (sym == NULL)
		gp_dl_forget_error();
	return sym != NULL;
}

void gp_framework_load_takeover(void)
{
	setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1", 0); /* 0: a value the user set stays */
}

void gp_framework_check_config(void)
{
	const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF");

	if (conf == NULL)
		conf = getenv("PYTORCH_ALLOC_CONF");
	if (conf == NULL)
		return;
	if (strstr(conf, "expandable_segments:True") || strstr(conf, "expandable_segments:true"))
		gp_log(GP_LOG_WARN, "PYTORCH_CUDA_ALLOC_CONF has expandable_segments: PyTorch maps "
				    "memory itself and never calls cudaMalloc; only the framework flush "
				    "on release reaches its memory");
	if (strstr(conf, "backend:cudaMallocAsync"))
		gp_log(GP_LOG_WARN, "PYTORCH_CUDA_ALLOC_CONF selects cudaMallocAsync: PyTorch never "
				    "calls cudaMalloc; releases flush its cache and trim the runtime's "
				    "memory pools instead");
}

int gp_framework_flush(void)
{
	int (*is_initialized)(void);
	int (*is_finalizing)(void) = NULL;
	int (*gil_ensure)(void);
	void (*gil_release)(int);
	int (*run)(const char *);
	int state;

	if (!copy_fn(&is_initialized, "Py_IsInitialized") ||
	    !copy_fn(&gil_ensure, "PyGILState_Ensure") ||
	    !copy_fn(&gil_release, "PyGILState_Release") || !copy_fn(&run, "PyRun_SimpleString"))
		return 0;
	if (!copy_fn(&is_finalizing, "Py_IsFinalizing"))
		copy_fn(&is_finalizing, "_Py_IsFinalizing");
	/* Without a way to tell finalisation apart, taking the GIL could hang at exit: skip. */
	if (is_finalizing == NULL || !is_initialized() || is_finalizing())
		return 0;
	state = gil_ensure();
	run(flush_code);
	gil_release(state);
	return 1;
}

/* Devices whose primary context is active, from the driver (never creates a context). */
static unsigned long long active_devices(void)
{
	int (*dev_get)(int *, int);
	int (*ctx_state)(int, unsigned *, int *);
	unsigned long long mask = 0;
	int n = 0;

	if (!copy_fn(&dev_get, "cuDeviceGet") || !copy_fn(&ctx_state, "cuDevicePrimaryCtxGetState") ||
	    gp_real.GetDeviceCount(&n) != cudaSuccess)
		return 0;
	for (int d = 0; d < n && d < 64; d++) {
		int dev, active = 0;
		unsigned flags;
		if (dev_get(&dev, d) == 0 && ctx_state(dev, &flags, &active) == 0 && active)
			mask |= 1ULL << d;
	}
	return mask;
}

void gp_framework_trim_async_pools(void)
{
	cudaError_t (*get_pool)(cudaMemPool_t *, int);
	cudaError_t (*get_attr)(cudaMemPool_t, enum cudaMemPoolAttr, void *);
	cudaError_t (*trim)(cudaMemPool_t, size_t);
	unsigned long long mask;

	if (!copy_fn(&get_pool, "cudaDeviceGetDefaultMemPool") ||
	    !copy_fn(&get_attr, "cudaMemPoolGetAttribute") || !copy_fn(&trim, "cudaMemPoolTrimTo"))
		return;
	mask = active_devices();
	for (int d = 0; mask != 0; d++, mask >>= 1) {
		cudaMemPool_t pool;
		unsigned long long reserved = 0;

		if (!(mask & 1) || get_pool(&pool, d) != cudaSuccess ||
		    get_attr(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess ||
		    reserved == 0)
			continue;
		/* Memory freed with cudaFreeAsync is trimmable once the work before it is done. */
		if (gp_real.SetDevice(d) == cudaSuccess)
			gp_real.DeviceSynchronize();
		trim(pool, 0);
		gp_log(GP_LOG_DEBUG, "device %d: trimmed the runtime's default memory pool (%.1f MiB "
				     "reserved before)", d, (double)reserved / 1048576.0);
	}
	gp_real.GetLastError();
}
