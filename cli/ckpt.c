/* ckpt.c — the driver's checkpoint API (cuCheckpointProcess*) and NVML's memory figures, found at
 * run time in libcuda.so.1 and libnvidia-ml.so.1, for suspend and resume; and the /proc figures
 * of a process. It never creates a CUDA context (cuInit only) and never fails for want of NVML:
 * the figures it would give are then unknown. */
#define _GNU_SOURCE
#include "ckpt.h"
#include "cli.h"
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The argument blocks of the checkpoint calls, as cuda.h lays them out: all optional (NULL)
 * but the lock's, which carries the timeout; the reserved words must be zero. */
struct lock_args {
	unsigned timeout_ms;
	unsigned reserved0;
	uint64_t reserved1[7];
};

typedef int (*pid_args_fn)(int pid, void *args);

struct gp_ckpt {
	void *cuda;
	struct gp_nvml *nvml; /* NULL: NVML is not here */
	int (*init)(unsigned flags);
	int (*driver_version)(int *v);
	int (*error_name)(int rc, const char **name);
	int (*get_state)(int pid, int *state);
	pid_args_fn lock, checkpoint, restore, unlock;
};

/* Store the address of `name` in `lib` (NULL if absent) into the function pointer at `fn`: ISO C
 * has no cast from dlsym's object pointer to a function pointer, a copy of the bytes is fine. */
static void sym(void *lib, const char *name, void *fn)
{
	void *p = lib != NULL ? dlsym(lib, name) : NULL;

	memcpy(fn, &p, sizeof(p));
}

int gp_ckpt_open(struct gp_ckpt **out, char *why, size_t len)
{
	struct gp_ckpt *c = calloc(1, sizeof(*c));
	int rc, version = 0;

	*out = NULL;
	if (c == NULL) {
		snprintf(why, len, "out of memory");
		return GP_CLI_ERROR;
	}
	c->cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (c->cuda == NULL) {
		snprintf(why, len, "no CUDA driver here: cannot load libcuda.so.1 (%s)", dlerror());
		goto unsupported;
	}
	sym(c->cuda, "cuInit", &c->init);
	sym(c->cuda, "cuDriverGetVersion", &c->driver_version);
	sym(c->cuda, "cuGetErrorName", &c->error_name);
	sym(c->cuda, "cuCheckpointProcessGetState", &c->get_state);
	sym(c->cuda, "cuCheckpointProcessLock", &c->lock);
	sym(c->cuda, "cuCheckpointProcessCheckpoint", &c->checkpoint);
	sym(c->cuda, "cuCheckpointProcessRestore", &c->restore);
	sym(c->cuda, "cuCheckpointProcessUnlock", &c->unlock);
	if (c->driver_version != NULL)
		c->driver_version(&version);
	if (c->init == NULL || c->get_state == NULL || c->lock == NULL || c->checkpoint == NULL ||
	    c->restore == NULL || c->unlock == NULL) {
		snprintf(why, len,
			 "this CUDA driver (CUDA %d.%d) has no checkpoint API: suspend and resume "
			 "need NVIDIA driver 570 or later (CUDA 12.8)",
			 version / 1000, version % 1000 / 10);
		goto unsupported;
	}
	rc = c->init(0);
	if (rc != 0) {
		char err[64];
		snprintf(why, len, "the CUDA driver cannot start here (cuInit: %s)",
			 gp_ckpt_error(c, rc, err, sizeof(err)));
		goto unsupported;
	}
	c->nvml = gp_nvml_open(why, len); /* none: its figures are unknown, not an error */
	why[0] = '\0';
	*out = c;
	return GP_CLI_OK;
unsupported:
	gp_ckpt_close(c);
	return GP_CLI_UNSUPPORTED;
}

void gp_ckpt_close(struct gp_ckpt *c)
{
	if (c == NULL)
		return;
	gp_nvml_close(c->nvml);
	/* libcuda stays loaded: the driver does not expect to be unloaded */
	free(c);
}

int gp_ckpt_state(struct gp_ckpt *c, long pid, int *state)
{
	*state = -1;
	return c->get_state((int)pid, state);
}

int gp_ckpt_lock(struct gp_ckpt *c, long pid, unsigned timeout_ms)
{
	struct lock_args args = { .timeout_ms = timeout_ms };

	return c->lock((int)pid, &args);
}

int gp_ckpt_checkpoint(struct gp_ckpt *c, long pid)
{
	return c->checkpoint((int)pid, NULL);
}

int gp_ckpt_restore(struct gp_ckpt *c, long pid)
{
	return c->restore((int)pid, NULL);
}

int gp_ckpt_unlock(struct gp_ckpt *c, long pid)
{
	return c->unlock((int)pid, NULL);
}

const char *gp_ckpt_error(struct gp_ckpt *c, int rc, char *buf, size_t len)
{
	const char *name = NULL;

	if (c != NULL && c->error_name != NULL && c->error_name(rc, &name) != 0)
		name = NULL;
	snprintf(buf, len, "%s (%d)", name != NULL ? name : "CUDA error", rc);
	return buf;
}

const char *gp_ckpt_state_name(int state)
{
	static const char *const names[] = { "running", "locked", "checkpointed", "failed" };

	return state >= 0 && state < 4 ? names[state] : "unknown";
}

/* NVML's figure summed over devices: the memory process `pid` holds, or (pid < 0) the memory in
 * use by all; -1 when NVML is not there or fails. */
static int64_t over_devices(struct gp_ckpt *c, long pid)
{
	unsigned n = 0;
	int64_t total = 0;

	if (c == NULL || c->nvml == NULL || gp_nvml_count(c->nvml, &n) != GP_NVML_OK)
		return -1;
	for (unsigned i = 0; i < n; i++) {
		struct gp_nvml_device d;
		uint64_t used;
		int rc;

		if (pid < 0) {
			if (gp_nvml_device(c->nvml, i, &d) != GP_NVML_OK)
				return -1;
			total += (int64_t)d.used_bytes;
			continue;
		}
		rc = gp_nvml_process_used(c->nvml, i, pid, &used);
		if (rc == GP_NVML_OK && used != GP_NVML_UNKNOWN)
			total += (int64_t)used;
		else if (rc != GP_NVML_OK && rc != GP_NVML_NOT_FOUND)
			return -1;
	}
	return total;
}

int64_t gp_ckpt_process_device_bytes(struct gp_ckpt *c, long pid)
{
	return over_devices(c, pid);
}

int64_t gp_ckpt_device_used_bytes(struct gp_ckpt *c)
{
	return over_devices(c, -1);
}

/* The value of the line starting with `key` in a /proc file of "key: N kB" lines, in bytes. */
static int64_t proc_kib(const char *path, const char *key)
{
	FILE *f = fopen(path, "re");
	char line[256];
	int64_t v = -1;
	size_t klen = strlen(key);

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, key, klen) == 0) {
			v = strtoll(line + klen, NULL, 10) * 1024;
			break;
		}
	}
	fclose(f);
	return v;
}

int64_t gp_ckpt_resident_bytes(long pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	return proc_kib(path, "VmRSS:");
}

int64_t gp_ckpt_host_available_bytes(void)
{
	return proc_kib("/proc/meminfo", "MemAvailable:");
}

int gp_ckpt_has_driver(long pid)
{
	char path[64], line[512];
	FILE *f;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
	f = fopen(path, "re");
	if (f == NULL)
		return 0;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, "/libcuda.so") != NULL;
	fclose(f);
	return found;
}
