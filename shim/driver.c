/* driver.c — the driver API's entry points that shim/fence.c uses, from the libcuda.so.1 already
 * in the process (RTLD_NOLOAD: the runtime loaded it; a process with a stand-in runtime and no
 * driver has none, and the fences use the runtime's calls). */
#define _GNU_SOURCE
#include "driver.h"
#include "log.h"
#include "real.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

struct gp_drv gp_drv;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int resolved_ok;

#define RESOLVE(h, field, name)                                                             \
	do {                                                                                \
		void *sym_ = dlsym(h, name);                                                \
		memcpy(&gp_drv.field, &sym_, sizeof(sym_));                                 \
	} while (0)

static void resolve(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);

	if (h == NULL) {
		gp_dl_forget_error();
		gp_log(GP_LOG_DEBUG, "libcuda.so.1 is not loaded: the fences use the runtime's calls");
		return;
	}
	RESOLVE(h, CtxGetCurrent, "cuCtxGetCurrent");
	RESOLVE(h, CtxGetDevice, "cuCtxGetDevice");
	RESOLVE(h, StreamQuery, "cuStreamQuery");
	RESOLVE(h, EventRecord, "cuEventRecord");
	RESOLVE(h, EventQuery, "cuEventQuery");
	dlclose(h); /* NOLOAD took a reference; the library stays loaded by the runtime */
	resolved_ok = gp_drv.CtxGetCurrent != NULL && gp_drv.CtxGetDevice != NULL &&
		      gp_drv.StreamQuery != NULL && gp_drv.EventRecord != NULL &&
		      gp_drv.EventQuery != NULL;
	if (!resolved_ok) {
		gp_dl_forget_error();
		memset(&gp_drv, 0, sizeof(gp_drv));
	}
	gp_log(GP_LOG_DEBUG, "driver API for the fences: %s", resolved_ok ? "yes" : "no");
}

int gp_drv_resolve(void)
{
	pthread_once(&once, resolve);
	return resolved_ok ? 0 : -1;
}
