/* runtime_device.c — the stand-in runtime's devices, errors and versions: the current device of
 * each thread (the runtime's own state; setting it makes its primary context current), device
 * synchronisation and reset through the driver, the sticky last error, error names. */
#include "runtime.h"

#include "standin.h"

cudaError_t cudaGetDeviceCount(int *count)
{
	cudaError_t rc = ready();
	int n = 0;

	if (rc != cudaSuccess)
		return result(rc);
	if (count == NULL)
		return result(cudaErrorInvalidValue);
	rc = from_cu(drv.DeviceGetCount(&n));
	if (rc == cudaSuccess && n == 0)
		rc = cudaErrorNoDevice;
	if (rc == cudaSuccess)
		*count = n;
	return result(rc);
}

/* Makes no context current: the current device is the runtime's alone. */
cudaError_t cudaGetDevice(int *device)
{
	cudaError_t rc = ready(), fault;

	if (rc != cudaSuccess)
		return result(rc);
	fault = (cudaError_t)ctl_inject(STANDIN_FAULT_GETDEVICE);
	if (fault != cudaSuccess)
		return result(fault);
	if (device == NULL)
		return result(cudaErrorInvalidValue);
	*device = rt_device();
	return cudaSuccess;
}

/* As since CUDA 12: the device's primary context is made current at once. */
cudaError_t cudaSetDevice(int device)
{
	cudaError_t rc = ready();

	if (rc != cudaSuccess)
		return result(rc);
	if (device < 0 || device >= rt_device_count())
		return result(cudaErrorInvalidDevice);
	rt_set_device(device);
	return result(use_device());
}

cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.CtxSynchronize(NULL));
}

/* Everything of the device's primary context goes (cuDevicePrimaryCtxReset_v2). */
cudaError_t cudaDeviceReset(void)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.DevicePrimaryCtxReset(rt_device()));
}

cudaError_t cudaGetLastError(void)
{
	if (ready() == cudaErrorCudartUnloading)
		return cudaErrorCudartUnloading;
	return rt_last_error(1);
}

cudaError_t cudaPeekAtLastError(void)
{
	if (ready() == cudaErrorCudartUnloading)
		return cudaErrorCudartUnloading;
	return rt_last_error(0);
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (ready() == cudaErrorCudartUnloading)
		return result(cudaErrorCudartUnloading);
	if (runtimeVersion == NULL)
		return result(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	cudaError_t rc = ready();

	if (rc != cudaSuccess)
		return result(rc);
	if (driverVersion == NULL)
		return result(cudaErrorInvalidValue);
	return cu_result(drv.DriverGetVersion(driverVersion));
}

const char *cudaGetErrorName(cudaError_t error)
{
	return rt_error_name(error);
}

const char *cudaGetErrorString(cudaError_t error)
{
	return rt_error_string(error);
}
