/* fuzz_options.c — libFuzzer target for the GPUPOOL_* options: every parser on the input, and
 * the table-driven loader on values cut from it (set in the environment). Checked: nothing
 * crashes or trips a sanitizer; what a parser accepts is in range (a percentage at most 100, a
 * signal that can be caught, a level, a choice index); loading is deterministic and every field
 * it leaves is valid; each bad value gets exactly one warning, which the log module writes as
 * exactly one line starting with "gpupool: " (stderr is captured around that write).
 * Built with clang -fsanitize=fuzzer (GPUPOOL_FUZZ=ON), or with replay.c to rerun inputs. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "options.h"

#define MAX_VALUE 512

static int log_fd = -1, saved_stderr = -1;
static unsigned warnings;

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_options: %s: [%s]\n", what, detail);
	abort();
}

/* The shim's warn callback sends the line to gp_log at the error level; here stderr is a memfd
 * for that one call, and what was written must be exactly one prefixed line. */
static void warn(const char *line)
{
	char out[2048];
	ssize_t n;

	warnings++;
	if (line == NULL || strlen(line) >= 384)
		fail("warning too long or NULL", line ? line : "(null)");
	if (log_fd < 0) {
		log_fd = memfd_create("fuzz_options_log", 0);
		saved_stderr = dup(2);
		if (log_fd < 0 || saved_stderr < 0)
			abort();
	}
	if (ftruncate(log_fd, 0) != 0 || lseek(log_fd, 0, SEEK_SET) != 0)
		abort();
	fflush(stderr);
	dup2(log_fd, 2);
	gp_log(GP_LOG_ERROR, "%s", line);
	dup2(saved_stderr, 2);
	n = pread(log_fd, out, sizeof(out) - 1, 0);
	if (n <= 0)
		fail("gp_log wrote nothing for a warning", line);
	out[n] = '\0';
	if (strncmp(out, "gpupool: error: ", 16) != 0)
		fail("a log line without the prefix", out);
	if (out[n - 1] != '\n' || memchr(out, '\n', (size_t)n - 1) != NULL)
		fail("one warning became more than one line on stderr", out);
}

static void check_parsers(const char *s)
{
	struct gp_size z;
	uint64_t ns, again;
	int v, w;
	size_t count;
	const struct gp_opt_def *t = gp_opt_table(&count);

	if (gp_opt_parse_bool(s, &v) == 0 && v != 0 && v != 1)
		fail("bool out of range", s);
	if (gp_opt_parse_level(s, &v) == 0 && (v < GP_LOG_ERROR || v > GP_LOG_DEBUG))
		fail("level out of range", s);
	if (gp_opt_parse_signal(s, &v) == 0 && v != 0 && v != SIGUSR1 && v != SIGUSR2 &&
	    (v < SIGRTMIN || v > SIGRTMAX))
		fail("a signal other than USR1, USR2 or a real-time one", s);
	memset(&z, 0, sizeof(z));
	if (gp_opt_parse_size(s, &z) == 0) {
		if (z.percent < 0 || z.percent > 100 || (z.percent > 0 && z.bytes != 0))
			fail("size out of range", s);
		if (gp_opt_size_bytes(&z, UINT64_C(1) << 50) > (UINT64_C(1) << 50) && z.percent > 0)
			fail("a percentage above the total", s);
	}
	if (gp_opt_parse_duration(s, &ns) == 0) {
		if (ns > UINT64_C(9200000000000000000))
			fail("duration out of range", s);
		if (gp_opt_parse_duration(s, &again) != 0 || again != ns)
			fail("duration not deterministic", s);
	}
	for (size_t i = 0; i < count; i++) {
		if (t[i].type != GP_OPT_CHOICE || gp_opt_parse_choice(s, t[i].accepts, &v) != 0)
			continue;
		w = 0;
		for (const char *c = t[i].accepts; *c; c++)
			w += *c == '|';
		if (v < 0 || v > w)
			fail("choice index out of range", s);
	}
}

static void check_loaded(const struct gp_options *o)
{
	if (o->log_level < GP_LOG_ERROR || o->log_level > GP_LOG_DEBUG)
		fail("loaded level out of range", "");
	if (o->signo < 0 || o->signo > SIGRTMAX || o->signo == SIGKILL || o->signo == SIGSTOP)
		fail("loaded signal out of range", "");
	if (o->poll_interval_ns < 1000000)
		fail("loaded poll interval below 1 ms", "");
	if (o->max_cached.percent > 100 || o->min_free.percent > 100)
		fail("loaded percentage above 100", "");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char buf[4096], *values[64];
	struct gp_options a, b;
	size_t count, nvalues = 0;
	const struct gp_opt_def *t = gp_opt_table(&count);
	unsigned warned;

	if (size >= sizeof(buf))
		size = sizeof(buf) - 1;
	memcpy(buf, data, size);
	buf[size] = '\0';
	check_parsers(buf);

	/* Values for the table's variables in order, cut at 0x01; an empty one stays unset. */
	for (char *p = buf; nvalues < count && nvalues < 64; nvalues++) {
		char *end = strchr(p, '\x01');
		values[nvalues] = p;
		if (end == NULL) {
			nvalues++;
			break;
		}
		*end = '\0';
		p = end + 1;
	}
	for (size_t i = 0; i < count; i++) {
		if (i < nvalues && values[i][0] != '\0' && strlen(values[i]) < MAX_VALUE) {
			check_parsers(values[i]);
			setenv(t[i].name, values[i], 1);
		} else {
			unsetenv(t[i].name);
		}
	}
	warnings = 0;
	gp_opt_load(&a, warn);
	warned = warnings;
	gp_opt_load(&b, NULL);
	if (memcmp(&a, &b, sizeof(a)) != 0)
		fail("loading twice gave two results", buf);
	if (warned > count)
		fail("more warnings than variables", buf);
	check_loaded(&a);
	for (size_t i = 0; i < count; i++)
		unsetenv(t[i].name);
	return 0;
}
