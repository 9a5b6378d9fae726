/* options.h — every GPUPOOL_* setting, in one table: name, type, default, one-line help.
 * Parsed once from the environment; a bad value gets one line naming the variable, the value
 * and the accepted form, and the default is used. The parser never aborts. */
#ifndef GPUPOOL_OPTIONS_H
#define GPUPOOL_OPTIONS_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

enum gp_opt_type {
	GP_OPT_BOOL,     /* 1/0, true/false, yes/no, on/off */
	GP_OPT_LEVEL,    /* error|warn|info|debug */
	GP_OPT_SIGNAL,   /* USR1, SIGUSR2, 10, none */
	GP_OPT_SIZE,     /* 512MiB, 2GB, 1.5GiB, 4096, 30% (of the device's memory), 0 = off */
	GP_OPT_DURATION, /* 250ms, 30s, 5min, 0 = off */
	GP_OPT_CHOICE,   /* one of the words of `accepts` ("a|b|c"), stored as its index */
	GP_OPT_PATH,     /* a file path ("%p" becomes the pid); "" or off = none */
	GP_OPT_RATIO,    /* 1, 1.5, 2x: from 1 to 4, stored as a whole percentage (int) */
};

#define GP_OPT_PATH_MAX 1024

enum gp_torch_mode { GP_TORCH_DEFAULT = 0, GP_TORCH_TAKEOVER };
enum gp_flush_mode { GP_FLUSH_AUTO = 0, GP_FLUSH_OFF };
enum gp_vmm_mode { GP_VMM_OFF = 0, GP_VMM_ON, GP_VMM_AUTO };

/* A size as given: bytes, or a share of the device's total memory. */
struct gp_size {
	uint64_t bytes;
	double percent; /* > 0: a share of the device's total memory, in percent */
};

struct gp_options {
	int log_level; /* enum gp_log_level */
	int signo;     /* 0 = no release signal */
	int disable;
	struct gp_size max_cached;      /* per device; 0 = no cap */
	uint64_t idle_timeout_ns;       /* 0 = off */
	struct gp_size min_free;        /* per device; 0 = off */
	uint64_t poll_interval_ns;
	uint64_t auto_suspend_ns;       /* GPUPOOL_AUTO_SUSPEND; 0 = off */
	int auto_suspend_copy;          /* GPUPOOL_AUTO_SUSPEND_COPY */
	uint64_t reuse_wait_ns;       /* GPUPOOL_REUSE_WAIT */
	uint64_t reuse_poll_ns;       /* GPUPOOL_REUSE_POLL */
	uint64_t reuse_age_ns;        /* GPUPOOL_REUSE_AGE */
	int oversize_pct;              /* GPUPOOL_OVERSIZE, percent */
	int vmm;                       /* GPUPOOL_VMM: enum gp_vmm_mode */
	uint64_t vmm_age_ns;           /* GPUPOOL_VMM_AGE */
	int vmm_trim;                  /* GPUPOOL_VMM_TRIM */
	struct gp_size thread_cache;   /* GPUPOOL_THREAD_CACHE: bytes per thread (no percentage) */
	int report_cached_as_free;
	int static_runtime;  /* GPUPOOL_STATIC_RUNTIME: patch a static runtime's entry points */
	int framework_flush; /* enum gp_flush_mode */
	int torch;           /* enum gp_torch_mode */
	int stats_shm;       /* publish the live view in /dev/shm */
	char stats_file[GP_OPT_PATH_MAX]; /* JSON statistics at exit; "" = none */
	char trace[GP_OPT_PATH_MAX];      /* allocation trace (CSV); "" = none */
};

struct gp_opt_def {
	const char *name;
	enum gp_opt_type type;
	const char *def;    /* default, in the variable's own syntax */
	const char *accepts; /* the accepted form, for messages and docs */
	const char *brief;   /* one short line: the README's table */
	const char *help;    /* what it does and when to use it: --help and docs/USAGE.md */
	size_t offset;       /* into struct gp_options */
	int nonzero;         /* durations: 0 is not allowed, nor below 1 ms */
};

const struct gp_opt_def *gp_opt_table(size_t *count);

/* Fill `o` from the environment. `warn` receives one line per bad value, and one per GPUPOOL_
 * variable that is not a setting but close to one (a misspelling, with the nearest name); may be
 * NULL. */
void gp_opt_load(struct gp_options *o, void (*warn)(const char *line));
/* For the library's constructor, which every process pays for, CUDA or not: parses the named
 * variables that are set (quietly; a bad value gives the table's default) and leaves every
 * other field as the caller set it, touching no parser for what is unset. The caller starts
 * from GP_OPT_EARLY_DEFAULTS; test_options checks it matches the table. */
void gp_opt_load_only(struct gp_options *o, const char *const *names, size_t n);
#define GP_OPT_EARLY_DEFAULTS                                                                      \
	{ .signo = SIGUSR1, .disable = 0, .torch = GP_TORCH_DEFAULT, .static_runtime = 1 }

/* Whether `value` is valid for option `d` (0) or not (-1); for the gpupool command. */
int gp_opt_check(const struct gp_opt_def *d, const char *value);

/* Parsers, exposed for tests. Return 0 on success, -1 on a bad value. */
int gp_opt_parse_bool(const char *s, int *out);
int gp_opt_parse_level(const char *s, int *out);
int gp_opt_parse_signal(const char *s, int *out);
int gp_opt_parse_size(const char *s, struct gp_size *out);
int gp_opt_parse_duration(const char *s, uint64_t *ns);
int gp_opt_parse_choice(const char *s, const char *choices, int *out);
int gp_opt_parse_ratio(const char *s, int *pct);
/* A size in bytes for a device with `total` bytes of memory. */
uint64_t gp_opt_size_bytes(const struct gp_size *s, uint64_t total);

#endif
