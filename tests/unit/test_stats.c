/* test_stats.c — the stats layer on its own: the text, JSON and Prometheus renderings of a known
 * snapshot (JSON and Prometheus checked by strict validators, tests/e2e/formatcheck.c), reset,
 * truncation, and the live view's file (round trip, mode, no symlink following, stale writer,
 * other versions, seqlock consistency under a concurrent writer).
 * `test_stats --dump-json|--dump-prometheus|--dump-text` prints the fixture's rendering for the
 * ctest that feeds it to python3's json module. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "formatcheck.h"
#include "pool_fixture.h" /* fx_mono_ns */
#include "stats.h"
#include "view.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 17];

/* Two devices with distinct figures, a signal release, and a command line that needs escaping. */
static void fixture(struct gp_stats_snapshot *s)
{
	struct gp_stats_device *d;

	memset(s, 0, sizeof(*s));
	s->pid = 4242;
	s->uid = 1000;
	s->signo = 10;
	s->start_ns = 1700000000000000000ULL;
	s->taken_ns = s->start_ns + 75000000000ULL;
	snprintf(s->cmd, sizeof(s->cmd), "python \"serve.py\" --name a\\b\ttab caf\xc3\xa9 bad\xff");
	d = gp_stats_device_entry(s, 0);
	snprintf(d->uuid, sizeof(d->uuid), "GPU-00000000-1111-2222-3333-444444444444");
	d->in_use_bytes = 3 * GiB / 2;
	d->in_use_blocks = 12;
	d->requested_bytes = 3 * GiB / 2 - 1000;
	d->idle_bytes = 512 * MiB;
	d->idle_blocks = 4;
	d->pending_bytes = 64 * MiB;
	d->pending_blocks = 1;
	d->peak_in_use_bytes = 2 * GiB;
	d->peak_reserved_bytes = 3 * GiB;
	d->allocs = 1000;
	d->hits = 750;
	d->frees = 988;
	d->real_mallocs = 250;
	d->real_frees = 233;
	d->failed_allocs = 2;
	d->oom_retries = 1;
	d->bad_frees = 3;
	d->framework_cached_bytes = 256 * MiB;
	d->passed_vmm_bytes = 64 * MiB;
	d->passed_async_bytes = 32 * MiB;
	d->passed_managed_bytes = 16 * MiB;
	d->passed_pitched_bytes = 8 * MiB;
	d->passed_unpooled_bytes = 4 * MiB;
	d->nvml_process_bytes = 3 * GiB / 2 + 512 * MiB + 64 * MiB + 124 * MiB + 300 * MiB;
	d->nvml_used_bytes = 5 * GiB;
	d->nvml_total_bytes = 80 * GiB;
	gp_stats_account(d);
	s->framework_read_ns = s->start_ns + 70000000000ULL;
	d = gp_stats_device_entry(s, 3); /* NVML unknown there */
	d->in_use_bytes = 4096;
	d->in_use_blocks = 1;
	d->allocs = 1;
	s->releases[0] = 2;
	s->released_bytes[0] = 1 * GiB;
	s->releases[4] = 1;
	s->released_bytes[4] = 128 * MiB;
	s->release_count = 3;
	s->last_release_cause = 0;
	s->last_release_bytes = 768 * MiB;
	s->last_release_blocks = 24;
	s->last_release_duration_ns = 3214000;
	s->last_release_time_ns = s->start_ns + 60000000000ULL;
}

static int count_lines(const char *t, size_t *widest)
{
	int n = 0;

	*widest = 0;
	while (*t) {
		size_t len = strcspn(t, "\n");
		if (len > *widest)
			*widest = len;
		n++;
		t += len + (t[len] == '\n');
	}
	return n;
}

/* Proves: the text shows every device as a column with human sizes and counts, the hit rate,
 * releases by cause and the last release, and fits one screen (< 40 lines of < 100 columns). */
static void test_text(void **state)
{
	struct gp_stats_snapshot s;
	size_t widest, n;
	int lines;

	(void)state;
	fixture(&s);
	n = gp_stats_text(&s, buf, sizeof(buf));
	assert_int_equal(n, strlen(buf));
	assert_non_null(strstr(buf, "pid 4242: python"));
	assert_non_null(strstr(buf, "release signal SIGUSR1 (10)"));
	assert_non_null(strstr(buf, "up 1m15s"));
	assert_non_null(strstr(buf, "device 0"));
	assert_non_null(strstr(buf, "device 3"));
	assert_non_null(strstr(buf, "1.50 GiB"));
	assert_non_null(strstr(buf, "512 MiB"));
	assert_non_null(strstr(buf, "75.0%"));
	assert_non_null(strstr(buf, "OOM retries"));
	assert_non_null(strstr(buf, "3.214 ms"));
	assert_non_null(strstr(buf, "768 MiB"));
	assert_null(strchr(buf, '\t')); /* the command's control characters are not passed on */
	lines = count_lines(buf, &widest);
	print_message("%s", buf);
	assert_true(lines < 40);
	assert_true(widest < 100);
}

/* Proves: the text leaves out a nested counter that is 0 on every device (what a setting not in
 * use would count: remapped, moved, to make room) and a gauge nested two deep (the trims' debt),
 * keeps one that is not 0 on some device (for every device), keeps cache hits at 0 and a gauge
 * nested one deep (held for graphs), and lines up the longest label with the numbers; JSON keeps
 * every figure. */
static void test_text_nested_zero_rows(void **state)
{
	struct gp_stats_snapshot s;
	char buf[8192], json[16384], *line, *end;

	(void)state;
	fixture(&s);
	gp_stats_device_entry(&s, 3)->trims = 7; /* device 0: 0 */
	gp_stats_device_entry(&s, 0)->hits = 0;
	gp_stats_text(&s, buf, sizeof(buf));
	assert_null(strstr(buf, "remapped"));
	assert_null(strstr(buf, "moved"));
	assert_null(strstr(buf, "given back"));
	assert_null(strstr(buf, "a larger class"));
	assert_null(strstr(buf, "    owed"));
	assert_non_null(strstr(buf, "  held for graphs"));
	line = strstr(buf, "  to make room");
	assert_non_null(line);
	end = strchr(line, '\n');
	assert_non_null(end);
	*end = '\0';
	assert_int_equal(strlen(line), 28 + 2 * 14); /* label column, two device columns */
	assert_true(line[28 + 13] == '0' && line[28 + 2 * 14 - 1] == '7');
	*end = '\n';
	assert_non_null(strstr(buf, "  cache hits"));
	gp_stats_json(&s, json, sizeof(json));
	assert_non_null(strstr(json, "\"remapped_bytes\""));
	assert_non_null(strstr(json, "\"owed_bytes\""));
	assert_non_null(strstr(json, "\"uuid\":\"GPU-00000000-1111-2222-3333-444444444444\""));
	assert_non_null(strstr(json, "{\"device\":3,\"uuid\":null,"));
	assert_non_null(strstr(json, "\"trims\""));
}

/* Proves: the state of the process shows in every rendering: running says nothing in the text
 * and null in JSON; suspended names the moment and the parked bytes; captures in progress show. */
static void test_suspended(void **state)
{
	struct gp_stats_snapshot s;

	(void)state;
	fixture(&s);
	gp_stats_text(&s, buf, sizeof(buf));
	assert_null(strstr(buf, "SUSPENDED"));
	assert_null(strstr(buf, "captures in progress"));
	gp_stats_json(&s, buf, sizeof(buf));
	assert_non_null(strstr(buf, "\"suspended_since_ns\":null,\"parked_bytes\":0,\"captures\":0"));
	s.suspended_since_ns = 1700000000000000000ull;
	s.parked_bytes = 3ull << 30;
	s.captures = 2;
	gp_stats_text(&s, buf, sizeof(buf));
	assert_non_null(strstr(buf, "SUSPENDED since 2023-11-"));
	assert_non_null(strstr(buf, "3.00 GiB parked in host memory"));
	assert_non_null(strstr(buf, "CUDA graph captures in progress: 2"));
	/* Suspended by itself (auto-suspend): named so, with its next call as the way back. */
	s.self_suspended = 1;
	s.auto_suspend_ns = 300000000ull;
	s.suspends = 2;
	s.resumes = 1;
	s.last_suspend_duration_ns = 1500000000ull;
	s.last_resume_duration_ns = 250000000ull;
	gp_stats_text(&s, buf, sizeof(buf));
	assert_non_null(strstr(buf, "SUSPENDED by itself (auto-suspend) since 2023-11-"));
	assert_non_null(strstr(buf, "its next CUDA call resumes it"));
	assert_non_null(strstr(buf, "auto-suspend after 300.000 ms idle: 2 suspends, the last took "
				    "1500.000 ms, 1 resumes, the last took 250.000 ms"));
	s.self_suspended = 0;
	gp_stats_json(&s, buf, sizeof(buf));
	assert_non_null(strstr(buf, "\"suspended_since_ns\":1700000000000000000,"
				    "\"parked_bytes\":3221225472,\"captures\":2"));
}

/* Proves: before any release the text says so instead of showing a meaningless cause. */
static void test_text_no_release(void **state)
{
	struct gp_stats_snapshot s;

	(void)state;
	fixture(&s);
	s.release_count = 0;
	gp_stats_text(&s, buf, sizeof(buf));
	assert_non_null(strstr(buf, "last release                none yet"));
	assert_null(strstr(buf, "took"));
}

/* Proves: the JSON is valid (strict parser), has every field with exact integers, escapes the
 * command line (quotes, backslash, tab, invalid UTF-8) and uses null for an unknown cause. */
static void test_json(void **state)
{
	struct gp_stats_snapshot s;
	char err[256];

	(void)state;
	fixture(&s);
	gp_stats_json(&s, buf, sizeof(buf));
	if (formatcheck_json(buf, err, sizeof(err)) != 0)
		fail_msg("%s in %s", err, buf);
	assert_non_null(strstr(buf, "\"in_use_bytes\":1610612736"));
	assert_non_null(strstr(buf, "\"peak_reserved_bytes\":3221225472"));
	assert_non_null(strstr(buf, "\"oom_retries\":1"));
	assert_non_null(strstr(buf, "\"releases\":{\"signal\":2,\"cap\":0,\"idle\":0,"
				    "\"pressure\":0,\"oom\":1,\"api\":0}"));
	assert_non_null(strstr(buf, "\"last_release_cause\":\"signal\""));
	assert_non_null(strstr(buf, "\"last_release_duration_ns\":3214000"));
	assert_non_null(strstr(buf, "\"hit_rate_percent\":75.00"));
	assert_non_null(strstr(buf, "\"device\":3"));
	assert_non_null(strstr(buf, "python \\\"serve.py\\\" --name a\\\\b\\u0009tab caf\xc3\xa9 bad?"));
	s.release_count = 0;
	gp_stats_json(&s, buf, sizeof(buf));
	assert_int_equal(formatcheck_json(buf, err, sizeof(err)), 0);
	assert_non_null(strstr(buf, "\"last_release_cause\":null"));
}

/* Proves: several processes make one valid JSON array; none makes an empty one. */
static void test_json_many(void **state)
{
	struct gp_stats_snapshot s[2];
	char err[256];

	(void)state;
	fixture(&s[0]);
	fixture(&s[1]);
	s[1].pid = 4343;
	gp_stats_json_many(s, 2, buf, sizeof(buf));
	if (formatcheck_json(buf, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_true(buf[0] == '[');
	assert_non_null(strstr(buf, "\"pid\":4343"));
	gp_stats_json_many(s, 0, buf, sizeof(buf));
	assert_string_equal(buf, "[]\n");
}

/* Proves: a short buffer gets a cut, terminated text and the full length, and that length is
 * enough for the whole text (the caller's retry), for every rendering. */
static void test_truncation(void **state)
{
	struct gp_stats_snapshot s;
	char small[64];
	size_t full, cut;

	(void)state;
	fixture(&s);
	full = gp_stats_json(&s, buf, sizeof(buf));
	cut = gp_stats_json(&s, small, sizeof(small));
	assert_int_equal(cut, full);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_memory_equal(small, buf, sizeof(small) - 1);
	full = gp_stats_prometheus(&s, 1, NULL, buf, sizeof(buf));
	assert_int_equal(gp_stats_prometheus(&s, 1, NULL, small, sizeof(small)), full);
	assert_int_equal(strlen(buf), full);
	full = gp_stats_text(&s, buf, sizeof(buf));
	assert_int_equal(gp_stats_text(&s, small, 0), full);
}

/* Proves: the Prometheus output is valid exposition format (HELP/TYPE before samples, families
 * together, counters in _total, no repeated series) for two processes, with one family per field
 * of the lists, seconds for durations, and escaped label values; who each process is (command,
 * program, signal, container) once, in gpupool_process_info. */
static void test_prometheus(void **state)
{
	static const char *const containers[] = {
		"", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	};
	struct gp_stats_snapshot s[2];
	char err[256];
	int families;

	(void)state;
	fixture(&s[0]);
	fixture(&s[1]);
	s[1].pid = 4343;
	s[1].release_count = 0;
	s[1].suspended_since_ns = 1700000000500000000ull;
	s[1].parked_bytes = 123456789;
	snprintf(s[1].cmd, sizeof(s[1].cmd), "/usr/bin/python3.11 -m vllm");
	gp_stats_prometheus(s, 2, containers, buf, sizeof(buf));
	if (formatcheck_prometheus(buf, &families, err, sizeof(err)) != 0)
		fail_msg("%s\n%s", err, buf);
	assert_int_equal(families, 3 + GP_STATS_NDEVICE_FIELDS + GP_STATS_NACCOUNT_FIELDS +
					   GP_STATS_NNVML_FIELDS + 2 + GP_STATS_NSTATE_FIELDS +
					   GP_STATS_NPROCESS_FIELDS);
	assert_non_null(strstr(buf, "gpupool_process_info{pid=\"4242\",command=\"python \\\"serve.py\\\" "
				    "--name a\\\\b?tab caf\xc3\xa9 bad?\",program=\"python\",signal=\"10\","
				    "container=\"\"} 1\n"));
	assert_non_null(strstr(buf, "gpupool_process_info{pid=\"4343\",command=\"/usr/bin/python3.11 "
				    "-m vllm\",program=\"python3.11\",signal=\"10\",container=\"0123456789"
				    "abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"} 1\n"));
	assert_non_null(strstr(buf, "gpupool_passed_vmm_bytes{pid=\"4242\",device=\"0\"} 67108864\n"));
	assert_non_null(strstr(buf, "gpupool_passed_vmm_bytes{pid=\"4242\",device=\"3\"} 0\n"));
	assert_non_null(strstr(buf, "gpupool_other_bytes{pid=\"4242\",device=\"0\"} 314572800\n"));
	assert_non_null(strstr(buf, "gpupool_nvml_total_bytes{pid=\"4242\",device=\"0\"} 85899345920\n"));
	/* NVML unknown on device 3: no sample rather than a made-up one */
	assert_null(strstr(buf, "gpupool_nvml_process_bytes{pid=\"4242\",device=\"3\"}"));
	assert_null(strstr(buf, "gpupool_other_bytes{pid=\"4242\",device=\"3\"}"));
	assert_non_null(strstr(buf, "gpupool_suspended_since_seconds{pid=\"4242\"} 0.000000000\n"));
	assert_non_null(strstr(buf, "gpupool_suspended_since_seconds{pid=\"4343\"} 1700000000.5"));
	assert_non_null(strstr(buf, "gpupool_parked_bytes{pid=\"4343\"} 123456789\n"));
	assert_non_null(strstr(buf, "# TYPE gpupool_in_use_bytes gauge\n"));
	assert_non_null(strstr(buf, "gpupool_in_use_bytes{pid=\"4242\",device=\"0\"} 1610612736\n"));
	assert_non_null(strstr(buf, "gpupool_in_use_bytes{pid=\"4343\",device=\"3\"} 4096\n"));
	assert_non_null(strstr(buf, "gpupool_device_info{pid=\"4242\",device=\"0\",uuid=\"GPU-00000000-"
				    "1111-2222-3333-444444444444\"} 1\n"));
	assert_non_null(strstr(buf, "gpupool_device_info{pid=\"4343\",device=\"3\",uuid=\"\"} 1\n"));
	assert_non_null(strstr(buf, "# TYPE gpupool_real_mallocs_total counter\n"));
	assert_non_null(strstr(buf, "gpupool_releases_total{pid=\"4242\",cause=\"oom\"} 1\n"));
	assert_non_null(strstr(buf, "gpupool_released_bytes_total{pid=\"4242\",cause=\"signal\"} "
				    "1073741824\n"));
	assert_non_null(strstr(buf, "gpupool_last_release_duration_seconds{pid=\"4242\"} 0.003214000\n"));
	assert_non_null(strstr(buf, "gpupool_last_release_cause{pid=\"4242\",cause=\"signal\"} 1\n"));
	assert_null(strstr(buf, "gpupool_last_release_cause{pid=\"4343\""));
	assert_non_null(
		strstr(buf, "command=\"python \\\"serve.py\\\" --name a\\\\b?tab caf\xc3\xa9 bad?\""));
}

/* Proves: the accounting lines add up: other_bytes is NVML's figure minus in use, idle, pending
 * and every passed-through line, never minus the framework's cache (inside in use); below 0 it
 * stays a signed figure; with NVML unknown it is unknown; a new device entry starts unknown. */
static void test_account_arithmetic(void **state)
{
	struct gp_stats_snapshot s;
	struct gp_stats_device *d;

	(void)state;
	fixture(&s);
	d = &s.dev[0];
	assert_int_equal(gp_stats_accounted_bytes(d),
			 3 * GiB / 2 + 512 * MiB + 64 * MiB + 64 * MiB + 32 * MiB + 16 * MiB +
				 8 * MiB + 4 * MiB);
	assert_int_equal(d->other_bytes, 300 * MiB);
	d->passed_managed_bytes += 400 * MiB; /* an estimate too high */
	gp_stats_account(d);
	assert_int_equal((int64_t)d->other_bytes, -(int64_t)(100 * MiB));
	d->nvml_process_bytes = GP_STATS_UNKNOWN;
	gp_stats_account(d);
	assert_true(d->other_bytes == GP_STATS_UNKNOWN);
	d = gp_stats_device_entry(&s, 5);
	assert_true(d->nvml_process_bytes == GP_STATS_UNKNOWN && d->nvml_used_bytes == GP_STATS_UNKNOWN &&
		    d->nvml_total_bytes == GP_STATS_UNKNOWN && d->other_bytes == GP_STATS_UNKNOWN);
	assert_int_equal(d->passed_vmm_bytes, 0);
}

/* Proves: JSON carries every accounting line per device with exact bytes, the rest as a signed
 * integer, and null for what NVML did not say (device 3), and stays valid JSON. */
static void test_account_json(void **state)
{
	struct gp_stats_snapshot s;
	char err[256];

	(void)state;
	fixture(&s);
	gp_stats_json(&s, buf, sizeof(buf));
	if (formatcheck_json(buf, err, sizeof(err)) != 0)
		fail_msg("%s in %s", err, buf);
	assert_non_null(strstr(buf, "\"framework_cached_bytes\":268435456,\"passed_vmm_bytes\":67108864,"
				    "\"passed_async_bytes\":33554432,\"passed_managed_bytes\":16777216,"
				    "\"passed_pitched_bytes\":8388608,\"passed_unpooled_bytes\":4194304,"
				    "\"other_bytes\":314572800,\"nvml_process_bytes\":"));
	assert_non_null(strstr(buf, "\"framework_read_ns\":1700000070000000000"));
	assert_non_null(strstr(buf, "\"other_bytes\":null,\"nvml_process_bytes\":null,"
				    "\"nvml_used_bytes\":null,\"nvml_total_bytes\":null"));
	s.dev[0].passed_managed_bytes += 400 * MiB;
	gp_stats_account(&s.dev[0]);
	s.framework_read_ns = 0;
	gp_stats_json(&s, buf, sizeof(buf));
	if (formatcheck_json(buf, err, sizeof(err)) != 0)
		fail_msg("%s in %s", err, buf);
	assert_non_null(strstr(buf, "\"other_bytes\":-104857600,"));
	assert_non_null(strstr(buf, "\"framework_read_ns\":null"));
}

/* The line of `text` that starts with `label`, NULL if none. */
static const char *line_of(const char *text, const char *label)
{
	size_t n = strlen(label);

	for (const char *l = text; *l != '\0'; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != 0))
		if (strncmp(l, label, n) == 0)
			return l;
	return NULL;
}

/* Proves: the accounting table shows each line with each device's figure, the framework's share
 * nested under in use (only once a framework was read), the rest and NVML's figure, "unknown"
 * where NVML did not say, and says in words what is unknown or estimated; a negative rest is
 * shown and explained; it fits 100 columns. */
static void test_account_text(void **state)
{
	struct gp_stats_snapshot s;
	size_t widest;
	const char *l;

	(void)state;
	fixture(&s);
	gp_stats_account_text(&s, buf, sizeof(buf));
	count_lines(buf, &widest);
	assert_true(widest < 100);
	l = line_of(buf, "device memory, every byte");
	assert_non_null(l);
	assert_non_null(strstr(l, "device 0"));
	assert_non_null(strstr(l, "device 3"));
	assert_non_null(l = line_of(buf, "in use by the program (gpupool's blocks)"));
	assert_non_null(strstr(l, "1.50 GiB"));
	assert_non_null(strstr(l, "4.00 KiB"));
	assert_non_null(l = line_of(buf, "  of which PyTorch/CuPy cache, unused"));
	assert_non_null(strstr(l, "256 MiB"));
	assert_non_null(l = line_of(buf, "idle in gpupool's cache"));
	assert_non_null(strstr(l, "512 MiB"));
	assert_non_null(l = line_of(buf, "pending (freed, the GPU not done yet)"));
	assert_non_null(strstr(l, "64.0 MiB"));
	assert_non_null(line_of(buf, "passed through the pool:"));
	assert_non_null(l = line_of(buf, "  VMM memory it maps itself"));
	assert_non_null(strstr(l, "64.0 MiB"));
	assert_non_null(l = line_of(buf, "  cudaMallocAsync pool, reserved"));
	assert_non_null(strstr(l, "32.0 MiB"));
	assert_non_null(l = line_of(buf, "  managed memory"));
	assert_non_null(strstr(l, "16.0 MiB"));
	assert_non_null(l = line_of(buf, "  pitched memory"));
	assert_non_null(strstr(l, "8.00 MiB"));
	assert_non_null(l = line_of(buf, "  cuMemAlloc, not pooled"));
	assert_non_null(strstr(l, "4.00 MiB"));
	assert_non_null(l = line_of(buf, "CUDA context, libraries (rest)"));
	assert_non_null(strstr(l, "300 MiB"));
	assert_non_null(strstr(l, "unknown"));
	assert_non_null(l = line_of(buf, "= NVML: held by the process"));
	assert_non_null(strstr(l, "2.48 GiB"));
	assert_non_null(l = line_of(buf, "NVML: device total"));
	assert_non_null(strstr(l, "80.0 GiB"));
	assert_non_null(strstr(buf, "NVML's figure unknown on a device"));
	assert_non_null(strstr(buf, "CuPy's pool on device 0 only"));
	assert_non_null(strstr(buf, "managed memory: what was allocated"));
	assert_non_null(strstr(buf, "1.00 MiB or less: counted in 512-byte steps"));
	assert_null(strstr(buf, "a rest below 0"));
	s.dev[0].passed_managed_bytes += 400 * MiB;
	gp_stats_account(&s.dev[0]);
	s.framework_read_ns = 0;
	gp_stats_account_text(&s, buf, sizeof(buf));
	assert_non_null(l = line_of(buf, "CUDA context, libraries (rest)"));
	assert_non_null(strstr(l, "-100 MiB"));
	assert_non_null(strstr(buf, "a rest below 0"));
	assert_null(line_of(buf, "  of which PyTorch/CuPy cache, unused"));
	s.ndev = 0;
	gp_stats_account_text(&s, buf, sizeof(buf));
	assert_string_equal(buf, "device memory: no device used yet\n");
}

/* Proves: the validators themselves reject what they must (so the tests above mean something). */
static void test_validators_reject(void **state)
{
	static const char *const bad_json[] = { "{\"a\":1,}", "[1 2]", "{\"a\":01}", "\"\x01\"",
						"\"\xff\"", "{a:1}", "[1]x", "" };
	static const char *const bad_prom[] = {
		"m 1\n",                                        /* no TYPE */
		"# TYPE m gauge\nm{a=\"1\"} 1\nm{a=\"1\"} 2\n",  /* repeated series */
		"# TYPE m counter\nm 1\n",                      /* counter without _total */
		"# TYPE m gauge\n# TYPE n gauge\nm 1\nn 1\nm 2\n", /* family not together */
		"# TYPE m gauge\nm{a=\"x\\q\"} 1\n",            /* bad escape */
		"# TYPE m gauge\nm x\n",                        /* bad value */
		"# TYPE m gauge\nm 1",                          /* no final newline */
	};
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i++)
		assert_int_equal(formatcheck_json(bad_json[i], err, sizeof(err)), -1);
	for (size_t i = 0; i < sizeof(bad_prom) / sizeof(bad_prom[0]); i++)
		assert_int_equal(formatcheck_prometheus(bad_prom[i], NULL, err, sizeof(err)), -1);
	assert_int_equal(formatcheck_json(" {\"a\":[1,-2.5e3,true,null,\"\\u00e9\"]} ", err,
					  sizeof(err)), 0);
}

/* Proves: reset zeroes every figure and keeps who the process is. */
static void test_reset(void **state)
{
	struct gp_stats_snapshot s;

	(void)state;
	fixture(&s);
	gp_stats_reset(&s);
	assert_int_equal(s.pid, 4242);
	assert_int_equal(s.signo, 10);
	assert_non_null(strstr(s.cmd, "serve.py"));
	assert_int_equal(s.ndev, 0);
	assert_int_equal(s.dev[0].in_use_bytes, 0);
	assert_int_equal(s.releases[0], 0);
	assert_int_equal(s.release_count, 0);
	assert_int_equal(s.last_release_bytes, 0);
	assert_non_null(gp_stats_device_entry(&s, 7));
	assert_int_equal(s.ndev, 1);
	assert_ptr_equal(gp_stats_device_entry(&s, 7), &s.dev[0]);
	assert_null(gp_stats_device_entry(&s, -1));
}

/* ---- the live view's file --------------------------------------------------------------- */

struct dir {
	char path[128];
	char view[192];
};

static int dir_setup(void **state)
{
	struct dir *d = calloc(1, sizeof(*d));

	snprintf(d->path, sizeof(d->path), "/tmp/gpupool-test-stats-XXXXXX");
	if (mkdtemp(d->path) == NULL)
		return -1;
	snprintf(d->view, sizeof(d->view), "%s/%s%ld", d->path, GP_STATS_VIEW_PREFIX, (long)getpid());
	*state = d;
	return 0;
}

static int dir_teardown(void **state)
{
	struct dir *d = *state;
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->path);
	if (system(cmd) != 0)
		return -1;
	free(d);
	return 0;
}

/* Proves: a created view reads back equal to what was published, at mode 0600, and a new
 * publication replaces it; closing with the path removes the file. */
static void test_view_roundtrip(void **state)
{
	struct dir *d = *state;
	struct gp_stats_snapshot s, got;
	struct gp_stats_view *v;
	struct stat st;

	fixture(&s);
	s.pid = getpid();
	assert_int_equal(gp_stats_view_create(d->view, &s, &v), 0);
	assert_int_equal(stat(d->view, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_uid, geteuid());
	assert_int_equal(gp_stats_view_read(d->view, &got), GP_VIEW_OK);
	assert_memory_equal(&got, &s, sizeof(s));
	s.dev[0].allocs = 5555;
	gp_stats_view_publish(v, &s);
	assert_int_equal(gp_stats_view_read(d->view, &got), GP_VIEW_OK);
	assert_int_equal(got.dev[0].allocs, 5555);
	gp_stats_view_close(v, d->view);
	assert_int_equal(access(d->view, F_OK), -1);
	assert_int_equal(gp_stats_view_read(d->view, &got), GP_VIEW_NONE);
}

/* Proves: a file of ours left under the name (an earlier program of this pid) is replaced, and a
 * symlink under the name is neither followed nor replaced. */
static void test_view_create_safely(void **state)
{
	struct dir *d = *state;
	struct gp_stats_snapshot s;
	struct gp_stats_view *v;
	char target[256], content[8] = { 0 };
	int fd;

	fixture(&s);
	s.pid = getpid();
	fd = open(d->view, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(gp_stats_view_create(d->view, &s, &v), 0);
	gp_stats_view_close(v, d->view);

	snprintf(target, sizeof(target), "%s/target", d->path);
	fd = open(target, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "keep", 4), 4);
	close(fd);
	assert_int_equal(symlink(target, d->view), 0);
	assert_true(gp_stats_view_create(d->view, &s, &v) < 0);
	assert_null(v);
	fd = open(target, O_RDONLY);
	assert_int_equal(read(fd, content, sizeof(content) - 1), 4);
	close(fd);
	assert_string_equal(content, "keep");
	assert_int_equal(gp_stats_view_read(d->view, &s), GP_VIEW_BAD); /* a symlink is no view */
	unlink(d->view);
}

/* Proves: a view whose process is gone reads as stale, even a half-made one; one of a live
 * process whose version differs, or that is too short, reads as not a view; one whose pid
 * inside is not the pid in its name is not trusted. */
static void test_view_stale_and_bad(void **state)
{
	struct dir *d = *state;
	struct gp_stats_snapshot s, got;
	struct gp_stats_view *v;
	char path[256];
	pid_t child = fork();
	uint32_t version = 99;
	int fd;

	if (child == 0)
		_exit(0);
	assert_true(child > 0);
	waitpid(child, NULL, 0); /* its pid is now free */
	fixture(&s);
	s.pid = child;
	snprintf(path, sizeof(path), "%s/%s%ld", d->path, GP_STATS_VIEW_PREFIX, (long)child);
	assert_int_equal(gp_stats_view_create(path, &s, &v), 0);
	gp_stats_view_close(v, NULL);
	assert_int_equal(gp_stats_view_read(path, &got), GP_VIEW_STALE);
	/* Half made (killed between creating the file and publishing): stale too. */
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(ftruncate(fd, sizeof(struct gp_stats_view)), 0);
	close(fd);
	assert_int_equal(gp_stats_view_read(path, &got), GP_VIEW_STALE);
	unlink(path);

	s.pid = getpid();
	assert_int_equal(gp_stats_view_create(d->view, &s, &v), 0);
	fd = open(d->view, O_WRONLY);
	assert_int_equal(pwrite(fd, &version, sizeof(version), offsetof(struct gp_stats_view, version)),
			 sizeof(version));
	assert_int_equal(gp_stats_view_read(d->view, &got), GP_VIEW_BAD);
	assert_int_equal(ftruncate(fd, 16), 0);
	assert_int_equal(gp_stats_view_read(d->view, &got), GP_VIEW_BAD);
	close(fd);
	gp_stats_view_close(v, d->view);

	/* The pid in the name must be the pid inside. */
	s.pid = getpid() + 1;
	assert_int_equal(gp_stats_view_create(d->view, &s, &v), 0);
	assert_int_equal(gp_stats_view_read(d->view, &got), GP_VIEW_FORGED);
	gp_stats_view_close(v, d->view);
}

struct race {
	struct gp_stats_view *v;
	_Atomic int stop;
	int torn;
	long reads;
	const char *path;
};

static void *writer(void *arg)
{
	struct race *r = arg;
	static struct gp_stats_snapshot s;
	/* Under a sanitizer (a test time scale above 1) a read's copy of the snapshot, a word at a
	 * time, takes a quarter of a millisecond and more: the pauses must leave it room. */
	const char *scale = getenv("GPUPOOL_TEST_TIME_SCALE");
	struct timespec ts = { 0, scale != NULL && atoi(scale) > 1 ? 1000000 : 20000 };

	fixture(&s);
	s.pid = getpid();
	for (uint64_t k = 1; !r->stop; k++) {
		s.dev[0].allocs = s.dev[0].hits = s.dev[1].frees = s.release_count = k;
		s.last_release_bytes = s.releases[5] = k;
		gp_stats_view_publish(r->v, &s);
		if (k % 4 == 0) /* one that never pauses starves readers; the shim's: every 200 ms */
			nanosleep(&ts, NULL);
	}
	return NULL;
}

/* Proves: readers never see a mix of two publications while a writer publishes every few
 * microseconds (the seqlock), and never give up (busy). The reads go on past 2000 until they have
 * seen more than 100 publications (a busy machine may leave the writer unscheduled for a while),
 * for at most a minute. */
static void test_view_seqlock(void **state)
{
	struct dir *d = *state;
	struct gp_stats_snapshot s, got;
	struct race r = { 0 };
	uint64_t last = 0, changes = 0;
	uint64_t deadline = fx_mono_ns() + 60000000000ull;
	pthread_t t;

	fixture(&s);
	s.pid = getpid();
	s.dev[0].allocs = s.dev[0].hits = s.dev[1].frees = s.release_count = 0; /* k = 0 */
	s.last_release_bytes = s.releases[5] = 0;
	assert_int_equal(gp_stats_view_create(d->view, &s, &r.v), 0);
	assert_int_equal(pthread_create(&t, NULL, writer, &r), 0);
	/* Each read also asks /proc about the writer: 2000 of them take 0.5 s in a plain build. */
	for (int i = 0; i < 2000 || (changes <= 100 && fx_mono_ns() < deadline); i++) {
		uint64_t k;
		int rc = gp_stats_view_read(d->view, &got);
		if (rc != GP_VIEW_OK)
			fail_msg("read %d returned %d", i, rc);
		k = got.dev[0].allocs;
		changes += k != last;
		last = k;
		if (got.dev[0].hits != k || got.dev[1].frees != k || got.release_count != k ||
		    got.last_release_bytes != k || got.releases[5] != k)
			r.torn++;
	}
	r.stop = 1;
	pthread_join(t, NULL);
	gp_stats_view_close(r.v, d->view);
	assert_int_equal(r.torn, 0);
	assert_true(changes > 100); /* the reads did overlap the writes */
}

static int dump(const char *what)
{
	struct gp_stats_snapshot s;

	fixture(&s);
	if (strcmp(what, "--dump-json") == 0)
		gp_stats_json(&s, buf, sizeof(buf));
	else if (strcmp(what, "--dump-prometheus") == 0)
		gp_stats_prometheus(&s, 1, NULL, buf, sizeof(buf));
	else
		gp_stats_text(&s, buf, sizeof(buf));
	fputs(buf, stdout);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text),
		cmocka_unit_test(test_text_nested_zero_rows),
		cmocka_unit_test(test_text_no_release),
		cmocka_unit_test(test_suspended),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_json_many),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_prometheus),
		cmocka_unit_test(test_account_arithmetic),
		cmocka_unit_test(test_account_json),
		cmocka_unit_test(test_account_text),
		cmocka_unit_test(test_validators_reject),
		cmocka_unit_test(test_reset),
		cmocka_unit_test_setup_teardown(test_view_roundtrip, dir_setup, dir_teardown),
		cmocka_unit_test_setup_teardown(test_view_create_safely, dir_setup, dir_teardown),
		cmocka_unit_test_setup_teardown(test_view_stale_and_bad, dir_setup, dir_teardown),
		cmocka_unit_test_setup_teardown(test_view_seqlock, dir_setup, dir_teardown),
	};

	if (argc > 1)
		return dump(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
