/* driver_state.c — the stand-in driver's state and settings: the environment read once, the
 * prologue every entry point runs (unloading, cuInit, a current context), the lock, fault
 * injection, and the report of the counters written at exit. Test-only. */
#define _GNU_SOURCE
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Under AddressSanitizer, "device" memory and its record come from mmap, not malloc. GCC 12's
 * ASan takes no allocator locks around fork: a child forked while another thread is inside
 * ASan's allocator (a quarantine recycle of a large chunk, say) deadlocks in its first large
 * malloc, which is the stand-in's cuMemAlloc (the forking tests would hang). glibc's malloc is
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

struct state st = { .lock = PTHREAD_MUTEX_INITIALIZER };
_Atomic int st_unloading, st_free_keeps, st_initialised;
_Atomic unsigned st_free_delay_us, st_event_latency_us, st_launch_delay_us;

static pthread_once_t st_once = PTHREAD_ONCE_INIT;

/* Fault injection: atomics, so that the runtime's cudaGetDevice (no lock) can fail too. */
struct fault {
	_Atomic unsigned every; /* 0 = off */
	_Atomic int error;
	_Atomic uint64_t calls, injected;
};

static const struct {
	const char *name;
	int error; /* a cudaError_t */
} fault_defs[STANDIN_FAULT_COUNT] = {
	[STANDIN_FAULT_MALLOC] = { "MALLOC", 2 },         /* cudaErrorMemoryAllocation */
	[STANDIN_FAULT_FREE] = { "FREE", 719 },           /* cudaErrorLaunchFailure */
	[STANDIN_FAULT_EVENT_RECORD] = { "EVENT_RECORD", 999 }, /* cudaErrorUnknown */
	[STANDIN_FAULT_EVENT_QUERY] = { "EVENT_QUERY", 999 },
	[STANDIN_FAULT_GETDEVICE] = { "GETDEVICE", 999 },
	[STANDIN_FAULT_VMM_MAP] = { "VMM_MAP", 2 },
	[STANDIN_FAULT_VMM_UNMAP] = { "VMM_UNMAP", 999 },
};

static struct fault faults[STANDIN_FAULT_COUNT];

/* ---- setup ---- */

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

static int env_on(const char *name)
{
	const char *s = getenv(name);

	return s != NULL && strcmp(s, "1") == 0;
}

static unsigned env_unsigned(const char *name)
{
	const char *s = getenv(name);

	return s != NULL ? (unsigned)strtoul(s, NULL, 10) : 0u;
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&st.lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&st.lock);
}

/* The streams' workers stay behind in the parent (driver_work.c). */
static void fork_child(void)
{
	work_after_fork();
	pthread_mutex_unlock(&st.lock);
}

static void setup_devices(void)
{
	uint64_t capacity = parse_bytes(getenv("STANDIN_CAPACITY"), GIB);
	const char *s = getenv("STANDIN_DEVICES");
	int i;

	st.ndevices = 1;
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
		st.dev[i].ctx.device = i;
	}
}

static void setup_faults(void)
{
	char name[64];
	const char *e;
	int i;

	for (i = 0; i < STANDIN_FAULT_COUNT; i++) {
		snprintf(name, sizeof(name), "STANDIN_FAIL_%s_EVERY", fault_defs[i].name);
		atomic_store(&faults[i].every, env_unsigned(name));
		snprintf(name, sizeof(name), "STANDIN_FAIL_%s_ERROR", fault_defs[i].name);
		e = getenv(name);
		atomic_store(&faults[i].error, e != NULL && atoi(e) != 0 ? atoi(e) : fault_defs[i].error);
	}
	atomic_store(&st_free_keeps, env_on("STANDIN_FAIL_FREE_KEEPS"));
}

static void st_init(void)
{
	const char *s;

	setup_devices();
	setup_faults();
	st.manual_events = env_on("STANDIN_MANUAL_EVENTS");
	st.trace = env_on("STANDIN_TRACE");
	st.use_mmap = STANDIN_MMAP || env_on("STANDIN_MMAP");
	s = getenv("STANDIN_REPORT");
	if (s != NULL)
		snprintf(st.report_path, sizeof(st.report_path), "%s", s);
	atomic_store(&st_unloading, env_on("STANDIN_UNLOADING"));
	atomic_store(&st_free_delay_us, env_unsigned("STANDIN_FREE_DELAY_US"));
	atomic_store(&st_event_latency_us, env_unsigned("STANDIN_EVENT_LATENCY_US"));
	atomic_store(&st_launch_delay_us, env_unsigned("STANDIN_LAUNCH_DELAY_US"));
	work_setup();
	streams_setup();
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void st_setup(void)
{
	pthread_once(&st_once, st_init);
}

/* ---- the prologue of an entry point ---- */

/* The driver is being torn down (STANDIN_UNLOADING) or was never initialised: fail at once. */
CUresult check_call(void)
{
	st_setup();
	if (atomic_load_explicit(&st_unloading, memory_order_relaxed))
		return CUDA_ERROR_DEINITIALIZED;
	if (!atomic_load_explicit(&st_initialised, memory_order_relaxed))
		return CUDA_ERROR_NOT_INITIALIZED;
	return CUDA_SUCCESS;
}

CUresult enter(void)
{
	CUresult rc = check_call();

	if (rc == CUDA_SUCCESS)
		pthread_mutex_lock(&st.lock);
	return rc;
}

/* As the real driver: work that belongs to a context needs one current on this thread. */
CUresult enter_ctx(int *device)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	*device = ctx_device();
	if (*device < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&st.lock);
	return CUDA_SUCCESS;
}

/* A default stream is the current context's: none current, no such stream. A stream of its own
 * carries its context. *device: the current context's device, -1 if none. */
CUresult enter_stream(CUstream s, int *device)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	*device = ctx_device();
	if (*device < 0 && is_default_stream(s))
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&st.lock);
	return CUDA_SUCCESS;
}

void lock_state(void)
{
	st_setup();
	pthread_mutex_lock(&st.lock);
}

static void write_report(void);

void report_if_due(void)
{
	if (st.reported)
		write_report();
}

void leave(void)
{
	report_if_due();
	nvml_publish();
	pthread_mutex_unlock(&st.lock);
}

/* The error an injected fault gives this call (a cudaError_t number, returned as the CUresult
 * of that number: equal for every error the kinds use), or CUDA_SUCCESS. */
CUresult inject(enum standin_fault kind)
{
	struct fault *f = &faults[kind];
	unsigned every = atomic_load_explicit(&f->every, memory_order_relaxed);

	if (every == 0 || (atomic_fetch_add(&f->calls, 1) + 1) % every != 0)
		return CUDA_SUCCESS;
	atomic_fetch_add(&f->injected, 1);
	return (CUresult)atomic_load(&f->error);
}

void set_fault(enum standin_fault kind, unsigned every, int error)
{
	atomic_store(&faults[kind].error, error != 0 ? error : fault_defs[kind].error);
	atomic_store(&faults[kind].calls, 0);
	atomic_store(&faults[kind].every, every);
}

uint64_t faults_injected(enum standin_fault kind)
{
	return atomic_load(&faults[kind].injected);
}

uint64_t charge(uint64_t bytes)
{
	if (bytes <= MIB)
		return (bytes + 511) / 512 * 512;
	return (bytes + 2 * MIB - 1) / (2 * MIB) * (2 * MIB);
}

uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- counters and the report ---- */

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
	{ "launches", offsetof(struct standin_counters, launches) },
	{ "vmm_creates", offsetof(struct standin_counters, vmm_creates) },
	{ "vmm_failed_creates", offsetof(struct standin_counters, vmm_failed_creates) },
	{ "vmm_releases", offsetof(struct standin_counters, vmm_releases) },
	{ "vmm_maps", offsetof(struct standin_counters, vmm_maps) },
	{ "vmm_unmaps", offsetof(struct standin_counters, vmm_unmaps) },
	{ "vmm_reserves", offsetof(struct standin_counters, vmm_reserves) },
	{ "vmm_address_frees", offsetof(struct standin_counters, vmm_address_frees) },
	{ "vmm_set_access", offsetof(struct standin_counters, vmm_set_access) },
	{ "work_queued", offsetof(struct standin_counters, work_queued) },
	{ "work_done", offsetof(struct standin_counters, work_done) },
	{ "kernels_run", offsetof(struct standin_counters, kernels_run) },
	{ "host_funcs_run", offsetof(struct standin_counters, host_funcs_run) },
	{ "pinned_allocs", offsetof(struct standin_counters, pinned_allocs) },
	{ "pinned_frees", offsetof(struct standin_counters, pinned_frees) },
};

#define NFIELDS (sizeof(counter_fields) / sizeof(counter_fields[0]))
_Static_assert(NFIELDS * sizeof(uint64_t) == sizeof(struct standin_counters),
	       "every counter is in the report");

static uint64_t *field(struct standin_counters *c, size_t i)
{
	return (uint64_t *)((char *)c + counter_fields[i].off);
}

/* Caller holds st.lock. */
void sum_counters(int device, struct standin_counters *out)
{
	size_t i;
	int d;

	memset(out, 0, sizeof(*out));
	for (d = 0; d < STANDIN_MAX_DEVICES; d++) {
		if (device >= 0 && d != device)
			continue;
		for (i = 0; i < NFIELDS; i++)
			*field(out, i) += *field(&st.dev[d].c, i);
	}
}

static int write_all(int fd, const char *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = write(fd, buf + done, len - done);

		if (n > 0)
			done += (size_t)n;
		else if (n < 0 && errno == EINTR)
			continue;
		else
			return -1;
	}
	return 0;
}

/* Caller holds st.lock. Totals over all devices, one `name=value` a line. Written beside and
 * renamed over the report, so a process that ends in the middle (exit() kills the other threads,
 * whose calls rewrite it) leaves the previous report whole. With write(2), not stdio: exit()
 * flushes and unbuffers every stdio stream, such a thread's too, so with fprintf a report cut
 * after its first line's name could be renamed into place (and e2e_storm_exit fail). */
static void write_report(void)
{
	struct standin_counters c;
	char tmp[sizeof(st.report_path) + 8], buf[4096];
	size_t i, len = 0;
	int fd, ok;

	if (st.report_path[0] == '\0')
		return;
	sum_counters(-1, &c);
	for (i = 0; i < NFIELDS && len < sizeof(buf); i++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s=%llu\n", counter_fields[i].name,
					(unsigned long long)*field(&c, i));
	if (len >= sizeof(buf))
		return; /* cannot happen: a few hundred bytes */
	snprintf(tmp, sizeof(tmp), "%s.tmp", st.report_path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	ok = write_all(fd, buf, len) == 0;
	if (close(fd) == 0 && ok)
		rename(tmp, st.report_path);
}

/* Libraries' destructors run after main returns or exit() is called: what the shim does at exit
 * before this point is in the report, and any call after it rewrites the report. */
__attribute__((destructor)) static void st_fini(void)
{
	lock_state();
	write_report();
	st.reported = 1;
	pthread_mutex_unlock(&st.lock);
}
