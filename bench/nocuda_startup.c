/* nocuda_startup.c — what LD_PRELOAD=libgpupool.so costs a process that never touches CUDA:
 * the wall time of spawning a program (default /bin/true) and waiting for it, plain and preloaded.
 * Each round runs every variant once, in an order shuffled per round so drift and position hit
 * each alike: plain, preloaded, plain' (plain again: plain' - plain, the same thing twice, is the
 * noise floor) and, with --floor LIB, that library preloaded instead (a tiny one: what any
 * preload costs, so preloaded - floor is what is gpupool's own). Reported: median per variant,
 * and medians of the paired per-round differences with a 95% confidence interval from order
 * statistics (the sign-test interval: no assumption about the distribution). Target: preloaded -
 * plain under 100 us and not beyond noise. Also checks that the preloaded program writes nothing
 * and exits 0. Needs no GPU.
 *   nocuda_startup LIBGPUPOOL [--reps 500] [--floor LIB] [PROGRAM ARGS...]
 * Output: "BENCH bench=nocuda..." lines (bench/bench_table.awk makes the table). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

enum { PLAIN, PRELOAD, PLAIN2, FLOOR, NVARIANTS };
static const char *const names[NVARIANTS] = { "plain", "preloaded", "plain-again", "floor" };

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* The environment without LD_PRELOAD (plain) or with only the library in it. */
static char **make_env(const char *lib)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 2, sizeof(*env));
	if (env == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0 && strncmp(environ[i], "GPUPOOL_", 8) != 0)
			env[k++] = environ[i];
	if (lib) {
		size_t len = strlen(lib) + 12;
		env[k] = malloc(len);
		if (env[k] == NULL)
			return NULL;
		snprintf(env[k++], len, "LD_PRELOAD=%s", lib);
	}
	env[k] = NULL;
	return env;
}

/* One spawn+wait in ns; -1 on failure. out_fd >= 0: the child's stdout and stderr go there. */
static int64_t spawn_once(char **argv, char **env, int out_fd, int *status)
{
	posix_spawn_file_actions_t fa;
	uint64_t t0;
	pid_t pid;
	int rc;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
	t0 = now_ns();
	rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
	if (rc == 0) {
		while (waitpid(pid, status, 0) < 0 && errno == EINTR)
			;
	}
	t0 = now_ns() - t0;
	posix_spawn_file_actions_destroy(&fa);
	return rc == 0 ? (int64_t)t0 : -1;
}

static double us(int64_t ns)
{
	return (double)ns / 1000.0;
}

/* Median and the 95% sign-test interval of sorted v[0..n). */
static void med_ci(const int64_t *v, int n, double *med, double *lo, double *hi)
{
	int k = (int)floor((n - 1.96 * sqrt((double)n)) / 2.0);

	if (k < 0)
		k = 0;
	*med = n % 2 ? us(v[n / 2]) : (us(v[n / 2 - 1]) + us(v[n / 2])) / 2;
	*lo = us(v[k]);
	*hi = us(v[n - 1 - k]);
}

/* Median and interval of the per-round differences a - b; prints one BENCH line. */
static void diff_line(int64_t *const *t, int a, int b, int reps, int64_t *d)
{
	double med, lo, hi;

	for (int r = 0; r < reps; r++)
		d[r] = t[a][r] - t[b][r];
	qsort(d, (size_t)reps, sizeof(*d), cmp_i64);
	med_ci(d, reps, &med, &lo, &hi);
	printf("BENCH bench=nocuda_diff variant=%s minus=%s reps=%d median_diff_us=%.1f "
	       "ci95_lo_us=%.1f ci95_hi_us=%.1f\n",
	       names[a], names[b], reps, med, lo, hi);
}

int main(int argc, char **argv)
{
	static char *default_prog[] = { "/bin/true", NULL };
	char **prog = default_prog, **env[NVARIANTS];
	int reps = 500, status, fd, bad = 0, nv = FLOOR;
	int64_t *t[NVARIANTS], *d;
	const char *lib, *floor_lib = NULL;
	uint64_t rng = 88172645463325252ull;
	char out[256];
	ssize_t got;
	int i = 2;

	if (argc < 2) {
		fprintf(stderr, "usage: nocuda_startup LIBGPUPOOL [--reps 500] [--floor LIB] [PROGRAM ARGS...]\n");
		return 2;
	}
	lib = argv[1];
	while (i + 1 < argc && argv[i][0] == '-') {
		if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--floor"))
			floor_lib = argv[i + 1];
		else
			break;
		i += 2;
	}
	if (i < argc)
		prog = &argv[i];
	if (reps < 20 || access(lib, R_OK) != 0 || (floor_lib && access(floor_lib, R_OK) != 0)) {
		fprintf(stderr, "nocuda_startup: need --reps >= 20 and readable libraries (%s)\n", lib);
		return 2;
	}
	env[PLAIN] = env[PLAIN2] = make_env(NULL);
	env[PRELOAD] = make_env(lib);
	env[FLOOR] = NULL;
	if (floor_lib) {
		env[FLOOR] = make_env(floor_lib);
		nv = NVARIANTS;
	}
	d = calloc((size_t)reps, sizeof(*d));
	for (int v = 0; v < NVARIANTS; v++)
		t[v] = calloc((size_t)reps, sizeof(*t[v]));
	fd = open("/dev/null", O_WRONLY);
	if (!env[PLAIN] || !env[PRELOAD] || (floor_lib && !env[FLOOR]) || !d || !t[0] || !t[1] ||
	    !t[2] || !t[3] || fd < 0)
		return 1;

	/* Does the preloaded program say anything, and exit as usual? */
	{
		char path[] = "/tmp/nocuda_startupXXXXXX";
		int ofd = mkstemp(path);
		if (ofd < 0 || spawn_once(prog, env[PRELOAD], ofd, &status) < 0) {
			fprintf(stderr, "nocuda_startup: cannot run %s\n", prog[0]);
			return 1;
		}
		got = pread(ofd, out, sizeof(out) - 1, 0);
		close(ofd);
		unlink(path);
		out[got > 0 ? got : 0] = '\0';
		printf("BENCH bench=nocuda_check program=%s exit=%d output_bytes=%zd\n", prog[0],
		       WIFEXITED(status) ? WEXITSTATUS(status) : -1, got);
		if (got > 0)
			printf("# the preloaded program wrote: %s\n", out);
	}
	for (int w = 0; w < 20; w++) /* warm the page cache and the loader */
		for (int v = 0; v < nv; v++)
			spawn_once(prog, env[v], fd, &status);
	for (int r = 0; r < reps; r++) {
		int order[NVARIANTS];
		for (int k = 0; k < nv; k++)
			order[k] = k;
		for (int k = nv - 1; k > 0; k--) { /* Fisher-Yates with xorshift64 */
			int j, tmp;
			rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
			j = (int)(rng % (uint64_t)(k + 1));
			tmp = order[k], order[k] = order[j], order[j] = tmp;
		}
		for (int k = 0; k < nv; k++) {
			int v = order[k];
			t[v][r] = spawn_once(prog, env[v], fd, &status);
			bad += t[v][r] < 0 || !WIFEXITED(status);
		}
	}
	if (bad)
		printf("# %d runs failed\n", bad);
	for (int v = 0; v < nv; v++) {
		double med, lo, hi;
		memcpy(d, t[v], (size_t)reps * sizeof(*d));
		qsort(d, (size_t)reps, sizeof(*d), cmp_i64);
		med_ci(d, reps, &med, &lo, &hi);
		printf("BENCH bench=nocuda variant=%s program=%s reps=%d median_us=%.1f p10_us=%.1f "
		       "p90_us=%.1f lib=%s\n",
		       names[v], prog[0], reps, med, us(d[reps / 10]), us(d[reps * 9 / 10]),
		       v == PRELOAD ? lib : v == FLOOR ? floor_lib : "-");
	}
	diff_line(t, PRELOAD, PLAIN, reps, d);
	diff_line(t, PLAIN2, PLAIN, reps, d);
	if (floor_lib) {
		diff_line(t, FLOOR, PLAIN, reps, d);
		diff_line(t, PRELOAD, FLOOR, reps, d);
	}
	return bad ? 1 : 0;
}
