/* gpu_basic.cu — the shim on a real GPU, one process, no stream created (one stream order):
 * caching (1000 pairs of 1 MiB reuse one block, data written by kernels reads back right),
 * bad frees (double free, interior and host pointers, NULL, cudaMallocAsync pointers),
 * SIGUSR1 release (~4 GiB back to the driver within 5 s, a live block keeps its data) and the
 * OOM retry (a cache-filled device still serves a large request, with no error left behind);
 * built with the static runtime, that its cudaMalloc and cudaFree come to the pool directly.
 * Run under LD_PRELOAD=libgpupool.so (ctest does); without it every check fails. */
#include "gpu_common.cuh"

#include <signal.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define PAIRS 1000

static void caching(void)
{
	const size_t size = GT_MIB;
	void *prev = NULL, *p = NULL;
	size_t fmin = (size_t)-1, fmax = 0, f;
	int changes = 0, data_ok = 1, calls_ok = 1, checks = 0;

	for (int i = 0; i < PAIRS; i++) {
		if (!gt_ok(cudaMalloc(&p, size), "cudaMalloc(1 MiB)")) {
			calls_ok = 0;
			break;
		}
		if (i == 0 || p != prev)
			changes++; /* 1 means every pair got the same block */
		prev = p;
		if (i % 100 == 0 || i == PAIRS - 1) {
			uint32_t v = 0xC0DE0000u + (uint32_t)i;
			checks++;
			if (!gt_fill(p, size, v, 0) || gt_count_ne(p, size, v) != 0)
				data_ok = 0;
		}
		f = gt_mem_free(NULL);
		fmin = f < fmin ? f : fmin;
		fmax = f > fmax ? f : fmax;
		if (!gt_ok(cudaFree(p), "cudaFree(1 MiB)")) {
			calls_ok = 0;
			break;
		}
	}
	gt_check(calls_ok && changes == 1, "caching: one block",
		 "%d pairs of 1 MiB: the pointer changed %d time(s) (want 1: the first)", PAIRS,
		 changes);
	gt_check(calls_ok && fmax - fmin <= 4 * GT_MIB, "caching: free memory flat",
		 "device free memory moved by %.1f MiB over %d pairs (limit 4 MiB)",
		 gt_mib(fmax - fmin), PAIRS);
	gt_check(calls_ok && data_ok, "caching: data",
		 "%d kernel-written patterns read back %s", checks, data_ok ? "right" : "WRONG");
}

/* The pooled pair's time, for the log (bench/hitpath.cu sets it beside the native one). */
static void timing(void)
{
	void *p;
	uint64_t t0, pool_ns;

	cudaMalloc(&p, GT_MIB); /* warm */
	cudaFree(p);
	t0 = gt_now_ns();
	for (int i = 0; i < PAIRS; i++) {
		cudaMalloc(&p, GT_MIB);
		cudaFree(p);
	}
	pool_ns = (gt_now_ns() - t0) / PAIRS;
	gt_info("timing", "1 MiB cudaMalloc+cudaFree pair: pooled %llu ns", (unsigned long long)pool_ns);
}

static void bad_frees(void)
{
	gt_release_fn release = gt_shim_release();
	void *p = NULL, *q = NULL, *a = NULL;
	unsigned long long released = 0;
	cudaError_t e;
	int host_var = 0;

	/* A double free of a cached block: the runtime's error for it, and the pool unharmed. */
	if (gt_ok(cudaMalloc(&p, 64 * 1024), "cudaMalloc(64 KiB)") &&
	    gt_ok(cudaFree(p), "cudaFree(64 KiB)")) {
		e = cudaFree(p);
		cudaGetLastError();
		gt_check(e == cudaErrorInvalidValue, "double free",
			 "second cudaFree returned %d (want %d cudaErrorInvalidValue)", (int)e,
			 (int)cudaErrorInvalidValue);
		if (gt_ok(cudaMalloc(&q, 64 * 1024), "cudaMalloc after double free")) {
			gt_fill(q, 64 * 1024, 0x0BADF00Du, 0);
			gt_check(gt_count_ne(q, 64 * 1024, 0x0BADF00Du) == 0, "pool intact after double free",
				 "next block %s the freed one, data right", q == p ? "is" : "is not");
			gt_ok(cudaFree(q), "cudaFree after double free");
		}
	}

	e = cudaFree(NULL);
	gt_check(e == cudaSuccess, "cudaFree(NULL)", "returned %d", (int)e);

	/* A pointer inside a live block is not a block: refused, and the block stays live. */
	if (gt_ok(cudaMalloc(&p, GT_MIB), "cudaMalloc(1 MiB)")) {
		gt_fill(p, GT_MIB, 0x11112222u, 0);
		e = cudaFree((char *)p + 4096);
		cudaGetLastError();
		gt_check(e != cudaSuccess, "interior pointer", "cudaFree(p + 4096) returned %d", (int)e);
		gt_check(gt_count_ne(p, GT_MIB, 0x11112222u) == 0, "interior pointer: block intact",
			 "data of the live block unchanged");
		gt_check(cudaFree(p) == cudaSuccess, "interior pointer: real free",
			 "cudaFree(p) still succeeds");
	}

	e = cudaFree(&host_var);
	cudaGetLastError();
	gt_check(e != cudaSuccess, "host pointer", "cudaFree(&stack variable) returned %d", (int)e);

	/* cudaMallocAsync is not pooled: its pointer goes to the real cudaFree, which accepts it. */
	if (gt_ok(cudaMallocAsync(&a, GT_MIB, 0), "cudaMallocAsync(1 MiB)")) {
		gt_fill(a, GT_MIB, 0xA5A5A5A5u, 0);
		gt_check(gt_count_ne(a, GT_MIB, 0xA5A5A5A5u) == 0, "cudaMallocAsync data",
			 "pattern read back");
		e = cudaFree(a);
		gt_check(e == cudaSuccess && cudaGetLastError() == cudaSuccess,
			 "cudaFree(cudaMallocAsync pointer)", "returned %d", (int)e);
	}

	/* Freed, released to the driver, freed again: the runtime's own answer, no crash. */
	if (release != NULL && gt_ok(cudaMalloc(&p, 256 * 1024), "cudaMalloc(256 KiB)") &&
	    gt_ok(cudaFree(p), "cudaFree(256 KiB)")) {
		int rc = release(-1, &released);
		gt_check(rc == 0 && released >= 256 * 1024, "gpupool_release",
			 "returned %d, %.1f MiB released", rc, gt_mib(released));
		e = cudaFree(p);
		cudaGetLastError();
		gt_check(e != cudaSuccess, "double free after release",
			 "cudaFree of a released block returned %d", (int)e);
	}
	gt_check(cudaGetLastError() == cudaSuccess, "no error left", "cudaGetLastError() clean");
}

/* The shim's cudaMemGetInfo counts cached blocks as free unless told not to (default: on). */
static int cached_reported_free(void)
{
	const char *v = getenv("GPUPOOL_REPORT_CACHED_AS_FREE");

	return v == NULL || !(strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 ||
			      strcasecmp(v, "no") == 0 || strcasecmp(v, "off") == 0);
}

static void sigusr1_release(void)
{
	enum { NBLK = 64 };
	const size_t blk = 64 * GT_MIB, live_size = 16 * GT_MIB;
	const size_t want = (size_t)(3.9 * (double)GT_GIB);
	void *b[NBLK], *live = NULL;
	size_t f0, f1, f2, f3 = 0, r2;
	uint64_t t0, waited_ms;
	int n = 0;

	if (!gt_ok(cudaMalloc(&live, live_size), "cudaMalloc(live 16 MiB)"))
		return;
	gt_fill(live, live_size, 0x1234ABCDu, 0);
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	f0 = gt_mem_free(NULL);
	for (n = 0; n < NBLK; n++)
		if (!gt_ok(cudaMalloc(&b[n], blk), "cudaMalloc(64 MiB)"))
			break;
	f1 = gt_mem_free(NULL);
	for (int i = 0; i < n; i++)
		gt_ok(cudaFree(b[i]), "cudaFree(64 MiB)");
	f2 = gt_mem_free(NULL);
	r2 = gt_mem_free_reported();
	if (cached_reported_free())
		gt_check(r2 >= f2 + (size_t)NBLK * blk - blk, "cudaMemGetInfo counts cached as free",
			 "reported %.2f GiB, driver %.2f GiB (want >= 4 GiB more)", gt_gib(r2),
			 gt_gib(f2));
	else
		gt_check(r2 <= f2 + blk, "cudaMemGetInfo reports the driver's figure",
			 "reported %.2f GiB, driver %.2f GiB (GPUPOOL_REPORT_CACHED_AS_FREE off)",
			 gt_gib(r2), gt_gib(f2));
	gt_info("release: before", "%d x 64 MiB allocated: free %.2f -> %.2f GiB; after cudaFree "
		"%.2f GiB", n, gt_gib(f0), gt_gib(f1), gt_gib(f2));
	gt_check(n == NBLK && f2 <= f1 + blk, "release: cudaFree caches",
		 "free memory after the frees rose by %.1f MiB (limit 64)",
		 f2 > f1 ? gt_mib(f2 - f1) : 0.0);

	t0 = gt_now_ns();
	raise(SIGUSR1);
	while (gt_now_ns() - t0 < 5000000000ull) {
		f3 = gt_mem_free(NULL);
		if (f3 >= f2 + want)
			break;
		usleep(10000);
	}
	waited_ms = (gt_now_ns() - t0) / 1000000;
	gt_check(f3 >= f2 + want, "release: SIGUSR1",
		 "free memory rose by %.2f GiB in %llu ms (want >= 3.9 GiB within 5 s); "
		 "cudaMemGetInfo now reports %.2f GiB",
		 f3 > f2 ? gt_gib(f3 - f2) : 0.0, (unsigned long long)waited_ms,
		 gt_gib(gt_mem_free_reported()));
	gt_check(gt_count_ne(live, live_size, 0x1234ABCDu) == 0, "release: live block kept",
		 "16 MiB live block still holds its pattern");
	gt_ok(cudaFree(live), "cudaFree(live)");
	gt_check(cudaMalloc(&b[0], blk) == cudaSuccess && cudaFree(b[0]) == cudaSuccess,
		 "release: pool usable after", "64 MiB allocated and freed again");
}

static void oom_retry(void)
{
	enum { MAXBLK = 1024 };
	static void *b[MAXBLK];
	size_t total = 0, f0 = gt_mem_free(&total), left, left_cached, big, after = 0;
	size_t target = f0 / 10 * 9;
	int n = 0;
	void *p = NULL;
	cudaError_t e, last;

	while ((size_t)(n + 1) * GT_GIB <= target && n < MAXBLK &&
	       cudaMalloc(&b[n], GT_GIB) == cudaSuccess)
		n++;
	cudaGetLastError();
	left = gt_mem_free(NULL);
	for (int i = 0; i < n; i++)
		gt_ok(cudaFree(b[i]), "cudaFree(1 GiB)");
	left_cached = gt_mem_free(NULL);
	/* Bigger than what the driver has left, and of another size class than 1 GiB. */
	big = (left_cached / (2 * GT_MIB)) * (2 * GT_MIB) + 2 * GT_GIB;
	gt_info("oom: filled", "total %.1f GiB, free %.1f GiB; %d x 1 GiB cached, %.1f GiB left; "
		"asking %.1f GiB", gt_gib(total), gt_gib(f0), n, gt_gib(left_cached), gt_gib(big));
	gt_check(n >= 1 && left_cached <= left + GT_GIB, "oom: cache holds the blocks",
		 "free memory after freeing %d GiB: %.1f GiB (was %.1f)", n, gt_gib(left_cached),
		 gt_gib(left));
	cudaGetLastError();
	e = cudaMalloc(&p, big);
	last = cudaGetLastError();
	gt_check(e == cudaSuccess, "oom: retry succeeds", "cudaMalloc(%.1f GiB) returned %d",
		 gt_gib(big), (int)e);
	gt_check(last == cudaSuccess, "oom: no sticky error",
		 "cudaGetLastError() after the retried cudaMalloc returned %d", (int)last);
	if (e == cudaSuccess) {
		gt_check(cudaMemset(p, 0x3C, big) == cudaSuccess &&
				 cudaDeviceSynchronize() == cudaSuccess,
			 "oom: block usable", "cudaMemset over the whole %.1f GiB", gt_gib(big));
		after = gt_mem_free(NULL);
		gt_info("oom: after", "free %.1f GiB with the %.1f GiB block live", gt_gib(after),
			gt_gib(big));
		gt_ok(cudaFree(p), "cudaFree(big)");
	}
	cudaGetLastError();
}

/* Built with the static runtime (gpu_basic_static): the static runtime door is open, so the
 * runtime's own cudaMalloc and cudaFree, linked into this program, begin with gpupool's jump
 * (jmp *0(%rip): ff 25 00 00 00 00) and the pairs above never entered them. */
static void static_door(void)
{
#if defined(GT_STATIC_RUNTIME) && defined(__x86_64__)
	static const unsigned char jump[] = { 0xff, 0x25, 0, 0, 0, 0 };
	cudaError_t (*m)(void **, size_t) = cudaMalloc;
	cudaError_t (*f)(void *) = cudaFree;
	const unsigned char *mb = reinterpret_cast<const unsigned char *>(m);
	const unsigned char *fb = reinterpret_cast<const unsigned char *>(f);

	gt_check(memcmp(mb, jump, sizeof(jump)) == 0 && memcmp(fb, jump, sizeof(jump)) == 0,
		 "static runtime door: open", "cudaMalloc begins %02x %02x, cudaFree %02x %02x",
		 mb[0], mb[1], fb[0], fb[1]);
#endif
}

int main(void)
{
	gt_test = "gpu_basic";
	if (!gt_require_shim() || !gt_context())
		return gt_finish(); /* SIGUSR1 would kill a process without the shim */
	static_door();
	caching();
	timing();
	bad_frees();
	sigusr1_release();
	oom_retry();
	return gt_finish();
}
