/* race_threads.c — proves, with "the GPU" behind every fence, that once a stream exists no thread
 * is handed a block before a fence recorded after its free can have completed, however threads
 * free and allocate at once (tests/gpu/gpu_race_threads.cu asks the same on a real GPU).
 * STANDIN_EVENT_LATENCY_US = L: an event completes L after it is recorded, and streams are never
 * idle. RACE_THREADS (8) threads, each with a stream of its own, for RACE_MS (300) ms, each
 * allocation on a device picked at random (STANDIN_DEVICES of them): up to 4 blocks live a thread, sizes of five classes (two sizes each, 4 KiB .. 4 MiB: the fence-batched
 * small classes and larger ones); each new block gets its owner's pattern, checked before
 * its free. A table shared by the threads holds every freed block's address and the time just
 * before its cudaFree; a cudaMalloc that returns such an address sooner than L after that time
 * is an early reuse (the fence that frees it was recorded after the free and completes L later).
 * Also proves the check is not vacuous, without leaving that to the scheduler: after the race
 * the threads hand a block round, each in turn (a condition variable) freeing a 16 MiB block (a
 * class the race never uses) that the next one asks for at once, and again once the fence
 * recorded after that free can have completed: the first ask must not get it sooner than L after
 * the free (the same table and check), the second must get it, from another thread; so every
 * thread takes a block another freed. RACE_MS is scaled by GPUPOOL_TEST_TIME_SCALE (a slower
 * build does less in the same time).
 * With RACE_RELEASE_MS > 0 a further thread gives the cache back (gpupool_release) that often
 * while the others race, holding the table's lock: the release's real cudaFree makes "the GPU"
 * catch up (the stand-in completes every event) and frees every cached block, so the table is
 * emptied then (an address the runtime hands out again after that is a new allocation). Proves
 * the same with releases racing, a block released while in use breaking its pattern, and that
 * the releases gave memory back. */
#define _GNU_SOURCE
#include <pthread.h>
#include <search.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define MAX_THREADS 64
#define SLOTS 4
#define MAX_FAIL_LINES 10
#define HANDOVER_BYTES (16 * E2E_MIB) /* above what the race asks for, times GPUPOOL_OVERSIZE */

/* Two sizes of one class each: 4 KiB, 64 KiB, 1 MiB (fence-batched), 2 and 4 MiB (a fence each). */
static const size_t sizes[] = {
	3872,           4096,    63488,       65536,       E2E_MIB - 4096,
	E2E_MIB,        3 * E2E_MIB / 2, 2 * E2E_MIB, 3 * E2E_MIB, 4 * E2E_MIB,
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

struct freed {
	void *ptr; /* the key */
	uint64_t t_free;
	int thread;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static void *table; /* tsearch tree of struct freed, by ptr */
static int fail_lines;
static uint64_t latency_ns, t_end;
static int ndevices;
static atomic_int racing; /* workers still running */

struct slot {
	void *ptr;
	size_t size;
	uint64_t tag;
};

struct worker {
	pthread_t tid;
	int id;
	uint64_t rng;
	struct slot slot[SLOTS];
	long allocs, reused, cross, early, bad_pattern;
	void *probe;  /* the hand-over: what its first ask got, when not the block handed over */
	int handed;   /* the hand-over: got the block the thread before it freed */
	int at_once;  /* ... already at its first ask (the pool waited for the fence) */
};

static int by_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)((const struct freed *)a)->ptr;
	uintptr_t y = (uintptr_t)((const struct freed *)b)->ptr;

	return x < y ? -1 : x > y;
}

static uint64_t rnd(struct worker *w, uint64_t n) /* xorshift64, 0 .. n-1 */
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng % n;
}

/* The address a cudaMalloc returned at t: a freed block handed out again? */
static void note_alloc(struct worker *w, void *p, size_t size, uint64_t t)
{
	struct freed key = { .ptr = p }, **found, *f;

	pthread_mutex_lock(&table_lock);
	found = tfind(&key, &table, by_ptr);
	if (found != NULL) {
		f = *found;
		tdelete(&key, &table, by_ptr);
		w->reused++;
		w->cross += f->thread != w->id;
		if (t < f->t_free + latency_ns) {
			w->early++;
			if (fail_lines++ < MAX_FAIL_LINES)
				printf("early reuse: thread %d got a %zu B block of thread %d %.3f ms after "
				       "its free (a fence completes %.3f ms after it is recorded)\n", w->id,
				       size, f->thread, (double)(t - f->t_free) / 1e6,
				       (double)latency_ns / 1e6);
		}
		free(f);
	}
	pthread_mutex_unlock(&table_lock);
}

/* Before the cudaFree: the block is still this thread's, so no other can get it first. */
static void note_free(struct worker *w, void *p)
{
	struct freed *f = malloc(sizeof(*f));

	if (f == NULL)
		e2e_fail("out of host memory");
	f->ptr = p;
	f->thread = w->id;
	pthread_mutex_lock(&table_lock);
	f->t_free = e2e_now_ns();
	if (tsearch(f, &table, by_ptr) == NULL)
		e2e_fail("out of host memory");
	pthread_mutex_unlock(&table_lock);
}

static void *run(void *arg)
{
	struct worker *w = arg;
	cudaStream_t own;

	e2e_cuda(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), "cudaStreamCreate");
	while (e2e_now_ns() < t_end) {
		struct slot *s = &w->slot[rnd(w, SLOTS)];

		if (s->ptr == NULL) {
			s->size = sizes[rnd(w, NSIZES)];
			e2e_cuda(cudaSetDevice((int)rnd(w, (uint64_t)ndevices)), "cudaSetDevice");
			e2e_cuda(cudaMalloc(&s->ptr, s->size), "cudaMalloc");
			note_alloc(w, s->ptr, s->size, e2e_now_ns());
			s->tag = ((uint64_t)w->id << 48) ^ (uint64_t)++w->allocs;
			e2e_fill(s->ptr, s->size, s->tag);
		} else {
			if (!e2e_verify(s->ptr, s->size, s->tag))
				w->bad_pattern++;
			note_free(w, s->ptr);
			e2e_cuda(cudaFree(s->ptr), "cudaFree");
			s->ptr = NULL;
		}
	}
	for (int i = 0; i < SLOTS; i++) {
		if (w->slot[i].ptr == NULL)
			continue;
		if (!e2e_verify(w->slot[i].ptr, w->slot[i].size, w->slot[i].tag))
			w->bad_pattern++;
		e2e_cuda(cudaFree(w->slot[i].ptr), "cudaFree");
	}
	e2e_cuda(cudaStreamDestroy(own), "cudaStreamDestroy");
	atomic_fetch_sub(&racing, 1);
	return NULL;
}

/* The hand-over, in turns: thread 0 frees a block, thread 1 takes it and frees it in turn, and
 * so on; thread 0 takes the last one. */
static pthread_mutex_t turn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cond = PTHREAD_COND_INITIALIZER;
static int turn, nturns;
static void *passed;          /* the block just freed */

static void wait_turn(int t)
{
	pthread_mutex_lock(&turn_lock);
	while (turn != t)
		pthread_cond_wait(&turn_cond, &turn_lock);
	pthread_mutex_unlock(&turn_lock);
}

/* Free p for the next thread, and give it the turn. */
static void pass_on(struct worker *w, void *p)
{
	note_free(w, p);
	e2e_cuda(cudaFree(p), "cudaFree");
	pthread_mutex_lock(&turn_lock);
	passed = p;
	turn++;
	pthread_cond_broadcast(&turn_cond);
	pthread_mutex_unlock(&turn_lock);
}

/* Ask for the block just passed on at once (the pool must not hand it out before its fence can
 * have completed: note_alloc counts that as early), then, if that ask got another block, once
 * the fence has completed: now it must come back. Returns the block taken. The fence is recorded
 * by the free, or, when another thread was driving the fences just then (the control thread),
 * by the next call that drives them, this first ask at the latest: it has completed the latency
 * after the later of the two. */
static void *take(struct worker *w)
{
	uint64_t ready_ns;
	void *p = NULL;

	e2e_cuda(cudaMalloc(&p, HANDOVER_BYTES), "cudaMalloc");
	ready_ns = e2e_now_ns() + latency_ns + 1000000u; /* 1 ms to spare */
	note_alloc(w, p, HANDOVER_BYTES, e2e_now_ns());
	if (p == passed) {
		w->at_once = 1;
	} else {
		w->probe = p; /* kept to the end: freed now, it could come back instead */
		while (e2e_now_ns() < ready_ns)
			e2e_sleep_ms(1);
		e2e_cuda(cudaMalloc(&p, HANDOVER_BYTES), "cudaMalloc");
		note_alloc(w, p, HANDOVER_BYTES, e2e_now_ns());
	}
	w->handed = p == passed;
	return p;
}

static void *hand_over(void *arg)
{
	struct worker *w = arg;
	void *p = NULL;

	e2e_cuda(cudaSetDevice(0), "cudaSetDevice");
	if (w->id == 0) {
		e2e_cuda(cudaMalloc(&p, HANDOVER_BYTES), "cudaMalloc");
		note_alloc(w, p, HANDOVER_BYTES, e2e_now_ns());
		pass_on(w, p);
	}
	wait_turn(w->id == 0 ? nturns : w->id);
	p = take(w);
	if (w->id == 0)
		e2e_cuda(cudaFree(p), "cudaFree");
	else
		pass_on(w, p);
	return NULL;
}

static void drop(void *node)
{
	free(node);
}

struct releaser {
	int every_ms;
	long releases, failed;
	unsigned long long bytes;
};

static void *release_loop(void *arg)
{
	struct releaser *r = arg;
	e2e_release_fn release = e2e_shim_release();
	while (atomic_load(&racing) > 0) {
		unsigned long long bytes = 0;

		e2e_sleep_ms(r->every_ms);
		pthread_mutex_lock(&table_lock);
		if (release(-1, &bytes) != 0)
			r->failed++;
		tdestroy(table, drop);
		table = NULL;
		pthread_mutex_unlock(&table_lock);
		r->releases++;
		r->bytes += bytes;
	}
	return NULL;
}

int main(void)
{
	const char *lat = getenv("STANDIN_EVENT_LATENCY_US"), *nt = getenv("RACE_THREADS"),
		   *ms = getenv("RACE_MS"), *rms = getenv("RACE_RELEASE_MS");
	struct releaser rel = { .every_ms = rms != NULL ? atoi(rms) : 0 };
	pthread_t rel_tid;
	int nthreads = nt != NULL ? atoi(nt) : 8, duration_ms = ms != NULL ? atoi(ms) : 300;
	static struct worker ws[MAX_THREADS];
	long allocs = 0, reused = 0, cross = 0, early = 0, bad = 0, race_reused, race_cross;
	int handed = 0, at_once = 0;
	cudaStream_t first;

	e2e_start("e2e_race_threads");
	if (lat == NULL || atoi(lat) <= 0)
		e2e_fail("STANDIN_EVENT_LATENCY_US must be set (the GPU's lag behind each fence)");
	if (nthreads < 2 || nthreads > MAX_THREADS || duration_ms <= 0)
		e2e_fail("RACE_THREADS must be 2..%d and RACE_MS positive", MAX_THREADS);
	latency_ns = (uint64_t)atoi(lat) * 1000u;
	duration_ms = e2e_scaled_ms(duration_ms);
	e2e_cuda(cudaGetDeviceCount(&ndevices), "cudaGetDeviceCount");
	/* A stream before any allocation: every reuse is fenced from the first. */
	e2e_cuda(cudaStreamCreate(&first), "cudaStreamCreate");
	t_end = e2e_now_ns() + (uint64_t)duration_ms * 1000000u;
	atomic_store(&racing, nthreads);
	for (int i = 0; i < nthreads; i++) {
		ws[i].id = i;
		ws[i].rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
		if (pthread_create(&ws[i].tid, NULL, run, &ws[i]) != 0)
			e2e_fail("pthread_create failed");
	}
	if (rel.every_ms > 0 && pthread_create(&rel_tid, NULL, release_loop, &rel) != 0)
		e2e_fail("pthread_create failed");
	for (int i = 0; i < nthreads; i++) {
		pthread_join(ws[i].tid, NULL);
		allocs += ws[i].allocs;
		reused += ws[i].reused;
		cross += ws[i].cross;
		early += ws[i].early;
		bad += ws[i].bad_pattern;
	}
	if (rel.every_ms > 0) {
		pthread_join(rel_tid, NULL);
		e2e_note("%ld releases while the threads raced (one every %d ms): %.1f MiB given back",
			 rel.releases, rel.every_ms, (double)rel.bytes / (double)E2E_MIB);
	}
	e2e_note("%d threads, %d device(s), %d ms, fences complete %s us after their record: %ld "
		 "cudaMalloc, %ld of them a freed block's address (%ld freed by another thread)",
		 nthreads, ndevices, duration_ms, lat, allocs, reused, cross);
	race_reused = reused;
	race_cross = cross;
	/* The hand-over, the releases over: nothing but the turns decides who gets which block. */
	nturns = nthreads;
	for (int i = 0; i < nthreads; i++) {
		ws[i].reused = ws[i].cross = ws[i].early = 0;
		if (pthread_create(&ws[i].tid, NULL, hand_over, &ws[i]) != 0)
			e2e_fail("pthread_create failed");
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_join(ws[i].tid, NULL);
		reused += ws[i].reused;
		cross += ws[i].cross;
		early += ws[i].early;
		handed += ws[i].handed;
		at_once += ws[i].at_once;
		if (ws[i].probe != NULL)
			e2e_cuda(cudaFree(ws[i].probe), "cudaFree");
	}
	e2e_cuda(cudaStreamDestroy(first), "cudaStreamDestroy");
	tdestroy(table, drop);
	e2e_check(early == 0, "no block handed out before a fence recorded after its free can have "
		  "completed (%ld early of %ld reuses)", early, reused);
	e2e_check(bad == 0, "every block kept its owner's pattern until its free (%ld broken)", bad);
	e2e_check(handed == nthreads && reused > race_reused && cross > race_cross,
		  "the check is not vacuous: in the hand-over each of the %d threads got the block "
		  "another had just freed (%d did, %d at their first ask, the pool waiting for the "
		  "fence): %ld reuses, %ld across threads, the race's %ld and %ld included", nthreads,
		  handed, at_once, reused, cross, race_reused, race_cross);
	if (rel.every_ms > 0)
		e2e_check(rel.releases > 0 && rel.failed == 0 && rel.bytes > 0, "releases during the "
			  "race gave memory back: %ld releases, %ld failed, %llu bytes", rel.releases,
			  rel.failed, rel.bytes);
	return 0;
}
