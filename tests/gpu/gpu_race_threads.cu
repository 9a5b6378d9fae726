/* gpu_race_threads.cu — gpu_race_random's question with host threads: reuse stays as safe as
 * native cudaFree when several threads free and allocate at once, each on streams of its own,
 * and a block one thread freed while its kernel still runs may go to another thread.
 * Each of T threads (default 8) runs rounds: K (1..3) blocks of random sizes (two sizes per size
 * class, 4 KiB .. 16 MiB) each get a slow writer (spin 0..2 ms, then write) on one of the
 * thread's two writer streams (one blocking, one non-blocking). In random order, after random
 * host delays, each block is freed (one round in ten first destroys and recreates its writer's
 * stream) and a block of a size of the same class is allocated and written at once by a new
 * owner: a kernel on the thread's third stream (non-blocking), or one time in four
 * cudaMemsetAsync on the legacy stream.
 * A table shared by the threads holds every writer block freed and not yet handed out again
 * (address, thread, launch time, spin). A cudaMalloc that returns such an address is a reuse
 * (across threads when another thread freed it) and must come no sooner than that writer can
 * have finished (host clock). At the end of its round a thread synchronizes the device (the
 * writers of every block it got are done) and counts the words of each new block that differ
 * from its owner's pattern: a block handed out while an earlier writer could still write it
 * shows there.
 * Asserted: no CUDA error; no early reuse; no clobbered block; blocks were reused, some across
 * threads; and the race was exercised: at least 1/8 of the new blocks were allocated while a
 * freed block of their class still had a writer that could be running (the pool had to pass it
 * over; on the H200 66-73% of them, 22% under compute-sanitizer, which slows the launches).
 * With RELEASE_MS > 0 a further thread gives the cache back (gpupool_release) every RELEASE_MS
 * while the others race: releases must not hand out or free a block in use, and the checks above
 * still hold for addresses the driver hands out again (a real cudaFree waits for the device, so
 * an address it returns comes after its writer); asserted also that releases gave memory back.
 * Usage: gpu_race_threads [THREADS [ROUNDS [SEED [RELEASE_MS]]]] (defaults 8, 1000 rounds a
 * thread, a seed from the clock (also for SEED 0), no releases; stops after 20 s). Seeds replay
 * the choices, not the timing. */
#include "gpu_common.cuh"

#include <atomic>
#include <mutex>
#include <pthread.h>
#include <unordered_map>
#include <vector>

#define MAX_THREADS 32
#define MAXK 3
#define MAX_SPIN_NS 2000000ull   /* a writer spins 0..2 ms before it writes */
#define MAX_DELAY_NS 400000ull   /* host delay before a free or an allocation: 0..400 us */
#define EARLY_MARGIN_NS 100000ull /* slack for the host clock vs the GPU's globaltimer */
#define TIME_LIMIT_NS 20000000000ull
#define MAX_FAIL_LINES 10
#define PAT_OLD 0xDEAD0000u
#define PAT_NEW 0x600D0000u
#define SLOW_GRID 16 /* up to 24 writers spin at once: leave room for the new owners' kernels */

/* Sizes in pairs of one size class each (pool/sizeclass.c): 4 KiB, 64 KiB, 1 MiB (batched
 * fences below 1 MiB and at it), 4 MiB, 16 MiB. */
static const size_t sizes[] = {
	3872,          4096,   63488,      65536,  GT_MIB - 4096, GT_MIB,
	3 * GT_MIB,    4 * GT_MIB, 15 * GT_MIB + 4096, 16 * GT_MIB,
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define NCLASSES (NSIZES / 2)

struct freed { /* a writer's block, freed, not yet handed out again */
	int thread;
	unsigned cls;
	uint64_t t_launch, spin_ns;
};

static std::atomic<int> racing; /* workers still running */
static std::mutex table_lock;
static std::unordered_map<void *, struct freed> table;
static int fail_lines; /* under table_lock */

struct tally {
	long blocks, renewed, reused, cross, early, clobbered, contended, errors, destroyed, legacy;
};

struct worker {
	int id, rounds;
	uint64_t rng, t_end;
	cudaStream_t ws[2], own; /* writer streams (blocking, non-blocking); the new owners' */
	unsigned long long *counter;
	struct tally t;
};

static uint64_t rnd(struct worker *w, uint64_t n) /* 0 .. n-1 */
{
	return gt_splitmix64(&w->rng) % n;
}

static int ok(struct worker *w, cudaError_t e, const char *call)
{
	if (e == cudaSuccess)
		return 1;
	cudaGetLastError();
	std::lock_guard<std::mutex> g(table_lock);
	w->t.errors++;
	if (fail_lines++ < MAX_FAIL_LINES)
		printf("FAIL %s thread %d: %s returned %d (%s)\n", gt_test, w->id, call, (int)e,
		       cudaGetErrorString(e));
	return 0;
}

/* 0..400 us (none one time in three), spun; one time in eight up to the longest spin and 1 ms
 * more, so that some writers end before their block's next allocation and blocks are reused. */
static void host_delay(struct worker *w)
{
	uint64_t ns = rnd(w, 8) == 0 ? rnd(w, MAX_SPIN_NS + 1000001ull)
		    : rnd(w, 3) == 0 ? 0 : rnd(w, MAX_DELAY_NS + 1), t0 = gt_now_ns();

	while (gt_now_ns() - t0 < ns)
		;
}

/* cudaMalloc, and what its address says: a freed writer block handed out again (early when its
 * writer cannot have finished yet); `contended` when a freed block of the class still had a
 * writer that could be running. NULL on failure. */
static void *alloc(struct worker *w, size_t size, unsigned cls, int *contended)
{
	void *p = NULL;
	uint64_t t;

	if (!ok(w, cudaMalloc(&p, size), "cudaMalloc"))
		return NULL;
	t = gt_now_ns();
	w->t.blocks++;
	std::lock_guard<std::mutex> g(table_lock);
	auto it = table.find(p);
	if (it != table.end()) {
		const struct freed f = it->second;

		table.erase(it);
		w->t.reused++;
		w->t.cross += f.thread != w->id;
		if (t + EARLY_MARGIN_NS < f.t_launch + f.spin_ns) {
			w->t.early++;
			if (fail_lines++ < MAX_FAIL_LINES)
				printf("FAIL %s early reuse: thread %d got a %zu B block of thread %d "
				       "%.3f ms before its writer (spin %.3f ms) can have finished\n",
				       gt_test, w->id, size, f.thread,
				       (double)(f.t_launch + f.spin_ns - t) / 1e6, (double)f.spin_ns / 1e6);
		}
	}
	if (contended != NULL) {
		*contended = 0;
		for (auto &e : table)
			if (e.second.cls == cls && e.second.t_launch + e.second.spin_ns > t) {
				*contended = 1;
				break;
			}
	}
	return p;
}

struct blk {
	unsigned cls;
	size_t size;
	void *old, *nw;
	int ws, contended;
	uint32_t want;
	uint64_t t_launch, spin_ns;
};

static void renew(struct worker *w, struct blk *b, int round, int i)
{
	size_t size = sizes[2 * b->cls + rnd(w, 2)];

	b->nw = alloc(w, size, b->cls, &b->contended);
	if (b->nw == NULL)
		return;
	w->t.renewed++;
	w->t.contended += b->contended;
	b->size = size;
	if (rnd(w, 4) == 0) {
		int byte = 0x10 + (round * MAXK + i) % 0xD0; /* 4 equal bytes: never a kernel's */

		w->t.legacy++;
		b->want = 0x01010101u * (uint32_t)byte;
		ok(w, cudaMemsetAsync(b->nw, byte, size, 0), "cudaMemsetAsync(new)");
	} else {
		b->want = PAT_NEW | (uint32_t)(w->id << 10) | (uint32_t)((round * MAXK + i) & 0x3FF);
		gt_fill_kernel<<<GT_GRID, GT_BLOCK, 0, w->own>>>((uint32_t *)b->nw, size / 4, b->want);
		ok(w, cudaGetLastError(), "fill kernel launch");
	}
}

static void one_round(struct worker *w, int round)
{
	struct blk bs[MAXK];
	int k = 1 + (int)rnd(w, MAXK), order[MAXK], renewed[MAXK] = { 0 };
	int destroy_at = rnd(w, 10) == 0 ? (int)rnd(w, (uint64_t)k) : -1;

	for (int i = 0; i < k; i++) {
		struct blk *b = &bs[i];

		memset(b, 0, sizeof(*b));
		order[i] = i;
		b->cls = (unsigned)rnd(w, NCLASSES);
		b->size = sizes[2 * b->cls + rnd(w, 2)];
		b->spin_ns = rnd(w, 8) == 0 ? 0 : rnd(w, MAX_SPIN_NS + 1);
		b->ws = (int)rnd(w, 2);
		b->old = alloc(w, b->size, b->cls, NULL);
		if (b->old == NULL)
			continue;
		b->t_launch = gt_now_ns();
		gt_slow_fill_kernel<<<SLOW_GRID, GT_BLOCK, 0, w->ws[b->ws]>>>(
			(uint32_t *)b->old, b->size / 4,
			PAT_OLD | (uint32_t)(w->id << 10) | (uint32_t)(round & 0x3FF), b->spin_ns);
		ok(w, cudaGetLastError(), "slow kernel launch");
	}
	for (int i = k - 1; i > 0; i--) { /* the frees in random order */
		int j = (int)rnd(w, (uint64_t)i + 1), x = order[i];

		order[i] = order[j];
		order[j] = x;
	}
	for (int n = 0; n < k; n++) {
		struct blk *b = &bs[order[n]];

		host_delay(w);
		if (b->old == NULL)
			continue;
		if (order[n] == destroy_at) { /* its writer still queued or running on it */
			unsigned flags = b->ws == 0 ? cudaStreamDefault : cudaStreamNonBlocking;

			ok(w, cudaStreamDestroy(w->ws[b->ws]), "cudaStreamDestroy");
			ok(w, cudaStreamCreateWithFlags(&w->ws[b->ws], flags), "cudaStreamCreate");
			w->t.destroyed++;
		}
		{
			std::lock_guard<std::mutex> g(table_lock);
			table[b->old] = { w->id, b->cls, b->t_launch, b->spin_ns };
		}
		ok(w, cudaFree(b->old), "cudaFree(old)");
		if (rnd(w, 2) == 0) { /* at once, or after the other frees */
			renew(w, b, round, order[n]);
			renewed[order[n]] = 1;
		}
	}
	for (int i = 0; i < k; i++) {
		if (!renewed[i] && bs[i].old != NULL) {
			host_delay(w);
			renew(w, &bs[i], round, i);
		}
	}
	/* Every thread's work queued so far is done: the writers of any block this one got too. */
	ok(w, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	for (int i = 0; i < k; i++) {
		struct blk *b = &bs[i];
		unsigned long long bad = 0;

		if (b->nw == NULL)
			continue;
		if (ok(w, cudaMemsetAsync(w->counter, 0, sizeof(*w->counter), w->own), "memset(counter)")) {
			gt_count_ne_kernel<<<GT_GRID, GT_BLOCK, 0, w->own>>>((const uint32_t *)b->nw,
									 b->size / 4, b->want, w->counter);
			if (ok(w, cudaMemcpyAsync(&bad, w->counter, sizeof(bad), cudaMemcpyDeviceToHost,
						  w->own), "memcpy(counter)") &&
			    ok(w, cudaStreamSynchronize(w->own), "cudaStreamSynchronize") && bad != 0) {
				std::lock_guard<std::mutex> g(table_lock);
				w->t.clobbered++;
				if (fail_lines++ < MAX_FAIL_LINES)
					printf("FAIL %s clobbered: thread %d round %d, %zu B block: %llu "
					       "words not its owner's (%s)\n", gt_test, w->id, round,
					       b->size, bad, b->contended ? "contended" : "uncontended");
			}
		}
		ok(w, cudaFree(b->nw), "cudaFree(new)");
	}
}

static void work(struct worker *w)
{
	if (!ok(w, cudaSetDevice(0), "cudaSetDevice") ||
	    !ok(w, cudaStreamCreateWithFlags(&w->ws[0], cudaStreamDefault), "cudaStreamCreate") ||
	    !ok(w, cudaStreamCreateWithFlags(&w->ws[1], cudaStreamNonBlocking), "cudaStreamCreate") ||
	    !ok(w, cudaStreamCreateWithFlags(&w->own, cudaStreamNonBlocking), "cudaStreamCreate") ||
	    !ok(w, cudaMalloc((void **)&w->counter, sizeof(*w->counter)), "cudaMalloc(counter)"))
		return;
	for (int r = 0; r < w->rounds && w->t.errors < 10 && gt_now_ns() < w->t_end; r++)
		one_round(w, r);
	ok(w, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	cudaFree(w->counter);
	cudaStreamDestroy(w->ws[0]);
	cudaStreamDestroy(w->ws[1]);
	cudaStreamDestroy(w->own);
}

static void *run(void *arg)
{
	work((struct worker *)arg);
	racing--;
	return NULL;
}

struct releaser {
	int every_ms;
	long releases, failed;
	unsigned long long bytes;
};

/* Gives the cache back every `every_ms` while workers race. */
static void *release_loop(void *arg)
{
	struct releaser *r = (struct releaser *)arg;
	gt_release_fn release = gt_shim_release();
	struct timespec ts = { r->every_ms / 1000, (long)(r->every_ms % 1000) * 1000000L };

	while (racing > 0) {
		unsigned long long bytes = 0;

		nanosleep(&ts, NULL);
		if (release(-1, &bytes) != 0)
			r->failed++;
		r->releases++;
		r->bytes += bytes;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int nthreads = argc > 1 ? atoi(argv[1]) : 8, rounds = argc > 2 ? atoi(argv[2]) : 1000;
	uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : 0;
	static struct worker ws[MAX_THREADS];
	pthread_t th[MAX_THREADS], rel_th;
	struct releaser rel = {};
	struct tally sum = {};
	uint64_t t0;

	gt_test = "gpu_race_threads";
	rel.every_ms = argc > 4 ? atoi(argv[4]) : 0;
	if (nthreads < 2 || nthreads > MAX_THREADS || rounds < 1 || rel.every_ms < 0) {
		fprintf(stderr, "usage: gpu_race_threads [THREADS 2..%d [ROUNDS [SEED [RELEASE_MS]]]]\n",
			MAX_THREADS);
		return 2;
	}
	if (seed == 0)
		seed = gt_now_ns();
	if (!gt_require_shim() || !gt_context())
		return gt_finish();
	racing = nthreads;
	t0 = gt_now_ns();
	for (int i = 0; i < nthreads; i++) {
		ws[i].id = i;
		ws[i].rounds = rounds;
		ws[i].rng = seed + 0x1000u * (uint64_t)i;
		ws[i].t_end = t0 + TIME_LIMIT_NS;
		if (pthread_create(&th[i], NULL, run, &ws[i]) != 0) {
			gt_check(0, "threads", "pthread_create failed for thread %d", i);
			return gt_finish();
		}
	}
	if (rel.every_ms > 0 && pthread_create(&rel_th, NULL, release_loop, &rel) != 0) {
		gt_check(0, "threads", "pthread_create failed for the releasing thread");
		return gt_finish();
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_join(th[i], NULL);
		sum.blocks += ws[i].t.blocks;
		sum.renewed += ws[i].t.renewed;
		sum.reused += ws[i].t.reused;
		sum.cross += ws[i].t.cross;
		sum.early += ws[i].t.early;
		sum.clobbered += ws[i].t.clobbered;
		sum.contended += ws[i].t.contended;
		sum.errors += ws[i].t.errors;
		sum.destroyed += ws[i].t.destroyed;
		sum.legacy += ws[i].t.legacy;
	}
	if (rel.every_ms > 0) {
		pthread_join(rel_th, NULL);
		gt_info("releases", "%ld while the threads raced (one every %d ms): %.1f MiB given back",
			rel.releases, rel.every_ms, gt_mib(rel.bytes));
	}
	gt_info("run", "%d threads, seed %llu, %.1f s: %ld cudaMalloc, %ld reuses of a freed writer's "
		"block (%ld from another thread), %ld new owners on the legacy stream, %ld streams "
		"destroyed with a writer on them", nthreads, (unsigned long long)seed,
		(double)(gt_now_ns() - t0) / 1e9, sum.blocks, sum.reused, sum.cross, sum.legacy,
		sum.destroyed);
	gt_check(sum.errors == 0, "no CUDA error", "%ld failed calls", sum.errors);
	gt_check(sum.early == 0, "no early reuse", "%ld blocks handed out before their writer can "
		 "have finished (of %ld reuses)", sum.early, sum.reused);
	gt_check(sum.clobbered == 0, "no clobbered block", "%ld new blocks held words not their "
		 "owner's", sum.clobbered);
	gt_check(sum.renewed > 0 && sum.contended * 8 >= sum.renewed, "race exercised",
		 "%ld of %ld new blocks allocated while a freed block of their class could still be "
		 "written by its writer (want >= 1/8)", sum.contended, sum.renewed);
	gt_check(sum.reused > 0 && sum.cross > 0, "blocks reused, across threads too",
		 "%ld reuses, %ld of them from another thread", sum.reused, sum.cross);
	if (rel.every_ms > 0)
		gt_check(rel.failed == 0 && rel.releases > 0 && rel.bytes > 0, "releases during the race",
			 "%ld releases, %ld failed, %.1f MiB given back", rel.releases, rel.failed,
			 gt_mib(rel.bytes));
	return gt_finish();
}
