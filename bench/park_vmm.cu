// park_vmm.cu — the fast park of VMM-backed blocks (shim/park_vmm.c) on the GPU, to choose its
// ring and workers from measurements: N GiB of live blocks made as the pool makes them (512 MiB
// each), a pattern in every word, parked to host memory through the pinned staging ring and
// brought back, the pattern checked. The park's own code runs (compiled in beside
// park_vmm_glue.c), not a copy of it. The ring is made once per process, so each configuration
// runs in a child of its own: two park/unpark cycles, the second one's GB/s reported (the first
// park also pins the ring: its time is shown apart). One GPU, no preload.
// Usage: park_vmm [--budget S] [--grid-gib N] [--sizes A,B,C]
//   the park's defaults at each of --sizes (default 2,8,32), then the grid (slots 2 and 4, slots
//   of 16 and 64 MiB, 1, 2 and 4 memcpy workers) at --grid-gib (default 4); a run that would
//   not fit the budget (default 55 s), the device or the host's free memory is skipped. Prints a
//   `PARK ...` line per run, a `BUS ...` line (pinned copies alone, no memcpy: the ceiling), and
//   a table.
//   park_vmm --child GIB SLOTS SLOT_MIB THREADS [--bus]: one run (SLOTS 0: the defaults).
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" {
#include "park_vmm.h"
int pvb_setup(void);
int pvb_alloc(size_t bytes, unsigned long long *va);
int pvb_free(unsigned long long va);
void pvb_ring(unsigned *slots, size_t *slot_bytes, unsigned *threads);
}

static const size_t MIB = 1u << 20, GIB = 1u << 30, BLOCK = 512 * MIB;

using clk = std::chrono::steady_clock;
static double s_since(clk::time_point t)
{
	return std::chrono::duration<double>(clk::now() - t).count();
}

__device__ static unsigned long long word_of(unsigned long long i, unsigned long long seed)
{
	unsigned long long x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 29);
}

__global__ void fill(unsigned long long *p, size_t n, unsigned long long seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = word_of(i, seed);
}

__global__ void check(const unsigned long long *p, size_t n, unsigned long long seed,
		      unsigned long long *bad)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		if (p[i] != word_of(i, seed))
			atomicAdd(bad, 1ull);
}

// The bus alone: pinned 64 MiB copies of the first block, each way, one stream (GB/s).
static void bus(unsigned long long va, double *dtoh, double *htod)
{
	const size_t n = 64 * MIB, reps = 32;
	void *pin = nullptr;
	CUstream s;

	*dtoh = *htod = 0;
	if (cuMemHostAlloc(&pin, n, 0) != CUDA_SUCCESS ||
	    cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
		return;
	for (int dir = 0; dir < 2; dir++) {
		auto t = clk::now();
		for (size_t r = 0; r < reps; r++)
			if (dir == 0)
				cuMemcpyDtoHAsync(pin, va + (r % 8) * n, n, s);
			else
				cuMemcpyHtoDAsync(va + (r % 8) * n, pin, n, s);
		cuStreamSynchronize(s);
		(dir == 0 ? *dtoh : *htod) = (double)(n * reps) / s_since(t) / 1e9;
	}
	cuStreamDestroy(s);
	cuMemFreeHost(pin);
}

static int child(size_t gib, unsigned slots, size_t slot_mib, unsigned threads, bool with_bus)
{
	const size_t bytes = gib * GIB;
	std::vector<unsigned long long> va;
	struct gp_park_figures f1 = {}, f2 = {}, g1 = {}, g2 = {};
	unsigned long long *bad = nullptr, nbad = 0;
	size_t free0 = 0, free1 = 0, free2 = 0, total = 0, sb = 0;
	double dtoh = 0, htod = 0;
	unsigned s = 0, t = 0;
	int rc, rc1, rc2, rc3, rc4;

	if ((rc = pvb_setup()) != 0) {
		printf("SKIP gib=%zu: no VMM-capable device (CUDA error %d)\n", gib, rc);
		return 0;
	}
	if (slots != 0 && gp_park_vmm_tune(slots, slot_mib * MIB, threads) != 0) {
		printf("ERR gib=%zu: the ring %u x %zu MiB, %u workers refused\n", gib, slots,
		       slot_mib, threads);
		return 1;
	}
	cuMemGetInfo(&free0, &total);
	if (free0 < bytes + GIB) {
		printf("SKIP gib=%zu: %zu MiB free on the device\n", gib, free0 / MIB);
		return 0;
	}
	for (size_t off = 0; off < bytes; off += BLOCK) {
		unsigned long long p = 0;
		size_t n = bytes - off < BLOCK ? bytes - off : BLOCK;

		if ((rc = pvb_alloc(n, &p)) != 0) {
			printf("ERR gib=%zu: a block: CUDA error %d\n", gib, rc);
			return 1;
		}
		va.push_back(p);
	}
	// The bus first: its copies back to the device overwrite the first block's start.
	if (with_bus)
		bus(va[0], &dtoh, &htod);
	for (size_t i = 0; i < va.size(); i++) {
		size_t n = bytes - i * BLOCK < BLOCK ? bytes - i * BLOCK : BLOCK;

		fill<<<1024, 256>>>((unsigned long long *)va[i], n / 8, i + 1);
	}
	cudaMalloc(&bad, sizeof(*bad));
	cudaMemset(bad, 0, sizeof(*bad));
	cudaDeviceSynchronize();
	cuMemGetInfo(&free1, &total);
	rc1 = gp_park_vmm(&f1);
	cuMemGetInfo(&free2, &total);
	rc2 = gp_unpark_vmm(&g1);
	rc3 = gp_park_vmm(&f2);
	rc4 = gp_unpark_vmm(&g2);
	for (size_t i = 0; i < va.size(); i++) {
		size_t n = bytes - i * BLOCK < BLOCK ? bytes - i * BLOCK : BLOCK;

		check<<<1024, 256>>>((const unsigned long long *)va[i], n / 8, i + 1, bad);
	}
	cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost);
	pvb_ring(&s, &sb, &t);
	for (unsigned long long p : va)
		pvb_free(p);
	cudaFree(bad);
	if (with_bus)
		printf("BUS dtoh_gbps=%.1f htod_gbps=%.1f\n", dtoh, htod);
	printf("PARK gib=%zu slots=%u slot_mib=%zu threads=%u park_gbps=%.2f unpark_gbps=%.2f "
	       "first_park_s=%.3f first_unpark_s=%.3f freed_gib=%.2f rc=%d,%d,%d,%d bad=%llu ok=%d\n",
	       gib, s, sb / MIB, t, (double)f2.bytes / (double)f2.park_ns,
	       (double)g2.bytes / (double)g2.unpark_ns, (double)f1.park_ns / 1e9,
	       (double)g1.unpark_ns / 1e9, ((double)free2 - (double)free1) / (double)GIB, rc1, rc2, rc3,
	       rc4, nbad,
	       rc1 == 0 && rc2 == 0 && rc3 == 0 && rc4 == 0 && nbad == 0 && f2.bytes == bytes &&
		       g2.bytes == bytes);
	return 0;
}

static size_t host_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kib = 0;

	while (f != nullptr && fgets(line, sizeof(line), f) != nullptr)
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
			break;
	if (f != nullptr)
		fclose(f);
	return (size_t)kib * 1024;
}

struct run {
	size_t gib;
	unsigned slots;
	size_t slot_mib;
	unsigned threads;
	bool bus;
};

static double field(const std::string &line, const char *key)
{
	size_t at = line.find(std::string(" ") + key + "=");

	return at == std::string::npos ? -1 : atof(line.c_str() + at + strlen(key) + 2);
}

int main(int argc, char **argv)
{
	double budget = 55;
	size_t grid_gib = 4;
	std::string sizes = "2,8,32";
	std::vector<run> runs;
	std::vector<std::string> lines;
	auto t0 = clk::now();
	int status = 0;

	if (argc >= 6 && strcmp(argv[1], "--child") == 0)
		return child(strtoul(argv[2], nullptr, 10), (unsigned)atoi(argv[3]),
			     strtoul(argv[4], nullptr, 10), (unsigned)atoi(argv[5]),
			     argc > 6 && strcmp(argv[6], "--bus") == 0);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--budget") == 0)
			budget = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--grid-gib") == 0)
			grid_gib = strtoul(argv[i + 1], nullptr, 10);
		else if (strcmp(argv[i], "--sizes") == 0)
			sizes = argv[i + 1];
		else {
			fprintf(stderr, "usage: park_vmm [--budget S] [--grid-gib N] [--sizes A,B]\n");
			return 2;
		}
	}
	// The defaults first: the sizes the issue's targets name must not be what the budget cuts.
	for (size_t at = 0; at < sizes.size();) {
		size_t comma = sizes.find(',', at);

		// The bus alone is measured beside the first run of the defaults.
		runs.push_back({ strtoul(sizes.c_str() + at, nullptr, 10), 0, 0, 0, at == 0 });
		at = comma == std::string::npos ? sizes.size() : comma + 1;
	}
	for (unsigned slots : { 2u, 4u })
		for (size_t mib : { (size_t)16, (size_t)64 })
			for (unsigned t : { 1u, 2u, 4u })
				runs.push_back({ grid_gib, slots, mib, t, false });
	for (const run &r : runs) {
		// Guessed from a slow host (memcpy workers at a few GB/s): four passes over the
		// bytes, plus the process's start.
		double guess = 2.0 + (double)r.gib * 4 / 6;
		char cmd[512], buf[1024];
		FILE *p;

		if (s_since(t0) + guess > budget) {
			printf("SKIP gib=%zu slots=%u slot_mib=%zu threads=%u: past the budget\n", r.gib,
			       r.slots, r.slot_mib, r.threads);
			continue;
		}
		if (host_available() < (r.gib + 2) * GIB) {
			printf("SKIP gib=%zu: %zu MiB of host memory available\n", r.gib,
			       host_available() / MIB);
			continue;
		}
		snprintf(cmd, sizeof(cmd), "/proc/%d/exe --child %zu %u %zu %u%s", (int)getpid(),
			 r.gib, r.slots, r.slot_mib, r.threads, r.bus ? " --bus" : "");
		p = popen(cmd, "r");
		while (p != nullptr && fgets(buf, sizeof(buf), p) != nullptr) {
			fputs(buf, stdout);
			if (strncmp(buf, "PARK ", 5) == 0 || strncmp(buf, "BUS ", 4) == 0)
				lines.push_back(buf);
			if (strncmp(buf, "ERR", 3) == 0 || strstr(buf, " ok=0") != nullptr)
				status = 1;
		}
		if (p == nullptr || pclose(p) != 0)
			status = 1;
		fflush(stdout);
	}
	printf("\npark_vmm: GB/s of the second cycle (park: device to host, unpark: back); the "
	       "first park also pins the ring\n");
	printf("%5s %5s %8s %7s %8s %8s %12s %14s %6s %4s\n", "GiB", "slots", "slot_MiB", "workers",
	       "park", "unpark", "1st_park_s", "1st_unpark_s", "freed", "ok");
	for (const std::string &l : lines) {
		if (l.compare(0, 4, "BUS ") == 0) {
			printf("bus alone (pinned 64 MiB copies, one stream): %.1f GB/s to host, %.1f "
			       "back\n", field(l, "dtoh_gbps"), field(l, "htod_gbps"));
			continue;
		}
		printf("%5.0f %5.0f %8.0f %7.0f %8.2f %8.2f %12.3f %14.3f %6.2f %4s\n",
		       field(l, "gib"), field(l, "slots"), field(l, "slot_mib"), field(l, "threads"),
		       field(l, "park_gbps"), field(l, "unpark_gbps"), field(l, "first_park_s"),
		       field(l, "first_unpark_s"), field(l, "freed_gib"),
		       field(l, "ok") == 1 ? "yes" : "NO");
	}
	printf("park_vmm: %s in %.0f s\n", status == 0 ? "ok" : "FAILED", s_since(t0));
	return status;
}
