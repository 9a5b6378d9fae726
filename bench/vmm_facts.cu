// vmm_facts.cu — what VMM-backed blocks (physical memory from cuMemCreate mapped into a range of
// cuMemAddressReserve) would cost and break at the pool's sizes, against cuMemAlloc: building a
// block from one handle or from 2 MiB granules, moving a block's memory to another range,
// releasing it; what unmapping does to work still queued on the old range, and what giving memory
// back waits for; and which calls a program may make on such memory still answer as on cuMemAlloc
// memory. One GPU, no preload.
// Prints `FACT name value` and `COST size ...` lines. Build: in bench/ (CUDA::cuda_driver).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using clk = std::chrono::steady_clock;
static double us_since(clk::time_point t)
{
	return std::chrono::duration<double, std::micro>(clk::now() - t).count();
}
static double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}
static const char *err(CUresult r)
{
	const char *s = "?";
	cuGetErrorName(r, &s);
	return s;
}
#define CK(x)                                                                                    \
	do {                                                                                     \
		CUresult r_ = (x);                                                               \
		if (r_ != CUDA_SUCCESS)                                                          \
			printf("ERR %s: %s\n", #x, err(r_));                                     \
	} while (0)

static const size_t GRAN = 2u << 20;
static CUmemAllocationProp prop;
static CUmemAccessDesc access_rw;

struct vblock {
	CUdeviceptr va = 0;
	size_t size = 0;
	std::vector<std::pair<CUmemGenericAllocationHandle, size_t>> chunks;
};

static void map_all(vblock &b)
{
	size_t off = 0;
	for (auto &c : b.chunks) {
		CK(cuMemMap(b.va + off, c.second, 0, c.first, 0));
		off += c.second;
	}
	CK(cuMemSetAccess(b.va, b.size, &access_rw, 1));
}

static vblock make(size_t size, size_t chunk)
{
	vblock b;
	b.size = size;
	CK(cuMemAddressReserve(&b.va, size, 0, 0, 0));
	for (size_t off = 0; off < size; off += chunk) {
		CUmemGenericAllocationHandle h;
		CK(cuMemCreate(&h, chunk, &prop, 0));
		b.chunks.push_back({ h, chunk });
	}
	map_all(b);
	return b;
}

static void destroy(vblock &b)
{
	CK(cuMemUnmap(b.va, b.size));
	for (auto &c : b.chunks)
		CK(cuMemRelease(c.first));
	CK(cuMemAddressFree(b.va, b.size));
	b.chunks.clear();
}

// Move b's memory into a fresh range of the same size (the pool's remap on a miss).
static void move(vblock &b)
{
	CUdeviceptr to;
	CK(cuMemAddressReserve(&to, b.size, 0, 0, 0));
	CK(cuMemUnmap(b.va, b.size));
	CK(cuMemAddressFree(b.va, b.size));
	b.va = to;
	map_all(b);
}

__global__ void spin_then_write(long long cycles, unsigned *p)
{
	long long t = clock64();
	while (clock64() - t < cycles) {
	}
	p[threadIdx.x] = 0xabcd0000u + threadIdx.x;
}

static void costs()
{
	size_t sizes[] = { 4u << 20, 16u << 20, 64u << 20, 256u << 20, 1u << 30 };
	for (size_t sz : sizes) {
		std::vector<double> alloc, free_, one, grans, mv1, mvg, rel1, relg;
		for (int i = 0; i < 5; i++) {
			CUdeviceptr p;
			auto t = clk::now();
			CK(cuMemAlloc(&p, sz));
			alloc.push_back(us_since(t));
			t = clk::now();
			CK(cuMemFree(p));
			free_.push_back(us_since(t));
			t = clk::now();
			vblock a = make(sz, sz);
			one.push_back(us_since(t));
			t = clk::now();
			vblock g = make(sz, GRAN);
			grans.push_back(us_since(t));
			t = clk::now();
			move(a);
			mv1.push_back(us_since(t));
			t = clk::now();
			move(g);
			mvg.push_back(us_since(t));
			t = clk::now();
			destroy(a);
			rel1.push_back(us_since(t));
			t = clk::now();
			destroy(g);
			relg.push_back(us_since(t));
		}
		printf("COST %5zu MiB  cuMemAlloc %.0f cuMemFree %.0f | one handle: build %.0f move %.0f release "
		       "%.0f | 2 MiB granules (%zu): build %.0f move %.0f release %.0f us\n",
		       sz >> 20, median(alloc), median(free_), median(one), median(mv1), median(rel1),
		       sz / GRAN, median(grans), median(mvg), median(relg));
	}
}

// What a program may ask about, or do with, such memory.
static void queries()
{
	vblock b = make(8u << 20, GRAN); // four granules, one range
	CUdeviceptr base = 0;
	size_t len = 0;
	CUresult r = cuMemGetAddressRange(&base, &len, b.va + (5u << 20));
	printf("FACT cuMemGetAddressRange(interior pointer, 4 granules of 2 MiB) %s base_is_range %d "
	       "len_mib %zu\n", err(r), base == b.va, len >> 20);
	cudaPointerAttributes pa;
	cudaError_t e = cudaPointerGetAttributes(&pa, (void *)(b.va + 4096));
	printf("FACT cudaPointerGetAttributes %s type_device %d device %d devptr_same %d\n",
	       cudaGetErrorName(e), pa.type == cudaMemoryTypeDevice, pa.device,
	       pa.devicePointer == (void *)(b.va + 4096));
	CUdeviceptr start = 0;
	size_t rsize = 0;
	r = cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b.va + (5u << 20));
	CUresult r2 = cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, b.va + (5u << 20));
	printf("FACT cuPointerGetAttribute RANGE_START %s is_range %d RANGE_SIZE %s mib %zu\n", err(r),
	       start == b.va, err(r2), rsize >> 20);
	std::vector<unsigned char> h(8u << 20, 0x5a), back(8u << 20, 0);
	e = cudaMemcpy((void *)b.va, h.data(), h.size(), cudaMemcpyHostToDevice);
	cudaError_t e2 = cudaMemcpy(back.data(), (void *)b.va, back.size(), cudaMemcpyDeviceToHost);
	printf("FACT cudaMemcpy H2D %s D2H %s equal %d\n", cudaGetErrorName(e), cudaGetErrorName(e2),
	       memcmp(h.data(), back.data(), h.size()) == 0);
	void *legacy;
	cudaMalloc(&legacy, 8u << 20);
	e = cudaMemcpy(legacy, (void *)b.va, 8u << 20, cudaMemcpyDeviceToDevice);
	e2 = cudaMemcpy((void *)b.va, legacy, 8u << 20, cudaMemcpyDefault);
	cudaError_t e3 = cudaMemset((void *)(b.va + GRAN - 4096), 7, 8192); // across two granules
	cudaError_t e4 = cudaMemcpy2D((void *)b.va, 4096, legacy, 4096, 4096, 512, cudaMemcpyDeviceToDevice);
	cudaDeviceSynchronize();
	printf("FACT cudaMemcpy D2D %s Default %s memset across granules %s Memcpy2D %s\n",
	       cudaGetErrorName(e), cudaGetErrorName(e2), cudaGetErrorName(e3), cudaGetErrorName(e4));
	cudaIpcMemHandle_t ih;
	e = cudaIpcGetMemHandle(&ih, (void *)b.va);
	cudaGetLastError();
	CUipcMemHandle ch;
	r = cuIpcGetMemHandle(&ch, b.va);
	printf("FACT cudaIpcGetMemHandle %s cuIpcGetMemHandle %s\n", cudaGetErrorName(e), err(r));
	e = cudaFree((void *)b.va);
	cudaGetLastError();
	printf("FACT cudaFree on such a range %s\n", cudaGetErrorName(e));
	int n = 0;
	cudaGetDeviceCount(&n);
	printf("FACT devices %d (peer access: %s)\n", n, n > 1 ? "see below" : "not measurable here");
	cudaFree(legacy);
	destroy(b);
}

// Unmapping does not wait for the device: work queued on the old range must be fenced before its
// memory moves. `unfenced`: move under the running kernel (run in a child process of its own: a
// kernel that writes to an unmapped range may poison the context); else wait for an event first.
static void fences(int unfenced)
{
	int rate = 0;
	cudaDeviceGetAttribute(&rate, cudaDevAttrClockRate, 0);
	vblock b = make(4u << 20, GRAN);
	cudaStream_t s;
	cudaEvent_t ev;
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	spin_then_write<<<1, 32, 0, s>>>((long long)rate * 100, (unsigned *)b.va); // 100 ms, then write
	cudaEventRecord(ev, s);
	if (!unfenced)
		cudaEventSynchronize(ev);
	auto t = clk::now();
	move(b);
	double moved = us_since(t);
	cudaError_t e = cudaStreamSynchronize(s);
	unsigned word = 0;
	cudaError_t e2 = cudaMemcpy(&word, (void *)b.va, 4, cudaMemcpyDeviceToHost);
	printf("FACT move %s: %.0f us; the kernel: %s; a copy after: %s; the data at the new range %s\n",
	       unfenced ? "under a running kernel that then writes the old range"
			: "after an event fence on the work of the old range",
	       moved, cudaGetErrorName(e), cudaGetErrorName(e2),
	       word == 0xabcd0000u ? "has the kernel's write" : "lacks the kernel's write");
}

// What giving VMM memory back waits for: with a kernel spinning 200 ms on another stream on the
// first piece of a two-piece range, cuMemUnmap of the other piece, cuMemRelease of its handle,
// and cuMemAddressFree of another, idle range (mapped, unmapped, its handle released), each behind
// a kernel of its own: the call's time, and whether the kernel still ran when it returned.
static void waits()
{
	int rate = 0;
	cudaDeviceGetAttribute(&rate, cudaDevAttrClockRate, 0);
	vblock b = make(2 * GRAN, GRAN), idle = make(GRAN, GRAN);
	const char *what[3] = { "cuMemUnmap of a piece beside the kernel's",
				"cuMemRelease of that piece", "cuMemAddressFree of an idle range" };
	cudaStream_t s;
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	CK(cuMemUnmap(idle.va, idle.size));
	CK(cuMemRelease(idle.chunks[0].first));
	for (int i = 0; i < 3; i++) {
		spin_then_write<<<1, 32, 0, s>>>((long long)rate * 200, (unsigned *)b.va);
		auto t = clk::now();
		CUresult r = i == 0   ? cuMemUnmap(b.va + GRAN, GRAN)
			     : i == 1 ? cuMemRelease(b.chunks[1].first)
				      : cuMemAddressFree(idle.va, idle.size);
		double took = us_since(t);
		cudaError_t running = cudaStreamQuery(s);
		printf("FACT %s, a kernel running on another stream: %s, %.0f us; the kernel %s when it "
		       "returned\n", what[i], err(r), took,
		       running == cudaErrorNotReady ? "still ran" : "was done");
		cudaStreamSynchronize(s);
	}
	CK(cuMemUnmap(b.va, GRAN));
	CK(cuMemRelease(b.chunks[0].first));
	CK(cuMemAddressFree(b.va, b.size));
	cudaStreamDestroy(s);
}

int main(int argc, char **argv)
{
	int child = argc > 1 && strcmp(argv[1], "--unfenced") == 0;

	if (!child) { // the unfenced move first, in a process of its own, before this one starts CUDA
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			execl("/proc/self/exe", argv[0], "--unfenced", (char *)nullptr);
			_exit(127);
		}
		waitpid(pid, nullptr, 0);
	}
	cudaFree(0);
	CUdevice dev;
	cuCtxGetDevice(&dev);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	access_rw.location = prop.location;
	access_rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	size_t gmin = 0, grec = 0;
	CK(cuMemGetAllocationGranularity(&gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CK(cuMemGetAllocationGranularity(&grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	if (child) {
		fences(1);
		return 0;
	}
	printf("FACT granularity minimum_kib %zu recommended_kib %zu\n", gmin >> 10, grec >> 10);
	queries();
	fences(0);
	waits();
	costs();
	return 0;
}
