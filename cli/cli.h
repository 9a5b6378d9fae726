/* cli.h — the gpupool command's subcommands and what they share: finding and reading the live
 * views of other processes, and the exit codes every subcommand uses. */
#ifndef GPUPOOL_CLI_H
#define GPUPOOL_CLI_H

#include "stats.h"

#include <stddef.h>

/* Exit codes (also in `gpupool --help` and the README). */
enum gp_cli_exit {
	GP_CLI_OK = 0,
	GP_CLI_ERROR = 1,      /* bad usage, or another error */
	GP_CLI_NO_PROCESS = 2, /* no such process */
	GP_CLI_NOT_GPUPOOL = 3, /* the process has no live view */
	GP_CLI_DENIED = 4,     /* permission denied */
	GP_CLI_STALE = 5,      /* the view outlived its process (it is removed) */
	GP_CLI_TIMEOUT = 6,    /* no release reported in time, or suspend could not lock in time */
	GP_CLI_STATE = 7,      /* suspend/resume: already suspended, not suspended, or a graph
				* capture in progress; release: suspended */
	GP_CLI_UNSUPPORTED = 8, /* suspend/resume: no CUDA driver, or none with the checkpoint API */
	GP_CLI_NO_MEMORY = 9,  /* suspend: not enough host memory for the checkpoint */
};

int gp_cli_run(int argc, char **argv);
int gp_cli_release(int argc, char **argv);
int gp_cli_stats(int argc, char **argv);
int gp_cli_top(int argc, char **argv);
int gp_cli_suspend(int argc, char **argv);
int gp_cli_resume(int argc, char **argv);
int gp_cli_exporter(int argc, char **argv);
void gp_cli_options_help(void);

/* Ask process `pid`, whose view `s` was just read, for a release: through its view, then the
 * release signal the view names, if any. `quiet`: print nothing on success. Returns an exit code. */
int gp_cli_ask_release(const char *cmd, long pid, const struct gp_stats_snapshot *s, int quiet);
/* `gpupool stats PID` found no live view: say what the CUDA driver knows of the process
 * (suspended or not) on stdout. GP_CLI_OK when the driver answered. */
int gp_cli_driver_state(long pid);

/* Read the view of `pid`. On failure, says why on stderr (prefixed by `cmd`), removes a stale
 * view, and returns the exit code; GP_CLI_OK on success. `quiet`: say nothing. */
int gp_cli_read(const char *cmd, long pid, struct gp_stats_snapshot *out, int quiet);
/* The pids of every view in /dev/shm, sorted, in a malloc'd array (NULL when none). */
long *gp_cli_list(size_t *n);
/* A pid argument: digits only, > 0; -1 otherwise. */
long gp_cli_pid(const char *arg);
/* The pids named after the options (argv[optind..]), or with `all` those of every view: a
 * malloc'd array of *n (NULL when none). GP_CLI_ERROR after saying what is wrong (a bad pid,
 * pids with --all) or, when nothing is named and not `all`, silently: the caller shows its
 * usage either way. */
int gp_cli_targets(const char *cmd, int argc, char **argv, int all, long **out, size_t *n);

/* NVML's figures (cli/nvml.c) into the views read: each device found by its UUID, the
 * process's own figure, and the rest computed (gp_stats_account). Without NVML, or for a device
 * or process it does not know, those rows stay unknown; `say`: tell why on stderr. */
void gp_cli_account(struct gp_stats_snapshot *s, size_t n, int say);

/* The container a process runs in (container.c), from /proc/PID/cgroup: the 64 lowercase hex
 * characters of its ID, or "" when none is named there. */
#define GP_CLI_CONTAINER_ID_LEN 64
void gp_cli_container(long pid, char out[GP_CLI_CONTAINER_ID_LEN + 1]);
/* The same from the text of a cgroup file: 0 and the ID in out, or -1 and "". */
int gp_cli_container_parse(const char *cgroup, char out[GP_CLI_CONTAINER_ID_LEN + 1]);
/* The container of each of the n processes, for gp_stats_prometheus: one malloc'd block (free
 * it), or NULL when out of memory. */
const char **gp_cli_containers(const struct gp_stats_snapshot *s, size_t n);

/* One scrape of the node for the exporter (scrape.c): every live view this user may read, read
 * only (a stale view is skipped, never removed), with the node's and the exporter's own figures,
 * in Prometheus' text format. The scraper keeps the counters between scrapes; scrapes run one at
 * a time (a lock inside). */
struct gp_cli_scraper;
struct gp_cli_scraper *gp_cli_scraper_new(void);
void gp_cli_scraper_free(struct gp_cli_scraper *sc);
/* NULL when NVML loaded (each device's memory is in every scrape); otherwise why not. */
const char *gp_cli_scraper_nvml(const struct gp_cli_scraper *sc);
/* The text of one scrape, malloc'd, its length in *len; NULL when out of memory. */
char *gp_cli_scrape(struct gp_cli_scraper *sc, size_t *len);

/* The exporter's HTTP server (http.c, GNU libmicrohttpd; http_none.c in a build without it):
 * GET and HEAD of /metrics (and of / for a pointer to it); 404 for any other path, 405 for any
 * other method. */
struct gp_cli_http_conf {
	int fd;                   /* bound and listening; the server closes it when stopped */
	unsigned timeout_s;       /* a connection that sends or takes nothing this long is closed */
	unsigned max_connections; /* connections served at once; more wait, unaccepted */
	char *(*metrics)(void *arg, size_t *len); /* /metrics' body, malloc'd (NULL: answer 500) */
	void *arg;
};
struct gp_cli_http;
/* NULL in a build that serves HTTP; otherwise why it does not, in one sentence. */
const char *gp_cli_http_missing(void);
/* Serve from a thread of the server's own until stopped; NULL after saying why on stderr. */
struct gp_cli_http *gp_cli_http_start(const struct gp_cli_http_conf *c);
void gp_cli_http_stop(struct gp_cli_http *h);

/* Option values (args.c): 0, or -1 after saying on stderr which option and value are wrong. */
int gp_cli_seconds(const char *cmd, const char *opt, const char *val, double *out);
int gp_cli_count(const char *cmd, const char *opt, const char *val, long *out);
/* getopt_long returned '?' or ':' (optstring starting with ':'): say which option, return 1. */
int gp_cli_bad_option(const char *cmd, char **argv, int c);
/* Print `text` wrapped to 80 columns, each line starting with `indent`. */
void gp_cli_wrap(const char *indent, const char *text);

#endif
