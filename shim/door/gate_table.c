/* gate_table.c — the one table of what the gate knows of a driver function by its name: whether
 * it only asks (GP_GATE_QUERY: not activity; while suspended answered, or the process woken for
 * it) and its answer for a suspended process. Every function not here is WORK. The stubs read it
 * when they are made (stubs.c, exports.c); the gate's owner may read it for anything else.
 *
 * A name matches a row by its base: the version and per-thread-stream suffixes (_v2, _v3, _ptsz,
 * _ptds) taken off, so every variant of a function is one row; a row ending in '*' matches every
 * base that begins with it. An answer is given only where every variant of the base has one
 * signature, and it never calls the driver: at a suspend the GPU was idle, every event complete
 * and every stream empty, so a query of either is answered CUDA_SUCCESS.
 *
 * Decided, and why:
 *  - Synchronizations (cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize) are WORK: they
 *    end the work the program queued, part of its activity, and a suspended process is woken.
 *  - cuGetErrorString/Name and cuDriverGetVersion need no context, but whether the driver's
 *    checkpoint lock lets them through is not known: no answer, so a suspended process is woken
 *    rather than left waiting inside the driver.
 *  - cuMemGetInfo has two signatures (the 32-bit one of CUDA 2.0): no answer here. Our own
 *    cuMemGetInfo_v2 and cudaMemGetInfo answer through gp_suspend_meminfo (driver.c, runtime.c).
 *  - Functions that may load code or make handles (cuKernelGetFunction, cuModuleGetFunction,
 *    cuMemGetHandleForAddressRange) are WORK.
 *  - cuCtxGetCurrent and cuCtxGetDevice are RECALL: a runtime asks one before nearly every call,
 *    so a polling thread's every event query would otherwise wake the process. */
#include "gate.h"
#include "lookup.h"

#include <cuda.h>
#include <string.h>

static CUresult answer_event_query(CUevent e)
{
	(void)e;
	return CUDA_SUCCESS;
}

static CUresult answer_stream_query(CUstream s)
{
	(void)s;
	return CUDA_SUCCESS;
}

/* What the calling thread last asked of its context while the gate was closed, and in which
 * watch (gp_gate_recall): a runtime asks for the current context before nearly every call, the
 * event and stream queries of a polling thread included, and what it gets back changes only by
 * the thread's own calls, each of which is work and ends the watch. */
static _Thread_local struct {
	unsigned long ctx_epoch, dev_epoch;
	CUcontext ctx;
	CUdevice dev;
	unsigned char has_ctx, has_dev;
} recall __attribute__((tls_model("initial-exec")));

static CUresult recall_ctx_get_current(CUcontext *c)
{
	unsigned long epoch;
	CUresult rc;

	if (gp_cu.CtxGetCurrent == NULL)
		return CUDA_ERROR_NOT_FOUND;
	if (gp_gate_recall(&epoch)) {
		if (c != NULL && recall.has_ctx && recall.ctx_epoch == epoch) {
			*c = recall.ctx;
			return CUDA_SUCCESS;
		}
		gp_gate_wake("cuCtxGetCurrent");
		return gp_cu.CtxGetCurrent(c);
	}
	rc = gp_cu.CtxGetCurrent(c);
	if (rc == CUDA_SUCCESS && c != NULL) {
		recall.ctx = *c;
		recall.ctx_epoch = epoch;
		recall.has_ctx = 1;
	}
	return rc;
}

static CUresult recall_ctx_get_device(CUdevice *d)
{
	unsigned long epoch;
	CUresult rc;

	if (gp_cu.CtxGetDevice == NULL)
		return CUDA_ERROR_NOT_FOUND;
	if (gp_gate_recall(&epoch)) {
		if (d != NULL && recall.has_dev && recall.dev_epoch == epoch) {
			*d = recall.dev;
			return CUDA_SUCCESS;
		}
		gp_gate_wake("cuCtxGetDevice");
		return gp_cu.CtxGetDevice(d);
	}
	rc = gp_cu.CtxGetDevice(d);
	if (rc == CUDA_SUCCESS && d != NULL) {
		recall.dev = *d;
		recall.dev_epoch = epoch;
		recall.has_dev = 1;
	}
	return rc;
}

typedef void (*any_fn)(void);

/* GP_GATE_RECALL, by exact symbol (cuCtxGetDevice_v2 takes a context: not this). */
static const struct {
	const char *name;
	any_fn answer;
} recalls[] = {
	{ "cuCtxGetCurrent", (any_fn)recall_ctx_get_current },
	{ "cuCtxGetDevice", (any_fn)recall_ctx_get_device },
};

static int recall_of(const char *name)
{
	for (size_t i = 0; name != NULL && i < sizeof(recalls) / sizeof(recalls[0]); i++)
		if (strcmp(name, recalls[i].name) == 0)
			return (int)i;
	return -1;
}

static const struct {
	const char *base; /* the base name, or a prefix ending in '*' */
	any_fn answer;    /* NULL: a suspended process is woken for it */
} queries[] = {
	{ "cuEventQuery", (any_fn)answer_event_query },
	{ "cuStreamQuery", (any_fn)answer_stream_query },
	{ "cuEventElapsedTime", NULL },
	{ "cuStreamIsCapturing", NULL },
	{ "cuStreamGet*", NULL }, /* priority, flags, context, id, device, capture info, attribute */
	{ "cuDriverGetVersion", NULL },
	{ "cuGetErrorString", NULL },
	{ "cuGetErrorName", NULL },
	{ "cuDeviceGet*", NULL }, /* the device, count, name, uuid, attributes, PCI id, pools */
	{ "cuDeviceComputeCapability", NULL },
	{ "cuDeviceTotalMem", NULL },
	{ "cuDeviceCanAccessPeer", NULL },
	{ "cuDevicePrimaryCtxGetState", NULL },
	{ "cuCtxGet*", NULL }, /* current, device, version, flags, limits, configs, id */
	{ "cuPointerGet*", NULL },
	{ "cuFuncGet*", NULL },
	{ "cuFuncIsLoaded", NULL },
	{ "cuKernelGetAttribute", NULL },
	{ "cuKernelGetName", NULL },
	{ "cuKernelGetParamInfo", NULL },
	{ "cuKernelGetLibrary", NULL },
	{ "cuOccupancy*", NULL },
	{ "cuMemGetInfo", NULL },
	{ "cuMemGetAddressRange", NULL },
	{ "cuMemGetAllocationGranularity", NULL },
	{ "cuMemGetAllocationPropertiesFromHandle", NULL },
	{ "cuMemGetAccess", NULL },
	{ "cuMemGetDefaultMemPool", NULL },
	{ "cuMemGetMemPool", NULL },
	{ "cuMemPoolGetAttribute", NULL },
	{ "cuMemPoolGetAccess", NULL },
	{ "cuMemRangeGetAttribute", NULL },
	{ "cuMemRangeGetAttributes", NULL },
};

/* The length of `name` without its version and flavour suffixes. */
static size_t base_len(const char *name)
{
	size_t n = strlen(name), d;

	for (;;) {
		if (n > 5 && (strncmp(name + n - 5, "_ptsz", 5) == 0 ||
			      strncmp(name + n - 5, "_ptds", 5) == 0)) {
			n -= 5;
			continue;
		}
		d = n;
		while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9')
			d--;
		if (d < n && d > 2 && name[d - 1] == 'v' && name[d - 2] == '_') {
			n = d - 2;
			continue;
		}
		return n;
	}
}

/* The row of `name`, or -1. */
static int row_of(const char *name)
{
	size_t n;

	if (name == NULL)
		return -1;
	n = base_len(name);
	for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++) {
		const char *b = queries[i].base;
		size_t len = strlen(b);
		if (b[len - 1] == '*') {
			if (n >= len - 1 && strncmp(name, b, len - 1) == 0)
				return (int)i;
		} else if (n == len && strncmp(name, b, n) == 0) {
			return (int)i;
		}
	}
	return -1;
}

enum gp_gate_kind gp_gate_kind_of(const char *name)
{
	if (recall_of(name) >= 0)
		return GP_GATE_RECALL;
	return row_of(name) >= 0 ? GP_GATE_QUERY : GP_GATE_WORK;
}

void *gp_gate_answer_of(const char *name)
{
	int i = recall_of(name);
	void *p = NULL;

	if (i >= 0) {
		memcpy(&p, &recalls[i].answer, sizeof(p));
		return p;
	}
	i = row_of(name);
	if (i >= 0 && queries[i].answer != NULL)
		memcpy(&p, &queries[i].answer, sizeof(p)); /* a function's address as the gate keeps it */
	return p;
}
