/* trace.c — GPUPOOL_TRACE. A thread that allocates or frees only stamps the time and appends a
 * record to its own ring (single producer, single consumer): no lock, no formatting, no system
 * call. The control thread (each time it wakes, and it is woken when a ring is half full), or a
 * thread whose ring is full, drains the rings under one lock, merges them in time order, finds
 * each free's size from its allocation and writes RMM's CSV (Thread,Time,Action,Pointer,Size,
 * Stream). Pool samples go to a second file for scripts/plot-trace. Never calls CUDA. */
#define _GNU_SOURCE
#include "trace.h"
#include "clock.h"
#include "grow.h"
#include "log.h"
#include "ptrmap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RING 8192            /* records per thread; a power of two */
#define OUT_BYTES (1 << 20)  /* formatted rows written per write(2) */
#define HEADER "Thread,Time,Action,Pointer,Size,Stream\n"
#define SAMPLE_HEADER "Time,Device,InUse,Idle,Pending,Event\n"

struct rec {
	uint64_t ns;   /* CLOCK_MONOTONIC */
	uint64_t ptr;
	uint64_t size; /* bytes asked for; 0 for a free (found at flush) */
	uint32_t tid;
	uint32_t action;
};

struct ring {
	_Atomic uint64_t head; /* records written: the owner's */
	char pad0[56];
	_Atomic uint64_t tail; /* records drained: the flusher's */
	char pad1[56];
	_Atomic uint64_t freeing; /* the stamp of a free the owner has not appended yet, or 0 */
	_Atomic int owned;     /* a live thread writes here */
	uint32_t tid;          /* the kernel id of the thread that writes here */
	struct ring *next;     /* set once, before the ring is published */
	struct rec rec[RING];
};

/* The ring this thread writes to: one per thread, so not in gp_shim.trace (see pool.c on
 * initial-exec). */
static _Thread_local struct ring *mine __attribute__((tls_model("initial-exec")));

/* ---- the producers' side ---------------------------------------------------------------- */

static void disown(void *arg)
{
	struct ring *r = arg;

	atomic_store_explicit(&r->owned, 0, memory_order_release);
}

/* A ring for this thread: one a finished thread left, or a new one. */
static struct ring *adopt(void)
{
	struct ring *r;

	for (r = atomic_load_explicit(&gp_shim.trace.rings, memory_order_acquire); r != NULL;
	     r = r->next) {
		int free_ring = 0;
		if (atomic_compare_exchange_strong(&r->owned, &free_ring, 1))
			goto got;
	}
	r = aligned_alloc(64, (sizeof(*r) + 63) / 64 * 64);
	if (r == NULL)
		return NULL;
	atomic_init(&r->head, 0);
	atomic_init(&r->tail, 0);
	atomic_init(&r->freeing, 0);
	atomic_init(&r->owned, 1);
	r->next = atomic_load(&gp_shim.trace.rings);
	while (!atomic_compare_exchange_weak(&gp_shim.trace.rings, &r->next, r))
		;
got:
	r->tid = (uint32_t)syscall(SYS_gettid);
	mine = r;
	pthread_setspecific(gp_shim.trace.owner_key, r);
	return r;
}

static void append(struct ring *r, int action, const void *ptr, size_t bytes, uint64_t ns)
{
	uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
	struct rec *e;

	if (h - t >= RING) {
		gp_trace_flush(); /* the control thread fell behind: this thread writes */
		t = atomic_load_explicit(&r->tail, memory_order_acquire);
		if (h - t >= RING) { /* tracing has ended */
			atomic_fetch_add_explicit(&gp_shim.trace.lost, 1, memory_order_relaxed);
			return;
		}
	}
	e = &r->rec[h & (RING - 1)];
	e->ns = ns;
	e->ptr = (uint64_t)(uintptr_t)ptr;
	e->size = bytes;
	e->tid = r->tid;
	e->action = (uint32_t)action;
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
	if (h + 1 - t == RING / 2 && gp_shim.trace.waker != NULL)
		gp_shim.trace.waker();
}

void gp_trace_event(int action, const void *ptr, size_t bytes)
{
	struct ring *r = mine;

	if (r == NULL && (r = adopt()) == NULL) {
		atomic_fetch_add_explicit(&gp_shim.trace.lost, 1, memory_order_relaxed);
		return;
	}
	append(r, action, ptr, bytes, gp_clock_ns(CLOCK_MONOTONIC));
}

/* The free's stamp is published before the pool can hand the block to another thread: a flush
 * then holds back every row from that moment on until this free's row is in. */
uint64_t gp_trace_free_begin_slow(void)
{
	struct ring *r = mine;
	uint64_t ns;

	if (r == NULL && (r = adopt()) == NULL)
		return 0;
	ns = gp_clock_ns(CLOCK_MONOTONIC);
	atomic_store(&r->freeing, ns);
	return ns;
}

void gp_trace_free_end_slow(uint64_t ns, const void *ptr)
{
	struct ring *r = mine;

	if (ptr != NULL)
		append(r, GP_TRACE_FREE, ptr, 0, ns);
	atomic_store_explicit(&r->freeing, 0, memory_order_release);
}

/* ---- sizes of live allocations ---------------------------------------------------------- */

/* gp_shim.trace.sizes: the pool's pointer map (pool/ptrmap.h) from a live allocation's address to
 * the bytes it asked for, stored in place of a pointer. Only the flusher uses it (flush_lock), so
 * no lock-free reader ever meets it; the shard's lock is taken all the same, as the map's writers
 * must. Made by gp_trace_start; it lives as long as the process. */
static void sizes_put(struct gp_ptrmap *m, uint64_t k, uint64_t v)
{
	struct gp_ptrmap_shard *s;

	if (k == 0 || m == NULL)
		return;
	s = gp_ptrmap_shard(m, (uintptr_t)k);
	gp_lock(&s->lock);
	/* An address seen again before its free's record (lost): the newer size counts. */
	gp_ptrmap_remove(s, (uintptr_t)k);
	/* Out of memory: this allocation's free is written with size 0, the trace goes on. */
	(void)gp_ptrmap_insert(s, (uintptr_t)k, (void *)(uintptr_t)v, NULL);
	gp_unlock(&s->lock);
}

/* The size of k's allocation, forgotten; 0 when unknown (allocated before tracing started, or
 * its record was lost). */
static uint64_t sizes_take(struct gp_ptrmap *m, uint64_t k)
{
	struct gp_ptrmap_shard *s;
	void *v;

	if (k == 0 || m == NULL)
		return 0;
	s = gp_ptrmap_shard(m, (uintptr_t)k);
	gp_lock(&s->lock);
	v = gp_ptrmap_remove(s, (uintptr_t)k);
	gp_unlock(&s->lock);
	return (uint64_t)(uintptr_t)v;
}

/* ---- formatting and writing (flush_lock held) -------------------------------------------- */

static void write_all(int to, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(to, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* disk full or closed: the trace ends short, the program goes on */
		buf += w;
		n -= (size_t)w;
	}
}

static void out_flush(void)
{
	write_all(gp_shim.trace.fd, gp_shim.trace.out, gp_shim.trace.out_n);
	gp_shim.trace.out_n = 0;
}

static char *put_dec(char *p, uint64_t v)
{
	char tmp[24];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n > 0)
		*p++ = tmp[--n];
	return p;
}

static char *put_hex(char *p, uint64_t v)
{
	static const char digits[] = "0123456789abcdef";
	int n = v ? (67 - __builtin_clzll(v)) / 4 : 1; /* hex digits */

	*p++ = '0';
	*p++ = 'x';
	for (int i = n - 1; i >= 0; i--, v >>= 4)
		p[i] = digits[v & 0xf];
	return p + n;
}

/* Local time of day with microseconds, as RMM writes it (spdlog's %H:%M:%S.%f). */
static char *put_time(char *p, uint64_t unix_ns)
{
	time_t sec = (time_t)(unix_ns / GP_NS_PER_S);
	uint64_t us = unix_ns % GP_NS_PER_S / 1000u;
	struct tm tm;

	if (sec != gp_shim.trace.shown_sec) {
		if (localtime_r(&sec, &tm) == NULL)
			memset(&tm, 0, sizeof(tm));
		snprintf(gp_shim.trace.shown_hms, sizeof(gp_shim.trace.shown_hms), "%02d:%02d:%02d.",
			 tm.tm_hour, tm.tm_min, tm.tm_sec);
		gp_shim.trace.shown_sec = sec;
	}
	memcpy(p, gp_shim.trace.shown_hms, 9);
	p += 9;
	for (int d = 5; d >= 0; d--) {
		p[d] = (char)('0' + us % 10);
		us /= 10;
	}
	return p + 6;
}

static void format(const struct rec *e)
{
	static const struct {
		const char *text;
		size_t len;
	} actions[] = { { "allocate,", 9 }, { "free,", 5 }, { "allocate failure,", 17 } };
	unsigned a = e->action < 3 ? e->action : 0;
	uint64_t size = e->size;
	char *p;

	if (gp_shim.trace.out_n > OUT_BYTES - 160)
		out_flush();
	if (e->action == GP_TRACE_ALLOC)
		sizes_put(gp_shim.trace.sizes, e->ptr, size);
	else if (e->action == GP_TRACE_FREE)
		size = sizes_take(gp_shim.trace.sizes, e->ptr);
	p = gp_shim.trace.out + gp_shim.trace.out_n;
	p = put_dec(p, e->tid);
	*p++ = ',';
	p = put_time(p, (uint64_t)((int64_t)e->ns + gp_shim.trace.wall_offset));
	*p++ = ',';
	memcpy(p, actions[a].text, actions[a].len);
	p += actions[a].len;
	p = put_hex(p, e->ptr);
	*p++ = ',';
	p = put_dec(p, size);
	memcpy(p, ",0x0\n", 5); /* cudaMalloc/cudaFree: the legacy default stream */
	p += 5;
	gp_shim.trace.out_n = (size_t)(p - gp_shim.trace.out);
}

/* Room for `need` records in batch and spare: they trade places at each merge, so both grow to
 * one capacity (batch_cap is what both hold at least). */
static int grow(struct gp_shim_trace *tr, size_t need)
{
	size_t cap_b = tr->batch_cap, cap_s = tr->batch_cap;

	if (gp_grow((void **)&tr->batch, &cap_b, need, sizeof(*tr->batch)) != 0 ||
	    gp_grow((void **)&tr->spare, &cap_s, need, sizeof(*tr->spare)) != 0)
		return -1;
	tr->batch_cap = cap_b;
	return 0;
}

static int add_run(struct gp_shim_trace *tr, size_t start)
{
	if (gp_grow((void **)&tr->runs, &tr->runs_cap, tr->nruns + 2, sizeof(*tr->runs)) != 0)
		return -1;
	tr->runs[tr->nruns++] = start;
	return 0;
}

/* Move what every ring holds into the batch, one run per ring; returns the batch's length. */
static size_t collect(struct gp_shim_trace *tr, size_t n)
{
	for (struct ring *r = atomic_load_explicit(&tr->rings, memory_order_acquire); r;
	     r = r->next) {
		uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
		uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);

		if (h == t)
			continue;
		if (grow(tr, n + (size_t)(h - t)) != 0 || add_run(tr, n) != 0) {
			atomic_fetch_add(&tr->lost, h - t);
		} else {
			for (; t != h; t++)
				tr->batch[n++] = r->rec[t & (RING - 1)];
		}
		atomic_store_explicit(&r->tail, h, memory_order_release);
	}
	return n;
}

/* Merge adjacent runs until one is left; ties keep the earlier run first (a thread's order). */
static void merge_runs(struct gp_shim_trace *tr, size_t n)
{
	size_t *runs = tr->runs;

	runs[tr->nruns] = n;
	while (tr->nruns > 1) {
		struct rec *batch = tr->batch, *spare = tr->spare;
		size_t out = 0;

		for (size_t r = 0; r < tr->nruns; r += 2) {
			size_t i = runs[r], mid = runs[r + 1];
			/* A last run alone is copied. */
			size_t end = r + 2 <= tr->nruns ? runs[r + 2] : mid;
			size_t j = mid, k = i;

			while (i < mid && j < end)
				spare[k++] = batch[j].ns < batch[i].ns ? batch[j++] : batch[i++];
			while (i < mid)
				spare[k++] = batch[i++];
			while (j < end)
				spare[k++] = batch[j++];
			runs[out++] = runs[r];
		}
		tr->nruns = out;
		runs[tr->nruns] = n;
		tr->batch = spare;
		tr->spare = batch;
	}
}

/* The stamp of the oldest free still in flight, else now. */
static uint64_t cutoff_now(const struct gp_shim_trace *tr)
{
	uint64_t cutoff = gp_clock_ns(CLOCK_MONOTONIC);

	for (struct ring *r = atomic_load_explicit(&tr->rings, memory_order_acquire); r;
	     r = r->next) {
		uint64_t f = atomic_load(&r->freeing);
		if (f != 0 && f < cutoff)
			cutoff = f;
	}
	return cutoff;
}

/* Write what the rings hold, in time order. Unless `all`, rows from the stamp of a free still in
 * flight (or from the start of this flush) on wait for the next flush: another thread may already
 * have a row for the block that free is giving back. */
static void drain(struct gp_shim_trace *tr, int all)
{
	uint64_t cutoff = UINT64_MAX;
	size_t n, i;

	tr->nruns = 0;
	if (tr->held > 0)
		add_run(tr, 0);
	n = collect(tr, tr->held);
	if (!all) {
		cutoff = cutoff_now(tr);
		n = collect(tr, n); /* frees that finished meanwhile: their rows are in now */
	}
	if (tr->nruns > 0)
		merge_runs(tr, n);
	for (i = 0; i < n && tr->batch[i].ns < cutoff; i++)
		format(&tr->batch[i]);
	out_flush();
	tr->held = n - i;
	if (tr->held > 0)
		memmove(tr->batch, tr->batch + i, tr->held * sizeof(*tr->batch));
}

static void sample(const struct gp_stats_snapshot *s, const char *event)
{
	char line[256], *p;
	uint64_t now = (uint64_t)((int64_t)gp_clock_ns(CLOCK_MONOTONIC) + gp_shim.trace.wall_offset);

	if (gp_shim.trace.samples == NULL)
		return;
	for (uint64_t i = 0; i < s->ndev && i < GP_STATS_MAX_DEVICES; i++) {
		const struct gp_stats_device *d = &s->dev[i];
		p = put_time(line, now);
		snprintf(p, sizeof(line) - (size_t)(p - line), ",%llu,%llu,%llu,%llu,%s\n",
			 (unsigned long long)d->device, (unsigned long long)d->in_use_bytes,
			 (unsigned long long)d->idle_bytes, (unsigned long long)d->pending_bytes, event);
		fputs(line, gp_shim.trace.samples);
	}
	fflush(gp_shim.trace.samples);
}

/* ---- the control side ------------------------------------------------------------------- */

/* x.csv -> x.pool.csv; anything else -> <path>.pool.csv */
static void samples_path(const char *path, char *buf, size_t len)
{
	size_t n = strlen(path);

	if (n > 4 && strcmp(path + n - 4, ".csv") == 0)
		snprintf(buf, len, "%.*s.pool.csv", (int)(n - 4), path);
	else
		snprintf(buf, len, "%s.pool.csv", path);
}

int gp_trace_start(const char *path, void (*wake)(void))
{
	char spath[4096];
	int rc = -1;

	gp_shim.trace.waker = wake;
	pthread_mutex_lock(&gp_shim.trace.flush_lock);
	gp_shim.trace.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (gp_shim.trace.fd < 0) {
		gp_log(GP_LOG_ERROR, "GPUPOOL_TRACE: cannot open %s: %s; not tracing", path,
		       strerror(errno));
		goto out;
	}
	if (gp_shim.trace.out == NULL)
		gp_shim.trace.out = malloc(OUT_BYTES);
	if (gp_shim.trace.out == NULL || pthread_key_create(&gp_shim.trace.owner_key, disown) != 0) {
		gp_log(GP_LOG_ERROR, "GPUPOOL_TRACE: %s; not tracing", gp_shim.trace.out == NULL ?
		       "no memory for the output buffer" : "no thread key left");
		close(gp_shim.trace.fd);
		gp_shim.trace.fd = -1;
		goto out;
	}
	if (gp_shim.trace.sizes == NULL) { /* without it frees are written with size 0 */
		gp_shim.trace.sizes = aligned_alloc(GP_LINE, sizeof(*gp_shim.trace.sizes));
		if (gp_shim.trace.sizes != NULL)
			gp_ptrmap_init(gp_shim.trace.sizes);
	}
	write_all(gp_shim.trace.fd, HEADER, strlen(HEADER));
	samples_path(path, spath, sizeof(spath));
	gp_shim.trace.samples = fopen(spath, "we");
	if (gp_shim.trace.samples == NULL)
		gp_log(GP_LOG_ERROR, "GPUPOOL_TRACE: cannot open %s: %s; no pool samples", spath,
		       strerror(errno));
	else
		fputs(SAMPLE_HEADER, gp_shim.trace.samples);
	gp_shim.trace.wall_offset = (int64_t)gp_clock_ns(CLOCK_REALTIME) - (int64_t)gp_clock_ns(CLOCK_MONOTONIC);
	atomic_store(&gp_shim.trace.on, 1);
	gp_log(GP_LOG_INFO, "tracing allocations to %s", path);
	rc = 0;
out:
	pthread_mutex_unlock(&gp_shim.trace.flush_lock);
	return rc;
}

void gp_trace_flush(void)
{
	pthread_mutex_lock(&gp_shim.trace.flush_lock);
	if (gp_shim.trace.fd >= 0)
		drain(&gp_shim.trace, 0);
	pthread_mutex_unlock(&gp_shim.trace.flush_lock);
}

void gp_trace_sample(const struct gp_stats_snapshot *s, const char *event)
{
	pthread_mutex_lock(&gp_shim.trace.flush_lock);
	if (gp_shim.trace.fd >= 0)
		sample(s, event);
	pthread_mutex_unlock(&gp_shim.trace.flush_lock);
}

void gp_trace_stop(const struct gp_stats_snapshot *s)
{
	uint64_t n;

	pthread_mutex_lock(&gp_shim.trace.flush_lock);
	if (gp_shim.trace.fd < 0)
		goto out;
	atomic_store(&gp_shim.trace.on, 0);
	drain(&gp_shim.trace, 1);
	sample(s, "exit");
	close(gp_shim.trace.fd);
	gp_shim.trace.fd = -1;
	if (gp_shim.trace.samples != NULL)
		fclose(gp_shim.trace.samples);
	gp_shim.trace.samples = NULL;
	n = atomic_load(&gp_shim.trace.lost);
	if (n > 0)
		gp_log(GP_LOG_WARN, "GPUPOOL_TRACE: %llu records could not be kept",
		       (unsigned long long)n);
out:
	pthread_mutex_unlock(&gp_shim.trace.flush_lock);
}
