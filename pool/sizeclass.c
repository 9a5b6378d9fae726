/* sizeclass.c — size classes with bounded waste.
 * A request is rounded up to a class; the class is at most 12.5% larger than what a native
 * allocation of the request occupies on the device, where the driver itself rounds requests
 * above 1 MiB up to 2 MiB. Pure arithmetic: no state, no locks; never a class smaller than the
 * request. */
#include "pool.h"

#define MIN_BYTES ((size_t)512)
#define SMALL_MAX ((size_t)1 << 20)     /* up to here: 8 classes per power of two */
#define GRANULE ((size_t)2 << 20)       /* the driver's granularity above SMALL_MAX */
#define MID_MAX ((size_t)16 << 20)      /* (1 MiB, 16 MiB]: one class per 2 MiB */
#define MAX_SHIFT 46                    /* largest class: 2^46 bytes (64 TiB) */

/* Index layout: 0 = 512 B; 1..88 = (512 B, 1 MiB] 8 per power of two; 89..96 = 2..16 MiB by
 * 2 MiB; 97.. = (16 MiB, 2^MAX_SHIFT] 8 per power of two. */
#define SMALL_BASE 1u
#define MID_BASE 89u
#define LARGE_BASE 97u
#define NCLASSES (LARGE_BASE + 8u * (MAX_SHIFT - 24u))

static unsigned log2_floor(size_t v)
{
	return (unsigned)(63 - __builtin_clzll((unsigned long long)v));
}

/* For s in (2^k, 2^(k+1)], step 2^(k-3): returns the step multiple index 9..16. */
static unsigned eighth(size_t s, unsigned *k)
{
	*k = log2_floor(s - 1);
	size_t g = (size_t)1 << (*k - 3);
	return (unsigned)((s + g - 1) / g);
}

unsigned gp_pool_class_count(void)
{
	return NCLASSES;
}

/* Returns NCLASSES for sizes the pool does not serve (0 and above the largest class). */
unsigned gp_pool_class_of(size_t bytes)
{
	unsigned k;

	if (bytes == 0 || bytes > ((size_t)1 << MAX_SHIFT))
		return NCLASSES;
	if (bytes <= MIN_BYTES)
		return 0;
	if (bytes <= SMALL_MAX) {
		unsigned m = eighth(bytes, &k);
		return SMALL_BASE + 8u * (k - 9u) + (m - 9u);
	}
	if (bytes <= MID_MAX)
		return MID_BASE + (unsigned)((bytes + GRANULE - 1) / GRANULE) - 1u;
	unsigned m = eighth(bytes, &k);
	return LARGE_BASE + 8u * (k - 24u) + (m - 9u);
}

size_t gp_pool_class_bytes(unsigned cls)
{
	if (cls == 0)
		return MIN_BYTES;
	if (cls < MID_BASE) {
		unsigned k = 9u + (cls - SMALL_BASE) / 8u;
		unsigned m = 9u + (cls - SMALL_BASE) % 8u;
		return (size_t)m << (k - 3u);
	}
	if (cls < LARGE_BASE)
		return (size_t)(cls - MID_BASE + 1u) * GRANULE;
	if (cls < NCLASSES) {
		unsigned k = 24u + (cls - LARGE_BASE) / 8u;
		unsigned m = 9u + (cls - LARGE_BASE) % 8u;
		return (size_t)m << (k - 3u);
	}
	return 0;
}

unsigned gp_pool_class_floor(size_t bytes)
{
	unsigned c = gp_pool_class_of(bytes);

	if (c >= NCLASSES)
		return bytes == 0 ? NCLASSES : NCLASSES - 1u;
	return gp_pool_class_bytes(c) > bytes && c > 0 ? c - 1u : c;
}
