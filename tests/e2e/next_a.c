/* next_a.c — a library that defines e2e_next_sym and looks up the *next* definition of it with
 * dlsym(RTLD_NEXT), as a wrapping library does (for e2e_dlsym). */
#define _GNU_SOURCE
#include <dlfcn.h>

char e2e_next_sym(void)
{
	return 'a';
}

/* Not a tail call: RTLD_NEXT is relative to the library the call comes from, which must be this
 * one, not the program that called it. */
void *e2e_a_lookup_next(void)
{
	void *volatile p = dlsym(RTLD_NEXT, "e2e_next_sym");

	return p;
}
