/* real.c — finding the real runtime's entry points, once, into one typed table.
 * Never loads a runtime itself: it only looks at what the program already has. */
#define _GNU_SOURCE
#include "real.h"
#include "lookup.h"
#include "log.h"
#include "state.h" /* gp_shim.real */

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

struct gp_real gp_real;

void gp_dl_forget_error(void)
{
	(void)dlerror(); /* returns the message, marks it returned */
	(void)dlerror(); /* frees the record */
}

static void *find(const char *name)
{
	static const char *const sonames[] = { "libcudart.so.13", "libcudart.so.12" };
	void *p = gp_real_dlsym(RTLD_NEXT, name); /* relative to this library: what comes after it */

	if (p != NULL && !gp_is_ours(p))
		return p;
	for (size_t i = 0; i < sizeof(sonames) / sizeof(sonames[0]); i++) {
		void *h = dlopen(sonames[i], RTLD_LAZY | RTLD_NOLOAD);
		if (h == NULL)
			continue;
		p = gp_real_dlsym(h, name);
		dlclose(h); /* NOLOAD took a reference; the library stays loaded by its owner */
		if (p != NULL && !gp_is_ours(p))
			return p;
	}
	gp_dl_forget_error();
	return NULL;
}

/* dlsym returns an object pointer; copying its bytes is the portable way to a function pointer. */
#define RESOLVE(field, name)                                                                \
	do {                                                                                \
		void *sym_ = find(name);                                                    \
		memcpy(&gp_real.field, &sym_, sizeof(sym_));                                \
	} while (0)

static void resolve(void)
{
	RESOLVE(Malloc, "cudaMalloc");
	RESOLVE(Free, "cudaFree");
	RESOLVE(GetDevice, "cudaGetDevice");
	RESOLVE(SetDevice, "cudaSetDevice");
	RESOLVE(GetDeviceCount, "cudaGetDeviceCount");
	RESOLVE(GetLastError, "cudaGetLastError");
	RESOLVE(MemGetInfo, "cudaMemGetInfo");
	RESOLVE(DeviceSynchronize, "cudaDeviceSynchronize");
	RESOLVE(IpcGetMemHandle, "cudaIpcGetMemHandle");
	gp_shim.real.resolved_ok = gp_real.Malloc != NULL && gp_real.Free != NULL &&
				   gp_real.GetDevice != NULL && gp_real.SetDevice != NULL &&
				   gp_real.GetLastError != NULL;
	if (!gp_shim.real.resolved_ok)
		memset(&gp_real, 0, sizeof(gp_real)); /* a runtime is all there or not at all */
}

int gp_real_resolve(void)
{
	pthread_once(&gp_shim.real.once, resolve);
	return gp_shim.real.resolved_ok ? 0 : -1;
}
