/* suspend.c — `gpupool suspend` and `gpupool resume` end to end on the stand-in's checkpoint API,
 * from outside, against children of this program that it steers through a pipe. It proves: a
 * gpupool process is asked for a release first (what it gave back is reported) and parks fewer
 * bytes than with --no-release; while suspended its CUDA calls wait, `stats` (text, JSON,
 * Prometheus) and `top` show it suspended with its parked bytes, and its device bytes are gone
 * (the stand-in poisons them); after resume its call returns and its memory is bitwise what it
 * was; a process without gpupool is suspended too, and `stats PID` asks the driver for its
 * state; the errors: no such process (2), not a CUDA process (3), already / not suspended and a
 * graph capture in progress (7), a busy process not locked in time (6, left running), a driver
 * without the checkpoint API (8), not enough host memory (9); a restore that fails leaves the
 * process suspended and a second resume works; a process only locked is unlocked by resume.
 * Usage: e2e_suspend --cli GPUPOOL --standin DIR --olddriver DIR --shim PRELOAD
 *        e2e_suspend --serve (the child, steered through stdin and stdout) */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

#define BLOCKS 8
#define BLOCK_BYTES (4 * E2E_MIB)

/* ---- the child ---- */

static void *blocks[BLOCKS];

static void churn(void)
{
	void *p[BLOCKS];

	for (int i = 0; i < BLOCKS; i++)
		e2e_cuda(cudaMalloc(&p[i], BLOCK_BYTES), "cudaMalloc");
	for (int i = 0; i < BLOCKS; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

/* Through CUDA calls (which wait while the process is suspended): 1 if every block is intact. */
static int check(void)
{
	static char host[BLOCK_BYTES];

	for (int i = 0; i < BLOCKS; i++) {
		e2e_cuda(cudaMemcpy(host, blocks[i], BLOCK_BYTES, cudaMemcpyDeviceToHost), "cudaMemcpy");
		if (!e2e_verify(host, BLOCK_BYTES, (uint64_t)i + 100))
			return 0;
	}
	return 1;
}

static void sleep_kernel(void **params)
{
	e2e_sleep_ms(*(int *)params[0]);
}

static int serve(void)
{
	static char host[BLOCK_BYTES];
	char line[128];
	cudaStream_t s = NULL;
	void *big = NULL;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < BLOCKS; i++) {
		e2e_cuda(cudaMalloc(&blocks[i], BLOCK_BYTES), "cudaMalloc");
		e2e_fill(host, BLOCK_BYTES, (uint64_t)i + 100);
		e2e_cuda(cudaMemcpy(blocks[i], host, BLOCK_BYTES, cudaMemcpyHostToDevice), "cudaMemcpy");
	}
	churn();
	printf("ready\n");
	while (fgets(line, sizeof(line), stdin) != NULL) {
		int ms;
		unsigned long long bytes;

		if (strcmp(line, "check\n") == 0) {
			printf("%s\n", check() ? "intact" : "damaged");
		} else if (strcmp(line, "raw\n") == 0) { /* the device bytes, without a CUDA call */
			printf("%s\n", e2e_verify(blocks[0], BLOCK_BYTES, 100) ? "intact" : "damaged");
		} else if (strcmp(line, "churn\n") == 0) {
			churn();
			printf("done\n");
		} else if (sscanf(line, "busy %d", &ms) == 1) {
			void *args[] = { &ms };
			dim3 one = { 1, 1, 1 };
			const void *fn;

			memcpy(&fn, &(void (*)(void **)){ sleep_kernel }, sizeof(fn));
			printf("busy\n");
			fflush(stdout);
			e2e_cuda(cudaLaunchKernel(fn, one, one, args, 0, NULL), "cudaLaunchKernel");
			/* the kernel runs on the stream, after the launch returned: "done" once it
			 * ended (and args, which the stand-in does not copy, outlive it) */
			e2e_cuda(cudaStreamSynchronize(NULL), "cudaStreamSynchronize");
			printf("done\n");
		} else if (strcmp(line, "capture\n") == 0) {
			e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
			e2e_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed),
				 "cudaStreamBeginCapture");
			printf("done\n");
		} else if (strcmp(line, "endcapture\n") == 0) {
			cudaGraph_t g = NULL;
			e2e_cuda(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
			e2e_cuda(cudaGraphDestroy(g), "cudaGraphDestroy");
			printf("done\n");
		} else if (sscanf(line, "alloc %llu", &bytes) == 1) {
			printf("%s\n", cudaMalloc(&big, bytes) == cudaSuccess ? "done" : "failed");
		} else {
			break;
		}
	}
	return 0;
}

/* ---- the test ---- */

static const char *cli, *standin_dir, *olddriver_dir, *shim;
static char out[1 << 16];

struct child {
	pid_t pid;
	int in, out; /* its stdin, its stdout */
};

/* A failed check exits: no child may stay behind, least of all a suspended one (it would wait
 * for ever, and ctest with it). */
static pid_t children[8];
static int nchildren;

static void kill_children(void)
{
	for (int i = 0; i < nchildren; i++)
		if (children[i] > 0)
			kill(children[i], SIGKILL);
}

static struct child spawn(int under_shim, const char *extra_env)
{
	int to[2], from[2];
	struct child c;

	if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0)
		e2e_fail("pipe: %s", strerror(errno));
	c.pid = fork();
	if (c.pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		setenv("STANDIN_CHECKPOINT", "1", 1);
		setenv("STANDIN_MMAP", "1", 1); /* reserved, not committed: too_big() */
		setenv("GPUPOOL_SIGNAL", "none", 1); /* the view's request word alone asks */
		if (under_shim)
			setenv("LD_PRELOAD", shim, 1);
		else
			unsetenv("LD_PRELOAD");
		if (extra_env != NULL)
			putenv((char *)extra_env);
		execl("/proc/self/exe", "e2e_suspend", "--serve", (char *)NULL);
		_exit(127);
	}
	if (nchildren < 8)
		children[nchildren++] = c.pid;
	close(to[0]);
	close(from[1]);
	c.in = to[1];
	c.out = from[0];
	return c;
}

/* One line from the child within timeout_ms, into buf (without its newline); 0 if none came. */
static int hear(struct child *c, char *buf, size_t len, int timeout_ms)
{
	size_t n = 0;
	uint64_t end = e2e_now_ms() + (uint64_t)timeout_ms;

	while (n + 1 < len) {
		struct pollfd p = { c->out, POLLIN, 0 };
		int left = (int)(end > e2e_now_ms() ? end - e2e_now_ms() : 0);

		if (poll(&p, 1, left) <= 0 || read(c->out, buf + n, 1) != 1)
			return 0;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return 1;
}

static void say(struct child *c, const char *cmd)
{
	if (write(c->in, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
		e2e_fail("cannot write to child %ld", (long)c->pid);
}

/* Whether the child's next line, within timeout_ms (scaled: a wait for what must come), is
 * `want`; the line in got ("(nothing)" if none came). */
static int says(struct child *c, const char *want, int timeout_ms, char *got, size_t len)
{
	if (!hear(c, got, len, e2e_scaled_ms(timeout_ms))) {
		snprintf(got, len, "(nothing within %d ms)", e2e_scaled_ms(timeout_ms));
		return 0;
	}
	return strcmp(got, want) == 0;
}

static void expect_line(struct child *c, const char *want, int timeout_ms)
{
	char got[128];

	if (!says(c, want, timeout_ms, got, sizeof(got)))
		e2e_fail("child %ld said %s, not \"%s\"", (long)c->pid, got, want);
}

/* Run the gpupool command (NULL-terminated arguments) with the stand-in driver `libdir` on the
 * library path and nothing preloaded; its stdout and stderr in out. Returns its exit status. */
static int run_cli_in(const char *libdir, const char *arg, ...)
{
	char path[4200];
	const char *env[] = { "LD_PRELOAD", "STANDIN_CHECKPOINT", path, NULL };
	int rc;
	va_list ap;

	snprintf(path, sizeof(path), "LD_LIBRARY_PATH=%s", libdir);
	va_start(ap, arg);
	rc = e2e_run_capture_v(cli, env, out, sizeof(out), arg, ap);
	va_end(ap);
	if (rc < 0)
		e2e_fail("%s %s did not exit normally", cli, arg);
	return rc;
}

#define run_cli(...) run_cli_in(standin_dir, __VA_ARGS__)

static void expect_cli(int rc, int want, const char *pattern, const char *what)
{
	e2e_check(rc == want && strstr(out, pattern) != NULL, "%s: exit %d (want %d), says \"%s\"",
		  what, rc, want, pattern);
	if (rc != want || strstr(out, pattern) == NULL)
		e2e_fail("output was: %s", out);
}

/* The number after "key": in the JSON in out, or -1 (null or absent). */
static long long json_value(const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(out, pat);
	if (p == NULL || strncmp(p + strlen(pat), "null", 4) == 0)
		return -1;
	return strtoll(p + strlen(pat), NULL, 10);
}

static void wait_view(pid_t pid)
{
	char p[16];

	snprintf(p, sizeof(p), "%ld", (long)pid);
	for (int i = 0; i < 500; i++) {
		if (run_cli("stats", p, NULL) == 0)
			return;
		e2e_sleep_ms(10);
	}
	e2e_fail("no live view for %s within 5 s", p);
}

static void gpupool_process(void)
{
	struct child a = spawn(1, NULL);
	char pid[16], line[64];
	long long with, without;

	snprintf(pid, sizeof(pid), "%ld", (long)a.pid);
	expect_line(&a, "ready", 10000);
	wait_view(a.pid);

	expect_cli(run_cli("suspend", pid, "--json", NULL), 0, "\"released_first\":true",
		   "suspend of a gpupool process asks for a release first");
	e2e_check(json_value("released_bytes") >= (long long)(BLOCKS * BLOCK_BYTES),
		  "the release before the checkpoint gave back the idle cache (%lld bytes)",
		  json_value("released_bytes"));
	with = json_value("parked_bytes");
	e2e_check(with >= (long long)(BLOCKS * BLOCK_BYTES * 9 / 10),
		  "the live blocks were parked in host memory (%lld bytes)", with);
	say(&a, "raw\n");
	e2e_check(says(&a, "damaged", 5000, line, sizeof(line)), "while suspended, its device bytes "
		  "are gone (the stand-in poisons them): the child read them and said \"%s\"", line);
	say(&a, "check\n");
	e2e_check(!hear(&a, line, sizeof(line), 300), "while suspended, its CUDA calls wait");
	expect_cli(run_cli("stats", pid, NULL), 0, "SUSPENDED since", "stats shows it suspended");
	expect_cli(run_cli("stats", pid, "--json", NULL), 0, "\"parked_bytes\":",
		   "stats --json has its parked bytes");
	e2e_check(json_value("suspended_since_ns") > 0 && json_value("parked_bytes") == with,
		  "stats --json: suspended since a moment, the bytes suspend reported");
	expect_cli(run_cli("stats", pid, "--prometheus", NULL), 0, "gpupool_suspended_since_seconds{pid=",
		   "stats --prometheus has the suspension");
	expect_cli(run_cli("top", "--once", NULL), 0, "SUSPENDED since", "top shows it suspended");
	expect_cli(run_cli("suspend", pid, NULL), 7, "already suspended", "a second suspend");
	expect_cli(run_cli("release", pid, "--wait", NULL), 7, "is suspended",
		   "a release of a suspended process says so at once, and how to resume it");

	expect_cli(run_cli("resume", pid, NULL), 0, "resumed", "resume");
	/* the check that waited: its memory bitwise as before */
	e2e_check(says(&a, "intact", 5000, line, sizeof(line)), "after resume the waiting call "
		  "returned, every block bitwise intact: the child said \"%s\"", line);
	expect_cli(run_cli("stats", pid, "--json", NULL), 0, "\"suspended_since_ns\":null",
		   "stats after resume: running");
	expect_cli(run_cli("resume", pid, NULL), 7, "is not suspended", "a second resume");

	/* Without the release first, the idle cache is copied too. */
	say(&a, "churn\n");
	expect_line(&a, "done", 5000);
	for (int i = 0; i < 500; i++) { /* its view shows the cache again (refreshed each second) */
		run_cli("stats", pid, "--json", NULL);
		if (json_value("idle_bytes") >= (long long)(BLOCKS * BLOCK_BYTES))
			break;
		e2e_sleep_ms(10);
	}
	expect_cli(run_cli("suspend", pid, "--no-release", "--json", NULL), 0,
		   "\"released_first\":false", "suspend --no-release");
	without = json_value("parked_bytes");
	e2e_check(without >= with + (long long)(BLOCKS * BLOCK_BYTES * 9 / 10),
		  "--no-release parked the idle cache too (%lld bytes, against %lld)", without, with);
	expect_cli(run_cli("resume", pid, NULL), 0, "resumed", "resume");
	say(&a, "check\n");
	expect_line(&a, "intact", 5000);

	/* A busy process is not locked in time, and is left as it was. */
	say(&a, "busy 3000\n");
	expect_line(&a, "busy", 5000);
	expect_cli(run_cli("suspend", pid, "--timeout", "0.5", NULL), 6, "could not be locked within",
		   "suspend of a busy process times out");
	expect_cli(run_cli("resume", pid, NULL), 7, "is not suspended", "and left it running");
	expect_line(&a, "done", 5000);
	say(&a, "check\n");
	expect_line(&a, "intact", 5000);

	/* A graph capture in progress. */
	say(&a, "capture\n");
	expect_line(&a, "done", 5000);
	for (int i = 0; i < 300; i++) {
		run_cli("stats", pid, "--json", NULL);
		if (json_value("captures") == 1)
			break;
		e2e_sleep_ms(10);
	}
	expect_cli(run_cli("suspend", pid, NULL), 7, "capture in progress",
		   "suspend during a graph capture");
	say(&a, "endcapture\n");
	expect_line(&a, "done", 5000);
	say(&a, "check\n");
	expect_line(&a, "intact", 5000);

	close(a.in);
	waitpid(a.pid, NULL, 0);
}

static void plain_process(void)
{
	struct child b = spawn(0, NULL);
	char pid[16];

	snprintf(pid, sizeof(pid), "%ld", (long)b.pid);
	expect_line(&b, "ready", 10000);
	expect_cli(run_cli("suspend", pid, NULL), 0, "skipped: not a gpupool process",
		   "a process without gpupool is suspended, without a release");
	expect_cli(run_cli("stats", pid, NULL), 0, "the CUDA driver reports it suspended",
		   "stats PID without a view asks the driver");
	expect_cli(run_cli("resume", pid, NULL), 0, "resumed", "resume it");
	say(&b, "check\n");
	expect_line(&b, "intact", 5000);
	close(b.in);
	waitpid(b.pid, NULL, 0);
}

/* A restore that fails leaves the process suspended, nothing lost, and a second resume works;
 * a process locked but not checkpointed (a suspend cut short) is unlocked by resume. */
static void half_done(void)
{
	struct child c = spawn(1, "STANDIN_CHECKPOINT_RESTORE_FAILS=1");
	char pid[16], path[4096], line[64];
	CUresult (*lock)(int, CUcheckpointLockArgs *);
	CUresult (*init)(unsigned);
	void *lib, *sym;

	snprintf(pid, sizeof(pid), "%ld", (long)c.pid);
	expect_line(&c, "ready", 10000);
	wait_view(c.pid);
	expect_cli(run_cli("suspend", pid, NULL), 0, "suspended", "suspend");
	expect_cli(run_cli("resume", pid, NULL), 1, "it stays suspended, nothing lost",
		   "a restore that fails (the device lacks the memory) says so");
	expect_cli(run_cli("stats", pid, NULL), 0, "SUSPENDED since", "and the process stays suspended");
	expect_cli(run_cli("resume", pid, NULL), 0, "resumed", "a second resume");
	say(&c, "check\n");
	e2e_check(says(&c, "intact", 5000, line, sizeof(line)), "after the failed restore and the "
		  "second resume, every block is intact: the child said \"%s\"", line);

	snprintf(path, sizeof(path), "%s/libcuda.so.1", standin_dir);
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL)
		e2e_fail("cannot load %s: %s", path, dlerror());
	sym = dlsym(lib, "cuInit");
	memcpy(&init, &sym, sizeof(init));
	sym = dlsym(lib, "cuCheckpointProcessLock");
	memcpy(&lock, &sym, sizeof(lock));
	if (init == NULL || lock == NULL || init(0) != CUDA_SUCCESS || lock(c.pid, NULL) != CUDA_SUCCESS)
		e2e_fail("cannot lock the child through the stand-in's checkpoint API");
	expect_cli(run_cli("suspend", pid, NULL), 7, "is already locked", "suspend of a locked process");
	expect_cli(run_cli("resume", pid, NULL), 0, "restore     not needed",
		   "resume of a process locked but not checkpointed unlocks it");
	say(&c, "check\n");
	expect_line(&c, "intact", 5000);
	close(c.in);
	waitpid(c.pid, NULL, 0);
}

static void too_big(void)
{
	long long avail = -1;
	char line[256], bytes[32], pid[16], env[64];
	FILE *f = fopen("/proc/meminfo", "r");
	struct child c;

	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "MemAvailable: %lld kB", &avail) == 1)
			break;
	if (f != NULL)
		fclose(f);
	if (avail <= 0) {
		e2e_note("no MemAvailable: the host-memory check is not tried");
		return;
	}
	snprintf(bytes, sizeof(bytes), "alloc %lld\n", avail * 1024 * 2);
	snprintf(env, sizeof(env), "STANDIN_CAPACITY=%lldK", avail * 4);
	c = spawn(1, env);
	snprintf(pid, sizeof(pid), "%ld", (long)c.pid);
	expect_line(&c, "ready", 10000);
	say(&c, bytes);
	if (!says(&c, "done", 10000, line, sizeof(line))) {
		e2e_note("the stand-in could not reserve twice the host's memory (%s): the host-memory "
			 "check is not tried", line);
	} else {
		wait_view(c.pid);
		expect_cli(run_cli("suspend", pid, NULL), 9, "not enough host memory",
			   "a process that holds more than the host has is not suspended");
		expect_cli(run_cli("resume", pid, NULL), 7, "is not suspended", "and it still runs");
	}
	close(c.in);
	waitpid(c.pid, NULL, 0);
}

static void errors(void)
{
	char self[16];
	pid_t sleeper = fork();

	if (sleeper == 0) {
		execlp("sleep", "sleep", "30", (char *)NULL);
		_exit(127);
	}
	children[nchildren++] = sleeper;
	snprintf(self, sizeof(self), "%ld", (long)sleeper);
	expect_cli(run_cli("suspend", "999999999", NULL), 2, "no such process: 999999999",
		   "suspend of no process");
	expect_cli(run_cli("resume", "999999999", NULL), 2, "no such process", "resume of no process");
	expect_cli(run_cli("suspend", self, NULL), 3, "is not a CUDA process", "suspend of sleep");
	expect_cli(run_cli("suspend", "abc", NULL), 1, "not a pid: abc", "a bad pid");
	expect_cli(run_cli("suspend", "1", "--timeout", "x", NULL), 1,
		   "--timeout x: not a number of seconds", "a bad timeout");
	expect_cli(run_cli("resume", "--bogus", NULL), 1, "unknown option --bogus", "a bad option");
	expect_cli(run_cli("suspend", "--help", NULL), 0, "usage: gpupool suspend", "suspend --help");
	expect_cli(run_cli_in(olddriver_dir, "suspend", self, NULL), 8,
		   "need NVIDIA driver 570 or later", "a driver without the checkpoint API");
	kill(sleeper, SIGKILL);
	waitpid(sleeper, NULL, 0);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--serve") == 0)
		return serve();
	e2e_start("e2e_suspend");
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--cli") == 0)
			cli = argv[i + 1];
		else if (strcmp(argv[i], "--standin") == 0)
			standin_dir = argv[i + 1];
		else if (strcmp(argv[i], "--olddriver") == 0)
			olddriver_dir = argv[i + 1];
		else if (strcmp(argv[i], "--shim") == 0)
			shim = argv[i + 1];
	}
	if (cli == NULL || standin_dir == NULL || olddriver_dir == NULL || shim == NULL)
		e2e_fail("usage: e2e_suspend --cli GPUPOOL --standin DIR --olddriver DIR --shim PRELOAD");
	signal(SIGPIPE, SIG_IGN);
	atexit(kill_children);
	errors();
	plain_process();
	gpupool_process();
	half_done();
	too_big();
	return 0;
}
