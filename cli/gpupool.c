/* gpupool.c — the gpupool command: run a program under the pool, and look at or act on the
 * processes that run under it, through their live views (stats/view.h). Links the stats layer
 * and the options table only: it never loads CUDA or the shim. */
#define _GNU_SOURCE
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void help(void)
{
	printf("gpupool %s: a caching GPU memory pool for unmodified CUDA programs\n\n"
	       "usage:\n"
	       "  gpupool run [--OPTION VALUE]... [--library PATH] [--] CMD [ARGS...]\n"
	       "      run CMD with libgpupool.so preloaded, the options as GPUPOOL_* variables\n"
	       "  gpupool release PID...|--all [--wait] [--timeout SECONDS]\n"
	       "      send the release signal; --wait: say what was released, and how fast\n"
	       "  gpupool stats PID...|--all [--json|--prometheus]\n"
	       "      the statistics of running processes, from their live views\n"
	       "  gpupool top [-d SECONDS] [-n FRAMES|--once]\n"
	       "      every process with a live view, one row per device, refreshed\n"
	       "  gpupool suspend PID... [--timeout SECONDS] [--no-release] [--force] [--json]\n"
	       "      take a whole CUDA process off the GPU (its memory parked in host memory)\n"
	       "  gpupool resume PID... [--json]\n"
	       "      give a suspended process its GPU memory back\n"
	       "  gpupool exporter [--listen HOST:PORT]\n"
	       "      serve /metrics (Prometheus) for every gpupool process of this machine\n"
	       "  gpupool version (also -V, --version)\n"
	       "      the version\n"
	       "  gpupool COMMAND --help\n"
	       "      what one command does and takes\n\n"
	       "exit status: 0 ok, 1 error or bad usage, 2 no such process, 3 not a gpupool\n"
	       "  process (suspend, resume: not a CUDA process), 4 permission denied, 5 stale\n"
	       "  view (removed), 6 timed out (no release reported, or not locked), 7 already\n"
	       "  or not suspended (release: suspended), or a graph capture in progress, 8 no\n"
	       "  driver with the checkpoint API, 9 not enough host memory\n\n",
	       GP_CLI_VERSION);
	gp_cli_options_help();
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	if (strcmp(cmd, "run") == 0)
		return gp_cli_run(argc - 1, argv + 1);
	if (strcmp(cmd, "release") == 0)
		return gp_cli_release(argc - 1, argv + 1);
	if (strcmp(cmd, "stats") == 0)
		return gp_cli_stats(argc - 1, argv + 1);
	if (strcmp(cmd, "top") == 0)
		return gp_cli_top(argc - 1, argv + 1);
	if (strcmp(cmd, "suspend") == 0)
		return gp_cli_suspend(argc - 1, argv + 1);
	if (strcmp(cmd, "resume") == 0)
		return gp_cli_resume(argc - 1, argv + 1);
	if (strcmp(cmd, "exporter") == 0)
		return gp_cli_exporter(argc - 1, argv + 1);
	if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0) {
		printf("gpupool %s\n", GP_CLI_VERSION);
		return GP_CLI_OK;
	}
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
		help();
		return GP_CLI_OK;
	}
	fprintf(stderr, "gpupool: %s%s\nusage: gpupool run|release|stats|top|suspend|resume|exporter ... (gpupool --help)\n",
		*cmd ? "unknown command: " : "no command given", cmd);
	return GP_CLI_ERROR;
}
