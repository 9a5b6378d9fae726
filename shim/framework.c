/* framework.c — talking to Python frameworks from the control thread.
 * Python is found in the process with dlsym(RTLD_DEFAULT), never loaded. The GIL is taken with
 * PyGILState_Ensure, never during interpreter finalisation and never with a pool lock held; the
 * code runs in a fresh namespace so the program's __main__ is untouched. Never called on the
 * allocation path: PyTorch may call cudaMalloc with its own allocator lock held. */
#define _GNU_SOURCE
#include "framework.h"
#include "log.h"
#include "pool.h"
#include "door/lookup.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(GP_FW_MAX_DEVICES == GP_MAX_DEVICES, "the probe covers every device");

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

void gp_framework_check_config(int takeover)
{
	const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF");
	const char *graphs = getenv("TORCHINDUCTOR_CUDAGRAPHS");

	/* Inductor's CUDA graph trees allocate from PyTorch's caching allocator's own pools, which
	 * takeover mode turns off: torch.compile's cudagraphs then fail, with or without gpupool.
	 * The environment is the one place this can be seen before it happens (mode="reduce-overhead"
	 * in the program's code is not). */
	if (takeover && graphs != NULL && strcmp(graphs, "1") == 0)
		gp_log(GP_LOG_ERROR, "GPUPOOL_TORCH=takeover with TORCHINDUCTOR_CUDAGRAPHS=1: "
				     "torch.compile's CUDA graph trees need PyTorch's caching allocator, "
				     "which takeover mode turns off (they fail, with or without gpupool); "
				     "use the default mode for them");

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

/* The interpreter's C API, found in the process. Only the control thread uses it. */
struct python {
	int (*is_initialized)(void);
	int (*is_finalizing)(void);
	int (*gil_ensure)(void);
	void (*gil_release)(int);
	int (*run_simple)(const char *);
	void *(*dict_new)(void);
	void *(*run_string)(const char *, int, void *, void *);
	void *(*dict_get)(void *, const char *);
	int (*dict_set)(void *, const char *, void *);
	void *(*builtins)(void);
	unsigned long long (*as_u64)(void *);
	void (*decref)(void *);
	void (*err_clear)(void);
};

#define PY_FILE_INPUT 257 /* Py_file_input: a module's statements */

/* 1 when every entry point was found; once found they stay (an interpreter is never unloaded).
 * The table is kept here, not in gp_shim (state.h): like gp_cu and gp_real it is a table of real
 * functions found once, not state; only the control thread fills and reads it. */
static int find_python(struct python *py)
{
	static struct python found;
	static int ok;

	if (ok) {
		*py = found;
		return 1;
	}
	if (!copy_fn(&found.is_initialized, "Py_IsInitialized") ||
	    !copy_fn(&found.gil_ensure, "PyGILState_Ensure") ||
	    !copy_fn(&found.gil_release, "PyGILState_Release") ||
	    !copy_fn(&found.run_simple, "PyRun_SimpleString") ||
	    !copy_fn(&found.dict_new, "PyDict_New") || !copy_fn(&found.run_string, "PyRun_String") ||
	    !copy_fn(&found.dict_get, "PyDict_GetItemString") ||
	    !copy_fn(&found.dict_set, "PyDict_SetItemString") ||
	    !copy_fn(&found.builtins, "PyEval_GetBuiltins") ||
	    !copy_fn(&found.as_u64, "PyLong_AsUnsignedLongLongMask") ||
	    !copy_fn(&found.decref, "Py_DecRef") || !copy_fn(&found.err_clear, "PyErr_Clear"))
		return 0;
	/* Without a way to tell finalisation apart, taking the GIL could hang at exit. */
	if (!copy_fn(&found.is_finalizing, "Py_IsFinalizing") &&
	    !copy_fn(&found.is_finalizing, "_Py_IsFinalizing"))
		return 0;
	ok = 1;
	*py = found;
	return 1;
}

/* The GIL, when there is a live interpreter: 1 and *state to give back, else 0. */
static int take_gil(struct python *py, int *state)
{
	if (!find_python(py) || !py->is_initialized() || py->is_finalizing())
		return 0;
	*state = py->gil_ensure();
	return 1;
}

int gp_framework_flush(void)
{
	struct python py;
	int state;

	if (!take_gil(&py, &state))
		return 0;
	py.run_simple(flush_code);
	py.gil_release(state);
	return 1;
}

/* Sums over PyTorch's devices and CuPy's default pool; any error leaves what was summed. The
 * activity figure only has to change when memory is handed out: PyTorch counts its allocations,
 * CuPy's pool has no counter, so its used and total bytes stand in (an allocation freed again
 * before the next probe goes unseen there). Per device too (cached_<d>): PyTorch's figures are
 * per device; CuPy's pool answers for the calling thread's current device only, which for this
 * thread is the runtime's default (0), and is counted there. */
static const char probe_code[] =
	"import sys\n"
	"present = 0\n"
	"cached = 0\n"
	"activity = 0\n"
	"per_dev = {}\n"
	"t = sys.modules.get('torch')\n"
	"try:\n"
	"    if t is not None and t.cuda.is_initialized():\n"
	"        present = 1\n"
	"        for d in range(t.cuda.device_count()):\n"
	"            s = t.cuda.memory_stats(d)\n"
	"            activity += s.get('allocation.all.allocated', 0)\n"
	"            u = s.get('reserved_bytes.all.current', 0) - "
	"s.get('allocated_bytes.all.current', 0)\n"
	"            cached += u\n"
	"            per_dev[d] = per_dev.get(d, 0) + u\n"
	"except Exception:\n"
	"    pass\n"
	"c = sys.modules.get('cupy')\n"
	"try:\n"
	"    if c is not None:\n"
	"        present = 1\n"
	"        p = c.get_default_memory_pool()\n"
	"        u = p.total_bytes() - p.used_bytes()\n"
	"        cached += u\n"
	"        activity += (p.used_bytes() << 20) ^ p.total_bytes()\n"
	"        d = c.cuda.runtime.getDevice()\n"
	"        per_dev[d] = per_dev.get(d, 0) + u\n"
	"except Exception:\n"
	"    pass\n"
	"cached = max(cached, 0)\n"
	"for d, u in per_dev.items():\n"
	"    if 0 <= d < %d:\n"
	"        globals()['cached_%%d' %% d] = max(u, 0)\n";

static uint64_t read_u64(const struct python *py, void *dict, const char *name)
{
	void *v = py->dict_get(dict, name); /* borrowed */

	return v == NULL ? 0 : (uint64_t)py->as_u64(v);
}

int gp_framework_probe(struct gp_fw_state *out)
{
	struct python py;
	char code[sizeof(probe_code) + 16], name[24];
	void *dict, *rc;
	int state;

	memset(out, 0, sizeof(*out));
	if (!take_gil(&py, &state))
		return 0;
	dict = py.dict_new();
	/* Before Python 3.10 a namespace without __builtins__ runs without them (no import). */
	if (dict != NULL && py.dict_set(dict, "__builtins__", py.builtins()) != 0) {
		py.decref(dict);
		dict = NULL;
	}
	snprintf(code, sizeof(code), probe_code, GP_FW_MAX_DEVICES);
	rc = dict == NULL ? NULL : py.run_string(code, PY_FILE_INPUT, dict, dict);
	if (rc != NULL) {
		out->present = read_u64(&py, dict, "present") != 0;
		out->cached = read_u64(&py, dict, "cached");
		out->activity = read_u64(&py, dict, "activity");
		for (int d = 0; d < GP_FW_MAX_DEVICES; d++) {
			snprintf(name, sizeof(name), "cached_%d", d);
			out->cached_device[d] = read_u64(&py, dict, name);
		}
		py.decref(rc);
	}
	py.err_clear(); /* a failed probe is not the program's error */
	if (dict != NULL)
		py.decref(dict);
	py.gil_release(state);
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
	for (int d = 0; d < n && d < GP_MAX_DEVICES; d++) {
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

	if (gp_real.SetDevice == NULL || gp_real.DeviceSynchronize == NULL ||
	    gp_real.GetDeviceCount == NULL || !copy_fn(&get_pool, "cudaDeviceGetDefaultMemPool") ||
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
