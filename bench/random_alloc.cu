/* random_alloc.cu — RMM's random_allocations workload: each step draws a size uniform in
 * [1 B, max MiB] and allocates it with probability 0.73 (while fewer than N allocations were made
 * and the live bytes stay under --max-usage-mib), else frees a random live block; 2N steps, then
 * what is still live is freed. The same seeded sequence for every contender.
 * Multi-stream variant (--streams 1,2,3,4): allocation k goes to stream k mod S (non-blocking
 * streams) and a short kernel (--kernel-us) writes into the block on that stream, so frees and
 * reuse happen while kernels run; async frees on the block's stream. --cpu-us N adds N µs of
 * busy host work after every step: a program that keeps the GPU busy while it works on the CPU,
 * where any wait inside cudaMalloc is time lost to the host, not hidden behind the GPU.
 * Run twice, like hitpath: plain it measures "native" and "async" (cudaMallocAsync on a pool
 * whose release threshold is UINT64_MAX); with LD_PRELOAD=libgpupool.so it measures "gpupool"
 * (no stream created: immediate reuse) and then "gpupool-fenced" (after creating one, as real
 * programs do: each reuse waits for an event fence); in the multi-stream variant gpupool is
 * fenced anyway.
 * Each configuration starts cold (the shim's cache released, the async pool trimmed), runs once
 * (cold) and, except native, a second time on the warm cache.
 * Reported: time per pass (including a final device synchronize, excluding the peak readings);
 * peak device memory above the starting point over both passes (device-wide, the runtime's own
 * cudaMemGetInfo, read after every allocation that made a real cudaMalloc; for async the pool's
 * reserved high-water mark, which is what it holds on the device); real cudaMalloc calls (from
 * libbench_count.so when preloaded after the shim, else n/a).
 * Output: "BENCH bench=random_alloc ..." lines (bench/bench_table.awk makes the table). */
#include "bench.cuh"

#define MAX_STREAMS 8

struct opts {
	uint64_t allocs[BENCH_MAX_LIST], max_mib[BENCH_MAX_LIST], streams[BENCH_MAX_LIST];
	int nallocs, nmax, nstreams; /* nstreams 0: the legacy-stream variant, no kernels */
	uint64_t seed, max_usage_mib, kernel_ns, cpu_ns;
	double time_limit_s;
	int kernels, warm;
	int contenders[B_NCONTENDERS];
};

struct block {
	void *p;
	size_t size;
	int stream; /* index into the pass's streams */
};

struct pass {
	uint64_t ns;         /* wall time minus the peak readings */
	uint64_t allocs, frees, failed, errors, real_mallocs;
	int cut;             /* stopped at the time limit */
	int have_counter;
};

static struct block *live;

static uint64_t rng_next(uint64_t *s) /* splitmix64: the same sequence in every process */
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static __device__ uint64_t globaltimer(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Busy for `ns`, then writes the first and last byte of the block. */
__global__ void touch_kernel(unsigned char *p, size_t n, uint64_t ns)
{
	uint64_t t0 = globaltimer();

	if (threadIdx.x != 0)
		return;
	while (globaltimer() - t0 < ns)
		;
	p[0] = 1;
	p[n - 1] = 1;
}

/* The host's own work between steps (--cpu-us). */
static void host_work(uint64_t ns)
{
	uint64_t t0 = bench_now_ns();

	while (bench_now_ns() - t0 < ns)
		;
}

static int do_alloc(enum bench_contender c, void **p, size_t size, cudaStream_t s)
{
	cudaError_t rc = c == B_ASYNC ? cudaMallocAsync(p, size, s) : cudaMalloc(p, size);

	if (rc != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	return 0;
}

static int do_free(enum bench_contender c, void *p, cudaStream_t s)
{
	cudaError_t rc = c == B_ASYNC ? cudaFreeAsync(p, s) : cudaFree(p);

	if (rc != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	return 0;
}

/* One pass of the workload. `m` accumulates the peak across passes. */
static void run_pass(enum bench_contender c, const struct opts *o, uint64_t n, uint64_t max_mib,
		     cudaStream_t *streams, int nstreams, struct bench_peak *m, struct pass *r)
{
	uint64_t rng = o->seed, max_bytes = max_mib * BENCH_MIB, usage = o->max_usage_mib * BENCH_MIB;
	uint64_t nlive = 0, live_bytes = 0, count = 0, meas0 = m->meas_ns, t0, before = 0;
	int launch = nstreams > 0 && o->kernels;

	memset(r, 0, sizeof(*r));
	r->have_counter = m->count != NULL;
	if (m->count)
		before = m->count();
	t0 = bench_now_ns();
	for (uint64_t i = 0; i < 2 * n; i++) {
		size_t size = (size_t)(rng_next(&rng) % max_bytes) + 1;
		int alloc = 1;

		if ((i & 63) == 0 && (double)(bench_now_ns() - t0) > o->time_limit_s * 1e9) {
			r->cut = 1;
			break;
		}
		if (nlive > 0)
			alloc = rng_next(&rng) % 100 < 73 && count < n && live_bytes + size < usage;
		else if (count >= n)
			break;
		if (alloc) {
			struct block *b = &live[nlive];
			b->stream = nstreams ? (int)(count % (uint64_t)nstreams) : 0;
			b->size = size;
			cudaStream_t s = nstreams ? streams[b->stream] : 0;
			if (do_alloc(c, &b->p, size, s) == 0) {
				nlive++;
				count++;
				live_bytes += size;
				if (launch) {
					touch_kernel<<<1, 32, 0, s>>>((unsigned char *)b->p, size, o->kernel_ns);
					if (cudaGetLastError() != cudaSuccess)
						r->errors++;
				}
				if (c != B_ASYNC)
					bench_peak_note(m);
			} else {
				r->failed++;
				alloc = 0;
			}
		}
		if (!alloc && nlive > 0) {
			uint64_t k = rng_next(&rng) % nlive;
			struct block b = live[k];
			live[k] = live[--nlive];
			live_bytes -= b.size;
			r->errors += do_free(c, b.p, nstreams ? streams[b.stream] : 0) != 0;
			r->frees++;
		}
		if (o->cpu_ns)
			host_work(o->cpu_ns);
	}
	while (nlive > 0) {
		struct block b = live[--nlive];
		r->errors += do_free(c, b.p, nstreams ? streams[b.stream] : 0) != 0;
		r->frees++;
	}
	if (cudaDeviceSynchronize() != cudaSuccess) {
		cudaGetLastError();
		r->errors++;
	}
	r->ns = bench_now_ns() - t0 - (m->meas_ns - meas0);
	r->allocs = count;
	if (m->count)
		r->real_mallocs = m->count() - before;
}

static void run_config(enum bench_contender c, const struct opts *o, uint64_t n, uint64_t max_mib,
		       int nstreams)
{
	cudaStream_t streams[MAX_STREAMS] = { 0 };
	struct pass cold, warm;
	struct bench_peak m;
	size_t base, peak;
	int have_warm = o->warm && c != B_NATIVE;

	for (int i = 0; i < nstreams; i++)
		if (cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking) != cudaSuccess) {
			fprintf(stderr, "random_alloc: cannot create stream %d\n", i);
			cudaGetLastError();
			return;
		}
	/* Start cold and from the same place: nothing cached by either pool, nothing pending. */
	cudaDeviceSynchronize();
	bench_shim_release();
	bench_async_trim();
	base = bench_device_used();
	bench_peak_start(&m, c);
	run_pass(c, o, n, max_mib, streams, nstreams, &m, &cold);
	if (have_warm)
		run_pass(c, o, n, max_mib, streams, nstreams, &m, &warm);
	peak = c == B_ASYNC ? bench_async_reserved_high() : m.peak > base ? m.peak - base : 0;
	printf("BENCH bench=random_alloc streams=%d allocs=%llu max_mib=%llu contender=%s "
	       "cold_ms=%.2f warm_ms=%.2f peak_mib=%.1f real_mallocs=%lld real_mallocs_warm=%lld "
	       "done=%llu failed=%llu errors=%llu cut=%d\n",
	       nstreams, (unsigned long long)n, (unsigned long long)max_mib, bench_names[c],
	       (double)cold.ns / 1e6, have_warm ? (double)warm.ns / 1e6 : -1.0, bench_mib(peak),
	       c != B_ASYNC && cold.have_counter ? (long long)cold.real_mallocs : -1LL,
	       have_warm && c != B_ASYNC && warm.have_counter ? (long long)warm.real_mallocs : -1LL,
	       (unsigned long long)cold.allocs,
	       (unsigned long long)(cold.failed + (have_warm ? warm.failed : 0)),
	       (unsigned long long)(cold.errors + (have_warm ? warm.errors : 0)),
	       cold.cut || (have_warm && warm.cut));
	fflush(stdout);
	for (int i = 0; i < nstreams; i++)
		cudaStreamDestroy(streams[i]);
	cudaGetLastError();
}

static void usage(void)
{
	fprintf(stderr,
		"usage: random_alloc [--allocs 10000,100000] [--max-mib 1,64,1024] [--streams 1,2,3,4]\n"
		"         [--kernel-us 20] [--no-kernels] [--cpu-us 0] [--seed 1] [--time-limit 20] [--max-usage-mib 16000]\n"
		"         [--no-warm] [--contenders native,async,gpupool,gpupool-fenced]\n");
	exit(2);
}

static int parse_contenders(const char *s, int *on)
{
	char buf[256], *tok, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", s);
	memset(on, 0, sizeof(int) * B_NCONTENDERS);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int found = 0;
		for (int c = 0; c < B_NCONTENDERS; c++)
			if (!strcmp(tok, bench_names[c]))
				on[c] = found = 1;
		if (!found)
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	int shim = bench_shim_loaded(), given_contenders = 0;
	uint64_t most = 0;
	double kernel_us = 20, cpu_us = 0;

	bench_exact_meminfo(argv);

	memset(&o, 0, sizeof(o));
	o.allocs[0] = 10000, o.allocs[1] = 100000, o.nallocs = 2;
	o.max_mib[0] = 1, o.max_mib[1] = 64, o.max_mib[2] = 1024, o.nmax = 3;
	o.seed = 1, o.max_usage_mib = 16000, o.time_limit_s = 20, o.kernels = 1, o.warm = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--no-kernels")) {
			o.kernels = 0;
		} else if (!strcmp(a, "--no-warm")) {
			o.warm = 0;
		} else if (v == NULL) {
			usage();
		} else if (!strcmp(a, "--allocs")) {
			o.nallocs = bench_parse_list(v, o.allocs, BENCH_MAX_LIST), i++;
		} else if (!strcmp(a, "--max-mib")) {
			o.nmax = bench_parse_list(v, o.max_mib, BENCH_MAX_LIST), i++;
		} else if (!strcmp(a, "--streams")) {
			o.nstreams = bench_parse_list(v, o.streams, BENCH_MAX_LIST), i++;
			if (o.nstreams == 0)
				usage();
		} else if (!strcmp(a, "--kernel-us")) {
			kernel_us = atof(v), i++;
		} else if (!strcmp(a, "--cpu-us")) {
			cpu_us = atof(v), i++;
		} else if (!strcmp(a, "--seed")) {
			o.seed = strtoull(v, NULL, 10), i++;
		} else if (!strcmp(a, "--time-limit")) {
			o.time_limit_s = atof(v), i++;
		} else if (!strcmp(a, "--max-usage-mib")) {
			o.max_usage_mib = strtoull(v, NULL, 10), i++;
		} else if (!strcmp(a, "--contenders")) {
			if (parse_contenders(v, o.contenders) != 0)
				usage();
			given_contenders = 1, i++;
		} else {
			usage();
		}
	}
	o.kernel_ns = (uint64_t)(kernel_us * 1000);
	if (cpu_us < 0 || kernel_us < 0)
		usage();
	o.cpu_ns = (uint64_t)(cpu_us * 1000);
	for (int i = 0; i < o.nallocs; i++)
		most = o.allocs[i] > most ? o.allocs[i] : most;
	for (int i = 0; i < o.nstreams; i++)
		if (o.streams[i] < 1 || o.streams[i] > MAX_STREAMS)
			usage();
	for (int i = 0; i < o.nmax; i++)
		if (o.max_mib[i] < 1)
			usage();
	if (o.nallocs == 0 || o.nmax == 0 || most == 0 || o.time_limit_s <= 0)
		usage();
	if (!given_contenders) {
		o.contenders[B_NATIVE] = o.contenders[B_ASYNC] = !shim;
		o.contenders[B_POOL] = shim;
		/* With --streams the process creates streams anyway: gpupool is the fenced path. */
		o.contenders[B_POOL_FENCED] = shim && o.nstreams == 0;
	}
	live = (struct block *)calloc(most, sizeof(*live));
	if (live == NULL)
		return 1;
	if (cudaDeviceSynchronize() != cudaSuccess) { /* creates the context */
		fprintf(stderr, "random_alloc: no CUDA context\n");
		return 1;
	}
	if (o.nstreams && o.kernels) { /* load the kernel now, not inside the first measurement */
		void *p = NULL;
		if (cudaMalloc(&p, 64) == cudaSuccess) {
			touch_kernel<<<1, 32>>>((unsigned char *)p, 64, 0);
			cudaDeviceSynchronize();
			cudaFree(p);
		}
		cudaGetLastError();
	}
	if (o.contenders[B_ASYNC] && bench_async_warm() != 0) {
		printf("# async: cannot set the default pool's release threshold; skipped\n");
		o.contenders[B_ASYNC] = 0;
	}
	printf("# random_alloc: %s, %s, kernels %.0f us, host work %.0f us a step, seed %llu, "
	       "real cudaMalloc count %s\n",
	       shim ? "libgpupool.so preloaded" : "native runtime",
	       o.nstreams ? (o.kernels ? "multi-stream with kernels" : "multi-stream, NO kernels")
			  : "legacy stream",
	       o.nstreams && o.kernels ? kernel_us : 0.0, cpu_us, (unsigned long long)o.seed,
	       bench_counter() ? "from libbench_count.so" : "not available");
	fflush(stdout);
	/* Contender by contender: gpupool-fenced last, since a created stream is for good. */
	for (int c = 0; c < B_NCONTENDERS; c++) {
		cudaStream_t fence_on = NULL;
		if (!o.contenders[c])
			continue;
		if (c == B_POOL_FENCED && cudaStreamCreateWithFlags(&fence_on, cudaStreamNonBlocking) != cudaSuccess) {
			cudaGetLastError();
			continue;
		}
		for (int si = 0; si < (o.nstreams ? o.nstreams : 1); si++)
			for (int ai = 0; ai < o.nallocs; ai++)
				for (int mi = 0; mi < o.nmax; mi++)
					run_config((enum bench_contender)c, &o, o.allocs[ai], o.max_mib[mi],
						   o.nstreams ? (int)o.streams[si] : 0);
		if (fence_on)
			cudaStreamDestroy(fence_on);
	}
	bench_shim_release();
	bench_async_trim();
	free(live);
	return 0;
}
