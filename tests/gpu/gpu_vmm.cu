/* gpu_vmm.cu — GPUPOOL_VMM=on on the GPU (run with it set; the test says so if it is not).
 *   - a miss moves idle blocks of other sizes into its block: the device's free memory does not
 *     drop, the kernels' bytes come along at their offsets, and kernels, memcpy of every kind,
 *     memcpy2D and memset work across the pieces;
 *   - what the driver answers about such a block: pointer attributes; cuMemGetAddressRange (the
 *     whole block, through the shim's driver door); legacy IPC refused;
 *   - a block freed while a kernel still writes it is not moved under the kernel: the kernel ends
 *     without error and the block that the miss got holds only what the host wrote;
 *   - a miss takes the end of a larger idle block where it lies, the rest serves another; a part
 *     given back while a kernel writes its neighbour in the same range leaves the kernel whole;
 *     idle parts serve a miss of their size together again;
 *   - a release gives the memory back (NVML's free memory rises by it). */
#include "gpu_common.cuh"

#include <cuda.h>

static int smi_free_mib(void)
{
	return (int)(gt_mem_free(NULL) >> 20);
}

static void moves(void)
{
	void *a = NULL, *b = NULL, *p = NULL, *h = NULL;
	size_t free0, free1;
	cudaPointerAttributes attr;
	CUdeviceptr base = 0;
	size_t size = 0;
	cudaIpcMemHandle_t ipc;
	cudaError_t e;

	gt_ok(cudaMalloc(&a, 64 * GT_MIB), "cudaMalloc(64 MiB)");
	gt_ok(cudaMalloc(&b, 32 * GT_MIB), "cudaMalloc(32 MiB)");
	gt_fill(a, 64 * GT_MIB, 0xAAAA0001u, 0);
	gt_fill(b, 32 * GT_MIB, 0xBBBB0002u, 0);
	gt_ok(cudaFree(a), "cudaFree(64 MiB)");
	gt_ok(cudaFree(b), "cudaFree(32 MiB)");
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	free0 = gt_mem_free(NULL);
	gt_ok(cudaMalloc(&p, 96 * GT_MIB), "cudaMalloc(96 MiB)");
	free1 = gt_mem_free(NULL);
	gt_check(free1 + 2 * GT_MIB >= free0, "a 96 MiB miss takes no new memory",
		 "free %.0f -> %.0f MiB", gt_mib(free0), gt_mib(free1));
	gt_check(gt_count_ne(p, 64 * GT_MIB, 0xAAAA0001u) == 0 &&
			 gt_count_ne((char *)p + 64 * GT_MIB, 32 * GT_MIB, 0xBBBB0002u) == 0,
		 "the idle blocks' bytes moved with them", "64 MiB at offset 0, 32 MiB at 64 MiB");
	gt_fill(p, 96 * GT_MIB, 7u, 0);
	gt_check(gt_count_ne(p, 96 * GT_MIB, 7u) == 0, "a kernel writes across the pieces", "96 MiB");

	/* Copies of every kind across the boundary between the pieces. */
	h = malloc(8 * GT_MIB);
	memset(h, 0x5A, 8 * GT_MIB);
	char *mid = (char *)p + 60 * GT_MIB;
	int ok = gt_ok(cudaMemcpy(mid, h, 8 * GT_MIB, cudaMemcpyHostToDevice), "cudaMemcpy H2D") &&
		 gt_ok(cudaMemcpy((char *)p + 80 * GT_MIB, mid, 8 * GT_MIB, cudaMemcpyDeviceToDevice),
		       "cudaMemcpy D2D");
	memset(h, 0, 8 * GT_MIB);
	ok = ok && gt_ok(cudaMemcpy(h, (char *)p + 80 * GT_MIB, 8 * GT_MIB, cudaMemcpyDeviceToHost),
			 "cudaMemcpy D2H");
	ok = ok && ((unsigned char *)h)[0] == 0x5A && ((unsigned char *)h)[8 * GT_MIB - 1] == 0x5A;
	ok = ok && gt_ok(cudaMemcpy2D(mid, 4096, h, 4096, 4096, 2048, cudaMemcpyDefault),
			 "cudaMemcpy2D");
	ok = ok && gt_ok(cudaMemset(mid, 0, 8 * GT_MIB), "cudaMemset across the pieces");
	gt_check(ok && gt_count_ne(mid, 8 * GT_MIB, 0u) == 0, "memcpy H2D, D2D, D2H, 2D and memset",
		 "across the 64 MiB boundary");
	free(h);

	e = cudaPointerGetAttributes(&attr, (char *)p + 70 * GT_MIB);
	gt_check(e == cudaSuccess && attr.type == cudaMemoryTypeDevice && attr.device == 0,
		 "cudaPointerGetAttributes", "%s, type %d", cudaGetErrorName(e), (int)attr.type);
	e = (cudaError_t)cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)p + 70 * GT_MIB);
	gt_check(e == cudaSuccess && base == (CUdeviceptr)(uintptr_t)p && size == 96 * GT_MIB,
		 "cuMemGetAddressRange inside the second piece answers the block",
		 "rc %d, base +%lld MiB, %zu MiB (the driver alone: the piece, +64 and 32)", (int)e,
		 ((long long)base - (long long)(uintptr_t)p) >> 20, size >> 20);
	e = cudaIpcGetMemHandle(&ipc, p);
	gt_check(e != cudaSuccess, "cudaIpcGetMemHandle is refused", "%s", cudaGetErrorName(e));
	cudaGetLastError();
	gt_ok(cudaFree(p), "cudaFree(96 MiB)");
}

/* A kernel still writes a freed 64 MiB block for 300 ms; a 128 MiB miss meanwhile must not take
 * its memory (the fence is not done). */
static void under_kernel(void)
{
	void *a = NULL, *p = NULL;
	cudaStream_t s;
	cudaError_t e;

	gt_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
	gt_ok(cudaMalloc(&a, 64 * GT_MIB), "cudaMalloc(64 MiB)");
	gt_slow_fill_kernel<<<GT_GRID, GT_BLOCK, 0, s>>>((uint32_t *)a, 64 * GT_MIB / 4, 0xDEADu,
							  300000000ull);
	gt_ok(cudaFree(a), "cudaFree while the kernel runs");
	gt_ok(cudaMalloc(&p, 128 * GT_MIB), "cudaMalloc(128 MiB) meanwhile");
	gt_ok(cudaMemset(p, 0, 128 * GT_MIB), "cudaMemset");
	e = cudaStreamSynchronize(s);
	gt_check(e == cudaSuccess, "the kernel on the freed block ends without error", "%s",
		 cudaGetErrorName(e));
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	gt_check(gt_count_ne(p, 128 * GT_MIB, 0u) == 0, "the miss's block holds only its own bytes",
		 "128 MiB of zeros after the kernel wrote 0xDEAD into the freed block");
	gt_ok(cudaFree(p), "cudaFree");
	cudaStreamDestroy(s);
}

/* An idle 64 MiB block (16 handles of 4 MiB) serves a 16 MiB miss with its last 16 MiB where they
 * lie (no new memory, their bytes there) and a 48 MiB one with the rest, at its address; the two
 * parts, idle again, serve a 64 MiB miss as one block there (merged): no new memory. Then the
 * 16 MiB part, freed and its fence done, is given back while a kernel writes the 48 MiB part of
 * the same range: its handles are unmapped beside the running kernel (a release of settled blocks
 * does not wait for the device), and the kernel ends without error, its bytes whole. */
static void split_merge(void)
{
	void *a = NULL, *p = NULL, *q = NULL, *r = NULL, *x = NULL, *t = NULL, *small[64];
	unsigned long long bytes = 0;
	cudaStream_t s;
	size_t free0, free1;
	cudaError_t e, running;

	gt_shim_release()(-1, NULL);
	gt_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
	gt_ok(cudaMalloc(&x, 96 * GT_MIB), "cudaMalloc(96 MiB)"); /* a range of its own, for later */
	gt_ok(cudaMalloc(&a, 64 * GT_MIB), "cudaMalloc(64 MiB)");
	gt_fill(a, 48 * GT_MIB, 0xA0A0u, 0);
	gt_fill((char *)a + 48 * GT_MIB, 16 * GT_MIB, 0xB0B0u, 0);
	gt_ok(cudaFree(a), "cudaFree(64 MiB)");
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	free0 = gt_mem_free(NULL);
	gt_ok(cudaMalloc(&p, 16 * GT_MIB), "cudaMalloc(16 MiB)");
	gt_ok(cudaMalloc(&q, 48 * GT_MIB), "cudaMalloc(48 MiB)");
	free1 = gt_mem_free(NULL);
	gt_check(p == (char *)a + 48 * GT_MIB && q == a && free1 + 2 * GT_MIB >= free0,
		 "an idle 64 MiB block serves 16 and 48 MiB misses where it lies",
		 "+%lld and +%lld MiB, free %.0f -> %.0f MiB", ((long long)((char *)p - (char *)a)) >> 20,
		 ((long long)((char *)q - (char *)a)) >> 20, gt_mib(free0), gt_mib(free1));
	gt_check(gt_count_ne(p, 16 * GT_MIB, 0xB0B0u) == 0 && gt_count_ne(q, 48 * GT_MIB, 0xA0A0u) == 0,
		 "their bytes are there", "16 MiB of 0xB0B0, 48 MiB of 0xA0A0");
	gt_ok(cudaFree(p), "cudaFree(16 MiB)");
	gt_ok(cudaFree(q), "cudaFree(48 MiB)");
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	gt_ok(cudaMalloc(&r, 64 * GT_MIB), "cudaMalloc(64 MiB)");
	free1 = gt_mem_free(NULL);
	gt_check(r == a && free1 + 2 * GT_MIB >= free0,
		 "the idle parts serve a 64 MiB miss as one block where they lie",
		 "+%lld MiB, free %.0f -> %.0f MiB", ((long long)((char *)r - (char *)a)) >> 20,
		 gt_mib(free0), gt_mib(free1));
	gt_fill(r, 64 * GT_MIB, 9u, 0);
	gt_check(gt_count_ne(r, 64 * GT_MIB, 9u) == 0, "a kernel writes the whole block", "64 MiB");
	gt_ok(cudaFree(r), "cudaFree(64 MiB)");
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

	gt_ok(cudaMalloc(&p, 16 * GT_MIB), "cudaMalloc(16 MiB)");
	gt_ok(cudaMalloc(&q, 48 * GT_MIB), "cudaMalloc(48 MiB)");
	gt_ok(cudaFree(p), "cudaFree(16 MiB)");
	gt_ok(cudaFree(x), "cudaFree(96 MiB)");
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	/* A 32 MiB miss drives the fences (the GPU is idle: the 16 and 96 MiB blocks settle) and
	 * takes the end of the 96 MiB block. */
	gt_ok(cudaMalloc(&t, 32 * GT_MIB), "cudaMalloc(32 MiB)");
	/* The checks' counters are pooled ordinary blocks of 8 bytes, which a release gives back
	 * with cudaFree, and cudaFree waits for the whole device (on the H200 the release took the
	 * kernel's 300 ms). Taken out of the cache here (hits), they stay out of the release. */
	for (int i = 0; i < 64; i++)
		gt_ok(cudaMalloc(&small[i], 8), "cudaMalloc(8 B)");
	gt_slow_fill_kernel<<<GT_GRID, GT_BLOCK, 0, s>>>((uint32_t *)q, 48 * GT_MIB / 4, 0xC0DEu,
							  300000000ull);
	gt_shim_release()(-1, &bytes);
	running = cudaStreamQuery(s);
	e = cudaStreamSynchronize(s);
	gt_check(running == cudaErrorNotReady && bytes >= 16 * GT_MIB,
		 "the freed 16 MiB part given back while a kernel writes its neighbour in the range",
		 "%llu MiB released; the kernel was %s when the release returned", bytes >> 20,
		 running == cudaErrorNotReady ? "still running" : cudaGetErrorName(running));
	gt_check(e == cudaSuccess, "the kernel ends without error", "%s", cudaGetErrorName(e));
	gt_check(gt_count_ne(q, 48 * GT_MIB, 0xC0DEu) == 0, "the kernel's block holds its bytes",
		 "48 MiB of 0xC0DE");
	gt_ok(cudaFree(q), "cudaFree(48 MiB)");
	gt_ok(cudaFree(t), "cudaFree(32 MiB)");
	for (int i = 0; i < 64; i++)
		gt_ok(cudaFree(small[i]), "cudaFree(8 B)");
	cudaGetLastError();
	cudaStreamDestroy(s);
}

static void release(void)
{
	void *p[8];
	unsigned long long bytes = 0;
	int before, after;

	for (int i = 0; i < 8; i++)
		gt_ok(cudaMalloc(&p[i], (size_t)(i + 2) * 16 * GT_MIB), "cudaMalloc");
	for (int i = 0; i < 8; i++)
		gt_ok(cudaFree(p[i]), "cudaFree");
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	before = smi_free_mib();
	gt_shim_release()(-1, &bytes);
	after = smi_free_mib();
	gt_check(bytes > 0 && after - before + 4 >= (int)(bytes >> 20), "a release returns it all",
		 "%llu MiB released, free %d -> %d MiB", bytes >> 20, before, after);
}

int main(void)
{
	const char *vmm = getenv("GPUPOOL_VMM");

	gt_test = "gpu_vmm";
	if (!gt_require_shim() || !gt_context())
		return gt_finish();
	gt_check(vmm != NULL && strcmp(vmm, "on") == 0, "run with GPUPOOL_VMM=on", "%s",
		 vmm ? vmm : "(unset)");
	moves();
	under_kernel();
	split_merge();
	release();
	return gt_finish();
}
