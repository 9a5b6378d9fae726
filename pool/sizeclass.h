/* sizeclass.h — size classes with bounded waste (sizeclass.c has the rest).
 * A request is rounded up to a class; the class is at most 12.5% larger than what a native
 * allocation of the request occupies on the device, where the driver itself rounds requests
 * above 1 MiB up to 2 MiB. Pure arithmetic: no state, no locks; never a class smaller than the
 * request. Inline: every allocation computes its class, a hit included. */
#ifndef GP_SIZECLASS_H
#define GP_SIZECLASS_H

#include <stddef.h>

#define GP_SC_MIN_BYTES ((size_t)512)
#define GP_SC_SMALL_MAX ((size_t)1 << 20) /* up to here: 8 classes per power of two */
#define GP_SC_GRANULE ((size_t)2 << 20)   /* the driver's granularity above SMALL_MAX */
#define GP_SC_MID_MAX ((size_t)16 << 20)  /* (1 MiB, 16 MiB]: one class per 2 MiB */
#define GP_SC_MAX_SHIFT 46                /* largest class: 2^46 bytes (64 TiB) */

/* Index layout: 0 = 512 B; 1..88 = (512 B, 1 MiB] 8 per power of two; 89..96 = 2..16 MiB by
 * 2 MiB; 97.. = (16 MiB, 2^MAX_SHIFT] 8 per power of two. */
#define GP_SC_SMALL_BASE 1u
#define GP_SC_MID_BASE 89u
#define GP_SC_LARGE_BASE 97u
#define GP_SC_NCLASSES (GP_SC_LARGE_BASE + 8u * (GP_SC_MAX_SHIFT - 24u))

/* For s in (2^k, 2^(k+1)], step 2^(k-3): returns the step multiple index 9..16. */
static inline unsigned gp_sc_eighth(size_t s, unsigned *k)
{
	*k = (unsigned)(63 - __builtin_clzll((unsigned long long)(s - 1)));
	size_t g = (size_t)1 << (*k - 3);
	return (unsigned)((s + g - 1) / g);
}

static inline unsigned gp_pool_class_count(void)
{
	return GP_SC_NCLASSES;
}

/* Returns gp_pool_class_count() for sizes the pool does not serve (0 and above the largest
 * class). */
static inline unsigned gp_pool_class_of(size_t bytes)
{
	unsigned k, m;

	if (bytes == 0 || bytes > ((size_t)1 << GP_SC_MAX_SHIFT))
		return GP_SC_NCLASSES;
	if (bytes <= GP_SC_MIN_BYTES)
		return 0;
	if (bytes <= GP_SC_SMALL_MAX) {
		m = gp_sc_eighth(bytes, &k);
		return GP_SC_SMALL_BASE + 8u * (k - 9u) + (m - 9u);
	}
	if (bytes <= GP_SC_MID_MAX)
		return GP_SC_MID_BASE + (unsigned)((bytes + GP_SC_GRANULE - 1) / GP_SC_GRANULE) - 1u;
	m = gp_sc_eighth(bytes, &k);
	return GP_SC_LARGE_BASE + 8u * (k - 24u) + (m - 9u);
}

#endif
