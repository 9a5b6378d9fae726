/* elfsym.h — functions of the main program found in its full symbol table (.symtab, which a
 * program keeps unless it was stripped), for code that no dynamic binding reaches (door/static.c).
 * Reads the program's file (by AT_EXECFN, else /proc/self/exe) and maps nothing of it writable;
 * an address is given only where the program's code in memory is what its file says it is. */
#ifndef GPUPOOL_DOOR_ELFSYM_H
#define GPUPOOL_DOOR_ELFSYM_H

#include <stddef.h>
#include <stdint.h>

struct gp_elf_fn {
	const char *name; /* the symbol's exact name */
	void *addr;       /* out: where it runs, NULL when not found or not as in the file */
	size_t size;      /* out: bytes, its symbol's size */
};

/* Looks every name up (at most 8); *marked is 1 when some symbol's name begins with one of
 * `marks` (a list ending in NULL). 0, or -1 when the program's file cannot be read or has no
 * .symtab (then every addr is NULL). */
int gp_elf_main_functions(struct gp_elf_fn *fns, size_t n, const char *const *marks,
			  int *marked);

/* Whether the main program may import the function `name` (its name is among the program's
 * dynamic strings, read in memory: no system call); 1 when that cannot be read. A cheap test
 * before gp_elf_main_functions, which reads the program's file. */
int gp_elf_main_may_import(const char *name);

#endif
