/* sizeclass.c — size classes: a class's bytes and the largest class a block serves (the class
 * of a request is inline, sizeclass.h). */
#include "pool.h"

size_t gp_pool_class_bytes(unsigned cls)
{
	if (cls == 0)
		return GP_SC_MIN_BYTES;
	if (cls < GP_SC_MID_BASE) {
		unsigned k = 9u + (cls - GP_SC_SMALL_BASE) / 8u;
		unsigned m = 9u + (cls - GP_SC_SMALL_BASE) % 8u;
		return (size_t)m << (k - 3u);
	}
	if (cls < GP_SC_LARGE_BASE)
		return (size_t)(cls - GP_SC_MID_BASE + 1u) * GP_SC_GRANULE;
	if (cls < GP_SC_NCLASSES) {
		unsigned k = 24u + (cls - GP_SC_LARGE_BASE) / 8u;
		unsigned m = 9u + (cls - GP_SC_LARGE_BASE) % 8u;
		return (size_t)m << (k - 3u);
	}
	return 0;
}

unsigned gp_pool_class_floor(size_t bytes)
{
	unsigned c = gp_pool_class_of(bytes);

	if (c >= GP_SC_NCLASSES)
		return bytes == 0 ? GP_SC_NCLASSES : GP_SC_NCLASSES - 1u;
	return gp_pool_class_bytes(c) > bytes && c > 0 ? c - 1u : c;
}
