/* typecheck.c — compiled, never linked: holds every driver row of table.h to the toolkit's own
 * type for it (cudaTypedefs.h's PFN_cu<base>_v<version>[_ptsz|_ptds]), so that a row whose
 * parameters are not the driver's fails the build instead of corrupting a call. It needs the
 * toolkit's internal view, which declares the types of the first variants too (cuStreamDestroy's
 * PFN_cuStreamDestroy_v2000): nothing compiled this way may go into the library. */
#define __CUDA_API_VERSION_INTERNAL
#include <cuda.h>
#include <cudaTypedefs.h>

#include "table.h"

#define PFN_PLAIN(base, version) PFN_cu##base##_v##version
#define PFN_PTSZ(base, version) PFN_cu##base##_v##version##_ptsz
#define PFN_PTDS(base, version) PFN_cu##base##_v##version##_ptds

#define SAME_AS_DRIVER(cls, name, base, version, flavour, params, args, stream)                   \
	_Static_assert(__builtin_types_compatible_p(PFN_##flavour(base, version),                \
						    CUresult(*) params),                         \
		       "cu" #name ": its row's parameters are not cudaTypedefs.h's");
GP_DRIVER_ALL(SAME_AS_DRIVER)
