/* stress.c — proves the pool under sustained concurrent load: STRESS_THREADS (16) threads each
 * make STRESS_OPS random operations (allocations of 1 B to 64 MiB, frees, device switches over
 * 4 stand-in devices, stream creation and destruction) in cycles of 600 ms (work and pause,
 * 150 ms each, twice; a release signal every 2 ms in the first 50 ms) while the cap, idle-age
 * and pressure policies release on the control thread
 * (run with STANDIN_DEVICES=4, GPUPOOL_MAX_CACHED, GPUPOOL_IDLE_TIMEOUT, GPUPOOL_MIN_FREE and
 * GPUPOOL_LOG=info). Every block carries its owner's pattern (ends and one word a MiB), checked
 * before each free and at the end: a block
 * handed to two owners, or released while live, breaks it. At the end the runtime holds exactly
 * the live blocks on each device (after a release), then nothing; every policy released at
 * least once (counted from the shim's log, which this program sends to a file; the idle policy
 * is given a last pause after the work when it found none during it, as in slow builds). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e.h"

#define MAX_THREADS 64
#define SLOTS 16
#define DEVICES 4

struct slot {
	void *ptr;
	size_t size;
	uint64_t tag;
	int device;
};

struct worker {
	pthread_t tid;
	int id;
	long ops;
	uint64_t allocs, frees;
	struct slot slot[SLOTS];
};

static atomic_int stop_signals, paused;
static atomic_ulong signals_sent;
static char log_path[128];
static int saved_stderr = -1;

/* About log-uniform from 1 B to 8 MiB; one in 4096 from 8 to 64 MiB. */
static size_t random_size(unsigned *seed)
{
	unsigned r = (unsigned)rand_r(seed);

	if (r % 4096 == 0)
		return (8 + (size_t)(r / 256) % 57) * E2E_MIB;
	return (size_t)((unsigned)rand_r(seed) % 2048 + 1) << (r / 256 % 13);
}

/* The owner's pattern: 64 bytes at each end and one word every MiB. Any other owner of the
 * block writes its own at the same places; a release while live makes the stand-in free it. */
#define TAG_SPAN 64

static uint64_t tag_word(uint64_t tag, size_t off)
{
	uint64_t x = tag * 0x9e3779b97f4a7c15ull + off;

	x ^= x >> 29;
	return x * 0xbf58476d1ce4e5b9ull;
}

static void tag_at(unsigned char *b, size_t off, size_t n, uint64_t tag, int check, int *ok)
{
	for (size_t j = off; j < off + n; j++) {
		unsigned char v = (unsigned char)(tag_word(tag, j / 8) >> (j % 8 * 8));

		if (!check)
			b[j] = v;
		else if (b[j] != v)
			*ok = 0;
	}
}

/* Writes (check 0) or checks (check 1, returns 1 if intact) the pattern of a block. */
static int owner_tag(void *p, size_t size, uint64_t tag, int check)
{
	unsigned char *b = p;
	int ok = 1;
	size_t span = size < TAG_SPAN ? size : TAG_SPAN;

	tag_at(b, 0, span, tag, check, &ok);
	tag_at(b, size - span, span, tag, check, &ok);
	for (size_t off = E2E_MIB; off + 8 <= size; off += E2E_MIB)
		tag_at(b, off, 8, tag, check, &ok);
	return ok;
}

static int device_of(const void *p)
{
	struct cudaPointerAttributes a;

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess)
		return -1;
	return a.device;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	unsigned seed = 1000u + (unsigned)w->id * 7919u;
	cudaStream_t stream = NULL;
	cudaError_t rc;
	int dev = w->id % DEVICES;
	long op;

	if (cudaSetDevice(dev) != cudaSuccess)
		e2e_fail("thread %d: cudaSetDevice failed", w->id);
	for (op = 0; op < w->ops; op++) {
		struct slot *s = &w->slot[rand_r(&seed) % SLOTS];

		while (atomic_load_explicit(&paused, memory_order_relaxed))
			e2e_sleep_ms(1);
		if (op % 64 == 0) {
			dev = rand_r(&seed) % DEVICES;
			if (cudaSetDevice(dev) != cudaSuccess)
				e2e_fail("thread %d: cudaSetDevice failed", w->id);
		}
		if (op % 4096 == 1000 && stream == NULL && cudaStreamCreate(&stream) != cudaSuccess)
			e2e_fail("thread %d: cudaStreamCreate failed", w->id);
		if (op % 4096 == 3000 && stream != NULL) {
			if (cudaStreamDestroy(stream) != cudaSuccess)
				e2e_fail("thread %d: cudaStreamDestroy failed", w->id);
			stream = NULL;
		}
		if (s->ptr != NULL) {
			if (!owner_tag(s->ptr, s->size, s->tag, 1))
				e2e_fail("thread %d op %ld: a %zu B block on device %d lost its owner's "
					 "pattern before its free", w->id, op, s->size, s->device);
			rc = cudaFree(s->ptr);
			if (rc != cudaSuccess)
				e2e_fail("thread %d op %ld: cudaFree returned %s", w->id, op,
					 cudaGetErrorName(rc));
			s->ptr = NULL;
			w->frees++;
			continue;
		}
		s->size = random_size(&seed);
		s->tag = ((uint64_t)w->id << 48) ^ (uint64_t)op;
		s->device = dev;
		rc = cudaMalloc(&s->ptr, s->size);
		if (rc != cudaSuccess)
			e2e_fail("thread %d op %ld: cudaMalloc(%zu) on device %d returned %s", w->id, op,
				 s->size, dev, cudaGetErrorName(rc));
		if (op % 16 == 0 && device_of(s->ptr) != dev)
			e2e_fail("thread %d op %ld: a block for device %d is on device %d", w->id, op, dev,
				 device_of(s->ptr));
		owner_tag(s->ptr, s->size, s->tag, 0);
		w->allocs++;
	}
	if (stream != NULL && cudaStreamDestroy(stream) != cudaSuccess)
		e2e_fail("thread %d: cudaStreamDestroy failed", w->id);
	return NULL;
}

/* Cycles of 600 ms: the workers run for 150 ms, pause for 150 ms (as programs do between
 * requests), run again and pause again. A release signal comes every 2 ms during the first
 * 50 ms of the cycle only: the signals coalesce while the control thread is busy and their
 * release may land in the first pause; in the second, cached blocks age for the idle policy. */
static void *signaller(void *arg)
{
	(void)arg;
	for (unsigned n = 0; !atomic_load(&stop_signals); n++) {
		unsigned phase = n % 600;

		if (phase < 50 && phase % 2 == 0) {
			kill(getpid(), SIGUSR1);
			atomic_fetch_add(&signals_sent, 1);
		}
		atomic_store(&paused, phase % 300 >= 150);
		e2e_sleep_ms(1);
	}
	atomic_store(&paused, 0);
	return NULL;
}

/* The shim's log goes to a file (counted at the end); on the way out the lines that are not
 * release notes come back to the real stderr, FAIL lines included. */
static void restore_stderr(void)
{
	char line[1024];
	FILE *f;

	if (saved_stderr < 0)
		return;
	fflush(stderr);
	dup2(saved_stderr, 2);
	f = fopen(log_path, "r");
	if (f != NULL) {
		while (fgets(line, sizeof(line), f) != NULL)
			if (strncmp(line, "gpupool: info: released", 23) != 0)
				fputs(line, stderr);
		fclose(f);
	}
	if (getenv("STRESS_KEEP_LOG") == NULL)
		unlink(log_path);
}

static void log_to_file(void)
{
	int fd;

	snprintf(log_path, sizeof(log_path), "/tmp/gpupool-e2e-stress-%d.log", (int)getpid());
	fd = open(log_path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	if (fd < 0)
		e2e_fail("cannot create %s", log_path);
	saved_stderr = dup(2);
	dup2(fd, 2);
	close(fd);
	atexit(restore_stderr);
}

static unsigned long count_log(const char *cause)
{
	char line[1024], want[32];
	unsigned long n = 0;
	FILE *f = fopen(log_path, "r");

	snprintf(want, sizeof(want), "(%s)", cause);
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "gpupool: info: released", 23) == 0 && strstr(line, want) != NULL &&
		    strstr(line, "released 0.0 MiB in 0 blocks") == NULL)
			n++;
	fclose(f);
	return n;
}

/* Slow builds (sanitizers) may leave the idle policy no pause it can use while the threads run:
 * the program pauses for good now, with a few blocks cached on each device (too few for the cap
 * or the pressure threshold), and the policy must give them back within 2 s. A release for a
 * signal still pending from the storm may take them first: then once more, up to 3 times. */
static void idle_pause(void)
{
	void *p[4];

	for (int attempt = 0; attempt < 3 && count_log("idle") == 0; attempt++) {
		for (int d = 0; d < DEVICES; d++) {
			e2e_cuda(cudaSetDevice(d), "cudaSetDevice");
			for (int i = 0; i < 4; i++)
				e2e_cuda(cudaMalloc(&p[i], 256 * E2E_KIB + (size_t)i), "cudaMalloc");
			for (int i = 0; i < 4; i++)
				e2e_cuda(cudaFree(p[i]), "cudaFree");
		}
		for (int i = 0; i < 200 && count_log("idle") == 0; i++)
			e2e_sleep_ms(10);
	}
}

struct want {
	uint64_t bytes[DEVICES];
	uint64_t allocs[DEVICES];
};

static int runtime_holds(void *arg)
{
	const struct want *w = arg;
	struct standin_counters c;

	for (int d = 0; d < DEVICES; d++) {
		standin_get(d, &c);
		if (c.live_bytes != w->bytes[d] || c.live_allocs != w->allocs[d])
			return 0;
	}
	return 1;
}

/* A release signal, then whether the runtime comes to hold exactly `w` (within 15 s, scaled);
 * if not, what it holds, per device, on stderr. */
static int held_after_release(const struct want *w)
{
	struct standin_counters c;

	kill(getpid(), SIGUSR1);
	if (e2e_poll(runtime_holds, (void *)w, 15000))
		return 1;
	for (int d = 0; d < DEVICES; d++) {
		standin_get(d, &c);
		fprintf(stderr, "device %d: runtime holds %llu allocations / %llu B, want %llu / %llu\n", d,
			(unsigned long long)c.live_allocs, (unsigned long long)c.live_bytes,
			(unsigned long long)w->allocs[d], (unsigned long long)w->bytes[d]);
	}
	return 0;
}

int main(void)
{
	static struct worker w[MAX_THREADS];
	int threads = getenv("STRESS_THREADS") ? atoi(getenv("STRESS_THREADS")) : 16;
	long ops = getenv("STRESS_OPS") ? atol(getenv("STRESS_OPS")) : 20000;
	struct standin_counters c;
	struct want want;
	uint64_t allocs = 0, live = 0, t0;
	unsigned long idle_during;
	pthread_t sig_tid;
	int i, k, n = 0;
	double secs;

	e2e_start("e2e_stress");
	if (threads < 1 || threads > MAX_THREADS || ops < 1)
		e2e_fail("STRESS_THREADS must be 1..%d and STRESS_OPS positive", MAX_THREADS);
	e2e_cuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
	if (n != DEVICES)
		e2e_fail("run me with STANDIN_DEVICES=%d (got %d)", DEVICES, n);
	log_to_file();
	{
		void *p = NULL;

		e2e_cuda(cudaMalloc(&p, 512), "cudaMalloc(512)");
		e2e_cuda(cudaFree(p), "cudaFree(512)");
	}
	t0 = e2e_now_ms();
	if (pthread_create(&sig_tid, NULL, signaller, NULL) != 0)
		e2e_fail("pthread_create");
	for (i = 0; i < threads; i++) {
		w[i].id = i;
		w[i].ops = ops;
		if (pthread_create(&w[i].tid, NULL, work, &w[i]) != 0)
			e2e_fail("pthread_create");
	}
	for (i = 0; i < threads; i++) {
		pthread_join(w[i].tid, NULL);
		allocs += w[i].allocs;
	}
	atomic_store(&stop_signals, 1);
	pthread_join(sig_tid, NULL);
	secs = (double)(e2e_now_ms() - t0) / 1000.0;
	idle_during = count_log("idle");
	c = e2e_counters();
	e2e_note("%d threads x %ld random ops (%llu allocations) on %d devices with %lu SIGUSR1 and "
		 "the cap, idle and pressure policies: no owner pattern broken (each checked at its "
		 "free), %.1f s", threads, ops, (unsigned long long)allocs, DEVICES,
		 atomic_load(&signals_sent), secs);

	memset(&want, 0, sizeof(want));
	for (i = 0; i < threads; i++) {
		for (k = 0; k < SLOTS; k++) {
			struct slot *s = &w[i].slot[k];

			if (s->ptr == NULL)
				continue;
			if (!owner_tag(s->ptr, s->size, s->tag, 1))
				e2e_fail("thread %d: a live block lost its owner's pattern", i);
			if (device_of(s->ptr) != s->device)
				e2e_fail("thread %d: a live block is not on its device", i);
			want.bytes[s->device] += standin_charge(standin_size(s->ptr));
			want.allocs[s->device]++;
			live++;
		}
	}
	e2e_check(held_after_release(&want), "after a release the runtime holds exactly the %llu live "
		  "blocks, on each device", (unsigned long long)live);
	if (idle_during == 0)
		idle_pause();
	for (i = 0; i < threads; i++)
		for (k = 0; k < SLOTS; k++)
			if (w[i].slot[k].ptr != NULL)
				e2e_cuda(cudaFree(w[i].slot[k].ptr), "cudaFree");
	memset(&want, 0, sizeof(want));
	e2e_check(held_after_release(&want), "after freeing them and a release the runtime holds "
		  "nothing, on each device");
	standin_get(-1, &c);
	e2e_check(c.mallocs == c.frees && c.bad_frees == 0,
		  "after freeing them and a release the runtime holds nothing: %llu real allocations, "
		  "each given back once, no bad free", (unsigned long long)c.mallocs);
	e2e_check(count_log("signal") > 0 && count_log("cap") > 0 && count_log("idle") > 0 &&
		  count_log("pressure") > 0,
		  "releases that gave memory back, by cause: signal %lu, cap %lu, idle %lu (%lu while the "
		  "threads ran), pressure %lu", count_log("signal"), count_log("cap"), count_log("idle"),
		  idle_during, count_log("pressure"));
	printf("PASS e2e_stress\n");
	return 0;
}
