/* views.c — finding and reading other processes' live views for the subcommands, and turning
 * every way that can fail into one clear sentence: no such process, not a gpupool process,
 * permission denied, stale view (removed), not trusted, another version. Never writes a view
 * (a stale one is removed). */
#define _GNU_SOURCE
#include "cli.h"
#include "view.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

long gp_cli_pid(const char *arg)
{
	char *end;
	long pid;

	if (arg == NULL || *arg < '0' || *arg > '9')
		return -1;
	errno = 0;
	pid = strtol(arg, &end, 10);
	/* Beyond pid_t a number would wrap into another process's pid. */
	return *end == '\0' && errno == 0 && pid > 0 && pid <= INT_MAX ? pid : -1;
}

static const char *user_name(uid_t uid, char *buf, size_t len)
{
	struct passwd *pw = getpwuid(uid);

	if (pw != NULL)
		snprintf(buf, len, "%s", pw->pw_name);
	else
		snprintf(buf, len, "uid %u", (unsigned)uid);
	return buf;
}

static int process_exists(long pid)
{
	return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
}

static void say_forged(const char *cmd, const char *path, long pid)
{
	char proc[64], owner[64], runs_as[64];
	struct stat st, pst;

	snprintf(proc, sizeof(proc), "/proc/%ld", pid);
	if (stat(path, &st) != 0)
		st.st_uid = (uid_t)-1;
	if (stat(proc, &pst) != 0)
		pst.st_uid = (uid_t)-1;
	fprintf(stderr, "%s: %s is not trusted: it belongs to %s but process %ld runs as %s; ignored\n",
		cmd, path, user_name(st.st_uid, owner, sizeof(owner)), pid,
		user_name(pst.st_uid, runs_as, sizeof(runs_as)));
}

int gp_cli_read(const char *cmd, long pid, struct gp_stats_snapshot *out, int quiet)
{
	char path[64], owner[64];
	struct stat st;
	int rc;

	gp_stats_view_path(pid, path, sizeof(path));
	rc = gp_stats_view_read(path, out);
	switch (rc) {
	case GP_VIEW_OK:
		return GP_CLI_OK;
	case GP_VIEW_NONE:
		if (!process_exists(pid)) {
			if (!quiet)
				fprintf(stderr, "%s: no such process: %ld\n", cmd, pid);
			return GP_CLI_NO_PROCESS;
		}
		if (!quiet)
			fprintf(stderr,
				"%s: process %ld is not a gpupool process: it has no live view %s "
				"(not started under libgpupool.so, no CUDA call yet, or GPUPOOL_STATS_SHM=0)\n",
				cmd, pid, path);
		return GP_CLI_NOT_GPUPOOL;
	case GP_VIEW_DENIED:
		if (!process_exists(pid)) {
			if (!quiet)
				fprintf(stderr, "%s: stale view: process %ld has exited without removing "
						"%s (another user's: it cannot be removed by you)\n", cmd, pid, path);
			return GP_CLI_STALE;
		}
		if (!quiet) {
			if (stat(path, &st) == 0)
				user_name(st.st_uid, owner, sizeof(owner));
			else
				snprintf(owner, sizeof(owner), "another user");
			fprintf(stderr, "%s: permission denied: %s belongs to %s (mode 0600); run it as "
				"%s%s\n", cmd, path, owner, owner, strcmp(owner, "root") ? " or as root" : "");
		}
		return GP_CLI_DENIED;
	case GP_VIEW_STALE: {
		int removed = unlink(path) == 0;
		if (!quiet)
			fprintf(stderr, "%s: stale view: process %ld has exited without removing %s%s\n",
				cmd, pid, path,
				removed ? " (removed now)" : " (it could not be removed: not yours)");
		return GP_CLI_STALE;
	}
	case GP_VIEW_FORGED:
		if (!quiet)
			say_forged(cmd, path, pid);
		return GP_CLI_ERROR;
	case GP_VIEW_BAD:
		if (!quiet)
			fprintf(stderr,
				"%s: %s is not a live view this gpupool (view version %u) can read: "
				"is the process running another gpupool version?\n",
				cmd, path, GP_STATS_VIEW_VERSION);
		return GP_CLI_ERROR;
	case GP_VIEW_BUSY:
		if (!quiet)
			fprintf(stderr, "%s: %s: %s\n", cmd, path, gp_stats_view_rc_text(rc));
		return GP_CLI_ERROR;
	default:
		if (!quiet)
			fprintf(stderr, "%s: cannot read %s: %s\n", cmd, path, strerror(errno));
		return GP_CLI_ERROR;
	}
}

static int by_value(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;

	return x < y ? -1 : x > y;
}

long *gp_cli_list(size_t *n)
{
	size_t plen = strlen(GP_STATS_VIEW_PREFIX), cap = 0;
	DIR *dir = opendir(GP_STATS_VIEW_DIR);
	struct dirent *e;
	long *pids = NULL;

	*n = 0;
	if (dir == NULL)
		return NULL;
	while ((e = readdir(dir)) != NULL) {
		long pid;

		if (strncmp(e->d_name, GP_STATS_VIEW_PREFIX, plen) != 0 ||
		    (pid = gp_cli_pid(e->d_name + plen)) < 0)
			continue;
		if (*n == cap) {
			long *more = realloc(pids, (cap = cap ? cap * 2 : 16) * sizeof(*pids));
			if (more == NULL)
				break;
			pids = more;
		}
		pids[(*n)++] = pid;
	}
	closedir(dir);
	if (*n > 0)
		qsort(pids, *n, sizeof(*pids), by_value);
	return pids;
}

int gp_cli_targets(const char *cmd, int argc, char **argv, int all, long **out, size_t *n)
{
	long *pids;

	*out = NULL;
	*n = 0;
	if (all && optind < argc) {
		fprintf(stderr, "%s: --all and pids: give one or the other\n", cmd);
		return GP_CLI_ERROR;
	}
	if (!all && optind >= argc)
		return GP_CLI_ERROR;
	for (int i = optind; i < argc; i++) {
		if (gp_cli_pid(argv[i]) <= 0) {
			fprintf(stderr, "%s: not a pid: %s\n", cmd, argv[i]);
			return GP_CLI_ERROR;
		}
	}
	if (all) {
		*out = gp_cli_list(n);
		return GP_CLI_OK;
	}
	pids = calloc((size_t)(argc - optind), sizeof(*pids));
	if (pids == NULL)
		return GP_CLI_ERROR;
	for (int i = optind; i < argc; i++)
		pids[(*n)++] = gp_cli_pid(argv[i]);
	*out = pids;
	return GP_CLI_OK;
}
