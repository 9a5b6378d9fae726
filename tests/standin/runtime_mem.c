/* runtime_mem.c — the stand-in runtime's memory entry points, each over its driver function:
 * cudaMalloc/cudaFree (cuMemAlloc_v2/cuMemFree_v2), the stream-ordered ones, memory info,
 * memset and copies (with their per-thread default stream flavours), pointer attributes and the
 * default memory pool. */
#include "runtime.h"

#include <string.h>

#ifdef STANDIN_STATIC
/* The static flavour: cudaMalloc and cudaFree are static_entry.c's, in front of these. */
#define cudaMalloc standin_static_malloc
#define cudaFree standin_static_free
cudaError_t standin_static_malloc(void **devPtr, size_t size);
cudaError_t standin_static_free(void *devPtr);
#endif

static void *ptr(CUdeviceptr d)
{
	return (void *)(uintptr_t)d;
}

/* A zero-byte request gets NULL without asking the driver, as from the real runtime. */
cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	CUdeviceptr d = 0;
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	if (devPtr == NULL)
		return result(cudaErrorInvalidValue);
	if (size == 0) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	rc = cu_result(drv.MemAlloc(&d, size));
	if (rc == cudaSuccess)
		*devPtr = ptr(d);
	return rc;
}

/* cudaFree(NULL) only initialises: the device's context is made current. */
cudaError_t cudaFree(void *devPtr)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess || devPtr == NULL)
		return result(rc);
	return cu_result(drv.MemFree(dptr(devPtr)));
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	CUdeviceptr d = 0;
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	if (devPtr == NULL)
		return result(cudaErrorInvalidValue);
	if (size == 0) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	rc = cu_result(drv.MemAllocAsync(&d, size, hStream));
	if (rc == cudaSuccess)
		*devPtr = ptr(d);
	return rc;
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess || devPtr == NULL)
		return result(rc);
	return cu_result(drv.MemFreeAsync(dptr(devPtr), hStream));
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.IpcGetMemHandle((CUipcMemHandle *)(void *)handle, dptr(devPtr)));
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.MemGetInfo(free_bytes, total_bytes));
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.MemsetD8(dptr(devPtr), (unsigned char)value, count));
}

cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.MemsetD8_ptds(dptr(devPtr), (unsigned char)value, count));
}

/* The kind does not matter: every pointer is a host pointer here (unified addressing). */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	cudaError_t rc = use_device();

	(void)kind;
	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.Memcpy(dptr(dst), dptr(src), count));
}

cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	cudaError_t rc = use_device();

	(void)kind;
	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.Memcpy_ptds(dptr(dst), dptr(src), count));
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.MemsetD8Async(dptr(devPtr), (unsigned char)value, count, stream));
}

cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.MemsetD8Async_ptsz(dptr(devPtr), (unsigned char)value, count, stream));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	cudaError_t rc = use_device();

	(void)kind;
	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.MemcpyAsync(dptr(dst), dptr(src), count, stream));
}

cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
				 enum cudaMemcpyKind kind, cudaStream_t stream)
{
	cudaError_t rc = use_device();

	(void)kind;
	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.MemcpyAsync_ptsz(dptr(dst), dptr(src), count, stream));
}

/* A pointer the driver does not know is host memory the runtime never registered. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *p)
{
	cudaError_t rc = use_device();
	CUresult cu;
	int device = -1;

	if (rc != cudaSuccess)
		return result(rc);
	if (attributes == NULL)
		return result(cudaErrorInvalidValue);
	memset(attributes, 0, sizeof(*attributes));
	cu = drv.PointerGetAttribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr(p));
	if (cu == CUDA_ERROR_INVALID_VALUE) {
		attributes->type = cudaMemoryTypeUnregistered;
		attributes->device = -2;
		attributes->hostPointer = (void *)(uintptr_t)p;
		return cudaSuccess;
	}
	if (cu != CUDA_SUCCESS)
		return cu_result(cu);
	attributes->type = cudaMemoryTypeDevice;
	attributes->device = device;
	attributes->devicePointer = (void *)(uintptr_t)p;
	return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.MemPoolTrimTo(memPool, minBytesToKeep));
}

/* The attributes' numbers are the driver's. */
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.MemPoolSetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	if (memPool == NULL)
		return result(cudaErrorInvalidValue);
	return cu_result(drv.DeviceGetDefaultMemPool(memPool, device));
}
