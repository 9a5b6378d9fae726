/* dlsymhook.c — another preloaded library that hooks dlsym, as profilers and vGPU tools do: it
 * counts the driver names it is asked for and forwards every call to libc's dlsym (found with
 * dlvsym, as such tools do). gpupool must work beside it in LD_PRELOAD (e2e_drvstatic_hook_*):
 * after it, gpupool's own hook must still pass the driver's names through it, which this library
 * checks at exit when E2E_HOOK_MUST_SEE_DRIVER=1 (exit status 1 if it saw none). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long calls, driver; /* __atomic: counted in dlsym, uninstrumented */

/* Uninstrumented: a sanitizer's runtime calls dlsym while it initialises, before its own state
 * exists. */
__attribute__((no_sanitize("address", "thread", "undefined"))) void *dlsym(void *handle,
									 const char *name)
{
	static void *(*next)(void *, const char *);

	if (next == NULL) {
		union {
			void *p;
			void *(*fn)(void *, const char *);
		} u;
		u.p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (u.p == NULL)
			u.p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		next = u.fn;
	}
	__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
	if (name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z')
		__atomic_fetch_add(&driver, 1, __ATOMIC_RELAXED);
	return next(handle, name);
}

__attribute__((destructor)) static void report(void)
{
	const char *must = getenv("E2E_HOOK_MUST_SEE_DRIVER");
	char line[96];
	int n = snprintf(line, sizeof(line), "dlsymhook: %ld calls, %ld of driver names\n",
			 __atomic_load_n(&calls, __ATOMIC_RELAXED),
			 __atomic_load_n(&driver, __ATOMIC_RELAXED));
	ssize_t w = write(2, line, (size_t)n);

	(void)w;
	if (must != NULL && strcmp(must, "1") == 0 && __atomic_load_n(&driver, __ATOMIC_RELAXED) == 0) {
		w = write(2, "FAIL dlsymhook: no driver name reached this hook\n", 50);
		_exit(1);
	}
}
