/* patch.h — sending calls of a function in the program's own code to one of ours, for what no
 * dynamic binding reaches (a static runtime's cudaMalloc, door/static.c): the function's first
 * instructions become a jump, and a trampoline runs them before jumping back, so the original
 * stays callable. Only x86-64, only a prologue every instruction of which it can read and move
 * (no branch, no call, nothing relative to the instruction pointer); anything else is refused,
 * never guessed. Must run while no other thread can be in the functions it patches. */
#ifndef GPUPOOL_DOOR_PATCH_H
#define GPUPOOL_DOOR_PATCH_H

#include <stddef.h>

/* Bytes of the jump written over a function's start. */
#define GP_PATCH_JUMP 14

/* The length of the whole instructions at `code` that cover at least `need` bytes, reading no
 * more than `max`; 0 when one of them is not an instruction this file can move. Pure: unit-tested. */
size_t gp_patch_prologue_len(const unsigned char *code, size_t max, size_t need);

struct gp_patch {
	void *fn;     /* the function patched */
	size_t size;  /* bytes: its symbol's size */
	void *target; /* where its calls go */
	void *orig;   /* out: the trampoline, callable as the function was */
};

/* Patches every function of `p` or none: 0 when all were patched (each p[i].orig set), else -1
 * with *why saying what stopped it, the code untouched. */
int gp_patch_apply(struct gp_patch *p, size_t n, const char **why);

#endif
