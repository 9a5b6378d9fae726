/* park.h — the driver's checkpoint API (cuCheckpointProcess*, CUDA 12.8, driver 570) called on
 * this process's own pid, for auto-suspend (suspend.c): lock, checkpoint, restore, unlock. A
 * driver without it, or headers older than 12.8, make gp_park_available() 0. Each call returns
 * the driver's CUresult. Never called while a pool lock is held. */
#ifndef GPUPOOL_SHIM_PARK_H
#define GPUPOOL_SHIM_PARK_H

/* The driver's CUprocessState, whatever the headers. */
enum gp_park_state {
	GP_PARK_RUNNING = 0,
	GP_PARK_LOCKED = 1,
	GP_PARK_CHECKPOINTED = 2,
	GP_PARK_FAILED = 3,
};

/* 1 when the driver has the calls auto-suspend makes. */
int gp_park_available(void);
/* Lock: every later CUDA call of the process waits in the driver; queued work completes first.
 * timeout_ms 0 waits for ever. */
int gp_park_lock(unsigned timeout_ms);
int gp_park_checkpoint(void);
int gp_park_restore(void);
int gp_park_unlock(void);
/* The process's state (enum gp_park_state) into *state. */
int gp_park_state(int *state);
/* "CUDA_ERROR_NOT_READY", or the number, for messages. */
const char *gp_park_error(int rc, char *buf, unsigned len);

#endif
