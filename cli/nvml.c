/* nvml.c — NVML's memory figures for the gpupool command, found at run time in
 * libnvidia-ml.so.1 (dlopen, once per gp_nvml_open): a device's total and used memory, and the
 * memory each process holds on it (compute and graphics lists). Never linked into the preloaded
 * library, never a reason for the command to fail: without NVML the caller is told why. */
#define _GNU_SOURCE
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* nvml.h is not part of the CUDA toolkit's headers everywhere (it comes with the driver's
 * development files), so the few types used here are declared as NVML lays them out:
 * nvmlMemory_t (v1), nvmlProcessInfo_v2_t (the struct the _v3 process calls fill: pid, then
 * usedGpuMemory at offset 8, then the MIG instance ids; 24 bytes), nvmlDevice_t an opaque
 * pointer, nvmlReturn_t an int. */
struct nvml_memory {
	unsigned long long total, free, used;
};
struct nvml_process {
	unsigned pid;
	unsigned long long used; /* NVML_VALUE_NOT_AVAILABLE (~0) when unknown */
	unsigned gpu_instance, compute_instance;
};
_Static_assert(sizeof(struct nvml_process) == 24, "nvmlProcessInfo_v2_t is 24 bytes");
_Static_assert(sizeof(struct nvml_memory) == 24, "nvmlMemory_t is 24 bytes");
typedef void *nvml_device;
typedef int (*nvml_list_fn)(nvml_device dev, unsigned *count, struct nvml_process *p);

#define NVML_NOT_AVAILABLE (~0ull)
#define NVML_UUID_LEN 96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */

struct gp_nvml {
	void *lib;
	int (*shutdown)(void);
	const char *(*error_string)(int rc); /* optional */
	int (*count)(unsigned *n);
	int (*by_index)(unsigned i, nvml_device *dev);
	int (*by_uuid)(const char *uuid, nvml_device *dev);
	int (*uuid)(nvml_device dev, char *buf, unsigned len);
	int (*memory)(nvml_device dev, struct nvml_memory *m);
	nvml_list_fn compute, graphics; /* the _v3 process lists */
	char error[48];                 /* gp_nvml_error's text for an unnamed code */
};

/* Store the address of `name` in `lib` (NULL if absent) into the function pointer at `fn`: ISO C
 * has no cast from dlsym's object pointer to a function pointer, a copy of the bytes is fine. */
static void sym(void *lib, const char *name, void *fn)
{
	void *p = dlsym(lib, name);

	memcpy(fn, &p, sizeof(p));
}

struct gp_nvml *gp_nvml_open(char *why, size_t len)
{
	struct gp_nvml *n = calloc(1, sizeof(*n));
	int (*init)(void) = NULL;
	int rc;

	if (n == NULL) {
		snprintf(why, len, "out of memory");
		return NULL;
	}
	n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (n->lib == NULL) {
		snprintf(why, len, "NVML is not here: cannot load libnvidia-ml.so.1 (%s)", dlerror());
		goto fail;
	}
	sym(n->lib, "nvmlInit_v2", &init);
	sym(n->lib, "nvmlShutdown", &n->shutdown);
	sym(n->lib, "nvmlErrorString", &n->error_string);
	sym(n->lib, "nvmlDeviceGetCount_v2", &n->count);
	sym(n->lib, "nvmlDeviceGetHandleByIndex_v2", &n->by_index);
	sym(n->lib, "nvmlDeviceGetHandleByUUID", &n->by_uuid);
	sym(n->lib, "nvmlDeviceGetUUID", &n->uuid);
	sym(n->lib, "nvmlDeviceGetMemoryInfo", &n->memory);
	sym(n->lib, "nvmlDeviceGetComputeRunningProcesses_v3", &n->compute);
	sym(n->lib, "nvmlDeviceGetGraphicsRunningProcesses_v3", &n->graphics);
	if (init == NULL || n->shutdown == NULL || n->count == NULL || n->by_index == NULL ||
	    n->by_uuid == NULL || n->uuid == NULL || n->memory == NULL || n->compute == NULL ||
	    n->graphics == NULL) {
		snprintf(why, len,
			 "NVML is too old here: libnvidia-ml.so.1 lacks the calls of driver 510 and "
			 "later (nvmlDeviceGetComputeRunningProcesses_v3)");
		goto fail;
	}
	rc = init();
	if (rc != GP_NVML_OK) {
		snprintf(why, len, "NVML cannot start here (nvmlInit: %s)", gp_nvml_error(n, rc));
		goto fail;
	}
	return n;
fail:
	if (n->lib != NULL)
		dlclose(n->lib);
	free(n);
	return NULL;
}

void gp_nvml_close(struct gp_nvml *n)
{
	if (n == NULL)
		return;
	n->shutdown();
	/* libnvidia-ml stays loaded: like the driver, it does not expect to be unloaded */
	free(n);
}

const char *gp_nvml_error(struct gp_nvml *n, int rc)
{
	const char *s = n != NULL && n->error_string != NULL ? n->error_string(rc) : NULL;

	if (s != NULL)
		return s;
	if (n == NULL)
		return "NVML error";
	snprintf(n->error, sizeof(n->error), "NVML error %d", rc);
	return n->error;
}

int gp_nvml_count(struct gp_nvml *n, unsigned *count)
{
	*count = 0;
	return n->count(count);
}

static int fill(struct gp_nvml *n, nvml_device dev, unsigned index, struct gp_nvml_device *out)
{
	struct nvml_memory m;
	int rc;

	memset(out, 0, sizeof(*out));
	out->index = index;
	if (n->uuid(dev, out->uuid, sizeof(out->uuid)) != GP_NVML_OK)
		out->uuid[0] = '\0';
	out->uuid[sizeof(out->uuid) - 1] = '\0';
	rc = n->memory(dev, &m);
	if (rc != GP_NVML_OK)
		return rc;
	out->total_bytes = m.total;
	out->used_bytes = m.used;
	out->free_bytes = m.free;
	return GP_NVML_OK;
}

int gp_nvml_device(struct gp_nvml *n, unsigned index, struct gp_nvml_device *out)
{
	nvml_device dev;
	int rc = n->by_index(index, &dev);

	if (rc != GP_NVML_OK)
		return rc;
	return fill(n, dev, index, out);
}

int gp_nvml_device_by_uuid(struct gp_nvml *n, const char *uuid, struct gp_nvml_device *out)
{
	unsigned count, i;
	int rc = gp_nvml_count(n, &count);

	/* By index, not nvmlDeviceGetHandleByUUID: the caller wants the index too, for the process
	 * lists, and a handle has no way back to it without one more call. */
	if (rc != GP_NVML_OK)
		return rc;
	for (i = 0; i < count; i++) {
		rc = gp_nvml_device(n, i, out);
		if (rc == GP_NVML_OK && strcmp(out->uuid, uuid) == 0)
			return GP_NVML_OK;
	}
	return GP_NVML_NOT_FOUND;
}

/* One of NVML's process lists into a malloc'd array (*list, *k entries): it is asked again with
 * more room while the list grows between the calls. */
static int list(nvml_list_fn fn, nvml_device dev, struct nvml_process **list, unsigned *k)
{
	unsigned room = 32;
	int rc = GP_NVML_INSUFFICIENT_SIZE;

	*list = NULL;
	*k = 0;
	for (int tries = 0; tries < 8 && rc == GP_NVML_INSUFFICIENT_SIZE; tries++) {
		struct nvml_process *p = realloc(*list, room * sizeof(*p));

		if (p == NULL)
			return 2; /* NVML_ERROR_INVALID_ARGUMENT is the nearest: never expected */
		*list = p;
		*k = room;
		rc = fn(dev, k, p);
		if (rc == GP_NVML_INSUFFICIENT_SIZE)
			room = *k > room ? *k + 8 : room * 2;
	}
	if (rc != GP_NVML_OK)
		*k = 0;
	return rc;
}

/* Add one process to out[] (*count entries), once per pid, keeping the larger figure. */
static void add_process(struct gp_nvml_process *out, size_t max, size_t *count,
			const struct nvml_process *p)
{
	uint64_t used = p->used == NVML_NOT_AVAILABLE ? GP_NVML_UNKNOWN : p->used;
	size_t j, seen = *count < max ? *count : max;

	for (j = 0; j < seen; j++) {
		if (out[j].pid != (long)p->pid)
			continue;
		if (out[j].used_bytes == GP_NVML_UNKNOWN ||
		    (used != GP_NVML_UNKNOWN && used > out[j].used_bytes))
			out[j].used_bytes = used;
		return;
	}
	if (*count < max) {
		out[*count].pid = (long)p->pid;
		out[*count].used_bytes = used;
	}
	(*count)++;
}

int gp_nvml_processes(struct gp_nvml *n, unsigned index, struct gp_nvml_process *out, size_t max,
		      size_t *count)
{
	struct nvml_process *c = NULL, *g = NULL;
	unsigned nc = 0, ng = 0, i;
	nvml_device dev;
	int rc;

	*count = 0;
	rc = n->by_index(index, &dev);
	if (rc != GP_NVML_OK)
		goto out;
	rc = list(n->compute, dev, &c, &nc);
	if (rc != GP_NVML_OK)
		goto out;
	/* A device without graphics (most data-centre cards) may answer "not supported". */
	if (list(n->graphics, dev, &g, &ng) != GP_NVML_OK)
		ng = 0;
	for (i = 0; i < nc; i++)
		add_process(out, max, count, &c[i]);
	for (i = 0; i < ng; i++)
		add_process(out, max, count, &g[i]);
out:
	free(c);
	free(g);
	return rc;
}

int gp_nvml_process_used(struct gp_nvml *n, unsigned index, long pid, uint64_t *bytes)
{
	struct gp_nvml_process *procs = NULL;
	size_t room = 64, count = 0, i;
	int rc;

	*bytes = 0;
	for (;;) {
		struct gp_nvml_process *p = realloc(procs, room * sizeof(*p));

		if (p == NULL) {
			rc = 2; /* NVML_ERROR_INVALID_ARGUMENT is the nearest: never expected */
			goto out;
		}
		procs = p;
		rc = gp_nvml_processes(n, index, procs, room, &count);
		if (rc != GP_NVML_OK || count <= room)
			break;
		room = count + 8;
	}
	if (rc != GP_NVML_OK)
		goto out;
	rc = GP_NVML_NOT_FOUND;
	for (i = 0; i < count; i++) {
		if (procs[i].pid == pid) {
			*bytes = procs[i].used_bytes;
			rc = GP_NVML_OK;
			break;
		}
	}
out:
	free(procs);
	return rc;
}
