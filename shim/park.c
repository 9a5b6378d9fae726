/* park.c — the driver's checkpoint API on this process's own pid (park.h). The table's rows
 * (door/table.h, GP_DRIVER_OWN_12080) are found like every other driver function; nothing here
 * decides anything: suspend.c does. */
#include "park.h"
#include "door/lookup.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if CUDA_VERSION >= 12080
int gp_park_available(void)
{
	gp_cu_resolve();
	return gp_cu.CheckpointProcessLock != NULL && gp_cu.CheckpointProcessCheckpoint != NULL &&
	       gp_cu.CheckpointProcessRestore != NULL && gp_cu.CheckpointProcessUnlock != NULL &&
	       gp_cu.CheckpointProcessGetState != NULL;
}

int gp_park_lock(unsigned timeout_ms)
{
	CUcheckpointLockArgs args;

	memset(&args, 0, sizeof(args));
	args.timeoutMs = timeout_ms;
	return (int)gp_cu.CheckpointProcessLock((int)getpid(), &args);
}

int gp_park_checkpoint(void)
{
	return (int)gp_cu.CheckpointProcessCheckpoint((int)getpid(), NULL);
}

int gp_park_restore(void)
{
	return (int)gp_cu.CheckpointProcessRestore((int)getpid(), NULL);
}

int gp_park_unlock(void)
{
	return (int)gp_cu.CheckpointProcessUnlock((int)getpid(), NULL);
}

int gp_park_state(int *state)
{
	CUprocessState s = CU_PROCESS_STATE_RUNNING;
	CUresult rc = gp_cu.CheckpointProcessGetState((int)getpid(), &s);

	*state = (int)s;
	return (int)rc;
}
#else
int gp_park_available(void)
{
	return 0;
}

int gp_park_lock(unsigned timeout_ms)
{
	(void)timeout_ms;
	return (int)CUDA_ERROR_NOT_SUPPORTED;
}

int gp_park_checkpoint(void)
{
	return (int)CUDA_ERROR_NOT_SUPPORTED;
}

int gp_park_restore(void)
{
	return (int)CUDA_ERROR_NOT_SUPPORTED;
}

int gp_park_unlock(void)
{
	return (int)CUDA_ERROR_NOT_SUPPORTED;
}

int gp_park_state(int *state)
{
	*state = GP_PARK_RUNNING;
	return (int)CUDA_ERROR_NOT_SUPPORTED;
}
#endif

const char *gp_park_error(int rc, char *buf, unsigned len)
{
	switch (rc) {
	case CUDA_SUCCESS:
		return "CUDA_SUCCESS";
	case CUDA_ERROR_NOT_READY:
		return "CUDA_ERROR_NOT_READY";
	case CUDA_ERROR_TIMEOUT:
		return "CUDA_ERROR_TIMEOUT";
	case CUDA_ERROR_ILLEGAL_STATE:
		return "CUDA_ERROR_ILLEGAL_STATE";
	case CUDA_ERROR_NOT_SUPPORTED:
		return "CUDA_ERROR_NOT_SUPPORTED";
	case CUDA_ERROR_OUT_OF_MEMORY:
		return "CUDA_ERROR_OUT_OF_MEMORY";
	case CUDA_ERROR_INVALID_VALUE:
		return "CUDA_ERROR_INVALID_VALUE";
	default:
		snprintf(buf, len, "CUresult %d", rc);
		return buf;
	}
}
