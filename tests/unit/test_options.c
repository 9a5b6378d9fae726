/* test_options.c — the GPUPOOL_* parsers and the table-driven loader: every unit, bounds,
 * garbage, overflow and empty values, and the one-line warning plus default on a bad value. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "options.h"

#define KiB 1024ULL
#define MiB (1024ULL * KiB)
#define GiB (1024ULL * MiB)

static uint64_t size_ok(const char *s)
{
	struct gp_size z = { 12345, 0 };
	assert_int_equal(gp_opt_parse_size(s, &z), 0);
	assert_true(z.percent == 0);
	return z.bytes;
}

static void size_bad(const char *s)
{
	struct gp_size z = { 12345, 0 };
	assert_int_equal(gp_opt_parse_size(s, &z), -1);
}

/* Proves: every size unit has its documented multiplier (1000- vs 1024-based), case aside. */
static void test_size_units(void **state)
{
	(void)state;
	assert_int_equal(size_ok("4096"), 4096);
	assert_int_equal(size_ok("4096B"), 4096);
	assert_int_equal(size_ok("2KB"), 2000);
	assert_int_equal(size_ok("2K"), 2000);
	assert_int_equal(size_ok("3MB"), 3000000);
	assert_int_equal(size_ok("2GB"), 2000000000ULL);
	assert_int_equal(size_ok("1TB"), 1000000000000ULL);
	assert_int_equal(size_ok("2KiB"), 2 * KiB);
	assert_int_equal(size_ok("512MiB"), 512 * MiB);
	assert_int_equal(size_ok("2GiB"), 2 * GiB);
	assert_int_equal(size_ok("1TiB"), 1024 * GiB);
	assert_int_equal(size_ok("1.5GiB"), 3 * GiB / 2);
	assert_int_equal(size_ok("2 GiB"), 2 * GiB);
	assert_int_equal(size_ok("2gib"), 2 * GiB);
	assert_int_equal(size_ok("0"), 0);
}

/* Proves: percentages are kept as shares (0..100]; above 100 is refused. */
static void test_size_percent(void **state)
{
	struct gp_size z;

	(void)state;
	assert_int_equal(gp_opt_parse_size("30%", &z), 0);
	assert_true(z.percent == 30.0 && z.bytes == 0);
	assert_int_equal(gp_opt_size_bytes(&z, 1000), 300);
	assert_int_equal(gp_opt_parse_size("100%", &z), 0);
	assert_int_equal(gp_opt_size_bytes(&z, 80 * GiB), 80 * GiB);
	assert_int_equal(gp_opt_parse_size("12.5 %", &z), 0);
	assert_int_equal(gp_opt_size_bytes(&z, 800), 100);
	size_bad("150%");
	size_bad("100.1%");
	size_bad("%");
	size_bad("-5%");
}

/* Proves: garbage, negatives, empty, unknown units and overflow are refused. */
static void test_size_garbage(void **state)
{
	(void)state;
	size_bad("lots");
	size_bad("");
	size_bad(" ");
	size_bad("-5GiB");
	size_bad("5XB");
	size_bad("GiB");
	size_bad("5 GiB extra");
	size_bad("1e9");
	size_bad("0x100");
	size_bad("99999999999TiB");
	size_bad("18446744073709551616"); /* 2^64 */
}

/* Proves: durations take ms, s and min; a bare 0 means off; anything else is refused. */
static void test_duration(void **state)
{
	uint64_t ns = 7;

	(void)state;
	assert_int_equal(gp_opt_parse_duration("250ms", &ns), 0);
	assert_int_equal(ns, 250000000ULL);
	assert_int_equal(gp_opt_parse_duration("30s", &ns), 0);
	assert_int_equal(ns, 30000000000ULL);
	assert_int_equal(gp_opt_parse_duration("5min", &ns), 0);
	assert_int_equal(ns, 300000000000ULL);
	assert_int_equal(gp_opt_parse_duration("1.5s", &ns), 0);
	assert_int_equal(ns, 1500000000ULL);
	assert_int_equal(gp_opt_parse_duration("0", &ns), 0);
	assert_int_equal(ns, 0);
	assert_int_equal(gp_opt_parse_duration("5", &ns), -1); /* a unit is needed */
	assert_int_equal(gp_opt_parse_duration("", &ns), -1);
	assert_int_equal(gp_opt_parse_duration("-1s", &ns), -1);
	assert_int_equal(gp_opt_parse_duration("10h", &ns), -1);
	assert_int_equal(gp_opt_parse_duration("soon", &ns), -1);
	assert_int_equal(gp_opt_parse_duration("999999999999min", &ns), -1);
}

/* Proves: booleans, log levels and signals accept their documented forms only. */
static void test_bool_level_signal(void **state)
{
	char num[16];
	int v;

	(void)state;
	assert_int_equal(gp_opt_parse_bool("YES", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(gp_opt_parse_bool("off", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(gp_opt_parse_bool("2", &v), -1);
	assert_int_equal(gp_opt_parse_level("debug", &v), 0);
	assert_int_equal(v, GP_LOG_DEBUG);
	assert_int_equal(gp_opt_parse_level("loud", &v), -1);
	assert_int_equal(gp_opt_parse_signal("USR2", &v), 0);
	assert_int_equal(v, SIGUSR2);
	assert_int_equal(gp_opt_parse_signal("SIGUSR1", &v), 0);
	assert_int_equal(v, SIGUSR1);
	assert_int_equal(gp_opt_parse_signal("12", &v), 0);
	assert_int_equal(v, 12);
	assert_int_equal(gp_opt_parse_signal("none", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(gp_opt_parse_signal("9", &v), -1); /* SIGKILL cannot be caught */
	assert_int_equal(gp_opt_parse_signal("SIGFOO", &v), -1);
	assert_int_equal(gp_opt_parse_signal("", &v), -1);
	/* Signals that mean something without the program asking are refused: a release handler
	 * would take their meaning away (SEGV a busy loop, TERM ignored). */
	assert_int_equal(gp_opt_parse_signal("11", &v), -1);
	assert_int_equal(gp_opt_parse_signal("15", &v), -1);
	assert_int_equal(gp_opt_parse_signal("SIGTERM", &v), -1);
	assert_int_equal(gp_opt_parse_signal("HUP", &v), -1);
	assert_int_equal(gp_opt_parse_signal("WINCH", &v), -1);
	/* The real-time signals are the program's own too. */
	assert_int_equal(gp_opt_parse_signal("RTMIN", &v), 0);
	assert_int_equal(v, SIGRTMIN);
	assert_int_equal(gp_opt_parse_signal("SIGRTMIN+3", &v), 0);
	assert_int_equal(v, SIGRTMIN + 3);
	assert_int_equal(gp_opt_parse_signal("rtmax-1", &v), 0);
	assert_int_equal(v, SIGRTMAX - 1);
	assert_int_equal(gp_opt_parse_signal("RTMAX+1", &v), -1);
	assert_int_equal(gp_opt_parse_signal("RTMIN-1", &v), -1);
	assert_int_equal(gp_opt_parse_signal("RTMIN+", &v), -1);
	assert_int_equal(gp_opt_parse_signal("RTMIN+99", &v), -1);
	snprintf(num, sizeof(num), "%d", SIGRTMIN + 1);
	assert_int_equal(gp_opt_parse_signal(num, &v), 0);
	assert_int_equal(v, SIGRTMIN + 1);
}

static char warned[8][400];
static int nwarned;

static void collect(const char *line)
{
	if (nwarned < 8)
		snprintf(warned[nwarned], sizeof(warned[0]), "%s", line);
	nwarned++;
}

static void clear_env(void)
{
	size_t n;
	const struct gp_opt_def *t = gp_opt_table(&n);
	for (size_t i = 0; i < n; i++)
		unsetenv(t[i].name);
	nwarned = 0;
}

/* Proves: with nothing set every option takes its documented default, without a warning. */
static void test_load_defaults(void **state)
{
	struct gp_options o;

	(void)state;
	clear_env();
	gp_opt_load(&o, collect);
	assert_int_equal(nwarned, 0);
	assert_int_equal(o.log_level, GP_LOG_ERROR);
	assert_int_equal(o.signo, SIGUSR1);
	assert_int_equal(o.disable, 0);
	assert_true(o.max_cached.bytes == 0 && o.max_cached.percent == 0);
	assert_int_equal(o.idle_timeout_ns, 0);
	assert_int_equal(o.poll_interval_ns, 100000000ULL);
	assert_int_equal(o.reuse_wait_ns, 10000000ULL);
	assert_int_equal(o.reuse_poll_ns, 0);
	assert_int_equal(o.reuse_age_ns, 20000ULL);
	assert_int_equal(o.report_cached_as_free, 1);
}

/* Proves: a bad value gets one line naming the variable, the value and the accepted form,
 * and the default is used; good values beside it are taken. */
static void test_load_bad_values(void **state)
{
	struct gp_options o;

	(void)state;
	clear_env();
	setenv("GPUPOOL_MAX_CACHED", "lots", 1);
	setenv("GPUPOOL_MIN_FREE", "150%", 1);
	setenv("GPUPOOL_POLL_INTERVAL", "0", 1); /* below 1 ms */
	setenv("GPUPOOL_IDLE_TIMEOUT", "2s", 1);
	setenv("GPUPOOL_LOG", "info", 1);
	gp_opt_load(&o, collect);
	assert_int_equal(nwarned, 3);
	assert_non_null(strstr(warned[0], "GPUPOOL_MAX_CACHED=lots"));
	assert_non_null(strstr(warned[0], "accepted:"));
	assert_non_null(strstr(warned[0], "using 0"));
	assert_non_null(strstr(warned[1], "GPUPOOL_MIN_FREE=150%"));
	assert_non_null(strstr(warned[2], "GPUPOOL_POLL_INTERVAL=0"));
	assert_true(o.max_cached.bytes == 0 && o.max_cached.percent == 0);
	assert_true(o.min_free.bytes == 0 && o.min_free.percent == 0);
	assert_int_equal(o.poll_interval_ns, 100000000ULL);
	assert_int_equal(o.idle_timeout_ns, 2000000000ULL);
	assert_int_equal(o.log_level, GP_LOG_INFO);
	clear_env();
}

/* Proves: a misspelt variable gets one line with the nearest setting's name, a variable far from
 * every name (a script's) none, and a duration without its unit says the unit is missing. */
static void test_load_unknown_and_unit(void **state)
{
	struct gp_options o;

	(void)state;
	clear_env();
	setenv("GPUPOOL_MAXCACHED", "1GiB", 1);
	setenv("GPUPOOL_BUILD_DIRECTORY", "build", 1);
	setenv("GPUPOOL_IDLE_TIMEOUT", "5", 1);
	gp_opt_load(&o, collect);
	assert_int_equal(nwarned, 2);
	assert_non_null(strstr(warned[0], "GPUPOOL_IDLE_TIMEOUT=5"));
	assert_non_null(strstr(warned[0], "needs its unit"));
	assert_non_null(strstr(warned[1], "GPUPOOL_MAXCACHED is not a gpupool setting"));
	assert_non_null(strstr(warned[1], "did you mean GPUPOOL_MAX_CACHED?"));
	assert_int_equal(o.idle_timeout_ns, 0);
	nwarned = 0;
	gp_opt_load(&o, NULL); /* quiet: the constructor's first look */
	assert_int_equal(nwarned, 0);
	unsetenv("GPUPOOL_MAXCACHED");
	unsetenv("GPUPOOL_BUILD_DIRECTORY");
	clear_env();
}

/* Proves: every table entry's default parses, and names are unique GPUPOOL_ variables. */
static void test_table_sane(void **state)
{
	size_t n;
	const struct gp_opt_def *t = gp_opt_table(&n);
	struct gp_options o;

	(void)state;
	assert_true(n >= 8);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(strncmp(t[i].name, "GPUPOOL_", 8), 0);
		assert_true(strlen(t[i].help) > 10);
		for (size_t j = i + 1; j < n; j++)
			assert_string_not_equal(t[i].name, t[j].name);
		clear_env();
		setenv(t[i].name, t[i].def, 1);
		gp_opt_load(&o, collect);
		assert_int_equal(nwarned, 0);
	}
	clear_env();
}

/* Proves: ratios from 1 to 4, with an optional x, as whole percentages; nothing else. */
static void test_ratio(void **state)
{
	int v = 0;

	(void)state;
	assert_int_equal(gp_opt_parse_ratio("1", &v), 0);
	assert_int_equal(v, 100);
	assert_int_equal(gp_opt_parse_ratio("1.5", &v), 0);
	assert_int_equal(v, 150);
	assert_int_equal(gp_opt_parse_ratio("2x", &v), 0);
	assert_int_equal(v, 200);
	assert_int_equal(gp_opt_parse_ratio(" 4 ", &v), 0);
	assert_int_equal(v, 400);
	v = 7;
	assert_int_equal(gp_opt_parse_ratio("0.5", &v), -1);
	assert_int_equal(gp_opt_parse_ratio("5", &v), -1);
	assert_int_equal(gp_opt_parse_ratio("2xx", &v), -1);
	assert_int_equal(gp_opt_parse_ratio("", &v), -1);
	assert_int_equal(gp_opt_parse_ratio("two", &v), -1);
	assert_int_equal(v, 7);
}

/* Proves: the constructor's partial load agrees with the full one: unset, it keeps
 * GP_OPT_EARLY_DEFAULTS, which equal the table's defaults; set, it parses; a bad value gives the
 * default; variables it was not asked for are not read. */
static void test_load_only(void **state)
{
	static const char *const names[] = { "GPUPOOL_DISABLE", "GPUPOOL_SIGNAL", "GPUPOOL_TORCH",
					     "GPUPOOL_STATIC_RUNTIME" };
	struct gp_options full, early = GP_OPT_EARLY_DEFAULTS;

	(void)state;
	clear_env();
	gp_opt_load(&full, collect);
	gp_opt_load_only(&early, names, 4);
	assert_int_equal(early.disable, full.disable);
	assert_int_equal(early.signo, full.signo);
	assert_int_equal(early.torch, full.torch);
	assert_int_equal(early.static_runtime, full.static_runtime);

	setenv("GPUPOOL_DISABLE", "yes", 1);
	setenv("GPUPOOL_SIGNAL", "SIGUSR2", 1);
	setenv("GPUPOOL_TORCH", "takeover", 1);
	setenv("GPUPOOL_STATIC_RUNTIME", "off", 1);
	setenv("GPUPOOL_LOG", "debug", 1);
	early = (struct gp_options)GP_OPT_EARLY_DEFAULTS;
	gp_opt_load_only(&early, names, 4);
	assert_int_equal(early.disable, 1);
	assert_int_equal(early.signo, SIGUSR2);
	assert_int_equal(early.torch, GP_TORCH_TAKEOVER);
	assert_int_equal(early.static_runtime, 0);
	assert_int_equal(early.log_level, 0); /* not asked for: untouched */

	setenv("GPUPOOL_SIGNAL", "KILL", 1);
	early = (struct gp_options)GP_OPT_EARLY_DEFAULTS;
	early.signo = 0;
	gp_opt_load_only(&early, names, 4);
	assert_int_equal(early.signo, SIGUSR1);
	assert_int_equal(nwarned, 0);
	clear_env();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_size_units),     cmocka_unit_test(test_size_percent),
		cmocka_unit_test(test_size_garbage),   cmocka_unit_test(test_duration),
		cmocka_unit_test(test_bool_level_signal), cmocka_unit_test(test_load_defaults),
		cmocka_unit_test(test_load_bad_values), cmocka_unit_test(test_table_sane),
		cmocka_unit_test(test_load_unknown_and_unit),
		cmocka_unit_test(test_load_only),      cmocka_unit_test(test_ratio),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
