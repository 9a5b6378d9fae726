/* cli.c — the gpupool command against a live process, from the inside. Started by ctest through
 * `gpupool run --max-cached 1GiB --signal USR1 -- e2e_cli --cli <gpupool>`, it proves: run put
 * the shim in LD_PRELOAD and the options in GPUPOOL_*; `gpupool stats PID` (text, JSON,
 * Prometheus) read while the program runs agrees with the stand-in's own counters; `gpupool
 * release PID --wait` gives back exactly what the stand-in saw freed and says so; afterwards the
 * view shows that release; `gpupool top` lists the process.
 * --hold SECONDS [MIB]: allocate four blocks of MIB MiB (default 2), free two (cached), sleep
 * (SIGTERM ends it cleanly): for the scripts.
 * --hold-own SECONDS: the same, with a SIGUSR1 handler of its own installed after start-up.
 * --workload: a second of allocations and frees with a release in the middle: for plot-trace. */
#define _GNU_SOURCE
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
#include "formatcheck.h"

#define BLOCKS 16
#define KEEP 4
#define BLOCK_BYTES (3 * E2E_MIB)
#define RELEASED_SIGNAL "\"released_bytes\":{\"signal\":"

static const char *cli;
static char out[1 << 17];

/* Run the gpupool command with the arguments given (NULL-terminated), without the shim in its
 * LD_PRELOAD; its stdout (and stderr) in out. Returns its exit status, or -1. */
static int run_cli(const char *arg, ...)
{
	static const char *const env[] = { "LD_PRELOAD", NULL };
	va_list ap;
	int rc;

	va_start(ap, arg);
	rc = e2e_run_capture_v(cli, env, out, sizeof(out), arg, ap);
	va_end(ap);
	return rc;
}

/* The number after "key": in the JSON (the first one: device 0 for device fields), or
 * UINT64_MAX when the key is missing. */
static uint64_t json_find(const char *key)
{
	char pat[96];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(out, pat);
	return p == NULL ? UINT64_MAX : strtoull(p + strlen(pat), NULL, 10);
}

static uint64_t json_u64(const char *key)
{
	uint64_t v = json_find(key);

	if (v == UINT64_MAX)
		e2e_fail("\"%s\" is missing from gpupool stats --json: %.500s", key, out);
	return v;
}

static char pid_text[32];
static uint64_t frees_done_ns; /* e2e_wall_ns once the last free has returned */

/* A view whose figures were read after the frees. The control thread reads the pool's counters
 * without stopping the program, list after list, then the threads' caches: a view begun during
 * the frees may count the last frees in the caches but not the blocks they pushed out into the
 * lists before (seen in CI under TSan: in use 16 MiB + cached 16 MiB of 64 MiB). */
static int stats_show(void *arg)
{
	(void)arg;
	return run_cli("stats", pid_text, "--json", NULL) == 0 && json_find("allocs") == BLOCKS &&
	       json_find("frees") == BLOCKS - KEEP &&
	       json_find("taken_time_ns") != UINT64_MAX && json_find("taken_time_ns") > frees_done_ns;
}

static void check_env(void)
{
	const char *pre = getenv("LD_PRELOAD"), *cap = getenv("GPUPOOL_MAX_CACHED");

	e2e_check(pre != NULL && strstr(pre, "libgpupool.so") != NULL,
		  "gpupool run put the shim in LD_PRELOAD (%s)", pre ? pre : "unset");
	e2e_check(cap != NULL && strcmp(cap, "1GiB") == 0 && getenv("GPUPOOL_SIGNAL") != NULL,
		  "--max-cached 1GiB and --signal USR1 became GPUPOOL_MAX_CACHED=%s, GPUPOOL_SIGNAL=%s",
		  cap ? cap : "unset", getenv("GPUPOOL_SIGNAL") ? getenv("GPUPOOL_SIGNAL") : "unset");
}

static void check_stats(struct standin_counters c)
{
	char want[160], err[256];
	uint64_t cached;

	if (!e2e_poll(stats_show, NULL, 3000))
		e2e_fail("gpupool stats never showed %d allocations and %d frees in a view read after "
			 "them: %.800s", BLOCKS, BLOCKS - KEEP, out);
	e2e_check(formatcheck_json(out, err, sizeof(err)) == 0, "gpupool stats --json is valid JSON%s%s",
		  *err ? ": " : "", err);
	e2e_check(json_u64("real_mallocs") == c.mallocs && json_u64("real_frees") == c.frees,
		  "cudaMalloc/cudaFree calls: view %llu/%llu, stand-in %llu/%llu",
		  (unsigned long long)json_u64("real_mallocs"), (unsigned long long)json_u64("real_frees"),
		  (unsigned long long)c.mallocs, (unsigned long long)c.frees);
	cached = json_u64("idle_bytes") + json_u64("pending_bytes");
	e2e_check(json_u64("in_use_bytes") + cached == c.live_bytes,
		  "in use %llu + cached %llu B = the stand-in's live bytes %llu",
		  (unsigned long long)json_u64("in_use_bytes"), (unsigned long long)cached,
		  (unsigned long long)c.live_bytes);
	e2e_check(json_u64("in_use_blocks") == KEEP &&
		  json_u64("idle_blocks") + json_u64("pending_blocks") == BLOCKS - KEEP,
		  "%d blocks in use, %d cached", KEEP, BLOCKS - KEEP);

	e2e_check(run_cli("stats", pid_text, NULL) == 0 && strstr(out, "cudaMalloc calls") != NULL &&
		  strstr(out, pid_text) != NULL, "gpupool stats PID prints the text table");
	e2e_check(run_cli("stats", pid_text, "--prometheus", NULL) == 0 &&
			  formatcheck_prometheus(out, NULL, err, sizeof(err)) == 0,
		  "gpupool stats --prometheus is valid exposition format%s%s", *err ? ": " : "", err);
	snprintf(want, sizeof(want), "gpupool_real_mallocs_total{pid=\"%s\",device=\"0\"} %llu\n",
		 pid_text, (unsigned long long)c.mallocs);
	e2e_check(strstr(out, want) != NULL, "and says %.*s", (int)strlen(want) - 1, want);
}

static void check_release(void)
{
	struct standin_counters before = e2e_counters(), after;
	unsigned long long bytes = 0, blocks = 0;
	const char *p;
	int rc;

	rc = run_cli("release", pid_text, "--wait", NULL);
	after = e2e_counters();
	p = strstr(out, "bytes) in ");
	if (rc != 0 || p == NULL || strstr(out, "(signal)") == NULL)
		e2e_fail("gpupool release --wait: exit %d, output: %s", rc, out);
	while (p > out && p[-1] != '(')
		p--;
	if (sscanf(p, "%llu bytes) in %llu blocks", &bytes, &blocks) != 2)
		e2e_fail("cannot read gpupool release's report: %s", out);
	printf("     %s", out);
	e2e_check(bytes == before.live_bytes - after.live_bytes && blocks == after.frees - before.frees &&
			  blocks == BLOCKS - KEEP,
		  "release --wait reported %llu B in %llu blocks; the stand-in saw %llu B in %llu frees",
		  bytes, blocks, (unsigned long long)(before.live_bytes - after.live_bytes),
		  (unsigned long long)(after.frees - before.frees));
	e2e_check(run_cli("stats", pid_text, "--json", NULL) == 0 && json_u64("release_count") == 1 &&
			  json_u64("last_release_bytes") == bytes && json_u64("idle_bytes") == 0 &&
			  json_u64("real_frees") == after.frees,
		  "the view shows the release (1 release of %llu B, nothing idle, %llu real frees)",
		  bytes, (unsigned long long)after.frees);
	p = strstr(out, RELEASED_SIGNAL);
	e2e_check(p != NULL && strtoull(p + strlen(RELEASED_SIGNAL), NULL, 10) == bytes &&
			  strstr(out, "\"releases\":{\"signal\":1,") != NULL,
		  "released bytes by cause: signal %llu", bytes);
}

static int cli_flow(void)
{
	void *b[BLOCKS];
	int i;

	e2e_start("e2e_cli");
	snprintf(pid_text, sizeof(pid_text), "%ld", (long)getpid());
	check_env();
	for (i = 0; i < BLOCKS; i++) {
		e2e_cuda(cudaMalloc(&b[i], BLOCK_BYTES), "cudaMalloc");
		e2e_fill(b[i], BLOCK_BYTES, (uint64_t)i);
	}
	for (i = KEEP; i < BLOCKS; i++)
		e2e_cuda(cudaFree(b[i]), "cudaFree");
	frees_done_ns = e2e_wall_ns();
	check_stats(e2e_counters());
	check_release();
	e2e_check(run_cli("top", "--once", NULL) == 0 && strstr(out, pid_text) != NULL &&
		  strstr(out, "HIT%") != NULL, "gpupool top --once lists this process");
	for (i = 0; i < KEEP; i++)
		if (!e2e_verify(b[i], BLOCK_BYTES, (uint64_t)i))
			e2e_fail("live block %d lost its data", i);
	printf("PASS e2e_cli\n");
	return 0;
}

static volatile sig_atomic_t ending;

static void on_term(int sig)
{
	(void)sig;
	ending = 1;
}

static volatile sig_atomic_t own_usr1;

static void on_own_usr1(int sig)
{
	(void)sig;
	own_usr1++;
}

/* Allocate four blocks of `mib` MiB, keep two, wait for SIGTERM (or the time given), exit
 * normally. `own`: then install a SIGUSR1 handler of the program's own (as servers do, to reopen
 * their logs), and say at exit how often it ran. */
static int hold(int seconds, size_t mib, int own)
{
	void *b[4];

	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	for (int i = 0; i < 4; i++)
		e2e_cuda(cudaMalloc(&b[i], mib * E2E_MIB), "cudaMalloc");
	e2e_cuda(cudaFree(b[2]), "cudaFree");
	e2e_cuda(cudaFree(b[3]), "cudaFree");
	if (own)
		signal(SIGUSR1, on_own_usr1);
	printf("holding: pid %ld\n", (long)getpid());
	fflush(stdout);
	for (int i = 0; i < seconds * 100 && !ending; i++)
		e2e_sleep_ms(10);
	if (own)
		printf("own SIGUSR1 handler ran %d time(s)\n", (int)own_usr1);
	return 0;
}

/* Ten rounds of growing allocations and frees, a release by signal after the fifth. */
static int workload(void)
{
	void *b[64];

	for (int round = 0; round < 10; round++) {
		int n = 8 + round * 4;

		for (int i = 0; i < n; i++)
			e2e_cuda(cudaMalloc(&b[i], (size_t)(1 + i % 5) * E2E_MIB), "cudaMalloc");
		e2e_sleep_ms(40);
		for (int i = 0; i < n; i += 2)
			e2e_cuda(cudaFree(b[i]), "cudaFree");
		e2e_sleep_ms(30);
		for (int i = 1; i < n; i += 2)
			e2e_cuda(cudaFree(b[i]), "cudaFree");
		e2e_sleep_ms(30);
		if (round == 4) {
			kill(getpid(), SIGUSR1);
			e2e_sleep_ms(150);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "--cli") == 0) {
		cli = argv[2];
		return cli_flow();
	}
	if (argc > 2 && strcmp(argv[1], "--hold") == 0)
		return hold(atoi(argv[2]), argc > 3 ? (size_t)atoi(argv[3]) : 2, 0);
	if (argc > 2 && strcmp(argv[1], "--hold-own") == 0)
		return hold(atoi(argv[2]), 2, 1);
	if (argc > 1 && strcmp(argv[1], "--workload") == 0)
		return workload();
	fprintf(stderr, "usage: e2e_cli --cli GPUPOOL | --hold SECONDS [MIB] | --hold-own SECONDS | "
			"--workload\n");
	return 2;
}
