/* ckpt.h — what suspend and resume need from outside the gpupool command: the driver's
 * checkpoint API and NVML's memory figures, both loaded at run time with dlopen (the command
 * links neither and never creates a CUDA context), and the /proc figures of a process. */
#ifndef GPUPOOL_CLI_CKPT_H
#define GPUPOOL_CLI_CKPT_H

#include <stddef.h>
#include <stdint.h>

/* The driver's CUprocessState. */
enum gp_ckpt_state {
	GP_CKPT_RUNNING = 0,
	GP_CKPT_LOCKED = 1,
	GP_CKPT_CHECKPOINTED = 2,
	GP_CKPT_FAILED = 3,
};

/* The CUresult values the command tells apart. */
#define GP_CKPT_SUCCESS 0
#define GP_CKPT_NOT_READY 600
#define GP_CKPT_TIMEOUT 909

struct gp_ckpt;

/* Load libcuda.so.1 and initialise it (cuInit), and NVML if present. Returns the enum
 * gp_cli_exit code: GP_CLI_OK, or GP_CLI_UNSUPPORTED with the reason in `why` (no driver, no
 * device, or a driver without the checkpoint API: it names the version needed). */
int gp_ckpt_open(struct gp_ckpt **out, char *why, size_t len);
void gp_ckpt_close(struct gp_ckpt *c);

/* The driver's calls, each returning its CUresult. timeout_ms 0: wait for ever. */
int gp_ckpt_state(struct gp_ckpt *c, long pid, int *state);
int gp_ckpt_lock(struct gp_ckpt *c, long pid, unsigned timeout_ms);
int gp_ckpt_checkpoint(struct gp_ckpt *c, long pid);
int gp_ckpt_restore(struct gp_ckpt *c, long pid);
int gp_ckpt_unlock(struct gp_ckpt *c, long pid);

/* "CUDA_ERROR_NOT_READY (600)" for a CUresult, into buf. */
const char *gp_ckpt_error(struct gp_ckpt *c, int rc, char *buf, size_t len);
/* "running", "locked", "checkpointed", "failed". */
const char *gp_ckpt_state_name(int state);

/* NVML, when it is there (else -1): the device memory process `pid` holds on every device, and
 * the memory in use on every device, by all processes (bytes). A process NVML does not list
 * (another pid namespace, or none held) counts 0 while NVML answers. */
int64_t gp_ckpt_process_device_bytes(struct gp_ckpt *c, long pid);
int64_t gp_ckpt_device_used_bytes(struct gp_ckpt *c);

/* /proc: the resident host memory of `pid` (bytes, -1 unknown); the host memory available
 * (MemAvailable, bytes, -1 unknown); 1 if `pid` has the CUDA driver (libcuda) mapped. */
int64_t gp_ckpt_resident_bytes(long pid);
int64_t gp_ckpt_host_available_bytes(void);
int gp_ckpt_has_driver(long pid);

#endif
