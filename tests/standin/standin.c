/* standin.c — a stand-in for the CUDA runtime (libcudart.so.13) in plain C, for CPU-only e2e tests.
 * "Device memory" is host memory; memory accounting, the per-thread last error, events, streams
 * and the stream-capture rules mimic the real runtime closely enough that a shim which behaves
 * here makes the same calls it would make on a GPU. Every entry point counts into
 * struct standin_counters. Test-only: never linked into libgpupool. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "standin.h"

#define STANDIN_MAX_DEVICES 8
#define STANDIN_MAP_BUCKETS 4096
#define STANDIN_ALIGN 256

/* Under AddressSanitizer, "device" memory and its record come from mmap, not malloc. GCC 12's
 * ASan takes no allocator locks around fork: a child forked while another thread is inside
 * ASan's allocator (a quarantine recycle of a large chunk, say) deadlocks in its first large
 * malloc, which is the stand-in's cudaMalloc (seen in e2e_storm_fork). glibc's malloc is
 * fork-safe, and elsewhere the stand-in keeps it: valgrind then checks device memory too. */
#if defined(__SANITIZE_ADDRESS__)
#define STANDIN_MMAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STANDIN_MMAP 1
#endif
#endif
#ifndef STANDIN_MMAP
#define STANDIN_MMAP 0
#endif
#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)

struct alloc {
	struct alloc *next;
	void *ptr;
	uint64_t size;    /* bytes asked for */
	uint64_t charged; /* bytes counted against the device */
	size_t span;      /* st.use_mmap: bytes mapped, this record first */
	int device;
};

struct CUmemPoolHandle_st {
	int device;
};

struct device {
	uint64_t capacity; /* bytes */
	uint64_t used;     /* bytes, as charged */
	struct standin_counters c;
	struct CUmemPoolHandle_st pool;
};

struct CUstream_st {
	struct CUstream_st *next;
	int device;
	unsigned flags;
	int priority;
	int capturing;
	int capture_invalid;
	enum cudaStreamCaptureMode capture_mode;
	const void *capture_thread; /* &thread_token of the thread that began the capture */
};

struct CUevent_st {
	struct CUevent_st *next;
	int device;
	unsigned flags;
	int recorded;
	int done;
	int captured;               /* recorded into a capture: not a point in real execution */
	struct CUstream_st *stream; /* NULL: a default stream of `device` */
	uint64_t seq;               /* record order, for cudaEventSynchronize */
	uint64_t done_at_ns;        /* STANDIN_EVENT_LATENCY_US: "the GPU" reaches it then */
};

struct CUgraph_st {
	int device;
};

static struct {
	pthread_mutex_t lock;
	int ndevices;
	int manual_events;
	int captures; /* streams now capturing */
	int reported; /* the exit report was written: rewrite it on every later call */
	int trace;    /* STANDIN_TRACE=1: say on stderr which call broke the capture rules */
	int use_mmap; /* device memory from mmap: under ASan, or STANDIN_MMAP=1 (a block freed and
		       * one allocated next, of one size, then usually get the same address) */
	uint64_t record_seq;
	struct device dev[STANDIN_MAX_DEVICES];
	struct alloc *map[STANDIN_MAP_BUCKETS];
	struct CUstream_st *streams;
	struct CUevent_st *events;
	char report_path[4096];
} st = { .lock = PTHREAD_MUTEX_INITIALIZER };

static pthread_once_t st_once = PTHREAD_ONCE_INIT;

/* Fault injection: atomics, so cudaGetDevice (which takes no lock) can fail too. */
struct fault {
	_Atomic unsigned every; /* 0 = off */
	_Atomic int error;
	_Atomic uint64_t calls, injected;
};

static const struct {
	const char *name;
	cudaError_t error;
} fault_defs[STANDIN_FAULT_COUNT] = {
	[STANDIN_FAULT_MALLOC] = { "MALLOC", cudaErrorMemoryAllocation },
	[STANDIN_FAULT_FREE] = { "FREE", cudaErrorLaunchFailure },
	[STANDIN_FAULT_EVENT_RECORD] = { "EVENT_RECORD", cudaErrorUnknown },
	[STANDIN_FAULT_EVENT_QUERY] = { "EVENT_QUERY", cudaErrorUnknown },
	[STANDIN_FAULT_GETDEVICE] = { "GETDEVICE", cudaErrorUnknown },
};

static struct fault faults[STANDIN_FAULT_COUNT];
static _Atomic int unloading, free_keeps;
static _Atomic unsigned free_delay_us;
static _Atomic unsigned event_latency_us;

static _Thread_local int cur_device;
static _Thread_local int ctx_device = -1; /* the device whose context is current, -1: none */
static _Thread_local cudaError_t last_error;
static _Thread_local enum cudaStreamCaptureMode thread_capture_mode;
static _Thread_local char thread_token;

/* ---- setup, locking, report ---- */

static uint64_t parse_bytes(const char *s, uint64_t dflt)
{
	char *end = NULL;
	unsigned long long v;

	if (s == NULL || *s == '\0')
		return dflt;
	v = strtoull(s, &end, 10);
	if (end == s)
		return dflt;
	switch (*end) {
	case 'K': case 'k': v *= 1024ull; break;
	case 'M': case 'm': v *= MIB; break;
	case 'G': case 'g': v *= GIB; break;
	default: break;
	}
	return v;
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&st.lock);
}

static void fork_release(void)
{
	pthread_mutex_unlock(&st.lock);
}

/* The stand-in libcuda.so.1 beside this library, loaded as the real runtime loads the driver. */
static void load_driver(void)
{
	static const char name[] = "libcuda.so.1";
	char path[4096];
	Dl_info self;
	const char *slash;
	size_t dir;

	if (dladdr((void *)&st, &self) == 0 || self.dli_fname == NULL ||
	    (slash = strrchr(self.dli_fname, '/')) == NULL)
		return;
	dir = (size_t)(slash - self.dli_fname) + 1;
	if (dir + sizeof(name) > sizeof(path))
		return;
	memcpy(path, self.dli_fname, dir);
	memcpy(path + dir, name, sizeof(name));
	if (dlopen(path, RTLD_NOW | RTLD_GLOBAL) == NULL)
		fprintf(stderr, "standin: %s not loaded: %s\n", path, dlerror());
}

static void st_init(void)
{
	const char *s;
	uint64_t capacity = parse_bytes(getenv("STANDIN_CAPACITY"), GIB);
	int i;

	st.ndevices = 1;
	s = getenv("STANDIN_DEVICES");
	if (s != NULL && *s != '\0') {
		st.ndevices = atoi(s);
		if (st.ndevices < 0)
			st.ndevices = 0;
		if (st.ndevices > STANDIN_MAX_DEVICES)
			st.ndevices = STANDIN_MAX_DEVICES;
	}
	for (i = 0; i < STANDIN_MAX_DEVICES; i++) {
		st.dev[i].capacity = capacity;
		st.dev[i].pool.device = i;
	}
	s = getenv("STANDIN_MANUAL_EVENTS");
	st.manual_events = s != NULL && strcmp(s, "1") == 0;
	s = getenv("STANDIN_TRACE");
	st.trace = s != NULL && strcmp(s, "1") == 0;
	s = getenv("STANDIN_MMAP");
	st.use_mmap = STANDIN_MMAP || (s != NULL && strcmp(s, "1") == 0);
	s = getenv("STANDIN_REPORT");
	if (s != NULL)
		snprintf(st.report_path, sizeof(st.report_path), "%s", s);
	for (i = 0; i < STANDIN_FAULT_COUNT; i++) {
		char name[64];
		const char *e;

		snprintf(name, sizeof(name), "STANDIN_FAIL_%s_EVERY", fault_defs[i].name);
		s = getenv(name);
		snprintf(name, sizeof(name), "STANDIN_FAIL_%s_ERROR", fault_defs[i].name);
		e = getenv(name);
		atomic_store(&faults[i].every, s != NULL ? (unsigned)strtoul(s, NULL, 10) : 0u);
		atomic_store(&faults[i].error, e != NULL && atoi(e) != 0 ? atoi(e) : (int)fault_defs[i].error);
	}
	s = getenv("STANDIN_FAIL_FREE_KEEPS");
	atomic_store(&free_keeps, s != NULL && strcmp(s, "1") == 0);
	s = getenv("STANDIN_UNLOADING");
	atomic_store(&unloading, s != NULL && strcmp(s, "1") == 0);
	s = getenv("STANDIN_FREE_DELAY_US");
	atomic_store(&free_delay_us, s != NULL ? (unsigned)strtoul(s, NULL, 10) : 0u);
	s = getenv("STANDIN_EVENT_LATENCY_US");
	atomic_store(&event_latency_us, s != NULL ? (unsigned)strtoul(s, NULL, 10) : 0u);
	pthread_atfork(fork_prepare, fork_release, fork_release);
	s = getenv("STANDIN_NO_DRIVER");
	if (s == NULL || strcmp(s, "1") != 0)
		load_driver();
}

/* The error an injected fault gives this call, or cudaSuccess. */
static cudaError_t inject(enum standin_fault kind)
{
	struct fault *f = &faults[kind];
	unsigned every = atomic_load_explicit(&f->every, memory_order_relaxed);

	if (every == 0 || (atomic_fetch_add(&f->calls, 1) + 1) % every != 0)
		return cudaSuccess;
	atomic_fetch_add(&f->injected, 1);
	return (cudaError_t)atomic_load(&f->error);
}

/* The runtime is being torn down (STANDIN_UNLOADING): every entry point fails at once. */
static int gone(void)
{
	pthread_once(&st_once, st_init);
	return atomic_load_explicit(&unloading, memory_order_relaxed);
}

static const struct {
	const char *name;
	size_t off;
} counter_fields[] = {
	{ "mallocs", offsetof(struct standin_counters, mallocs) },
	{ "frees", offsetof(struct standin_counters, frees) },
	{ "failed_mallocs", offsetof(struct standin_counters, failed_mallocs) },
	{ "bad_frees", offsetof(struct standin_counters, bad_frees) },
	{ "async_mallocs", offsetof(struct standin_counters, async_mallocs) },
	{ "async_frees", offsetof(struct standin_counters, async_frees) },
	{ "live_allocs", offsetof(struct standin_counters, live_allocs) },
	{ "live_bytes", offsetof(struct standin_counters, live_bytes) },
	{ "event_records", offsetof(struct standin_counters, event_records) },
	{ "event_queries", offsetof(struct standin_counters, event_queries) },
	{ "syncs", offsetof(struct standin_counters, syncs) },
	{ "stream_creates", offsetof(struct standin_counters, stream_creates) },
	{ "stream_destroys", offsetof(struct standin_counters, stream_destroys) },
	{ "mem_get_info", offsetof(struct standin_counters, mem_get_info) },
	{ "pool_trims", offsetof(struct standin_counters, pool_trims) },
	{ "frees_off_device", offsetof(struct standin_counters, frees_off_device) },
	{ "stream_queries", offsetof(struct standin_counters, stream_queries) },
	{ "drv_stream_queries", offsetof(struct standin_counters, drv_stream_queries) },
	{ "drv_event_records", offsetof(struct standin_counters, drv_event_records) },
	{ "drv_event_queries", offsetof(struct standin_counters, drv_event_queries) },
};

static uint64_t *field(struct standin_counters *c, size_t i)
{
	return (uint64_t *)((char *)c + counter_fields[i].off);
}

/* Caller holds st.lock. */
static void sum_counters(int device, struct standin_counters *out)
{
	size_t i;
	int d;

	memset(out, 0, sizeof(*out));
	for (d = 0; d < STANDIN_MAX_DEVICES; d++) {
		if (device >= 0 && d != device)
			continue;
		for (i = 0; i < sizeof(counter_fields) / sizeof(counter_fields[0]); i++)
			*field(out, i) += *field(&st.dev[d].c, i);
	}
}

/* Caller holds st.lock. Totals over all devices, one `name=value` a line. Written beside and
 * renamed over the report, so a process that ends in the middle (exit() kills the other threads,
 * whose calls rewrite it) leaves the previous report whole. With write(2), not stdio: exit()
 * flushes and unbuffers every stdio stream, such a thread's too, and with fprintf a report cut
 * after its first line's name was renamed into place (e2e_storm_exit failed in 3 of about 150
 * ctest runs under ASan; none in 150 since). */
static void write_report(void)
{
	struct standin_counters c;
	char tmp[sizeof(st.report_path) + 8], buf[4096];
	size_t i, len = 0, done = 0;
	int fd, ok = 1;

	if (st.report_path[0] == '\0')
		return;
	sum_counters(-1, &c);
	for (i = 0; i < sizeof(counter_fields) / sizeof(counter_fields[0]) && len < sizeof(buf); i++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s=%llu\n", counter_fields[i].name,
					(unsigned long long)*field(&c, i));
	if (len >= sizeof(buf))
		return; /* cannot happen: a few hundred bytes */
	snprintf(tmp, sizeof(tmp), "%s.tmp", st.report_path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	while (ok && done < len) {
		ssize_t n = write(fd, buf + done, len - done);
		if (n > 0)
			done += (size_t)n;
		else if (n < 0 && errno == EINTR)
			continue;
		else
			ok = 0;
	}
	if (close(fd) == 0 && ok)
		rename(tmp, st.report_path);
}

/* Libraries' destructors run after main returns or exit() is called: what the shim does at exit
 * before this point is in the report, and any call after it rewrites the report. */
__attribute__((destructor)) static void st_fini(void)
{
	pthread_once(&st_once, st_init);
	pthread_mutex_lock(&st.lock);
	write_report();
	st.reported = 1;
	pthread_mutex_unlock(&st.lock);
}

/* The state's lock, for the test API: no context is made current by it. */
static void lock_state(void)
{
	pthread_once(&st_once, st_init);
	pthread_mutex_lock(&st.lock);
}

/* A runtime call that does work: the thread's current device's context is current from now on,
 * as the runtime makes it. */
static void enter(void)
{
	pthread_once(&st_once, st_init);
	pthread_mutex_lock(&st.lock);
	ctx_device = cur_device;
}

static void leave(void)
{
	if (st.reported)
		write_report();
	pthread_mutex_unlock(&st.lock);
}

/* Failed calls set the calling thread's last error, like the runtime (cudaErrorNotReady is a
 * status, not an error). */
static cudaError_t result(cudaError_t rc)
{
	if (rc != cudaSuccess && rc != cudaErrorNotReady)
		last_error = rc;
	return rc;
}

static struct device *current(void)
{
	return &st.dev[cur_device];
}

uint64_t standin_charge(uint64_t bytes)
{
	if (bytes <= MIB)
		return (bytes + 511) / 512 * 512;
	return (bytes + 2 * MIB - 1) / (2 * MIB) * (2 * MIB);
}

/* ---- the pointer map ---- */

static size_t bucket(const void *p)
{
	uintptr_t v = (uintptr_t)p;

	return (size_t)((v >> 8) ^ (v >> 20)) % STANDIN_MAP_BUCKETS;
}

static struct alloc *map_find(const void *p)
{
	struct alloc *a;

	for (a = st.map[bucket(p)]; a != NULL; a = a->next)
		if (a->ptr == p)
			return a;
	return NULL;
}

static struct alloc *map_remove(const void *p)
{
	struct alloc **link = &st.map[bucket(p)];
	struct alloc *a;

	for (; *link != NULL; link = &(*link)->next) {
		a = *link;
		if (a->ptr == p) {
			*link = a->next;
			return a;
		}
	}
	return NULL;
}

/* ---- error names ---- */

static const struct {
	cudaError_t code;
	const char *name;
	const char *text;
} errors[] = {
	{ cudaSuccess, "cudaSuccess", "no error" },
	{ cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument" },
	{ cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down" },
	{ cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure" },
	{ cudaErrorUnknown, "cudaErrorUnknown", "unknown error" },
	{ cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory" },
	{ cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error" },
	{ cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected" },
	{ cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal" },
	{ cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle" },
	{ cudaErrorIllegalState, "cudaErrorIllegalState",
	  "the operation cannot be performed in the present state" },
	{ cudaErrorNotReady, "cudaErrorNotReady", "device not ready" },
	{ cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported" },
	{ cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
	  "operation not permitted when stream is capturing" },
	{ cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
	  "operation failed due to a previous error during capture" },
	{ cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
	  "operation would make the legacy stream depend on a capturing blocking stream" },
	{ cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
	  "attempt to terminate a thread-local capture sequence from another thread" },
};

static const char *error_name(cudaError_t error)
{
	size_t i;

	for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == error)
			return errors[i].name;
	return "unrecognized error code";
}

/* ---- stream capture rules (CUDA programming guide, "Prohibited and Unhandled Operations") ---- */

/* Whether a potentially unsafe call (cudaMalloc, cudaFree, queries, synchronisation) from this
 * thread is prohibited now, per cudaThreadExchangeStreamCaptureMode. */
static int capture_prohibits(void)
{
	struct CUstream_st *s;

	if (st.captures == 0 || thread_capture_mode == cudaStreamCaptureModeRelaxed)
		return 0;
	for (s = st.streams; s != NULL; s = s->next) {
		if (!s->capturing || s->capture_mode == cudaStreamCaptureModeRelaxed)
			continue;
		if (s->capture_thread == &thread_token)
			return 1;
		if (thread_capture_mode == cudaStreamCaptureModeGlobal &&
		    s->capture_mode == cudaStreamCaptureModeGlobal)
			return 1;
	}
	return 0;
}

/* An illegal call during capture also invalidates the capture, as on a GPU. Returns rc; with
 * STANDIN_TRACE=1 says on stderr which call broke the rules, to tell a shim's author. */
static cudaError_t capture_error(const char *fn, int device, cudaError_t rc)
{
	struct CUstream_st *s;

	for (s = st.streams; s != NULL; s = s->next)
		if (s->capturing && (device < 0 || s->device == device))
			s->capture_invalid = 1;
	if (st.trace)
		fprintf(stderr, "standin: %s during stream capture: %s (thread capture mode %d)\n", fn,
			error_name(rc), (int)thread_capture_mode);
	return rc;
}

static cudaError_t check_unsafe_call(const char *fn)
{
	if (!capture_prohibits())
		return cudaSuccess;
	return capture_error(fn, -1, cudaErrorStreamCaptureUnsupported);
}

/* The legacy stream implicitly waits for every blocking stream of its device: touching it while
 * one of those is capturing is an error. */
static int legacy_stream_blocked(int device)
{
	struct CUstream_st *s;

	for (s = st.streams; s != NULL; s = s->next)
		if (s->capturing && s->device == device && !(s->flags & cudaStreamNonBlocking))
			return 1;
	return 0;
}

static int device_capturing(int device)
{
	struct CUstream_st *s;

	for (s = st.streams; s != NULL; s = s->next)
		if (s->capturing && s->device == device)
			return 1;
	return 0;
}

static int is_default_stream(cudaStream_t s)
{
	return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

static int is_legacy_stream(cudaStream_t s)
{
	return s == NULL || s == cudaStreamLegacy;
}

static int stream_valid(cudaStream_t s)
{
	struct CUstream_st *it;

	if (is_default_stream(s))
		return 1;
	for (it = st.streams; it != NULL; it = it->next)
		if (it == s)
			return 1;
	return 0;
}

static int stream_device(cudaStream_t s)
{
	return is_default_stream(s) ? cur_device : s->device;
}

static int event_valid(cudaEvent_t e)
{
	struct CUevent_st *it;

	for (it = st.events; it != NULL; it = it->next)
		if (it == e)
			return 1;
	return 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- events: "the GPU" completes them when told or on synchronisation ---- */

/* Synchronised past it: done now, whatever the latency. */
static void finish(struct CUevent_st *e)
{
	e->done = 1;
	e->done_at_ns = 0;
}

static void complete_all(int device)
{
	struct CUevent_st *e;

	for (e = st.events; e != NULL; e = e->next)
		if (e->recorded && !e->captured && (device < 0 || e->device == device))
			finish(e);
}

static void complete_stream(cudaStream_t s)
{
	struct CUevent_st *e;
	int device = stream_device(s);

	for (e = st.events; e != NULL; e = e->next) {
		if (!e->recorded || e->captured)
			continue;
		/* the legacy stream waits for every blocking stream of its device */
		if (e->stream == s || (is_legacy_stream(s) && e->device == device))
			finish(e);
	}
}

static int stream_has_pending(cudaStream_t s)
{
	struct CUevent_st *e;
	int device = stream_device(s);

	for (e = st.events; e != NULL; e = e->next) {
		if (!e->recorded || e->captured || e->done)
			continue;
		if (e->stream == s || (is_legacy_stream(s) && e->device == device))
			return 1;
	}
	return 0;
}

/* ---- memory ---- */

/* A record and the block it describes; NULL when host memory ran out. */
static struct alloc *alloc_new(size_t size)
{
	struct alloc *a;

	if (st.use_mmap) {
		size_t page = 4096, span = page + (size + page - 1) / page * page;
		void *base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (base == MAP_FAILED)
			return NULL;
		a = base;
		a->ptr = (char *)base + page;
		a->span = span;
		return a;
	}
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return NULL;
	a->ptr = aligned_alloc(STANDIN_ALIGN, (size + STANDIN_ALIGN - 1) / STANDIN_ALIGN * STANDIN_ALIGN);
	if (a->ptr == NULL) {
		free(a);
		return NULL;
	}
	return a;
}

static void alloc_delete(struct alloc *a)
{
	if (st.use_mmap) {
		munmap(a, a->span);
		return;
	}
	free(a->ptr);
	free(a);
}

static cudaError_t do_malloc(void **devPtr, size_t size, int device, int async)
{
	struct device *d = &st.dev[device];
	struct alloc *a = NULL;
	uint64_t charged = standin_charge(size);
	cudaError_t rc = cudaSuccess;

	if (devPtr == NULL) {
		rc = cudaErrorInvalidValue;
		goto out;
	}
	if (size == 0) {
		*devPtr = NULL;
		goto out;
	}
	if (size > d->capacity || d->used + charged > d->capacity) { /* first test: no overflow */
		rc = cudaErrorMemoryAllocation;
		goto out;
	}
	a = alloc_new(size);
	if (a == NULL) {
		rc = cudaErrorMemoryAllocation;
		goto out;
	}
	a->size = size;
	a->charged = charged;
	a->device = device;
	a->next = st.map[bucket(a->ptr)];
	st.map[bucket(a->ptr)] = a;
	d->used += charged;
	d->c.live_allocs++;
	d->c.live_bytes += charged;
	*devPtr = a->ptr;
out:
	if (rc == cudaSuccess) {
		if (async)
			d->c.async_mallocs++;
		else
			d->c.mallocs++;
	} else {
		d->c.failed_mallocs++;
	}
	return rc;
}

/* Frees a live allocation; counts a bad free on the current device otherwise. */
static cudaError_t do_free(void *devPtr, int async)
{
	struct alloc *a = map_remove(devPtr);
	struct device *d;

	if (a == NULL) {
		current()->c.bad_frees++;
		return cudaErrorInvalidValue;
	}
	d = &st.dev[a->device];
	d->used -= a->charged;
	d->c.live_allocs--;
	d->c.live_bytes -= a->charged;
	if (async)
		d->c.async_frees++;
	else
		d->c.frees++;
	if (!async && a->device != cur_device)
		d->c.frees_off_device++; /* legal in CUDA; gpupool promises not to do it */
	alloc_delete(a);
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	cudaError_t rc;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	rc = check_unsafe_call(__func__);
	if (rc == cudaSuccess)
		rc = inject(STANDIN_FAULT_MALLOC);
	if (rc != cudaSuccess)
		current()->c.failed_mallocs++;
	else
		rc = do_malloc(devPtr, size, cur_device, 0);
	leave();
	return result(rc);
}

/* Like the runtime's, it waits for the device: every recorded event completes. An injected
 * failure frees the allocation all the same (unless STANDIN_FAIL_FREE_KEEPS) and reports the
 * error, as cudaFree does with the error of an earlier asynchronous launch. */
cudaError_t cudaFree(void *devPtr)
{
	cudaError_t rc = cudaSuccess, fault = cudaSuccess;
	unsigned delay = atomic_load(&free_delay_us);

	if (gone())
		return result(cudaErrorCudartUnloading);
	if (devPtr == NULL)
		return cudaSuccess;
	if (delay > 0) {
		struct timespec ts = { (time_t)(delay / 1000000u), (long)(delay % 1000000u) * 1000L };

		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
	enter();
	rc = check_unsafe_call(__func__);
	if (rc != cudaSuccess)
		goto out;
	if (map_find(devPtr) != NULL)
		fault = inject(STANDIN_FAULT_FREE);
	if (fault != cudaSuccess && atomic_load(&free_keeps)) {
		rc = fault;
		goto out;
	}
	rc = do_free(devPtr, 0);
	if (rc == cudaSuccess)
		complete_all(-1);
	if (fault != cudaSuccess)
		rc = fault;
out:
	leave();
	return result(rc);
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	cudaError_t rc;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	if (!stream_valid(hStream)) {
		current()->c.failed_mallocs++;
		rc = cudaErrorInvalidResourceHandle;
	} else {
		rc = do_malloc(devPtr, size, stream_device(hStream), 1);
	}
	leave();
	return result(rc);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	cudaError_t rc = cudaSuccess;

	if (gone())
		return result(cudaErrorCudartUnloading);
	if (devPtr == NULL)
		return cudaSuccess;
	enter();
	if (!stream_valid(hStream))
		rc = cudaErrorInvalidResourceHandle;
	else
		rc = do_free(devPtr, 1);
	leave();
	return result(rc);
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
	struct device *d;
	cudaError_t rc = cudaSuccess;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	d = current();
	d->c.mem_get_info++;
	if (free_bytes == NULL || total_bytes == NULL) {
		rc = cudaErrorInvalidValue;
		goto out;
	}
	*free_bytes = (size_t)(d->capacity > d->used ? d->capacity - d->used : 0);
	*total_bytes = (size_t)d->capacity;
out:
	leave();
	return result(rc);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	cudaError_t rc;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	rc = check_unsafe_call(__func__);
	if (rc == cudaSuccess && legacy_stream_blocked(cur_device)) {
		rc = capture_error(__func__, cur_device, cudaErrorStreamCaptureImplicit);
	}
	if (rc == cudaSuccess && devPtr == NULL && count > 0)
		rc = cudaErrorInvalidValue;
	if (rc == cudaSuccess)
		memset(devPtr, value, count);
	leave();
	return result(rc);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	cudaError_t rc;

	if (gone())
		return result(cudaErrorCudartUnloading);
	(void)kind;
	enter();
	rc = check_unsafe_call(__func__);
	if (rc == cudaSuccess && legacy_stream_blocked(cur_device)) {
		rc = capture_error(__func__, cur_device, cudaErrorStreamCaptureImplicit);
	}
	if (rc == cudaSuccess && (dst == NULL || src == NULL) && count > 0)
		rc = cudaErrorInvalidValue;
	if (rc == cudaSuccess)
		memmove(dst, src, count);
	leave();
	return result(rc);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
	struct alloc *a;
	cudaError_t rc = cudaSuccess;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	if (attributes == NULL) {
		rc = cudaErrorInvalidValue;
		goto out;
	}
	memset(attributes, 0, sizeof(*attributes));
	a = map_find(ptr);
	if (a == NULL) {
		attributes->type = cudaMemoryTypeUnregistered;
		attributes->device = -2;
		attributes->hostPointer = (void *)ptr;
		goto out;
	}
	attributes->type = cudaMemoryTypeDevice;
	attributes->device = a->device;
	attributes->devicePointer = a->ptr;
out:
	leave();
	return result(rc);
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
	cudaError_t rc = cudaSuccess;
	int d;

	if (gone())
		return result(cudaErrorCudartUnloading);
	(void)minBytesToKeep;
	enter();
	for (d = 0; d < st.ndevices; d++)
		if (memPool == &st.dev[d].pool)
			break;
	if (d == st.ndevices) {
		rc = cudaErrorInvalidValue;
		goto out;
	}
	st.dev[d].c.pool_trims++;
out:
	leave();
	return result(rc);
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	cudaError_t rc = cudaSuccess;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	if (memPool == NULL)
		rc = cudaErrorInvalidValue;
	else if (device < 0 || device >= st.ndevices)
		rc = cudaErrorInvalidDevice;
	else
		*memPool = &st.dev[device].pool;
	leave();
	return result(rc);
}

/* ---- devices and errors ---- */

cudaError_t cudaGetDeviceCount(int *count)
{
	cudaError_t rc = cudaSuccess;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	if (count == NULL)
		rc = cudaErrorInvalidValue;
	else if (st.ndevices == 0)
		rc = cudaErrorNoDevice;
	else
		*count = st.ndevices;
	leave();
	return result(rc);
}

cudaError_t cudaGetDevice(int *device)
{
	cudaError_t fault;

	if (gone())
		return result(cudaErrorCudartUnloading);
	fault = inject(STANDIN_FAULT_GETDEVICE);
	if (fault != cudaSuccess)
		return result(fault);
	if (device == NULL)
		return result(cudaErrorInvalidValue);
	if (st.ndevices == 0)
		return result(cudaErrorNoDevice);
	*device = cur_device;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	if (device < 0 || device >= st.ndevices)
		return result(cudaErrorInvalidDevice);
	cur_device = device;
	ctx_device = device; /* as since CUDA 12: the device's primary context is made current */
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t rc;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	current()->c.syncs++;
	rc = check_unsafe_call(__func__);
	if (rc == cudaSuccess && device_capturing(cur_device)) {
		rc = capture_error(__func__, cur_device, cudaErrorStreamCaptureUnsupported);
	}
	if (rc == cudaSuccess)
		complete_all(-1);
	leave();
	return result(rc);
}

/* Frees every allocation of the current device and destroys its streams and events, as the
 * runtime does with every resource of the device's context (their handles become invalid). */
cudaError_t cudaDeviceReset(void)
{
	struct CUstream_st **sl, *s;
	struct CUevent_st **el, *e;
	struct alloc **link, *a;
	struct device *d;
	size_t b;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	d = current();
	for (b = 0; b < STANDIN_MAP_BUCKETS; b++) {
		link = &st.map[b];
		while (*link != NULL) {
			a = *link;
			if (a->device != cur_device) {
				link = &a->next;
				continue;
			}
			*link = a->next;
			alloc_delete(a);
		}
	}
	d->used = 0;
	d->c.live_allocs = 0;
	d->c.live_bytes = 0;
	for (sl = &st.streams; *sl != NULL;) {
		s = *sl;
		if (s->device != cur_device) {
			sl = &s->next;
			continue;
		}
		*sl = s->next;
		if (s->capturing)
			st.captures--;
		for (e = st.events; e != NULL; e = e->next)
			if (e->stream == s)
				e->stream = NULL;
		free(s);
	}
	for (el = &st.events; *el != NULL;) {
		e = *el;
		if (e->device != cur_device) {
			el = &e->next;
			continue;
		}
		*el = e->next;
		free(e);
	}
	leave();
	return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t rc = last_error;

	if (gone())
		return cudaErrorCudartUnloading;
	last_error = cudaSuccess;
	return rc;
}

cudaError_t cudaPeekAtLastError(void)
{
	if (gone())
		return cudaErrorCudartUnloading;
	return last_error;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	if (runtimeVersion == NULL)
		return result(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	if (driverVersion == NULL)
		return result(cudaErrorInvalidValue);
	*driverVersion = CUDART_VERSION;
	return cudaSuccess;
}

const char *cudaGetErrorName(cudaError_t error)
{
	return error_name(error);
}

const char *cudaGetErrorString(cudaError_t error)
{
	size_t i;

	for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == error)
			return errors[i].text;
	return "unrecognized error code";
}

/* ---- streams and capture ---- */

static cudaError_t stream_create(cudaStream_t *pStream, unsigned flags, int priority)
{
	struct CUstream_st *s = NULL;
	cudaError_t rc = cudaSuccess;

	enter();
	if (pStream == NULL) {
		rc = cudaErrorInvalidValue;
		goto out;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		rc = cudaErrorMemoryAllocation;
		goto out;
	}
	s->device = cur_device;
	s->flags = flags;
	s->priority = priority;
	s->next = st.streams;
	st.streams = s;
	current()->c.stream_creates++;
	*pStream = s;
out:
	leave();
	return result(rc);
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	return stream_create(pStream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	return stream_create(pStream, flags, 0);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	return stream_create(pStream, flags, priority);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	struct CUstream_st **link;
	struct CUevent_st *e;
	cudaError_t rc = cudaErrorInvalidResourceHandle;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	for (link = &st.streams; *link != NULL; link = &(*link)->next) {
		if (*link != stream)
			continue;
		*link = stream->next;
		if (stream->capturing)
			st.captures--;
		for (e = st.events; e != NULL; e = e->next)
			if (e->stream == stream)
				e->stream = NULL;
		st.dev[stream->device].c.stream_destroys++;
		free(stream);
		rc = cudaSuccess;
		break;
	}
	leave();
	return result(rc);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	cudaError_t rc;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	current()->c.syncs++;
	if (!stream_valid(stream)) {
		rc = cudaErrorInvalidResourceHandle;
		goto out;
	}
	rc = check_unsafe_call(__func__);
	if (rc != cudaSuccess)
		goto out;
	if (!is_default_stream(stream) && stream->capturing) {
		rc = capture_error(__func__, stream->device, cudaErrorStreamCaptureUnsupported);
		goto out;
	}
	if (is_legacy_stream(stream) && legacy_stream_blocked(cur_device)) {
		rc = capture_error(__func__, cur_device, cudaErrorStreamCaptureImplicit);
		goto out;
	}
	complete_stream(stream);
out:
	leave();
	return result(rc);
}

/* cudaStreamQuery's answer, with the lock held. */
static cudaError_t query_stream(cudaStream_t stream, const char *fn)
{
	cudaError_t rc;

	if (!stream_valid(stream))
		return cudaErrorInvalidResourceHandle;
	rc = check_unsafe_call(fn);
	if (rc != cudaSuccess)
		return rc;
	if (!is_default_stream(stream) && stream->capturing)
		return capture_error(fn, stream->device, cudaErrorStreamCaptureUnsupported);
	if (is_legacy_stream(stream) && legacy_stream_blocked(cur_device))
		return capture_error(fn, cur_device, cudaErrorStreamCaptureImplicit);
	/* The stand-in sees no work but events. With manual events, work is always queued that
	 * completes only when the test says, and it cannot say so for work queued later; with an
	 * event latency, the "GPU" always lags that far behind: never idle, in both. */
	return st.manual_events || atomic_load(&event_latency_us) > 0 || stream_has_pending(stream)
		       ? cudaErrorNotReady
		       : cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	cudaError_t rc;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	current()->c.stream_queries++;
	rc = query_stream(stream, __func__);
	leave();
	return result(rc);
}

int standin_drv_context(void)
{
	return ctx_device;
}

int standin_drv_stream_query(void *stream)
{
	cudaError_t rc;

	if (gone())
		return cudaErrorCudartUnloading;
	lock_state(); /* not enter(): the driver makes no context current */
	current()->c.drv_stream_queries++;
	rc = query_stream((cudaStream_t)stream, "cuStreamQuery");
	leave();
	return rc;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	cudaError_t rc = cudaSuccess;

	if (gone())
		return result(cudaErrorCudartUnloading);
	(void)flags;
	enter();
	if (!stream_valid(stream) || !event_valid(event))
		rc = cudaErrorInvalidResourceHandle;
	leave();
	return result(rc);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	cudaError_t rc = cudaSuccess;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	if (is_default_stream(stream)) {
		rc = cudaErrorStreamCaptureUnsupported;
		goto out;
	}
	if (!stream_valid(stream)) {
		rc = cudaErrorInvalidResourceHandle;
		goto out;
	}
	if (stream->capturing) {
		rc = cudaErrorIllegalState;
		goto out;
	}
	stream->capturing = 1;
	stream->capture_invalid = 0;
	stream->capture_mode = mode;
	stream->capture_thread = &thread_token;
	st.captures++;
out:
	leave();
	return result(rc);
}

/* A graph object of `device` (graphs hold no nodes here); cudaErrorMemoryAllocation if none. */
static cudaError_t new_graph(cudaGraph_t *out, int device)
{
	*out = calloc(1, sizeof(**out));
	if (*out == NULL)
		return cudaErrorMemoryAllocation;
	(*out)->device = device;
	return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	struct CUevent_st *e;
	struct CUgraph_st *g = NULL;
	cudaError_t rc = cudaSuccess;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	if (pGraph == NULL) {
		rc = cudaErrorInvalidValue;
		goto out;
	}
	*pGraph = NULL;
	if (is_default_stream(stream) || !stream_valid(stream)) {
		rc = cudaErrorInvalidResourceHandle;
		goto out;
	}
	if (!stream->capturing) {
		rc = cudaErrorIllegalState;
		goto out;
	}
	if (stream->capture_mode != cudaStreamCaptureModeRelaxed &&
	    stream->capture_thread != &thread_token) {
		rc = cudaErrorStreamCaptureWrongThread;
		goto out;
	}
	stream->capturing = 0;
	st.captures--;
	/* events captured into the graph were never real points in the stream */
	for (e = st.events; e != NULL; e = e->next) {
		if (e->captured && e->stream == stream) {
			e->captured = 0;
			e->recorded = 0;
		}
	}
	if (stream->capture_invalid) {
		rc = cudaErrorStreamCaptureInvalidated;
		goto out;
	}
	rc = new_graph(&g, stream->device);
	if (rc == cudaSuccess)
		*pGraph = g;
out:
	leave();
	return result(rc);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
	cudaError_t rc = cudaSuccess;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	if (pCaptureStatus == NULL) {
		rc = cudaErrorInvalidValue;
		goto out;
	}
	*pCaptureStatus = cudaStreamCaptureStatusNone;
	if (!stream_valid(stream)) {
		rc = cudaErrorInvalidResourceHandle;
		goto out;
	}
	if (is_legacy_stream(stream)) {
		if (legacy_stream_blocked(cur_device))
			rc = cudaErrorStreamCaptureImplicit;
		goto out;
	}
	if (stream == cudaStreamPerThread || !stream->capturing)
		goto out;
	*pCaptureStatus = stream->capture_invalid ? cudaStreamCaptureStatusInvalidated
						  : cudaStreamCaptureStatusActive;
out:
	leave();
	return result(rc);
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
	enum cudaStreamCaptureMode old = thread_capture_mode;

	if (gone())
		return result(cudaErrorCudartUnloading);
	if (mode == NULL)
		return result(cudaErrorInvalidValue);
	thread_capture_mode = *mode;
	*mode = old;
	return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	if (graph == NULL)
		return result(cudaErrorInvalidValue);
	free(graph);
	return cudaSuccess;
}

/* Executable graphs: launches are not simulated (the stand-in runs no kernels); the handles are
 * real objects so that a shim tracking graph lifetimes can be tested. */
struct CUgraphExec_st {
	int device;
};

static cudaError_t instantiate(cudaGraphExec_t *exec, cudaGraph_t graph)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	if (exec == NULL || graph == NULL)
		return result(cudaErrorInvalidValue);
	*exec = calloc(1, sizeof(**exec));
	if (*exec == NULL)
		return result(cudaErrorMemoryAllocation);
	(*exec)->device = graph->device;
	return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
	(void)flags;
	return instantiate(exec, graph);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
					  unsigned long long flags)
{
	(void)flags;
	return instantiate(exec, graph);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	if (exec == NULL)
		return result(cudaErrorInvalidValue);
	free(exec);
	return cudaSuccess;
}

cudaError_t cudaGraphCreate(cudaGraph_t *graph, unsigned int flags)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	if (graph == NULL || flags != 0)
		return result(cudaErrorInvalidValue);
	return result(new_graph(graph, cur_device));
}

/* Nodes are not simulated: every node is this one. */
static struct CUgraphNode_st {
	int unused;
} the_node;

cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *node, cudaGraph_t graph,
				       const cudaGraphNode_t *deps, size_t ndeps, cudaGraph_t child)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	if (node == NULL || graph == NULL || child == NULL || (ndeps > 0 && deps == NULL))
		return result(cudaErrorInvalidValue);
	*node = &the_node;
	return cudaSuccess;
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
				cudaGraphExecUpdateResultInfo *info)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	if (exec == NULL || graph == NULL)
		return result(cudaErrorInvalidValue);
	if (info != NULL)
		memset(info, 0, sizeof(*info));
	return cudaSuccess;
}

cudaError_t cudaGraphClone(cudaGraph_t *clone, cudaGraph_t graph)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	if (clone == NULL || graph == NULL)
		return result(cudaErrorInvalidValue);
	return result(new_graph(clone, graph->device));
}

/* ---- events ---- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	struct CUevent_st *e;
	cudaError_t rc = cudaSuccess;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	if (event == NULL) {
		rc = cudaErrorInvalidValue;
		goto out;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL) {
		rc = cudaErrorMemoryAllocation;
		goto out;
	}
	e->device = cur_device;
	e->flags = flags;
	e->next = st.events;
	st.events = e;
	*event = e;
out:
	leave();
	return result(rc);
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	if (gone())
		return result(cudaErrorCudartUnloading);
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	struct CUevent_st **link;
	cudaError_t rc = cudaErrorInvalidResourceHandle;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	for (link = &st.events; *link != NULL; link = &(*link)->next) {
		if (*link != event)
			continue;
		*link = event->next;
		free(event);
		rc = cudaSuccess;
		break;
	}
	leave();
	return result(rc);
}

/* An event belongs to the device that was current when it was created; recording it on a stream
 * of another device is an error, as on a GPU. */
/* cudaEventRecord's work, with the lock held. */
static cudaError_t record_event(cudaEvent_t event, cudaStream_t stream, const char *fn)
{
	cudaError_t rc;
	int device;

	current()->c.event_records++;
	if (!event_valid(event) || !stream_valid(stream))
		return cudaErrorInvalidResourceHandle;
	rc = inject(STANDIN_FAULT_EVENT_RECORD);
	if (rc != cudaSuccess)
		return rc;
	device = stream_device(stream);
	if (device != event->device)
		return cudaErrorInvalidResourceHandle;
	if (is_legacy_stream(stream) && legacy_stream_blocked(device))
		return capture_error(fn, device, cudaErrorStreamCaptureImplicit);
	event->recorded = 1;
	event->stream = is_default_stream(stream) ? NULL : stream;
	event->seq = ++st.record_seq;
	event->captured = !is_default_stream(stream) && stream->capturing;
	event->done = !event->captured && !st.manual_events;
	event->done_at_ns = mono_ns() + (uint64_t)atomic_load(&event_latency_us) * 1000u;
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	cudaError_t rc;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	rc = record_event(event, stream, __func__);
	leave();
	return result(rc);
}

/* cudaEventQuery's answer, with the lock held. */
static cudaError_t query_event(cudaEvent_t event, const char *fn)
{
	cudaError_t rc;

	current()->c.event_queries++;
	if (!event_valid(event))
		return cudaErrorInvalidResourceHandle;
	rc = check_unsafe_call(fn);
	if (rc != cudaSuccess)
		return rc;
	if (event->captured)
		return capture_error(fn, -1, cudaErrorStreamCaptureUnsupported);
	rc = inject(STANDIN_FAULT_EVENT_QUERY);
	if (rc != cudaSuccess)
		return rc;
	return !event->recorded || (event->done && mono_ns() >= event->done_at_ns) ? cudaSuccess
										   : cudaErrorNotReady;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
	cudaError_t rc;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	rc = query_event(event, __func__);
	leave();
	return result(rc);
}

int standin_drv_event_record(void *event, void *stream)
{
	cudaError_t rc;

	if (gone())
		return cudaErrorCudartUnloading;
	lock_state();
	current()->c.drv_event_records++;
	rc = record_event((cudaEvent_t)event, (cudaStream_t)stream, "cuEventRecord");
	leave();
	return rc;
}

int standin_drv_event_query(void *event)
{
	cudaError_t rc;

	if (gone())
		return cudaErrorCudartUnloading;
	lock_state();
	current()->c.drv_event_queries++;
	rc = query_event((cudaEvent_t)event, "cuEventQuery");
	leave();
	return rc;
}

/* Waits for the event, which also completes what was recorded before it on the same stream. */
cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	struct CUevent_st *e;
	cudaError_t rc;

	if (gone())
		return result(cudaErrorCudartUnloading);
	enter();
	current()->c.syncs++;
	if (!event_valid(event)) {
		rc = cudaErrorInvalidResourceHandle;
		goto out;
	}
	rc = check_unsafe_call(__func__);
	if (rc != cudaSuccess)
		goto out;
	if (event->captured) {
		rc = capture_error(__func__, -1, cudaErrorStreamCaptureUnsupported);
		goto out;
	}
	if (!event->recorded)
		goto out;
	for (e = st.events; e != NULL; e = e->next)
		if (e->recorded && !e->captured && e->stream == event->stream &&
		    e->device == event->device && e->seq <= event->seq)
			finish(e);
out:
	leave();
	return result(rc);
}

/* ---- control and inspection (standin.h) ---- */

void standin_set_fault(enum standin_fault kind, unsigned every, int error)
{
	if ((unsigned)kind >= STANDIN_FAULT_COUNT)
		return;
	pthread_once(&st_once, st_init);
	atomic_store(&faults[kind].error, error != 0 ? error : (int)fault_defs[kind].error);
	atomic_store(&faults[kind].calls, 0);
	atomic_store(&faults[kind].every, every);
}

uint64_t standin_faults(enum standin_fault kind)
{
	if ((unsigned)kind >= STANDIN_FAULT_COUNT)
		return 0;
	return atomic_load(&faults[kind].injected);
}

void standin_set_free_keeps(int on)
{
	pthread_once(&st_once, st_init);
	atomic_store(&free_keeps, on != 0);
}

void standin_set_unloading(int on)
{
	pthread_once(&st_once, st_init);
	atomic_store(&unloading, on != 0);
}

void standin_set_free_delay_us(unsigned us)
{
	pthread_once(&st_once, st_init);
	atomic_store(&free_delay_us, us);
}

void standin_get(int device, struct standin_counters *out)
{
	lock_state();
	if (device >= st.ndevices || device < -1)
		memset(out, 0, sizeof(*out));
	else
		sum_counters(device, out);
	leave();
}

void standin_set_capacity(int device, uint64_t bytes)
{
	lock_state();
	if (device >= 0 && device < STANDIN_MAX_DEVICES)
		st.dev[device].capacity = bytes;
	leave();
}

void standin_set_manual_events(int on)
{
	lock_state();
	st.manual_events = on != 0;
	leave();
}

void standin_complete_events(void)
{
	lock_state();
	complete_all(-1);
	leave();
}

int standin_owns(const void *p)
{
	int owned;

	lock_state();
	owned = map_find(p) != NULL;
	leave();
	return owned;
}

uint64_t standin_size(const void *p)
{
	struct alloc *a;
	uint64_t size;

	lock_state();
	a = map_find(p);
	size = a != NULL ? a->size : 0;
	leave();
	return size;
}
