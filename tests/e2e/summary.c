/* summary.c — proves what a process leaves at exit, watching a child that runs a known pattern
 * (16 allocations, 8 of them cache hits, 4 blocks still in use at exit): with GPUPOOL_LOG=info
 * its stderr ends with a one-screen summary whose every line has the `gpupool: ` prefix; with
 * GPUPOOL_STATS_FILE=<dir>/stats-%p.json the file is named after its pid and holds valid JSON
 * with the pattern's figures; while it runs its live view exists, and after exit it is gone;
 * with GPUPOOL_STATS_SHM=0 there is none; an unwritable stats file costs one error line and
 * changes nothing else. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "formatcheck.h"

#define SUMMARY_MARK "gpupool: info: statistics at exit:"

static int view_exists(long pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/dev/shm/gpupool.%ld", pid);
	return access(path, F_OK) == 0;
}

/* 8 x 2 MiB allocated and freed, 8 again (all hits), 4 freed. Exit 3 if the view is not as
 * `want_view` says. */
static int child(int want_view)
{
	void *p[8];

	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 8; i++)
			e2e_cuda(cudaMalloc(&p[i], 2 * E2E_MIB), "cudaMalloc");
		for (int i = 0; i < (round == 0 ? 8 : 4); i++)
			e2e_cuda(cudaFree(p[i]), "cudaFree");
	}
	if (view_exists((long)getpid()) != want_view) {
		fprintf(stderr, "child: the live view %s\n", want_view ? "is missing" : "exists");
		return 3;
	}
	return 0;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = calloc(1, 1 << 16);

	if (f == NULL || text == NULL)
		e2e_fail("cannot read %s", path);
	if (fread(text, 1, (1 << 16) - 1, f) == 0)
		e2e_fail("%s is empty", path);
	fclose(f);
	return text;
}

static void run(const char *const *args, const char *const *env, struct e2e_child *ch)
{
	char buf[128];

	if (e2e_run_self(args, env, 15000, ch) != 0)
		e2e_fail("could not start the child");
	if (ch->timed_out || !WIFEXITED(ch->status) || WEXITSTATUS(ch->status) != 0)
		e2e_fail("the child %s; its stderr: %.2000s", e2e_status_text(ch->status, buf, sizeof(buf)),
			 ch->err);
}

/* The one stats-<pid>.json in dir: its pid, and its path in path. */
static long find_stats(const char *dir, char *path, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	long pid = -1;

	while (d != NULL && (e = readdir(d)) != NULL)
		if (sscanf(e->d_name, "stats-%ld.json", &pid) == 1)
			break;
	if (d != NULL)
		closedir(d);
	if (pid < 0)
		e2e_fail("no stats-<pid>.json was written in %s", dir);
	snprintf(path, len, "%s/stats-%ld.json", dir, pid);
	return pid;
}

static void check_summary(const struct e2e_child *ch)
{
	const char *s = strstr(ch->err, SUMMARY_MARK), *l;
	int lines = 0, bad = 0;

	e2e_check(s != NULL, "GPUPOOL_LOG=info: the summary is on stderr");
	for (l = ch->err; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
		bad |= strncmp(l, "gpupool: ", 9) != 0;
		lines += l >= s;
	}
	printf("%s", s);
	e2e_check(!bad, "every line of stderr starts with \"gpupool: \"");
	e2e_check(lines < 40, "the summary fits one screen (%d lines)", lines);
	e2e_check(strstr(s, "hit rate") != NULL && strstr(s, "50.0%") != NULL &&
			  strstr(s, "cudaMalloc calls") != NULL,
		  "it shows the hit rate (50.0%%) and the cudaMalloc calls");
}

int main(int argc, char **argv)
{
	static const char *const args[] = { "--child", NULL };
	static const char *const args_noshm[] = { "--child-noshm", NULL };
	char dir[] = "/tmp/gpupool-e2e-summary-XXXXXX", file[256], path[300], err[256], env_file[300];
	const char *env[] = { "GPUPOOL_LOG=info", env_file, "GPUPOOL_STATS_SHM", NULL };
	const char *env_noshm[] = { "GPUPOOL_LOG", "GPUPOOL_STATS_FILE", "GPUPOOL_STATS_SHM=0", NULL };
	const char *env_bad[] = { "GPUPOOL_LOG", "GPUPOOL_STATS_FILE=/nonexistent-dir/x.json",
				  "GPUPOOL_STATS_SHM", NULL };
	struct e2e_child ch;
	char *json;
	long pid;

	if (argc > 1 && strcmp(argv[1], "--child") == 0)
		return child(1);
	if (argc > 1 && strcmp(argv[1], "--child-noshm") == 0)
		return child(0);
	e2e_start("e2e_summary");
	if (mkdtemp(dir) == NULL)
		e2e_fail("mkdtemp failed");
	snprintf(env_file, sizeof(env_file), "GPUPOOL_STATS_FILE=%s/stats-%%p.json", dir);
	run(args, env, &ch);
	e2e_note("the child saw its live view while it ran (its check: it exited 0)");
	check_summary(&ch);
	pid = find_stats(dir, file, sizeof(file));
	json = slurp(file);
	e2e_check(formatcheck_json(json, err, sizeof(err)) == 0, "%s is valid JSON%s%s", file,
		  *err ? ": " : "", err);
	snprintf(path, sizeof(path), "\"pid\":%ld,", pid);
	e2e_check(strstr(json, path) != NULL && strstr(json, "\"allocs\":16,") &&
			  strstr(json, "\"hits\":8,") && strstr(json, "\"real_mallocs\":8,") &&
			  strstr(json, "\"in_use_blocks\":4,") && strstr(json, "\"frees\":12,"),
		  "and holds the child's figures: its pid, 16 allocations, 8 hits, 8 cudaMalloc, 4 in use");
	e2e_check(!view_exists(pid), "the child's live view is gone after its exit");
	unlink(file);
	free(json);

	run(args_noshm, env_noshm, &ch);
	e2e_check(ch.err_len == 0, "GPUPOOL_STATS_SHM=0: no live view, and nothing on stderr");

	run(args, env_bad, &ch);
	e2e_check(strstr(ch.err, "GPUPOOL_STATS_FILE: cannot write /nonexistent-dir/x.json") != NULL &&
			  strchr(ch.err, '\n') == ch.err + ch.err_len - 1,
		  "an unwritable GPUPOOL_STATS_FILE: one error line, exit status 0 (\"%.200s\")", ch.err);
	rmdir(dir);
	printf("PASS e2e_summary\n");
	return 0;
}
