/* drvcalls.cu — what the driver door costs a program built with the static runtime (nvcc's
 * default), run plain and under LD_PRELOAD=libgpupool.so:
 *   init_us       the runtime's first call (cudaFree(0)): loading the driver and its ~440 lookups
 *                 through cuGetProcAddress, which gpupool's door answers;
 *   ctx_set_ns    cuCtxSetCurrent of the current context (one of gpupool's entry points: passes
 *                 through after a look at the device);
 *   meminfo_ns    cuMemGetInfo (gpupool's: adds the cache to the free memory);
 *   query_ns      cuStreamQuery of the legacy stream (not gpupool's: handed out as the driver's);
 *   launch_ns     an empty kernel launch, which the runtime makes through the driver;
 *   floor_ns      cudaMalloc of 0 bytes + cudaFree(NULL): what the runtime's own pair costs
 *                 where it need not reach the driver's allocator (the part of a pooled pair
 *                 that is the runtime's, not gpupool's).
 * Output: "BENCH drvcalls contender=native|gpupool name=value ..." */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define N 200000

__global__ void empty_kernel(void) {}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(void)
{
	int shim = dlsym(RTLD_DEFAULT, "gpupool_release") != NULL;
	uint64_t t0, init_ns, ctx_ns, info_ns, query_ns, launch_ns, floor_ns;
	void *z;
	size_t f, t;
	CUcontext c;

	t0 = now_ns();
	if (cudaFree(0) != cudaSuccess)
		return 1;
	init_ns = now_ns() - t0;
	cuCtxGetCurrent(&c);
	t0 = now_ns();
	for (int i = 0; i < N; i++)
		cuCtxSetCurrent(c);
	ctx_ns = now_ns() - t0;
	t0 = now_ns();
	for (int i = 0; i < N / 10; i++)
		cuMemGetInfo(&f, &t);
	info_ns = (now_ns() - t0) * 10;
	t0 = now_ns();
	for (int i = 0; i < N; i++)
		cuStreamQuery(CU_STREAM_LEGACY);
	query_ns = now_ns() - t0;
	cudaDeviceSynchronize();
	t0 = now_ns();
	for (int i = 0; i < N / 10; i++)
		empty_kernel<<<1, 1>>>();
	cudaDeviceSynchronize();
	launch_ns = (now_ns() - t0) * 10;
	t0 = now_ns();
	for (int i = 0; i < N; i++) {
		cudaMalloc(&z, 0);
		cudaFree(NULL);
	}
	floor_ns = now_ns() - t0;
	printf("BENCH drvcalls contender=%s init_us=%.0f ctx_set_ns=%.1f meminfo_ns=%.1f "
	       "query_ns=%.1f launch_ns=%.1f floor_ns=%.1f\n", shim ? "gpupool" : "native",
	       init_ns / 1e3, (double)ctx_ns / N, (double)info_ns / N, (double)query_ns / N,
	       (double)launch_ns / N, (double)floor_ns / N);
	return 0;
}
