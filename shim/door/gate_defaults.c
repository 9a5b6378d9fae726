/* gate_defaults.c — TEMPORARY, until branch g (the gate's stubs) is merged: delete this file
 * then. The gate word and weak stand-ins for what branch g writes (door/gate.h): the kind of a
 * function by its name, no answers, and no stubs (cuGetProcAddress and dlsym hand out the real
 * functions, as before), so that only our own entry points with GP_GATE pass the gate here.
 * suspend.c owns the gate and writes the strong gp_gate_pass and gp_gate_hook. */
#include "gate.h"

#include <string.h>

_Atomic unsigned char gp_gate_closed;

/* Functions that only ask: not activity. */
__attribute__((weak)) enum gp_gate_kind gp_gate_kind_of(const char *name)
{
	static const char *const queries[] = {
		"cuEventQuery", "cuStreamQuery", "cuMemGetInfo", "cuPointerGetAttribute",
		"cuPointerGetAttributes", "cuDeviceGetAttribute", "cuCtxGetCurrent",
		"cuCtxGetDevice", "cuDriverGetVersion", "cuMemGetAddressRange",
	};

	for (size_t i = 0; name != NULL && i < sizeof(queries) / sizeof(queries[0]); i++)
		if (strncmp(name, queries[i], strlen(queries[i])) == 0)
			return GP_GATE_QUERY;
	return GP_GATE_WORK;
}

__attribute__((weak)) void *gp_gate_answer_of(const char *name)
{
	(void)name;
	return NULL;
}

__attribute__((weak)) void *gp_gate_stub(const char *name, void *real)
{
	(void)name;
	return real;
}
