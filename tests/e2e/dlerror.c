/* dlerror.c — proves that the shim's own symbol lookups leave no error for the program: after the
 * first CUDA call (the shim looks up the real runtime, trying libcudart.so.12 where .13 is
 * loaded) the program's dlerror() is NULL, and a lookup of the program's own still reports its
 * own failure. Otherwise dlerror() would return "libcudart.so.12: cannot open shared object
 * file", and each thread of ours whose last lookup failed would keep glibc's record of it (a
 * leak for LeakSanitizer when the control thread exits). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "e2e.h"

int main(void)
{
	const char *err;
	void *p = NULL;

	e2e_start("e2e_dlerror");
	e2e_cuda(cudaMalloc(&p, 4096), "cudaMalloc");
	err = dlerror();
	e2e_check(err == NULL, "after the first cudaMalloc the program's dlerror() is NULL (got: %s)",
		  err ? err : "NULL");
	e2e_cuda(cudaFree(p), "cudaFree");
	e2e_check(dlsym(RTLD_DEFAULT, "e2e_no_such_symbol_here") == NULL, "a missing symbol is missing");
	e2e_cuda(cudaMalloc(&p, 4096), "cudaMalloc");
	err = dlerror();
	e2e_check(err != NULL && strstr(err, "e2e_no_such_symbol_here") != NULL,
		  "the program's own failed lookup is still what dlerror() reports (got: %s)",
		  err ? err : "NULL");
	e2e_cuda(cudaFree(p), "cudaFree");
	printf("PASS e2e_dlerror\n");
	return 0;
}
