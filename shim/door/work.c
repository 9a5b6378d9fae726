/* work.c — the driver entry points of the calls that queue GPU work on a stream (table.h's
 * GP_DRIVER_WORK), one per row, all alike and made from the row: the real function must exist
 * (else the driver's "not found"), the real call with the caller's arguments, and after it
 * succeeded the shim is told where the work went. Never anything before the real call, and
 * never a second look at the arguments: what the driver answered is what the caller gets. */
#include "driver.h"
#include "gate.h"
#include "lookup.h"
#include "shim.h"

#define WORK_ENTRY_POINT(cls, name, base, version, flavour, params, args, stream)                 \
	GP_EXPORT CUresult cu##name params                                                        \
	{                                                                                         \
		CUresult rc;                                                                      \
                                                                                                  \
		(void)GP_GATE(GP_GATE_WORK);                                                      \
		if (GP_MISSING(name))                                                             \
			return CUDA_ERROR_NOT_FOUND;                                              \
		rc = gp_cu.name args;                                                             \
		if (rc == CUDA_SUCCESS)                                                           \
			gp_shim_work(stream, GP_CU_PER_THREAD_##flavour);                         \
		return rc;                                                                        \
	}

GP_DRIVER_WORK(WORK_ENTRY_POINT)
