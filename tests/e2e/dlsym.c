/* dlsym.c — gpupool's own dlsym leaves every other lookup exactly as it was: a library's
 * dlsym(RTLD_NEXT) still finds the definition after *that library* (not after gpupool), twice
 * in a row; RTLD_DEFAULT finds the first definition; a missing name is NULL with dlerror() set;
 * names that only start like the driver's (cublas..., curl...) are not the driver's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "e2e.h"

char e2e_next_sym(void); /* next_a.c, next_b.c */
void *e2e_a_lookup_next(void);

int main(void)
{
	char (*fn)(void);
	void *p, *q;

	e2e_start("e2e_dlsym");
	p = e2e_a_lookup_next();
	q = e2e_a_lookup_next();
	memcpy(&fn, &p, sizeof(p));
	e2e_check(p != NULL && fn() == 'b', "dlsym(RTLD_NEXT) from library a finds library b's "
		  "definition, not a's (%c)", p ? fn() : '?');
	e2e_check(q == p, "a second dlsym(RTLD_NEXT) finds the same");
	p = dlsym(RTLD_DEFAULT, "e2e_next_sym");
	memcpy(&fn, &p, sizeof(p));
	e2e_check(p != NULL && fn() == 'a', "dlsym(RTLD_DEFAULT) finds the first definition (%c)",
		  p ? fn() : '?');
	(void)dlerror();
	p = dlsym(RTLD_DEFAULT, "e2e_no_such_symbol");
	e2e_check(p == NULL && dlerror() != NULL, "a missing name: NULL, and dlerror() says why");
	p = dlsym(RTLD_DEFAULT, "cuNoSuchDriverCall");
	e2e_check(p == NULL && dlerror() != NULL, "a missing driver name: NULL, and dlerror() says why");
	e2e_check(dlsym(RTLD_DEFAULT, "cublasCreate_v2") == NULL &&
		  dlsym(RTLD_DEFAULT, "curl_easy_init") == NULL, "cublas/curl names pass untouched");
	return 0;
}
