/* dryrun_stubs.c — libbench_dryrun.so: the few runtime entry points the benchmarks need that the
 * stand-in runtime (tests/standin) lacks, so `scripts/bench --dry-run` can check parsing and
 * control flow on a machine without a GPU: fat-binary registration (every nvcc-built program
 * calls it at start-up), kernel launch (never launches: run the benchmarks with --no-kernels) and
 * the stream-ordered pool's attributes (accepted, read as 0). Preloaded after the stand-in.
 * Figures from a dry run mean nothing; nothing in the product uses this. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum { SUCCESS = 0, NOT_SUPPORTED = 801 }; /* cudaSuccess, cudaErrorNotSupported */

static void *handle_storage[4];

EXPORT void **__cudaRegisterFatBinary(void *fat)
{
	(void)fat;
	return handle_storage;
}

EXPORT void __cudaRegisterFatBinaryEnd(void **handle)
{
	(void)handle;
}

EXPORT void __cudaUnregisterFatBinary(void **handle)
{
	(void)handle;
}

EXPORT void __cudaRegisterFunction(void **handle, const char *host, char *dev, const char *name,
				   int limit, void *tid, void *bid, void *bdim, void *gdim, int *wsize)
{
	(void)handle, (void)host, (void)dev, (void)name, (void)limit;
	(void)tid, (void)bid, (void)bdim, (void)gdim, (void)wsize;
}

EXPORT void __cudaRegisterVar(void **handle, char *host, char *dev, const char *name, int ext,
			      size_t size, int constant, int global)
{
	(void)handle, (void)host, (void)dev, (void)name, (void)ext, (void)size, (void)constant;
	(void)global;
}

/* dim3 is three unsigned ints, passed by value: the arguments are not looked at. */
struct dim3s {
	unsigned x, y, z;
};

EXPORT unsigned __cudaPushCallConfiguration(struct dim3s grid, struct dim3s block, size_t shmem,
					    void *stream)
{
	(void)grid, (void)block, (void)shmem, (void)stream;
	return 0;
}

/* A failure here makes the generated launch stub skip the launch. */
EXPORT int __cudaPopCallConfiguration(struct dim3s *grid, struct dim3s *block, size_t *shmem,
				      void *stream)
{
	(void)grid, (void)block, (void)shmem, (void)stream;
	return NOT_SUPPORTED;
}

EXPORT int cudaLaunchKernel(const void *func, struct dim3s grid, struct dim3s block, void **args,
			    size_t shmem, void *stream)
{
	(void)func, (void)grid, (void)block, (void)args, (void)shmem, (void)stream;
	return NOT_SUPPORTED;
}

/* CUDA 13's launch path: the kernel handle, then the launch through it. */
EXPORT int __cudaGetKernel(void **kernel, const void *func)
{
	(void)func;
	*kernel = NULL;
	return NOT_SUPPORTED;
}

EXPORT int __cudaLaunchKernel(void *kernel, struct dim3s grid, struct dim3s block, void **args,
			      size_t shmem, void *stream)
{
	(void)kernel, (void)grid, (void)block, (void)args, (void)shmem, (void)stream;
	return NOT_SUPPORTED;
}

EXPORT int __cudaLaunchKernel_ptsz(void *kernel, struct dim3s grid, struct dim3s block, void **args,
				   size_t shmem, void *stream)
{
	(void)kernel, (void)grid, (void)block, (void)args, (void)shmem, (void)stream;
	return NOT_SUPPORTED;
}

EXPORT int cudaMemPoolSetAttribute(void *pool, int attr, void *value)
{
	(void)pool, (void)attr, (void)value;
	return SUCCESS;
}

EXPORT int cudaMemPoolGetAttribute(void *pool, int attr, void *value)
{
	(void)pool;
	/* the size of the attribute's value: int for the reuse flags (1-3), else uint64_t */
	memset(value, 0, attr >= 1 && attr <= 3 ? sizeof(int) : sizeof(uint64_t));
	return SUCCESS;
}
