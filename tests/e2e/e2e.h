/* e2e.h — small helpers shared by the end-to-end programs: checks that print what they prove and
 * exit non-zero with a clear message, stand-in counters, polling, block patterns, and running
 * this same program again as a child (to watch its exit, signals and stderr from outside).
 * Plain functions only: a failed check calls exit(1) itself, visibly. */
#ifndef GPUPOOL_E2E_H
#define GPUPOOL_E2E_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "standin.h"

#define E2E_KIB ((size_t)1024)
#define E2E_MIB ((size_t)1024 * 1024)

/* Name shown in every message (set once from main). */
void e2e_start(const char *name);

/* Print "FAIL <name>: <message>" on stderr and exit(1). */
void e2e_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* ok: print "ok   <message>" on stdout; not ok: e2e_fail(message). */
void e2e_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The three below talk to the runtime (e2e_rt.c); the rest never does (e2e.c). */

/* A CUDA call that must succeed: fails with the error's name otherwise. */
void e2e_cuda(cudaError_t rc, const char *what);

/* Print an informational line on stdout. */
void e2e_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Counters of the stand-in runtime, device 0. */
struct standin_counters e2e_counters(void);

/* How much slower than a plain build on an idle machine this run may be: GPUPOOL_TEST_TIME_SCALE,
 * which ctest sets from cmake/test-time.cmake (the sanitizer, valgrind, a slow machine); 1 when
 * unset. Waits for something that must happen stretch by it; durations that set how much work a
 * test does may too. Never a reason to accept less: only to wait longer for it. */
double e2e_time_scale(void);
/* ms times e2e_time_scale(). */
int e2e_scaled_ms(int ms);

/* Poll (every ~1 ms) until pred(arg) is true or timeout_ms (times e2e_time_scale()) passes;
 * returns the last pred(). */
int e2e_poll(int (*pred)(void *arg), void *arg, int timeout_ms);

/* Poll until the stand-in's live allocations and bytes on device 0 are what is given (timeout_ms
 * scaled as in e2e_poll). */
int e2e_wait_live(uint64_t allocs, uint64_t bytes, int timeout_ms);

void e2e_sleep_ms(int ms);
uint64_t e2e_now_ms(void);
/* CLOCK_MONOTONIC in nanoseconds: the clock of the stand-in's event latency. */
uint64_t e2e_now_ns(void);
/* CLOCK_REALTIME in nanoseconds: the clock of a view's taken_time_ns. */
uint64_t e2e_wall_ns(void);

/* The preloaded shim's gpupool_release, found in the process; fails the test when it is not
 * there (the program was run without LD_PRELOAD=libgpupool.so). */
typedef int (*e2e_release_fn)(int device, unsigned long long *bytes);
e2e_release_fn e2e_shim_release(void);

/* Write / check a pattern derived from `seed`: one 8-byte word every 4 KiB and the last 8 bytes
 * (every byte below 16 B); cheap even for large blocks. e2e_verify returns 1 if intact. */
void e2e_fill(void *p, size_t bytes, uint64_t seed);
int e2e_verify(const void *p, size_t bytes, uint64_t seed);

/* A counter from the stand-in's STANDIN_REPORT file ("key=value" lines; -1 if absent). */
long e2e_report_value(const char *path, const char *key);

/* Threads of this process, from /proc/self/status (-1 if unreadable). */
int e2e_threads(void);

/* Run the program at argv[0] with the arguments argv (NULL-terminated) and the environment
 * changed by `env` (as e2e_run_self); its stdout and stderr into out (NUL-terminated, cut to
 * len - 1). Polls, so that a signal the child sends us is handled meanwhile. Returns its exit
 * status, or -1. */
int e2e_run_capture(const char *const *argv, const char *const *env, char *out, size_t len);
/* The same for the program `prog` with the arguments `arg` and those after it up to a NULL
 * (at most 14 in all). */
int e2e_run_capture_v(const char *prog, const char *const *env, char *out, size_t len,
		      const char *arg, va_list ap);

/* What the e2e programs run as a child of themselves reports back. */
struct e2e_child {
	int status;       /* as from waitpid */
	int timed_out;    /* killed after timeout_ms */
	char err[16384];  /* its stderr (truncated) */
	size_t err_len;
};

/* Run this program again (/proc/self/exe) with `args` (NULL-terminated, without argv[0]) and the
 * current environment changed by `env` (NULL-terminated; "NAME=value" sets, "NAME" unsets), its
 * stdout shared, its stderr captured. Kills it after timeout_ms (times e2e_time_scale()).
 * Returns 0, or -1 if it could not be started. */
int e2e_run_self(const char *const *args, const char *const *env, int timeout_ms,
		 struct e2e_child *out);

/* Describe a waitpid status ("exited with 3", "killed by signal 10 (User defined signal 1)"). */
const char *e2e_status_text(int status, char *buf, size_t len);

#endif
