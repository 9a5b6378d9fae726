/* grow.h — the one growable array of the project: gp_grow makes room in a realloc'd array,
 * doubling its capacity. Header only, libc only, so that the pool and the shim may both use it.
 * Never loses the array: when memory runs out it and its capacity are left as they were. */
#ifndef GPUPOOL_GROW_H
#define GPUPOOL_GROW_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define GP_GROW_FIRST 16 /* elements of an array's first allocation */

/* Room for at least `need` elements of `elem` bytes in *arr, whose room is *cap elements: 0, or
 * -1 when realloc fails or the size would overflow (*arr and *cap unchanged). */
static inline int gp_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap = *cap ? *cap : GP_GROW_FIRST;
	void *p;

	if (need <= *cap)
		return 0;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return -1;
		ncap *= 2;
	}
	if (elem != 0 && ncap > SIZE_MAX / elem)
		return -1;
	p = realloc(*arr, ncap * elem);
	if (p == NULL)
		return -1;
	*arr = p;
	*cap = ncap;
	return 0;
}

#endif
