/* lifecycle.c — proves the shim across the program's life events:
 *   --mode devreset   (STANDIN_DEVICES=2) cudaDeviceReset makes the pool forget that device's
 *                     blocks without freeing them (the reset did); the other device is untouched;
 *                     pointers from before the reset get the runtime's own error; the device's
 *                     streams and events, gone with the reset, no longer stop freed blocks from
 *                     being reused, on that device or any other
 *   --mode exit-releasing  the program exits while the control thread is in the middle of a
 *                     slow release: exit status 0, no hang, no crash, nothing freed twice
 *   --mode fork-busy  fork() 20 times while 4 threads allocate and free and the release signal
 *                     arrives every millisecond: every child passes straight through and exits 0,
 *                     the parent keeps working and ends with exact accounting */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

static void expect_rc(cudaError_t got, cudaError_t want, const char *what)
{
	e2e_check(got == want, "%s -> %s (want %s)", what, cudaGetErrorName(got), cudaGetErrorName(want));
}

static struct standin_counters dev_counters(int device)
{
	struct standin_counters c;

	standin_get(device, &c);
	return c;
}

static void *must_malloc(size_t n)
{
	void *p = NULL;

	e2e_cuda(cudaMalloc(&p, n), "cudaMalloc");
	return p;
}

/* Alloc/free cycles of one size: how many real allocations they needed. */
static uint64_t cycles(int device, int n)
{
	uint64_t m0 = dev_counters(device).mallocs;
	int i;

	/* 2 MiB: above the sizes whose reuse waits for a batch of fenced frees. */
	for (i = 0; i < n; i++) {
		void *p = must_malloc(2 * E2E_MIB);

		e2e_fill(p, 2 * E2E_MIB, (uint64_t)i);
		e2e_cuda(cudaFree(p), "cudaFree");
	}
	return dev_counters(device).mallocs - m0;
}

static void mode_devreset(void)
{
	struct standin_counters all0, c0, c1;
	cudaStream_t s1 = NULL, s0 = NULL, s1b = NULL;
	void *a, *b, *d, *e, *p;

	(void)b;
	uint64_t n, bad;
	e2e_release_fn release = e2e_shim_release();

	/* Device 1: a stream, a live block, two cached blocks whose fence is still in flight. */
	standin_set_manual_events(1);
	e2e_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
	e2e_cuda(cudaStreamCreate(&s1), "cudaStreamCreate on device 1");
	a = must_malloc(E2E_MIB);
	b = must_malloc(2 * E2E_MIB);
	p = must_malloc(3 * E2E_MIB);
	e2e_cuda(cudaFree(b), "cudaFree");
	e2e_cuda(cudaFree(p), "cudaFree");
	p = must_malloc(2 * E2E_MIB); /* a miss: records a fence that stays in flight */
	e2e_cuda(cudaFree(p), "cudaFree");
	/* Device 0: a stream, a live block and a cached one. */
	e2e_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
	e2e_cuda(cudaStreamCreate(&s0), "cudaStreamCreate on device 0");
	d = must_malloc(E2E_MIB);
	e = must_malloc(4 * E2E_MIB);
	e2e_fill(d, E2E_MIB, 42);
	e2e_cuda(cudaFree(e), "cudaFree");
	all0 = dev_counters(-1);
	c0 = dev_counters(0);

	e2e_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
	e2e_cuda(cudaDeviceReset(), "cudaDeviceReset of device 1");
	standin_set_manual_events(0);
	c1 = dev_counters(1);
	e2e_check(c1.live_allocs == 0 && dev_counters(-1).frees == all0.frees &&
		  dev_counters(-1).bad_frees == 0,
		  "the reset freed device 1's memory; the shim made no cudaFree of its own");
	e2e_check(dev_counters(0).live_bytes == c0.live_bytes && e2e_verify(d, E2E_MIB, 42),
		  "device 0 is untouched: its live and cached blocks are still held");

	expect_rc(cudaFree(a), cudaErrorInvalidValue,
		  "cudaFree of a block from before the reset: the runtime's own error");
	(void)cudaGetLastError();
	bad = dev_counters(-1).bad_frees; /* that one */
	n = dev_counters(1).mallocs;
	p = must_malloc(2 * E2E_MIB);
	e2e_check(standin_owns(p) && dev_counters(1).mallocs == n + 1, "a cudaMalloc on device 1 is a "
		  "new real allocation, never a block the reset freed");
	e2e_cuda(cudaFree(p), "cudaFree");

	/* Fences after the reset (the program has not destroyed the stream the reset took with it):
	 * every freed block must become reusable again, here and there. */
	e2e_cuda(cudaStreamCreate(&s1b), "cudaStreamCreate on device 1 after the reset");
	n = cycles(1, 100);
	e2e_check(n <= 4, "device 1: 100 alloc/free cycles after the reset needed %llu real "
		  "allocations (fences complete again)", (unsigned long long)n);
	e2e_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
	n = cycles(0, 100);
	e2e_check(n <= 4, "device 0: 100 alloc/free cycles needed %llu real allocations",
		  (unsigned long long)n);
	e2e_cuda(cudaStreamDestroy(s0), "cudaStreamDestroy");
	e2e_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
	e2e_cuda(cudaStreamDestroy(s1b), "cudaStreamDestroy");
	expect_rc(cudaStreamDestroy(s1), cudaErrorInvalidResourceHandle,
		  "cudaStreamDestroy of a stream the reset destroyed: the runtime's own error");
	(void)cudaGetLastError();
	e2e_cuda(cudaFree(d), "cudaFree");
	e2e_check(release(-1, NULL) == 0, "a release frees what is cached, with no error");
	c1 = dev_counters(-1);
	e2e_check(c1.live_allocs == 0 && c1.bad_frees == bad,
		  "the runtime holds nothing (%llu allocations) and saw no bad free from the shim",
		  (unsigned long long)c1.live_allocs);
	expect_rc(cudaGetLastError(), cudaSuccess, "no error is left pending for the program");
}

/* ---- exit while releasing ---- */

#define EXIT_BLOCKS 150
#define EXIT_FREE_US 20000

static int exit_child(void)
{
	void *p[EXIT_BLOCKS];
	int i;

	for (i = 0; i < EXIT_BLOCKS; i++)
		p[i] = must_malloc((size_t)(i % 7 + 1) * 64 * E2E_KIB);
	for (i = 0; i < EXIT_BLOCKS; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	standin_set_free_delay_us(EXIT_FREE_US);
	kill(getpid(), SIGUSR1);
	for (i = 0; i < 5000 && e2e_counters().frees < 3; i++)
		e2e_sleep_ms(1);
	if (e2e_counters().frees < 3)
		return 3;
	printf("     child: exits with the release in progress (%llu of %d blocks freed)\n",
	       (unsigned long long)e2e_counters().frees, EXIT_BLOCKS);
	return 0;
}

static void mode_exit_releasing(void)
{
	char report[256], env_report[300], buf[128];
	const char *args[] = { "--mode", "exit-child", NULL };
	const char *env[] = { env_report, NULL };
	struct e2e_child ch;
	uint64_t t0 = e2e_now_ms(), took;
	long mallocs, frees, live, bad;

	snprintf(report, sizeof(report), "/tmp/gpupool-e2e-exitrel-%d.txt", (int)getpid());
	snprintf(env_report, sizeof(env_report), "STANDIN_REPORT=%s", report);
	unlink(report);
	if (e2e_run_self(args, env, 20000, &ch) != 0)
		e2e_fail("could not start the child");
	took = e2e_now_ms() - t0;
	if (ch.err_len > 0)
		fprintf(stderr, "%s", ch.err);
	e2e_check(!ch.timed_out, "the child finished (%.1f s), no hang at exit", (double)took / 1000.0);
	e2e_check(WIFEXITED(ch.status) && WEXITSTATUS(ch.status) == 0, "the child %s (want exit 0)",
		  e2e_status_text(ch.status, buf, sizeof(buf)));
	mallocs = e2e_report_value(report, "mallocs");
	frees = e2e_report_value(report, "frees");
	live = e2e_report_value(report, "live_allocs");
	bad = e2e_report_value(report, "bad_frees");
	unlink(report);
	e2e_check(mallocs == EXIT_BLOCKS && bad == 0 && live + frees == mallocs,
		  "the runtime's last report: %ld allocations, %ld freed, %ld live, %ld bad frees "
		  "(nothing freed twice)", mallocs, frees, live, bad);
	e2e_note("the exit waited %.1f s for the release; %s", (double)took / 1000.0,
		 frees < mallocs ? "the process ended before the release did"
				 : "the release ended before the process did");
}

/* ---- fork while busy ---- */

#define FB_THREADS 4
#define FB_FORKS 20

static atomic_int fb_stop;

static void *fb_worker(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg + 17u;
	void *slot[16] = { 0 };
	size_t size[16] = { 0 };
	int k;

	while (!atomic_load(&fb_stop)) {
		k = rand_r(&seed) % 16;
		if (slot[k] != NULL) {
			if (!e2e_verify(slot[k], size[k], (uint64_t)k))
				e2e_fail("a block lost its pattern");
			if (cudaFree(slot[k]) != cudaSuccess)
				e2e_fail("cudaFree failed");
			slot[k] = NULL;
			continue;
		}
		size[k] = (size_t)512 << (rand_r(&seed) % 12);
		if (cudaMalloc(&slot[k], size[k]) != cudaSuccess)
			e2e_fail("cudaMalloc failed");
		e2e_fill(slot[k], size[k], (uint64_t)k);
	}
	for (k = 0; k < 16; k++)
		if (slot[k] != NULL && cudaFree(slot[k]) != cudaSuccess)
			e2e_fail("cudaFree failed");
	return NULL;
}

static void *fb_signaller(void *arg)
{
	(void)arg;
	while (!atomic_load(&fb_stop)) {
		kill(getpid(), SIGUSR1);
		e2e_sleep_ms(1);
	}
	return NULL;
}

static void fork_child(void)
{
	struct standin_counters c0 = e2e_counters(), c;
	void *p = NULL;

	if (cudaMalloc(&p, E2E_MIB) != cudaSuccess)
		_exit(2);
	e2e_fill(p, E2E_MIB, 5);
	if (!e2e_verify(p, E2E_MIB, 5) || cudaFree(p) != cudaSuccess)
		_exit(3);
	c = e2e_counters();
	_exit(c.mallocs == c0.mallocs + 1 && c.frees == c0.frees + 1 ? 0 : 4);
}

static void mode_fork_busy(void)
{
	pthread_t t[FB_THREADS], sig;
	struct standin_counters c;
	char buf[128];
	int i, status;

	e2e_cuda(cudaFree(must_malloc(512)), "cudaMalloc/cudaFree");
	for (i = 0; i < FB_THREADS; i++)
		if (pthread_create(&t[i], NULL, fb_worker, (void *)(uintptr_t)i) != 0)
			e2e_fail("pthread_create");
	if (pthread_create(&sig, NULL, fb_signaller, NULL) != 0)
		e2e_fail("pthread_create");
	for (i = 0; i < FB_FORKS; i++) {
		uint64_t end = e2e_now_ms() + (uint64_t)e2e_scaled_ms(10000);
		pid_t pid, got = 0;

		e2e_sleep_ms(10);
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			e2e_fail("fork failed");
		if (pid == 0)
			fork_child();
		while (got != pid && e2e_now_ms() < end) {
			got = waitpid(pid, &status, WNOHANG);
			if (got != pid)
				e2e_sleep_ms(2);
		}
		if (got != pid) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			e2e_fail("fork %d: the child hung (killed after 10 s)", i);
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			e2e_fail("fork %d: the child %s (want exit 0: one pass-through cudaMalloc and "
				 "cudaFree)", i, e2e_status_text(status, buf, sizeof(buf)));
	}
	atomic_store(&fb_stop, 1);
	for (i = 0; i < FB_THREADS; i++)
		pthread_join(t[i], NULL);
	pthread_join(sig, NULL);
	e2e_note("%d forks while %d threads allocated and freed under a 1 ms signal storm: every "
		 "child passed straight through and exited 0 (each checked)", FB_FORKS, FB_THREADS);
	kill(getpid(), SIGUSR1);
	if (!e2e_wait_live(0, 0, 5000)) {
		c = e2e_counters();
		e2e_fail("after a last release the runtime still holds %llu allocations",
			 (unsigned long long)c.live_allocs);
	}
	c = e2e_counters();
	e2e_check(c.mallocs == c.frees && c.bad_frees == 0,
		  "the parent's accounting is exact: %llu real allocations, all given back once",
		  (unsigned long long)c.mallocs);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 && strcmp(argv[1], "--mode") == 0 ? argv[2] : "devreset";
	char name[64];

	if (strcmp(mode, "exit-child") == 0)
		return exit_child();
	snprintf(name, sizeof(name), "e2e_lifecycle_%s", mode);
	e2e_start(name);
	if (strcmp(mode, "devreset") == 0)
		mode_devreset();
	else if (strcmp(mode, "exit-releasing") == 0)
		mode_exit_releasing();
	else if (strcmp(mode, "fork-busy") == 0)
		mode_fork_busy();
	else
		e2e_fail("unknown mode %s", mode);
	printf("PASS %s\n", name);
	return 0;
}
