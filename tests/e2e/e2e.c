/* e2e.c — helpers shared by the end-to-end programs (see e2e.h) that do not touch the CUDA
 * runtime, so programs that must never load it can use them too. Test-only. */
#define _GNU_SOURCE
#include "e2e.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *e2e_name = "e2e";

void e2e_start(const char *name)
{
	e2e_name = name;
	setvbuf(stdout, NULL, _IOLBF, 0);
}

void e2e_fail(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "FAIL %s: ", e2e_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void e2e_check(int ok, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!ok)
		e2e_fail("%s", msg);
	printf("ok   %s\n", msg);
}

void e2e_note(const char *fmt, ...)
{
	va_list ap;

	fputs("     ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
}

/* Until an absolute time: a relative sleep restarted after each signal makes no progress when
 * signals arrive faster than it can start sleeping (the storm tests). */
void e2e_sleep_ms(int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

uint64_t e2e_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t e2e_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t e2e_wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

e2e_release_fn e2e_shim_release(void)
{
	void *sym = dlsym(RTLD_DEFAULT, "gpupool_release");
	e2e_release_fn f;

	if (sym == NULL)
		e2e_fail("gpupool_release not found: run under LD_PRELOAD=libgpupool.so");
	memcpy(&f, &sym, sizeof(sym));
	return f;
}

/* Read at each call, not kept: threads call it, and the environment does not change. */
double e2e_time_scale(void)
{
	const char *v = getenv("GPUPOOL_TEST_TIME_SCALE");
	double s = v != NULL ? strtod(v, NULL) : 1.0;

	return s >= 1.0 ? s : 1.0;
}

int e2e_scaled_ms(int ms)
{
	return (int)((double)ms * e2e_time_scale());
}

int e2e_poll(int (*pred)(void *arg), void *arg, int timeout_ms)
{
	uint64_t end = e2e_now_ms() + (uint64_t)e2e_scaled_ms(timeout_ms);

	while (!pred(arg)) {
		if (e2e_now_ms() >= end)
			return pred(arg);
		e2e_sleep_ms(1);
	}
	return 1;
}

static uint64_t pattern_word(uint64_t seed, size_t off)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)off;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return x;
}

void e2e_fill(void *p, size_t bytes, uint64_t seed)
{
	unsigned char *b = p;
	uint64_t w;
	size_t off;

	if (bytes < 16) {
		for (off = 0; off < bytes; off++)
			b[off] = (unsigned char)pattern_word(seed, off);
		return;
	}
	for (off = 0; off + 16 <= bytes; off += 4096) {
		w = pattern_word(seed, off);
		memcpy(b + off, &w, 8);
	}
	w = pattern_word(seed, bytes - 8);
	memcpy(b + bytes - 8, &w, 8);
}

int e2e_verify(const void *p, size_t bytes, uint64_t seed)
{
	const unsigned char *b = p;
	uint64_t w;
	size_t off;

	if (bytes < 16) {
		for (off = 0; off < bytes; off++)
			if (b[off] != (unsigned char)pattern_word(seed, off))
				return 0;
		return 1;
	}
	for (off = 0; off + 16 <= bytes; off += 4096) {
		memcpy(&w, b + off, 8);
		if (w != pattern_word(seed, off))
			return 0;
	}
	memcpy(&w, b + bytes - 8, 8);
	return w == pattern_word(seed, bytes - 8);
}

int e2e_threads(void)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");
	int n = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "Threads:", 8) == 0)
			n = atoi(line + 8);
	fclose(f);
	return n;
}

/* The environment of the child: ours, with `env` applied. Returns a malloc'd array. */
static char **child_environ(const char *const *env)
{
	size_t n = 0, m = 0, i, j, k, len;
	char **out;

	while (environ[n] != NULL)
		n++;
	while (env != NULL && env[m] != NULL)
		m++;
	out = calloc(n + m + 1, sizeof(*out));
	if (out == NULL)
		return NULL;
	k = 0;
	for (i = 0; i < n; i++) {
		int replaced = 0;

		for (j = 0; j < m; j++) {
			len = strcspn(env[j], "=");
			if (strncmp(environ[i], env[j], len) == 0 && environ[i][len] == '=')
				replaced = 1;
		}
		if (!replaced)
			out[k++] = environ[i];
	}
	for (j = 0; j < m; j++)
		if (strchr(env[j], '=') != NULL)
			out[k++] = (char *)env[j];
	out[k] = NULL;
	return out;
}

int e2e_run_self(const char *const *args, const char *const *env, int timeout_ms,
		 struct e2e_child *out)
{
	char **argv = NULL, **envp = NULL;
	size_t nargs = 0, i;
	int pipefd[2] = { -1, -1 };
	int rc = -1, done = 0;
	uint64_t end;
	pid_t pid;

	memset(out, 0, sizeof(*out));
	while (args != NULL && args[nargs] != NULL)
		nargs++;
	argv = calloc(nargs + 2, sizeof(*argv));
	envp = child_environ(env);
	if (argv == NULL || envp == NULL)
		goto out;
	argv[0] = (char *)e2e_name;
	for (i = 0; i < nargs; i++)
		argv[i + 1] = (char *)args[i];
	if (pipe2(pipefd, O_CLOEXEC) != 0)
		goto out;
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		goto out;
	if (pid == 0) {
		dup2(pipefd[1], 2);
		execve("/proc/self/exe", argv, envp);
		_exit(127);
	}
	close(pipefd[1]);
	pipefd[1] = -1;
	end = e2e_now_ms() + (uint64_t)e2e_scaled_ms(timeout_ms);
	while (!done) {
		struct pollfd pfd = { pipefd[0], POLLIN, 0 };
		char buf[4096];
		ssize_t got;

		if (pipefd[0] >= 0 && poll(&pfd, 1, 10) > 0) {
			got = read(pipefd[0], buf, sizeof(buf));
			if (got > 0) {
				size_t room = sizeof(out->err) - 1 - out->err_len;
				size_t take = (size_t)got < room ? (size_t)got : room;

				memcpy(out->err + out->err_len, buf, take);
				out->err_len += take;
			} else if (got == 0) {
				close(pipefd[0]);
				pipefd[0] = -1;
			}
		} else if (pipefd[0] < 0) {
			e2e_sleep_ms(5);
		}
		if (waitpid(pid, &out->status, WNOHANG) == pid) {
			done = 1;
		} else if (e2e_now_ms() > end) {
			out->timed_out = 1;
			kill(pid, SIGKILL);
			waitpid(pid, &out->status, 0);
			done = 1;
		}
	}
	/* drain what the child wrote just before it ended */
	while (pipefd[0] >= 0) {
		char buf[4096];
		ssize_t got = read(pipefd[0], buf, sizeof(buf));
		size_t room = sizeof(out->err) - 1 - out->err_len;

		if (got <= 0)
			break;
		if ((size_t)got > room)
			got = (ssize_t)room;
		memcpy(out->err + out->err_len, buf, (size_t)got);
		out->err_len += (size_t)got;
	}
	out->err[out->err_len] = '\0';
	rc = 0;
out:
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	free(argv);
	free(envp);
	return rc;
}

const char *e2e_status_text(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exited with %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "status 0x%x", status);
	return buf;
}

long e2e_report_value(const char *path, const char *key)
{
	char line[256];
	size_t len = strlen(key);
	long v = -1;
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, key, len) == 0 && line[len] == '=')
			v = atol(line + len + 1);
	fclose(f);
	return v;
}

int e2e_run_capture_v(const char *prog, const char *const *env, char *out, size_t len,
		      const char *arg, va_list ap)
{
	const char *argv[16] = { prog, arg };
	int n = 2;

	while (n < 15 && (argv[n] = va_arg(ap, const char *)) != NULL)
		n++;
	argv[n] = NULL;
	return e2e_run_capture(argv, env, out, len);
}

int e2e_run_capture(const char *const *argv, const char *const *env, char *out, size_t len)
{
	char **envp = child_environ(env);
	int fds[2], status = -1;
	size_t used = 0;
	ssize_t got;
	pid_t pid;

	out[0] = '\0';
	if (envp == NULL || pipe2(fds, O_CLOEXEC) != 0) {
		free(envp);
		return -1;
	}
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		execve(argv[0], (char *const *)argv, envp);
		_exit(127);
	}
	free(envp);
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		return -1;
	}
	/* Short polls, not one blocking read: a signal the child sends us must be handled
	 * meanwhile (thread sanitizer builds defer handlers to the next intercepted call). */
	for (;;) {
		struct pollfd pfd = { fds[0], POLLIN, 0 };
		int ready = poll(&pfd, 1, 10);

		if (ready < 0 && errno != EINTR)
			break;
		if (ready <= 0)
			continue;
		got = read(fds[0], out + used, len - 1 - used);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		used += (size_t)got;
		if (used == len - 1)
			break;
	}
	out[used] = '\0';
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
