/* nvml.h — NVML (libnvidia-ml.so.1), loaded at run time by the gpupool command alone: each
 * device's memory (total, used) and what each process holds on it, by NVML index or by UUID (the
 * live view names a device by its UUID in NVML's own format). The preloaded library never loads
 * it; the command never fails for want of it: gp_nvml_open says why it is not there. */
#ifndef GPUPOOL_CLI_NVML_H
#define GPUPOOL_CLI_NVML_H

#include <stddef.h>
#include <stdint.h>

#define GP_NVML_UUID_MAX 96        /* NVML_DEVICE_UUID_V2_BUFFER_SIZE, with the NUL */
#define GP_NVML_UNKNOWN UINT64_MAX /* a figure NVML could not give (NVML_VALUE_NOT_AVAILABLE) */

/* NVML's return codes the callers tell apart (nvmlReturn_t). */
#define GP_NVML_OK 0
#define GP_NVML_NOT_FOUND 6
#define GP_NVML_INSUFFICIENT_SIZE 7

struct gp_nvml;

struct gp_nvml_device {
	unsigned index;              /* NVML's index (its order need not be CUDA's) */
	char uuid[GP_NVML_UUID_MAX]; /* "GPU-..." ("" if NVML would not say) */
	uint64_t total_bytes;        /* nvmlDeviceGetMemoryInfo: the device's memory, bytes */
	uint64_t used_bytes;         /* in use, by every process and the driver, bytes */
	uint64_t free_bytes;         /* bytes */
};

struct gp_nvml_process {
	long pid;            /* as NVML sees it: the host's pid namespace */
	uint64_t used_bytes; /* bytes the process holds on the device, GP_NVML_UNKNOWN if unknown */
};

/* Load libnvidia-ml.so.1 and initialise it (nvmlInit_v2). NULL when it cannot, with the reason
 * in `why` ("NVML is not here: ..."): the callers show what they can without it. */
struct gp_nvml *gp_nvml_open(char *why, size_t len);
/* nvmlShutdown; the library stays loaded. NULL is fine. */
void gp_nvml_close(struct gp_nvml *n);

/* NVML's error text for a return code ("Not Found"), or "NVML error N". */
const char *gp_nvml_error(struct gp_nvml *n, int rc);

/* The devices NVML knows. Returns an NVML return code (GP_NVML_OK). */
int gp_nvml_count(struct gp_nvml *n, unsigned *count);
/* One device's figures, by NVML index, or by UUID ("GPU-...": GP_NVML_NOT_FOUND when no device
 * has it). Returns an NVML return code. */
int gp_nvml_device(struct gp_nvml *n, unsigned index, struct gp_nvml_device *out);
int gp_nvml_device_by_uuid(struct gp_nvml *n, const char *uuid, struct gp_nvml_device *out);

/* The processes using device `index`, compute and graphics, each pid once (a process in both
 * lists holds one figure: the larger is kept). Up to `max` into out[]; *count says how many there
 * are, which may be more than max. Returns an NVML return code. */
int gp_nvml_processes(struct gp_nvml *n, unsigned index, struct gp_nvml_process *out, size_t max,
		      size_t *count);
/* What process `pid` holds on device `index` (*bytes; GP_NVML_UNKNOWN if NVML lists it without a
 * figure). Returns GP_NVML_OK, GP_NVML_NOT_FOUND when NVML does not list it there (it holds
 * nothing there, or lives in another pid namespace), or another NVML return code. */
int gp_nvml_process_used(struct gp_nvml *n, unsigned index, long pid, uint64_t *bytes);

#endif
