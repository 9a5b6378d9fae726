/* gate.c — the gate in front of every way a program reaches the driver (shim/door/gate.h), under
 * LD_PRELOAD with the stand-in CUDA. The program is linked to libcuda.so.1 and libcudart.so.13.
 * It reaches driver functions that gpupool does not wrap by the three routes: a call bound by
 * name (cuDeviceGetName, cuCtxGetDevice: gpupool's exported stubs), a pointer from
 * cuGetProcAddress and one from dlsym on a libcuda handle (the stubs gp_gate_stub hands out).
 * Under libgpupool_gatetest.so (gate_owner.c: the shim with a test owner of the gate) it proves:
 * with the gate open nothing passes the owner; closed, each call through each route passes it
 * exactly once, with the function's kind, and the caller's arguments and results are intact; a
 * suspended process (played) gets the answers of queries without the driver (cuEventQuery,
 * cuStreamQuery, cuMemGetInfo_v2, cudaMemGetInfo); our own entry points (cudaMalloc,
 * cuMemAlloc_v2, ...) pass the owner's hook; the same function gets the same stub; a function the
 * driver lacks answers CUDA_ERROR_NOT_FOUND; threads calling stubs for the first time at once
 * while the gate opens and closes get every result right. With --product, under libgpupool.so
 * itself (which exports nothing of the gate): every route hands out gpupool's stubs, and they
 * work. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "e2e.h"
#include "gate.h" /* the kinds: what gatetest_* count by */

static void ok(CUresult rc, const char *what)
{
	if (rc != CUDA_SUCCESS)
		e2e_fail("%s failed with CUresult %d", what, (int)rc);
}

/* ---- the test owner, found in the preloaded library ---- */

static struct {
	void (*close)(int);
	void (*suspend)(int);
	unsigned long (*passes)(const char *);
	int (*kind)(const char *);
	unsigned long (*hooks)(int);
} gt;

static void *need(const char *name)
{
	void *p = dlsym(RTLD_DEFAULT, name);

	if (p == NULL)
		e2e_fail("%s not found: run under libgpupool_gatetest.so (or pass --product)", name);
	return p;
}

static void find_owner(void)
{
	void *p;

	p = need("gatetest_close"), memcpy(&gt.close, &p, sizeof(p));
	p = need("gatetest_suspend"), memcpy(&gt.suspend, &p, sizeof(p));
	p = need("gatetest_passes"), memcpy(&gt.passes, &p, sizeof(p));
	p = need("gatetest_kind"), memcpy(&gt.kind, &p, sizeof(p));
	p = need("gatetest_hooks"), memcpy(&gt.hooks, &p, sizeof(p));
}

/* ---- where a function comes from ---- */

static int from_gpupool(const void *p)
{
	Dl_info info;

	return dladdr(p, &info) != 0 && info.dli_fname != NULL &&
	       strstr(info.dli_fname, "libgpupool") != NULL;
}

typedef CUresult (*name_fn)(char *, int, CUdevice);
typedef CUresult (*ctxdev_fn)(CUdevice *);
typedef CUresult (*event_fn)(CUevent);
typedef CUresult (*stream_fn)(CUstream);
typedef CUresult (*nothing_fn)(CUfunction, const char **);

static void *fn_ptr(void (*fn)(void))
{
	void *p;

	memcpy(&p, &fn, sizeof(p));
	return p;
}
#define ADDR(fn) fn_ptr((void (*)(void))(fn))
#define AS(type, p) ((type)(uintptr_t)(p))

static void check_name(name_fn fn, const char *route)
{
	char name[64];

	memset(name, 'x', sizeof(name));
	ok(fn(name, (int)sizeof(name), 0), route);
	e2e_check(strcmp(name, "gpupool stand-in 0") == 0, "%s: the stand-in's name (\"%s\")", route,
		  name);
	memset(name, 'x', sizeof(name));
	ok(fn(name, 9, 0), route);
	e2e_check(strcmp(name, "gpupool ") == 0, "%s: cut to its length argument (\"%s\")", route,
		  name);
}

struct routes {
	name_fn linked_name, gpa_name, dlsym_name;
	ctxdev_fn linked_dev, gpa_dev, dlsym_dev;
	event_fn gpa_event_query;
	stream_fn gpa_stream_query;
};

static void take_routes(struct routes *r)
{
	CUdriverProcAddressQueryResult status;
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	void *p;

	if (h == NULL)
		e2e_fail("libcuda.so.1 is not loaded: %s", dlerror());
	r->linked_name = cuDeviceGetName;
	r->linked_dev = cuCtxGetDevice;
	ok(cuGetProcAddress("cuDeviceGetName", &p, 13000, 0, &status), "cuGetProcAddress(name)");
	r->gpa_name = AS(name_fn, p);
	ok(cuGetProcAddress("cuCtxGetDevice", &p, 2000, 0, &status), "cuGetProcAddress(ctxdev)");
	r->gpa_dev = AS(ctxdev_fn, p);
	ok(cuGetProcAddress("cuEventQuery", &p, 2000, 0, &status), "cuGetProcAddress(evq)");
	r->gpa_event_query = AS(event_fn, p);
	ok(cuGetProcAddress("cuStreamQuery", &p, 2000, 0, &status), "cuGetProcAddress(stq)");
	r->gpa_stream_query = AS(stream_fn, p);
	r->dlsym_name = AS(name_fn, dlsym(h, "cuDeviceGetName"));
	r->dlsym_dev = AS(ctxdev_fn, dlsym(h, "cuCtxGetDevice"));
	dlclose(h);
	e2e_check(r->dlsym_name != NULL && r->dlsym_dev != NULL, "dlsym on the libcuda handle");

	e2e_check(from_gpupool(ADDR(r->linked_name)) && from_gpupool(ADDR(r->linked_dev)),
		  "the program's own cuDeviceGetName and cuCtxGetDevice bind gpupool's exports");
	e2e_check(from_gpupool(ADDR(r->gpa_name)) && from_gpupool(ADDR(r->gpa_dev)) &&
			  from_gpupool(ADDR(r->gpa_event_query)),
		  "cuGetProcAddress hands out gpupool's stubs for functions it does not wrap");
	e2e_check(from_gpupool(ADDR(r->dlsym_name)) && from_gpupool(ADDR(r->dlsym_dev)),
		  "dlsym on a libcuda handle hands out gpupool's stubs");
	e2e_check(r->gpa_name == r->dlsym_name && r->gpa_dev == r->dlsym_dev,
		  "the same driver function gets the same stub by either lookup");
}

/* Each route, each result intact. */
static void call_routes(const struct routes *r, CUdevice dev)
{
	CUdevice d;

	check_name(r->linked_name, "cuDeviceGetName (linked)");
	check_name(r->gpa_name, "cuDeviceGetName (cuGetProcAddress)");
	check_name(r->dlsym_name, "cuDeviceGetName (dlsym)");
	d = -1, ok(r->linked_dev(&d), "cuCtxGetDevice (linked)");
	e2e_check(d == dev, "cuCtxGetDevice (linked): device %d", (int)d);
	d = -1, ok(r->gpa_dev(&d), "cuCtxGetDevice (cuGetProcAddress)");
	e2e_check(d == dev, "cuCtxGetDevice (cuGetProcAddress): device %d", (int)d);
	d = -1, ok(r->dlsym_dev(&d), "cuCtxGetDevice (dlsym)");
	e2e_check(d == dev, "cuCtxGetDevice (dlsym): device %d", (int)d);
}

/* cuFuncGetName: a driver function in cuda.h that the stand-in lacks, bound by name. */
static void check_missing(void)
{
	void *p = dlsym(RTLD_DEFAULT, "cuFuncGetName");
	const char *name = NULL;

	e2e_check(p != NULL && from_gpupool(p), "gpupool exports cuFuncGetName, which the "
						 "stand-in lacks");
	e2e_check(AS(nothing_fn, p)(NULL, &name) == CUDA_ERROR_NOT_FOUND,
		  "a driver function the driver lacks answers CUDA_ERROR_NOT_FOUND");
}

/* Threads making their first calls of exported stubs at once (cuDeviceGetCount and
 * cuDriverGetVersion, not called before) and calling through a handed-out stub, while the gate
 * opens and closes under them: every result right (under TSan: no race in finding a stub's
 * function). */
#define RACE_THREADS 8
#define RACE_CALLS 2000

struct racer {
	ctxdev_fn dev_fn;
	CUcontext ctx;
	int bad;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	int n, v;
	CUdevice d;

	if (cuCtxSetCurrent(r->ctx) != CUDA_SUCCESS)
		r->bad++;
	for (int i = 0; i < RACE_CALLS; i++) {
		n = -1, v = -1, d = -1;
		if (cuDeviceGetCount(&n) != CUDA_SUCCESS || n != 1)
			r->bad++;
		if (cuDriverGetVersion(&v) != CUDA_SUCCESS || v <= 0)
			r->bad++;
		if (r->dev_fn(&d) != CUDA_SUCCESS || d != 0)
			r->bad++;
	}
	return NULL;
}

static void check_race(const struct routes *rt, CUcontext ctx, int toggle)
{
	struct racer r[RACE_THREADS];
	pthread_t t[RACE_THREADS];
	int bad = 0;

	for (int i = 0; i < RACE_THREADS; i++) {
		r[i] = (struct racer){ rt->gpa_dev, ctx, 0 };
		if (pthread_create(&t[i], NULL, race, &r[i]) != 0)
			e2e_fail("pthread_create");
	}
	for (int i = 0; toggle && i < 200; i++) {
		gt.close(i % 2 == 0);
		e2e_sleep_ms(1);
	}
	for (int i = 0; i < RACE_THREADS; i++) {
		pthread_join(t[i], NULL);
		bad += r[i].bad;
	}
	if (toggle)
		gt.close(0);
	e2e_check(bad == 0, "%d threads, first calls of exported stubs at once%s: every result "
			    "right (%d wrong)", RACE_THREADS,
		  toggle ? " while the gate opens and closes" : "", bad);
}

int main(int argc, char **argv)
{
	int product = argc > 1 && strcmp(argv[1], "--product") == 0;
	struct standin_counters c0, c1;
	unsigned long p0, w0, q0;
	struct routes r;
	CUdevice dev;
	CUcontext ctx;
	CUstream s;
	CUevent ev;
	CUdeviceptr dp;
	size_t fr = 0, tot = 0;
	void *rp = NULL;

	e2e_start(product ? "e2e_gate_product" : "e2e_gate");
	if (!product)
		find_owner();
	ok(cuInit(0), "cuInit");
	ok(cuDeviceGet(&dev, 0), "cuDeviceGet");
	ok(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	ok(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	take_routes(&r);
	call_routes(&r, dev);
	check_missing();
	check_race(&r, ctx, !product);
	if (product)
		return 0;

	/* open: nothing passes the owner */
	p0 = gt.passes(NULL), w0 = gt.hooks(GP_GATE_WORK), q0 = gt.hooks(GP_GATE_QUERY);
	call_routes(&r, dev);
	e2e_cuda(cudaMalloc(&rp, 4096), "cudaMalloc");
	e2e_cuda(cudaFree(rp), "cudaFree");
	ok(cuMemAlloc(&dp, 4096), "cuMemAlloc_v2");
	ok(cuMemFree(dp), "cuMemFree_v2");
	e2e_check(gt.passes(NULL) == p0 && gt.hooks(GP_GATE_WORK) == w0 &&
			  gt.hooks(GP_GATE_QUERY) == q0,
		  "gate open: no call passed the owner (%lu passes, %lu hooks)", gt.passes(NULL) - p0,
		  gt.hooks(GP_GATE_WORK) - w0);

	/* closed: every call through every route passes once, as a query */
	gt.close(1);
	p0 = gt.passes("cuDeviceGetName");
	check_name(r.linked_name, "closed: cuDeviceGetName (linked)");
	e2e_check(gt.passes("cuDeviceGetName") == p0 + 2, "closed: the linked call passed the owner "
							   "once a call (%lu)",
		  gt.passes("cuDeviceGetName") - p0);
	check_name(r.gpa_name, "closed: cuDeviceGetName (cuGetProcAddress)");
	check_name(r.dlsym_name, "closed: cuDeviceGetName (dlsym)");
	e2e_check(gt.passes("cuDeviceGetName") == p0 + 6,
		  "closed: each route passed the owner once a call (%lu of 6)",
		  gt.passes("cuDeviceGetName") - p0);
	e2e_check(gt.kind("cuDeviceGetName") == GP_GATE_QUERY, "cuDeviceGetName passes as a query");
	p0 = gt.passes("cuCtxGetDevice");
	call_routes(&r, dev);
	e2e_check(gt.passes("cuCtxGetDevice") == p0 + 3,
		  "closed: cuCtxGetDevice passed once by each route (%lu of 3)",
		  gt.passes("cuCtxGetDevice") - p0);

	/* closed: our own entry points pass the owner's hook, as work */
	w0 = gt.hooks(GP_GATE_WORK);
	e2e_cuda(cudaMalloc(&rp, 4096), "cudaMalloc");
	e2e_cuda(cudaFree(rp), "cudaFree");
	ok(cuMemAlloc(&dp, 4096), "cuMemAlloc_v2");
	ok(cuMemFree(dp), "cuMemFree_v2");
	e2e_check(gt.hooks(GP_GATE_WORK) >= w0 + 4,
		  "closed: cudaMalloc, cudaFree, cuMemAlloc_v2, cuMemFree_v2 passed the hook as work "
		  "(%lu)", gt.hooks(GP_GATE_WORK) - w0);

	/* a stream with work and an event that stays pending (manual events) */
	gt.close(0);
	standin_set_manual_events(1);
	ok(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	ok(cuEventCreate(&ev, 0), "cuEventCreate");
	ok(cuEventRecord(ev, s), "cuEventRecord");
	gt.close(1);
	e2e_check(r.gpa_event_query(ev) == CUDA_ERROR_NOT_READY &&
			  r.gpa_stream_query(s) == CUDA_ERROR_NOT_READY,
		  "closed, not suspended: the queries reach the driver (not ready)");

	/* suspended (played): queries answered without the driver */
	gt.suspend(1);
	standin_get(0, &c0);
	q0 = gt.hooks(GP_GATE_QUERY);
	e2e_check(r.gpa_event_query(ev) == CUDA_SUCCESS && r.gpa_stream_query(s) == CUDA_SUCCESS &&
			  cuEventQuery(ev) == CUDA_SUCCESS,
		  "suspended: cuEventQuery and cuStreamQuery answered CUDA_SUCCESS");
	ok(cuMemGetInfo(&fr, &tot), "cuMemGetInfo_v2");
	e2e_check(fr == 12345 && tot == 67890, "suspended: cuMemGetInfo_v2 answered by the owner "
					       "(%zu of %zu)", fr, tot);
	fr = tot = 0;
	e2e_cuda(cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo");
	e2e_check(fr == 12345 && tot == 67890, "suspended: cudaMemGetInfo answered by the owner "
					       "(%zu of %zu)", fr, tot);
	standin_get(0, &c1);
	e2e_check(c1.event_queries == c0.event_queries && c1.stream_queries == c0.stream_queries &&
			  c1.mem_get_info == c0.mem_get_info,
		  "suspended: no query reached the driver");
	e2e_check(gt.hooks(GP_GATE_QUERY) == q0 + 2, "the memory queries passed the hook as "
							  "queries (%lu)",
		  gt.hooks(GP_GATE_QUERY) - q0);
	gt.suspend(0);
	gt.close(0);

	standin_complete_events();
	ok(cuEventDestroy(ev), "cuEventDestroy");
	ok(cuStreamDestroy(s), "cuStreamDestroy");
	ok(cuMemGetInfo(&fr, &tot), "cuMemGetInfo_v2");
	e2e_check(tot != 67890, "open again: cuMemGetInfo_v2 is the driver's (%zu bytes)", tot);
	return 0;
}
