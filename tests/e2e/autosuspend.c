/* autosuspend.c — GPUPOOL_AUTO_SUSPEND end to end on the stand-in, whose checkpoint API serves a
 * process suspending itself (driver_ckpt.c). The program is its own subject: it reads its device
 * bytes from the stand-in NVML's file (/dev/shm/standin-nvml.<pid>: 0 only while checkpointed,
 * its context included), its figures from its own live view, and the shim's log from its stderr,
 * which it sends to a file. One mode per run:
 *   idle      idle past the timeout: device bytes fall to 0, the next cudaMemcpy returns the data
 *   threads   8 threads call cudaMemcpy at once while suspended: all get their data, one resume
 *   busy      a loop of small GPU work (a memset every millisecond) is never suspended
 *   capture   a graph capture in progress blocks it (its log line), and its end lets it go
 *   managed   live managed memory blocks it (its log line), its free lets it go
 *   ipc       an IPC memory handle handed out blocks it for good (its log line)
 *   hostmem   more on the device than the host has available blocks it (its log line)
 *   query     a thread polling cudaEventQuery neither keeps it awake nor wakes it
 *   cli       `gpupool stats --json` shows the fields; `gpupool resume` wakes it (no CUDA call)
 *   restore   a restore that fails twice is retried (said at error) and the data come back
 * Usage: e2e_autosuspend MODE [GPUPOOL-COMMAND]; GPUPOOL_AUTO_SUSPEND is set by ctest. */
#define _GNU_SOURCE
#include <cuda.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "nvml_file.h"
#include "view.h"

#define BLOCKS 4
/* 1 MiB, ordinary blocks; mode vmm: 4 MiB, VMM-backed under GPUPOOL_VMM=on. */
static size_t BLOCK_BYTES = E2E_MIB;

static void *blocks[BLOCKS];
static char log_path[] = "/tmp/e2e_autosuspend.XXXXXX";
static int saved_stderr = -1;
/* GPUPOOL_AUTO_SUSPEND, ms: already scaled with the build and the machine (tests/e2e's
 * CMakeLists.txt), so the waits counted in it are not scaled again. */
static int after_ms;

/* The shim's lines, written to fd 2, go to a file this program reads; shown at the end. */
static void dump_log(void)
{
	char buf[4096];
	ssize_t n;
	int fd = open(log_path, O_RDONLY);

	if (fd < 0 || saved_stderr < 0)
		return;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (write(saved_stderr, buf, (size_t)n) != n)
			break;
	close(fd);
	unlink(log_path);
}

static void capture_log(void)
{
	int fd = mkstemp(log_path);

	if (fd < 0)
		e2e_fail("mkstemp");
	saved_stderr = dup(2);
	dup2(fd, 2);
	close(fd);
	atexit(dump_log);
}

static int log_has(const char *needle)
{
	static char buf[1 << 16];
	ssize_t n;
	int fd = open(log_path, O_RDONLY);

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return strstr(buf, needle) != NULL;
}

/* The bytes the stand-in NVML sees the process hold on device 0 (-1: no file). */
static int64_t device_bytes(void)
{
	char path[64];
	struct standin_nvml_file *f;
	int64_t v;
	int fd;

	snprintf(path, sizeof(path), "%s/%s%ld", STANDIN_NVML_DIR, STANDIN_NVML_PREFIX,
		 (long)getpid());
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	f = mmap(NULL, sizeof(*f), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (f == MAP_FAILED)
		return -1;
	v = (int64_t)atomic_load(&f->used[0]);
	munmap(f, sizeof(*f));
	return v;
}

static struct gp_stats_snapshot view(void)
{
	static struct gp_stats_snapshot s;
	char path[64];
	int rc;

	gp_stats_view_path((long)getpid(), path, sizeof(path));
	rc = gp_stats_view_read(path, &s);
	if (rc != GP_VIEW_OK)
		e2e_fail("own view: %s", gp_stats_view_rc_text(rc));
	return s;
}

static int is_suspended(void *arg)
{
	(void)arg;
	return device_bytes() == 0 && view().self_suspended == 1;
}

static int resumes_at_least(void *arg)
{
	return view().resumes >= (uint64_t)(uintptr_t)arg;
}

static void expect_suspended(const char *why)
{
	e2e_check(e2e_poll(is_suspended, NULL, 10 * after_ms + 5000),
		  "%s: the process suspends itself (device bytes 0, its view says so)", why);
}

/* Idle for n timeouts, with no CUDA call: still running. */
static void expect_not_suspended(int n, const char *why)
{
	e2e_sleep_ms(n * after_ms);
	e2e_check(view().suspends == 0 && device_bytes() > 0, "%s: not suspended after %d "
		  "timeouts idle (suspends %llu)", why, n, (unsigned long long)view().suspends);
}

static void setup(void)
{
	char *host = malloc(BLOCK_BYTES);
	void *spare;

	if (host == NULL)
		e2e_fail("malloc");

	for (int i = 0; i < BLOCKS; i++) {
		e2e_cuda(cudaMalloc(&blocks[i], BLOCK_BYTES), "cudaMalloc");
		e2e_fill(host, BLOCK_BYTES, (uint64_t)i + 7);
		e2e_cuda(cudaMemcpy(blocks[i], host, BLOCK_BYTES, cudaMemcpyHostToDevice),
			 "cudaMemcpy");
	}
	/* An idle block in the cache: the release before the suspend gives it back. */
	e2e_cuda(cudaMalloc(&spare, 8 * BLOCK_BYTES), "cudaMalloc");
	e2e_cuda(cudaFree(spare), "cudaFree");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	free(host);
	e2e_check(device_bytes() > 0, "the process holds device memory");
}

static int intact(int i)
{
	char *host = malloc(BLOCK_BYTES);
	int ok;

	if (host == NULL)
		e2e_fail("malloc");
	e2e_cuda(cudaMemcpy(host, blocks[i], BLOCK_BYTES, cudaMemcpyDeviceToHost), "cudaMemcpy");
	ok = e2e_verify(host, BLOCK_BYTES, (uint64_t)i + 7);
	free(host);
	return ok;
}

static void expect_resumed(uint64_t resumes, const char *why)
{
	/* Polled before the message's figure is read (a call's arguments have no order). */
	int ok = e2e_poll(resumes_at_least, (void *)(uintptr_t)resumes, 10000);
	uint64_t now = view().resumes;

	e2e_check(ok && now == resumes && device_bytes() > 0,
		  "%s: resumed (resumes %llu, want %llu), device memory back", why,
		  (unsigned long long)now, (unsigned long long)resumes);
}

static void mode_idle(void)
{
	struct gp_stats_snapshot s;

	expect_suspended("idle");
	s = view();
	e2e_check(s.suspends == 1 && s.parked_bytes >= BLOCKS * BLOCK_BYTES &&
			  s.parked_bytes < 8 * BLOCK_BYTES && s.suspended_since_ns != 0,
		  "one suspend, its live blocks parked and the idle cache released first (%llu "
		  "bytes)", (unsigned long long)s.parked_bytes);
	e2e_check(log_has("auto-suspended after"), "the log says it suspended");
	for (int i = 0; i < BLOCKS; i++)
		e2e_check(intact(i), "block %d: the next cudaMemcpy returns its data", i);
	expect_resumed(1, "idle");
	expect_suspended("idle again");
	e2e_check(view().suspends == 2, "idle again: suspended a second time");
}

/* GPUPOOL_VMM=on, 4 MiB blocks (VMM-backed): they leave by gpupool's own copies before the
 * checkpoint (GPUPOOL_AUTO_SUSPEND_COPY, on by default), and come back at the same addresses. */
static void mode_vmm(void)
{
	expect_suspended("vmm");
	e2e_check(log_has("MiB of it by gpupool's copies") && !log_has(" 0.0 MiB of it by gpupool"),
		  "the log says the VMM-backed blocks left by gpupool's copies");
	for (int i = 0; i < BLOCKS; i++)
		e2e_check(intact(i), "block %d: the next cudaMemcpy returns its data, at the same "
			  "address", i);
	expect_resumed(1, "vmm");
	expect_suspended("vmm again");
	for (int i = 0; i < BLOCKS; i++)
		e2e_check(intact(i), "block %d: intact after the second suspend", i);
}

static pthread_barrier_t start_line;

static void *memcpy_thread(void *arg)
{
	int i = (int)(uintptr_t)arg;

	pthread_barrier_wait(&start_line);
	return (void *)(uintptr_t)intact(i % BLOCKS);
}

static void mode_threads(void)
{
	pthread_t t[8];
	int ok = 1;

	expect_suspended("threads");
	pthread_barrier_init(&start_line, NULL, 8);
	for (int i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, memcpy_thread, (void *)(uintptr_t)i);
	for (int i = 0; i < 8; i++) {
		void *r;

		pthread_join(t[i], &r);
		ok &= r != NULL;
	}
	e2e_check(ok, "8 threads calling during the suspension all get their data");
	expect_resumed(1, "threads: one resume for all of them");
}

static void mode_busy(void)
{
	uint64_t end = e2e_now_ms() + (uint64_t)(6 * after_ms);

	while (e2e_now_ms() < end) {
		e2e_cuda(cudaMemset(blocks[0], 1, 4096), "cudaMemset");
		e2e_sleep_ms(1);
	}
	e2e_check(view().suspends == 0 && device_bytes() > 0,
		  "a busy loop for 6 timeouts is never suspended (suspends %llu)",
		  (unsigned long long)view().suspends);
	expect_suspended("busy, then idle");
}

static void mode_capture(void)
{
	cudaStream_t s;
	cudaGraph_t g;

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "begin capture");
	expect_not_suspended(4, "capture in progress");
	e2e_check(log_has("not suspending: a CUDA graph capture is in progress"),
		  "the log names the capture");
	e2e_cuda(cudaStreamEndCapture(s, &g), "end capture");
	e2e_cuda(cudaGraphDestroy(g), "cudaGraphDestroy");
	/* Work after it: until the gate's stubs (branch g) the end of a capture is not seen. */
	e2e_cuda(cudaMemset(blocks[0], 1, 4096), "cudaMemset");
	expect_suspended("capture ended");
}

static void mode_managed(void)
{
	CUdeviceptr p;

	e2e_check(cuMemAllocManaged(&p, BLOCK_BYTES, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS,
		  "cuMemAllocManaged");
	expect_not_suspended(4, "managed memory live");
	e2e_check(log_has("not suspending: managed memory is live"), "the log names it");
	e2e_check(cuMemFree(p) == CUDA_SUCCESS, "cuMemFree");
	expect_suspended("managed memory freed");
}

static void mode_ipc(void)
{
	cudaIpcMemHandle_t h;

	e2e_cuda(cudaIpcGetMemHandle(&h, blocks[0]), "cudaIpcGetMemHandle");
	expect_not_suspended(4, "IPC handle handed out");
	e2e_check(log_has("not suspending: an IPC memory handle was handed out"),
		  "the log names it");
}

static void mode_hostmem(void)
{
	long long avail = -1;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "r");
	void *big;

	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "MemAvailable: %lld kB", &avail) == 1)
			break;
	if (f != NULL)
		fclose(f);
	if (avail <= 0)
		e2e_fail("no MemAvailable in /proc/meminfo");
	/* STANDIN_MMAP: reserved, not committed. */
	if (cudaMalloc(&big, (size_t)avail * 1024 * 2) != cudaSuccess) {
		e2e_note("the stand-in could not reserve twice the host's memory: not tried");
		return;
	}
	expect_not_suspended(4, "more on the device than the host has");
	e2e_check(log_has("not suspending: not enough host memory"), "the log says why");
	e2e_cuda(cudaFree(big), "cudaFree"); /* cached: the release before a suspend frees it */
	expect_suspended("host memory enough again");
}

static atomic_int poll_stop, poll_errors;
static atomic_long polls;

static void *poller(void *arg)
{
	cudaEvent_t ev = arg;

	while (!atomic_load(&poll_stop)) {
		if (cudaEventQuery(ev) != cudaSuccess)
			atomic_fetch_add(&poll_errors, 1);
		atomic_fetch_add(&polls, 1);
		e2e_sleep_ms(1);
	}
	return NULL;
}

static void mode_query(void)
{
	cudaEvent_t ev;
	pthread_t t;
	long before;

	e2e_cuda(cudaEventCreate(&ev), "cudaEventCreate");
	e2e_cuda(cudaEventRecord(ev, NULL), "cudaEventRecord");
	e2e_cuda(cudaEventSynchronize(ev), "cudaEventSynchronize");
	pthread_create(&t, NULL, poller, ev);
	expect_suspended("a thread polling an event");
	e2e_sleep_ms(3 * after_ms);
	e2e_check(device_bytes() == 0 && view().resumes == 0,
		  "the polling thread does not wake it (resumes %llu)",
		  (unsigned long long)view().resumes);
	before = atomic_load(&polls);
	e2e_check(intact(0), "the next cudaMemcpy resumes it with its data");
	e2e_sleep_ms(20);
	atomic_store(&poll_stop, 1);
	pthread_join(t, NULL);
	e2e_check(atomic_load(&poll_errors) == 0 && atomic_load(&polls) > before,
		  "every query answered cudaSuccess, and polling went on after the resume");
}

/* posix_spawn, not fork: a fork runs the driver's fork handlers, which wait while the process
 * is locked (as a real driver's may). */
static int run_cli(const char *cli, const char *what, char *out, size_t len)
{
	extern char **environ;
	char pid[24], *argv[5], *envp[256];
	posix_spawn_file_actions_t fa;
	size_t n = 0, got = 0;
	int fds[2], status = -1;
	pid_t child;
	ssize_t r;

	snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	argv[0] = (char *)cli;
	argv[1] = (char *)what;
	argv[2] = strcmp(what, "stats") == 0 ? "--json" : pid;
	argv[3] = strcmp(what, "stats") == 0 ? pid : NULL;
	argv[4] = NULL;
	for (char **e = environ; *e != NULL && n < 255; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) != 0)
			envp[n++] = *e;
	envp[n] = NULL;
	if (pipe(fds) != 0)
		return -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
	posix_spawn_file_actions_addclose(&fa, fds[0]);
	if (posix_spawn(&child, cli, &fa, NULL, argv, envp) != 0)
		child = -1;
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	while (child > 0 && got + 1 < len && (r = read(fds[0], out + got, len - 1 - got)) > 0)
		got += (size_t)r;
	out[got] = '\0';
	close(fds[0]);
	if (child > 0)
		waitpid(child, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void mode_cli(const char *cli)
{
	static char out[1 << 16];
	int rc;

	expect_suspended("cli");
	rc = run_cli(cli, "stats", out, sizeof(out));
	e2e_check(rc == 0 && strstr(out, "\"self_suspended\":1") != NULL &&
			  strstr(out, "\"suspends\":1") != NULL &&
			  strstr(out, "\"auto_suspend_ns\":") != NULL &&
			  strstr(out, "\"last_resume_duration_ns\":") != NULL,
		  "gpupool stats --json shows it suspended by itself (status %d): %.300s", rc, out);
	rc = run_cli(cli, "resume", out, sizeof(out));
	e2e_check(rc == 0, "gpupool resume of a process that suspended itself (status %d): %s", rc,
		  out);
	expect_resumed(1, "gpupool resume, with no CUDA call of the process");
	for (int i = 0; i < BLOCKS; i++)
		e2e_check(intact(i), "block %d intact after gpupool resume", i);
}

static void mode_restore(void)
{
	expect_suspended("restore");
	for (int i = 0; i < BLOCKS; i++)
		e2e_check(intact(i), "block %d: its data come back despite two failed restores", i);
	e2e_check(log_has("restore 1 failed") && log_has("restore 2 failed"),
		  "each failed restore is said");
	expect_resumed(1, "one resume, retried within");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	const char *after = getenv("GPUPOOL_AUTO_SUSPEND");

	e2e_start("autosuspend");
	if (after == NULL || sscanf(after, "%dms", &after_ms) != 1 || after_ms <= 0)
		e2e_fail("GPUPOOL_AUTO_SUSPEND=<n>ms must be set");
	if (strcmp(mode, "hostmem") == 0) {
		char line[128], cap[64];
		long long avail = -1;
		FILE *f = fopen("/proc/meminfo", "r");

		while (f != NULL && fgets(line, sizeof(line), f) != NULL)
			if (sscanf(line, "MemAvailable: %lld kB", &avail) == 1)
				break;
		if (f != NULL)
			fclose(f);
		snprintf(cap, sizeof(cap), "%lldK", avail * 4);
		setenv("STANDIN_MMAP", "1", 1);
		setenv("STANDIN_CAPACITY", cap, 1);
	}
	capture_log();
	{
		/* The runtime first: it initialises the driver this program also links. */
		int n = 0;
		e2e_cuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
	}
	if (strcmp(mode, "vmm") == 0)
		BLOCK_BYTES = 4 * E2E_MIB;
	setup();
	if (strcmp(mode, "idle") == 0)
		mode_idle();
	else if (strcmp(mode, "vmm") == 0)
		mode_vmm();
	else if (strcmp(mode, "threads") == 0)
		mode_threads();
	else if (strcmp(mode, "busy") == 0)
		mode_busy();
	else if (strcmp(mode, "capture") == 0)
		mode_capture();
	else if (strcmp(mode, "managed") == 0)
		mode_managed();
	else if (strcmp(mode, "ipc") == 0)
		mode_ipc();
	else if (strcmp(mode, "hostmem") == 0)
		mode_hostmem();
	else if (strcmp(mode, "query") == 0)
		mode_query();
	else if (strcmp(mode, "cli") == 0 && argc > 2)
		mode_cli(argv[2]);
	else if (strcmp(mode, "restore") == 0)
		mode_restore();
	else
		e2e_fail("usage: e2e_autosuspend MODE [GPUPOOL]");
	printf("PASS autosuspend %s\n", mode);
	return 0;
}
