/* dlsymhook.c — another preloaded library that hooks dlsym, as profilers and vGPU tools do: it
 * counts and forwards every call to the next dlsym with a plain call. gpupool must work before
 * and after it in LD_PRELOAD (e2e_drvstatic_hook_*). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static _Atomic long calls;

void *dlsym(void *handle, const char *name)
{
	static void *(*next)(void *, const char *);

	if (next == NULL) {
		void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (p == NULL)
			p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		memcpy(&next, &p, sizeof(p));
	}
	atomic_fetch_add(&calls, 1);
	return next(handle, name);
}

__attribute__((destructor)) static void report(void)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "dlsymhook: %ld calls\n", (long)atomic_load(&calls));
	ssize_t w = write(2, line, (size_t)n);
	(void)w;
}
