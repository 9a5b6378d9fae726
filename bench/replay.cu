/* replay.cu — replays an allocation trace in RMM's CSV format (Thread,Time,Action,Pointer,Size,
 * Stream: what rmm::mr::logging_resource_adaptor and GPUPOOL_TRACE write) against a contender:
 * one replay thread per trace thread, each doing its events in file order; a free waits until the
 * allocation it frees was replayed (it may be another thread's); the original pointers map to the
 * new ones through an allocation number given while parsing (addresses are reused in a trace).
 * Rows with "allocate failure" and frees of pointers the trace never allocated are skipped;
 * blocks never freed are freed after the timing.
 * Run twice, like hitpath: plain it measures "native" and "async" (legacy stream, warm pool);
 * with LD_PRELOAD=libgpupool.so, "gpupool" and then, after creating a stream, "gpupool-fenced"
 * (see random_alloc.cu). Each contender replays cold (caches released) and, except native, once
 * more warm. Reported like random_alloc: time, peak device memory above the start, real
 * cudaMalloc calls.
 *   replay [--time-limit 20] [--no-warm] [--contenders native,async,...] FILE...
 *   replay --generate FILE [--gen-threads 2] [--gen-steps 150] [--seed 1]
 * --generate writes a synthetic trace (an inference-like loop over layers with varying token
 * counts, long-lived blocks freed later, some by the other thread) for when no real one is at
 * hand. Output: "BENCH bench=replay ..." lines (bench/bench_table.awk makes the table). */
#include "bench.cuh"

#include <atomic>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <unordered_map>
#include <vector>

#define MAX_THREADS 64
#define FAILED ((uintptr_t)1) /* slot value: the allocation failed, or its block was freed */

struct trace {
	std::string name;
	int nthreads;
	std::vector<uint32_t> ev[MAX_THREADS]; /* allocation number << 1 | is_free */
	std::vector<uint64_t> size;            /* per allocation number, bytes */
	std::vector<uint8_t> owner;            /* replay thread that allocates it */
	uint64_t rows, frees, skipped_failures, unmatched_frees, leaked, cross_frees, peak_live;
};

/* ---- parsing ------------------------------------------------------------------------------ */

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t' || *s == '"')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '"'))
		*--e = '\0';
	return s;
}

/* Splits a line in place at commas; returns the number of fields (at most max). */
static int split(char *line, char **f, int max)
{
	int n = 0;

	f[n++] = line;
	for (char *p = line; *p && n < max; p++)
		if (*p == ',') {
			*p = '\0';
			f[n++] = p + 1;
		}
	for (int i = 0; i < n; i++)
		f[i] = trim(f[i]);
	return n;
}

static int parse(const char *path, struct trace *t)
{
	enum { THREAD, ACTION, POINTER, SIZE, NCOLS };
	static const char *const cols[NCOLS] = { "Thread", "Action", "Pointer", "Size" };
	int idx[NCOLS] = { -1, -1, -1, -1 }, maxidx = 0, header = 1;
	std::unordered_map<uint64_t, uint32_t> live_ptr; /* original pointer -> allocation number */
	std::unordered_map<uint64_t, int> tids;
	uint64_t live = 0;
	char line[4096], *f[32];
	FILE *fp = fopen(path, "r");

	if (fp == NULL) {
		fprintf(stderr, "replay: cannot open %s\n", path);
		return -1;
	}
	const char *base = strrchr(path, '/');
	t->name = base ? base + 1 : path;
	t->nthreads = 0;
	t->rows = t->frees = t->skipped_failures = t->unmatched_frees = t->cross_frees = t->peak_live = 0;
	while (fgets(line, sizeof(line), fp)) {
		char *s = trim(line);
		int n;

		if (*s == '\0' || *s == '#')
			continue;
		n = split(s, f, 32);
		if (header) {
			for (int c = 0; c < NCOLS; c++)
				for (int i = 0; i < n; i++)
					if (!strcmp(f[i], cols[c]))
						idx[c] = i;
			for (int c = 0; c < NCOLS; c++) {
				if (idx[c] < 0) {
					fprintf(stderr, "replay: %s: no column %s in the header\n", path, cols[c]);
					fclose(fp);
					return -1;
				}
				maxidx = idx[c] > maxidx ? idx[c] : maxidx;
			}
			header = 0;
			continue;
		}
		if (n <= maxidx)
			continue;
		t->rows++;
		const char *act = f[idx[ACTION]];
		int is_free = !strcmp(act, "free");
		if (!is_free && strcmp(act, "allocate")) {
			t->skipped_failures++; /* "allocate failure", "free failure" */
			continue;
		}
		uint64_t tid = strtoull(f[idx[THREAD]], NULL, 10);
		uint64_t ptr = strtoull(f[idx[POINTER]], NULL, 16);
		uint64_t size = strtoull(f[idx[SIZE]], NULL, 10);
		auto ti = tids.find(tid);
		int th;
		if (ti == tids.end()) {
			th = (int)(tids.size() % MAX_THREADS); /* more threads than that: folded */
			tids.emplace(tid, th);
			if (t->nthreads < MAX_THREADS)
				t->nthreads++;
		} else {
			th = ti->second;
		}
		if (!is_free) {
			uint32_t a = (uint32_t)t->size.size();
			t->size.push_back(size);
			t->owner.push_back((uint8_t)th);
			live_ptr[ptr] = a; /* a pointer still live here was never freed: it leaks */
			t->ev[th].push_back(a << 1);
			live += size;
			t->peak_live = live > t->peak_live ? live : t->peak_live;
		} else {
			auto it = live_ptr.find(ptr);
			if (it == live_ptr.end()) {
				t->unmatched_frees++;
				continue;
			}
			uint32_t a = it->second;
			live_ptr.erase(it);
			live -= t->size[a];
			t->frees++;
			t->cross_frees += t->owner[a] != th;
			t->ev[th].push_back(a << 1 | 1);
		}
	}
	fclose(fp);
	t->leaked = t->size.size() - t->frees;
	if (header || t->size.empty()) {
		fprintf(stderr, "replay: %s: no allocations\n", path);
		return -1;
	}
	return 0;
}

/* ---- replaying ---------------------------------------------------------------------------- */

struct shared {
	const struct trace *t;
	enum bench_contender c;
	std::atomic<uintptr_t> *slot; /* per allocation number: 0 not yet, FAILED, or the block */
	std::atomic<int> abort;
	std::atomic<size_t> peak;     /* device-wide used, bytes */
	bench_count_fn count;
	int every;                    /* read after every allocation (bench_peak_every_alloc) */
	double limit_s;
	pthread_barrier_t go;
};

struct worker {
	pthread_t tid;
	int id;
	struct shared *sh;
	uint64_t t0, t1, meas_ns, failed, errors;
	char pad[64];
};

static void note_peak(struct shared *sh, uint64_t *last, uint64_t *meas)
{
	uint64_t c = 0, t0;
	size_t u, old;

	if (sh->count) {
		c = sh->count();
		if (c == *last && !sh->every)
			return;
	}
	t0 = bench_now_ns();
	u = bench_device_used();
	old = sh->peak.load(std::memory_order_relaxed);
	while (u > old && !sh->peak.compare_exchange_weak(old, u))
		;
	*last = c;
	*meas += bench_now_ns() - t0;
}

static void *replay_thread(void *arg)
{
	struct worker *w = (struct worker *)arg;
	struct shared *sh = w->sh;
	const std::vector<uint32_t> &ev = sh->t->ev[w->id];
	uint64_t last = sh->count ? sh->count() : 0;

	pthread_barrier_wait(&sh->go);
	w->t0 = bench_now_ns();
	for (size_t i = 0; i < ev.size(); i++) {
		uint32_t a = ev[i] >> 1;
		if ((i & 255) == 0 && (double)(bench_now_ns() - w->t0) > sh->limit_s * 1e9)
			sh->abort.store(1);
		if (sh->abort.load(std::memory_order_relaxed))
			break;
		if (!(ev[i] & 1)) {
			void *p = NULL;
			cudaError_t rc = sh->c == B_ASYNC ? cudaMallocAsync(&p, sh->t->size[a], 0)
							   : cudaMalloc(&p, sh->t->size[a]);
			if (rc != cudaSuccess) {
				cudaGetLastError();
				w->failed++;
				sh->slot[a].store(FAILED, std::memory_order_release);
				continue;
			}
			sh->slot[a].store((uintptr_t)p, std::memory_order_release);
			if (sh->c != B_ASYNC)
				note_peak(sh, &last, &w->meas_ns);
			continue;
		}
		uintptr_t v = sh->slot[a].load(std::memory_order_acquire);
		for (int spins = 0; v == 0; spins++) { /* another thread's allocation, not replayed yet */
			if (sh->abort.load(std::memory_order_relaxed))
				break;
			if (spins > 64)
				sched_yield();
			v = sh->slot[a].load(std::memory_order_acquire);
		}
		if (v <= FAILED)
			continue;
		cudaError_t rc = sh->c == B_ASYNC ? cudaFreeAsync((void *)v, 0) : cudaFree((void *)v);
		if (rc != cudaSuccess) {
			cudaGetLastError();
			w->errors++;
		}
		sh->slot[a].store(FAILED, std::memory_order_relaxed);
	}
	w->t1 = bench_now_ns();
	return NULL;
}

struct pass {
	uint64_t ns, failed, errors, real_mallocs;
	int cut;
};

static void run_pass(struct shared *sh, struct pass *r)
{
	static struct worker w[MAX_THREADS];
	const struct trace *t = sh->t;
	uint64_t before = sh->count ? sh->count() : 0, t0 = UINT64_MAX, t1 = 0, meas = 0;

	memset(r, 0, sizeof(*r));
	for (size_t a = 0; a < t->size.size(); a++)
		sh->slot[a].store(0);
	sh->abort.store(0);
	pthread_barrier_init(&sh->go, NULL, (unsigned)t->nthreads);
	for (int i = 0; i < t->nthreads; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = i;
		w[i].sh = sh;
		if (pthread_create(&w[i].tid, NULL, replay_thread, &w[i]) != 0) {
			fprintf(stderr, "replay: cannot start thread %d\n", i);
			exit(1);
		}
	}
	for (int i = 0; i < t->nthreads; i++) {
		pthread_join(w[i].tid, NULL);
		t0 = w[i].t0 < t0 ? w[i].t0 : t0;
		t1 = w[i].t1 > t1 ? w[i].t1 : t1;
		meas = w[i].meas_ns > meas ? w[i].meas_ns : meas;
		r->failed += w[i].failed;
		r->errors += w[i].errors;
	}
	if (cudaDeviceSynchronize() != cudaSuccess) {
		cudaGetLastError();
		r->errors++;
	}
	t1 = bench_now_ns() > t1 ? bench_now_ns() : t1;
	pthread_barrier_destroy(&sh->go);
	r->ns = t1 - t0 - meas; /* the busiest thread's peak readings left out */
	r->cut = sh->abort.load();
	if (sh->count)
		r->real_mallocs = sh->count() - before;
	/* Blocks the trace never freed (or a cut run left): freed outside the timing. */
	for (size_t a = 0; a < t->size.size(); a++) {
		uintptr_t v = sh->slot[a].load();
		if (v > FAILED)
			sh->c == B_ASYNC ? cudaFreeAsync((void *)v, 0) : cudaFree((void *)v);
	}
	cudaDeviceSynchronize();
	cudaGetLastError();
}

static void run_contender(const struct trace *t, enum bench_contender c, double limit_s, int warm)
{
	struct shared sh;
	struct pass cold, hot;
	size_t base, peak;
	int have_warm = warm && c != B_NATIVE;
	long long real_cold = -1, real_warm = -1;

	sh.t = t;
	sh.c = c;
	sh.slot = new std::atomic<uintptr_t>[t->size.size()];
	sh.count = bench_counter();
	sh.every = bench_peak_every_alloc(c);
	sh.limit_s = limit_s;
	cudaDeviceSynchronize();
	bench_shim_release();
	bench_async_trim();
	base = bench_device_used();
	sh.peak.store(base);
	run_pass(&sh, &cold);
	if (have_warm)
		run_pass(&sh, &hot);
	peak = c == B_ASYNC ? bench_async_reserved_high() : sh.peak.load() - base;
	if (sh.count && c != B_ASYNC) {
		real_cold = (long long)cold.real_mallocs;
		real_warm = have_warm ? (long long)hot.real_mallocs : -1;
	}
	printf("BENCH bench=replay trace=%s threads=%d allocs=%zu contender=%s cold_ms=%.2f "
	       "warm_ms=%.2f peak_mib=%.1f real_mallocs=%lld real_mallocs_warm=%lld trace_peak_mib=%.1f "
	       "failed=%llu errors=%llu cut=%d\n",
	       t->name.c_str(), t->nthreads, t->size.size(), bench_names[c], (double)cold.ns / 1e6,
	       have_warm ? (double)hot.ns / 1e6 : -1.0, bench_mib(peak), real_cold, real_warm,
	       bench_mib(t->peak_live),
	       (unsigned long long)(cold.failed + (have_warm ? hot.failed : 0)),
	       (unsigned long long)(cold.errors + (have_warm ? hot.errors : 0)),
	       cold.cut || (have_warm && hot.cut));
	fflush(stdout);
	delete[] sh.slot;
}

/* ---- a synthetic trace -------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct gen {
	FILE *fp;
	uint64_t us;                                          /* fake clock, microseconds */
	uint64_t rng, next_addr;
	std::unordered_map<uint64_t, std::vector<uint64_t>> free_addrs; /* by size: reused */
	std::unordered_map<uint64_t, uint64_t> sizes;           /* live address -> size */
};

static void gen_row(struct gen *g, int thread, const char *action, uint64_t ptr, uint64_t size)
{
	uint64_t s = g->us / 1000000;

	g->us += 1 + rng_next(&g->rng) % 30;
	fprintf(g->fp, "%llu,%02llu:%02llu:%02llu.%06llu,%s,0x%llx,%llu,0x0\n",
		(unsigned long long)(140000000000000ull + 4096ull * (uint64_t)thread),
		(unsigned long long)(12 + s / 3600 % 12), (unsigned long long)(s / 60 % 60),
		(unsigned long long)(s % 60), (unsigned long long)(g->us % 1000000), action,
		(unsigned long long)ptr, (unsigned long long)size);
}

/* An address like an allocator's: a freed one of the same size comes back first. */
static uint64_t gen_alloc(struct gen *g, int thread, uint64_t size)
{
	std::vector<uint64_t> &fl = g->free_addrs[size];
	uint64_t p;

	if (!fl.empty()) {
		p = fl.back();
		fl.pop_back();
	} else {
		p = g->next_addr;
		g->next_addr += (size + 511) / 512 * 512;
	}
	g->sizes[p] = size;
	gen_row(g, thread, "allocate", p, size);
	return p;
}

static void gen_free(struct gen *g, int thread, uint64_t p)
{
	uint64_t size = g->sizes[p];

	g->sizes.erase(p);
	g->free_addrs[size].push_back(p);
	gen_row(g, thread, "free", p, size);
}

struct longlived {
	uint64_t p;
	int free_step, free_thread;
};

static int generate(const char *path, int nthreads, int steps, uint64_t seed)
{
	struct gen g;
	std::vector<struct longlived> kv;
	const uint64_t hidden = 2048, ff = 8192, heads = 16;
	const int layers = 6;

	g.fp = fopen(path, "w");
	if (g.fp == NULL) {
		fprintf(stderr, "replay: cannot write %s\n", path);
		return 1;
	}
	g.us = 0;
	g.rng = seed;
	g.next_addr = 0x7f0000000000ull;
	fprintf(g.fp, "Thread,Time,Action,Pointer,Size,Stream\n");
	for (int step = 0; step < steps; step++) {
		for (int th = 0; th < nthreads; th++) {
			uint64_t tokens = 64 * (1 + rng_next(&g.rng) % 64); /* 64 - 4096 */
			uint64_t act = tokens * hidden * 2, keys = tokens < 1024 ? tokens : 1024;
			uint64_t x = gen_alloc(&g, th, act), scalar = 0;

			for (int l = 0; l < layers; l++) {
				uint64_t qkv = gen_alloc(&g, th, 3 * act);
				uint64_t scores = gen_alloc(&g, th, heads * tokens * keys * 2);
				uint64_t probs = gen_alloc(&g, th, heads * tokens * keys * 2);
				gen_free(&g, th, scores);
				uint64_t ctx = gen_alloc(&g, th, act);
				gen_free(&g, th, probs);
				gen_free(&g, th, qkv);
				uint64_t up = gen_alloc(&g, th, tokens * ff * 2);
				uint64_t gelu = gen_alloc(&g, th, tokens * ff * 2);
				gen_free(&g, th, up);
				uint64_t down = gen_alloc(&g, th, act);
				gen_free(&g, th, gelu);
				gen_free(&g, th, ctx);
				if (scalar)
					gen_free(&g, th, scalar);
				scalar = gen_alloc(&g, th, 1 + rng_next(&g.rng) % 512);
				gen_free(&g, th, x);
				x = down;
			}
			gen_free(&g, th, x);
			gen_free(&g, th, scalar);
			if (step % 8 == th % 8) { /* a cache block kept for a while */
				struct longlived b;
				b.p = gen_alloc(&g, th, (1 + rng_next(&g.rng) % 16) << 21);
				b.free_step = step + 20 + (int)(rng_next(&g.rng) % 40);
				b.free_thread = nthreads > 1 && rng_next(&g.rng) % 10 == 0 ? (th + 1) % nthreads : th;
				kv.push_back(b);
			}
			for (size_t i = 0; i < kv.size();) {
				if (kv[i].free_thread == th && kv[i].free_step <= step) {
					gen_free(&g, th, kv[i].p);
					kv[i] = kv.back();
					kv.pop_back();
				} else {
					i++;
				}
			}
		}
	}
	for (size_t i = 0; i < kv.size(); i++)
		gen_free(&g, kv[i].free_thread, kv[i].p);
	if (fclose(g.fp) != 0) {
		fprintf(stderr, "replay: writing %s failed\n", path);
		return 1;
	}
	return 0;
}

/* ---- main --------------------------------------------------------------------------------- */

static void usage(void)
{
	fprintf(stderr, "usage: replay [--time-limit 20] [--no-warm] [--contenders native,async,gpupool,gpupool-fenced] FILE...\n"
			"       replay --generate FILE [--gen-threads 2] [--gen-steps 150] [--seed 1]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *gen_path = NULL;
	int gen_threads = 2, gen_steps = 150, warm = 1, shim = bench_shim_loaded();
	int on[B_NCONTENDERS] = { !shim, !shim, shim, shim }, status = 0;
	uint64_t seed = 1;
	double limit_s = 20;
	std::vector<const char *> files;

	bench_exact_meminfo(argv);

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--no-warm")) {
			warm = 0;
		} else if (a[0] == '-' && a[1] == '-' && v == NULL) {
			usage();
		} else if (!strcmp(a, "--generate")) {
			gen_path = v, i++;
		} else if (!strcmp(a, "--gen-threads")) {
			gen_threads = atoi(v), i++;
		} else if (!strcmp(a, "--gen-steps")) {
			gen_steps = atoi(v), i++;
		} else if (!strcmp(a, "--seed")) {
			seed = strtoull(v, NULL, 10), i++;
		} else if (!strcmp(a, "--time-limit")) {
			limit_s = atof(v), i++;
		} else if (!strcmp(a, "--contenders")) {
			char buf[256], *tok, *save = NULL;
			memset(on, 0, sizeof(on));
			snprintf(buf, sizeof(buf), "%s", v);
			for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
				for (int c = 0; c < B_NCONTENDERS; c++)
					on[c] |= !strcmp(tok, bench_names[c]);
			i++;
		} else if (a[0] == '-') {
			usage();
		} else {
			files.push_back(a);
		}
	}
	if (gen_path)
		return gen_threads < 1 || gen_threads > MAX_THREADS || gen_steps < 1
			       ? (usage(), 2)
			       : generate(gen_path, gen_threads, gen_steps, seed);
	if (files.empty() || limit_s <= 0)
		usage();
	if (cudaDeviceSynchronize() != cudaSuccess) { /* creates the context */
		fprintf(stderr, "replay: no CUDA context\n");
		return 1;
	}
	if (on[B_ASYNC] && bench_async_warm() != 0) {
		printf("# async: cannot set the default pool's release threshold; skipped\n");
		on[B_ASYNC] = 0;
	}
	printf("# replay: %s, real cudaMalloc count %s\n",
	       shim ? "libgpupool.so preloaded" : "native runtime",
	       bench_counter() ? "from libbench_count.so" : "not available");
	std::vector<struct trace *> traces;
	for (size_t f = 0; f < files.size(); f++) {
		struct trace *t = new trace;
		if (parse(files[f], t) != 0) {
			status = 1;
			delete t;
			continue;
		}
		traces.push_back(t);
		printf("# trace %s: %llu rows, %zu allocations, %llu frees, %d threads, %llu cross-thread "
		       "frees, %llu unmatched frees skipped, %llu failure rows skipped, %llu never freed, "
		       "peak live %.1f MiB\n",
		       t->name.c_str(), (unsigned long long)t->rows, t->size.size(),
		       (unsigned long long)t->frees, t->nthreads, (unsigned long long)t->cross_frees,
		       (unsigned long long)t->unmatched_frees, (unsigned long long)t->skipped_failures,
		       (unsigned long long)t->leaked, bench_mib(t->peak_live));
		fflush(stdout);
	}
	/* Contender by contender: gpupool-fenced last, since a created stream is for good. */
	for (int c = 0; c < B_NCONTENDERS; c++) {
		cudaStream_t fence_on = NULL;
		if (!on[c])
			continue;
		if (c == B_POOL_FENCED && cudaStreamCreateWithFlags(&fence_on, cudaStreamNonBlocking) != cudaSuccess) {
			cudaGetLastError();
			continue;
		}
		for (size_t f = 0; f < traces.size(); f++)
			run_contender(traces[f], (enum bench_contender)c, limit_s, warm);
		if (fence_on)
			cudaStreamDestroy(fence_on);
	}
	for (size_t f = 0; f < traces.size(); f++)
		delete traces[f];
	bench_shim_release();
	bench_async_trim();
	return status;
}
