/* options.c — the GPUPOOL_* table and its parsers. The README's variable table and
 * `gpupool --help` are checked against gp_opt_table(). Reads the environment with
 * secure_getenv (ignored in setuid programs); never logs itself: the caller decides. */
#define _GNU_SOURCE
#include "options.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OPT(field) offsetof(struct gp_options, field)

static const struct gp_opt_def table[] = {
	{ "GPUPOOL_LOG", GP_OPT_LEVEL, "error", "error|warn|info|debug",
	  "What the shim writes to stderr.",
	  "What the shim writes to stderr (one line per message, `gpupool:` prefix). `debug` adds a line for each real allocation the pool makes (its size: where a program's misses are).", OPT(log_level), 0 },
	{ "GPUPOOL_SIGNAL", GP_OPT_SIGNAL, "USR1",
	  "USR1, USR2, a real-time signal (RTMIN, RTMIN+3, RTMAX-1, SIGRTMIN+2, or its number), or none",
	  "The signal that gives idle GPU memory back.",
	  "The signal that makes the process give idle GPU memory back. A handler the process already has for it at start (one a parent ignored it with, too) is kept, and `gpupool release` asks through the live view instead.",
	  OPT(signo), 0 },
	{ "GPUPOOL_DISABLE", GP_OPT_BOOL, "0", "1|0|true|false|yes|no|on|off",
	  "Pass every call through, unpooled (for bisecting problems).",
	  "Pass every call straight through to the CUDA runtime (for bisecting problems).",
	  OPT(disable), 0 },
	{ "GPUPOOL_MAX_CACHED", GP_OPT_SIZE, "0",
	  "a size (512MiB, 2GB, 1.5GiB, bytes) or a percentage of the device's memory (30%); 0 = no cap",
	  "Per device: idle cached memory above this is given back, oldest first.",
	  "Per device: idle cached memory above this is released, oldest first (by the control "
	  "thread, and before a cudaMalloc that needs new memory).", OPT(max_cached), 0 },
	{ "GPUPOOL_IDLE_TIMEOUT", GP_OPT_DURATION, "0", "a duration (500ms, 30s, 5min); 0 = off",
	  "Give back blocks idle this long; everything once the process is idle.",
	  "A cached block unused for longer than this is released; once the whole process has allocated nothing for this long, PyTorch's and CuPy's own caches are flushed and everything cached goes.", OPT(idle_timeout_ns), 0 },
	{ "GPUPOOL_MIN_FREE", GP_OPT_SIZE, "0",
	  "a size (4GiB, 8GB, bytes) or a percentage of the device's memory (30%); 0 = off",
	  "Per device: give memory back while the device has less than this free.",
	  "Per device: while the device's free memory is below this, cached blocks are released, after flushing PyTorch's and CuPy's own caches (spaced out while the device stays short).",
	  OPT(min_free), 0 },
	{ "GPUPOOL_POLL_INTERVAL", GP_OPT_DURATION, "100ms", "a duration (50ms, 1s), at least 1ms",
	  "How often free device memory is checked for GPUPOOL_MIN_FREE.",
	  "How often free device memory is checked for GPUPOOL_MIN_FREE.", OPT(poll_interval_ns), 1 },
	{ "GPUPOOL_AUTO_SUSPEND", GP_OPT_DURATION, "0", "a duration (30s, 5min, 1h); 0 = off",
	  "Suspend the whole process after this long idle; its next CUDA call resumes it.",
	  "Once no CUDA call that does work (launches, copies, allocations, frees; queries do not count) has reached gpupool for this long, the GPU has no work of the process in flight and no graph capture is underway, the process gives its idle memory back and then suspends itself through the driver's checkpoint API (driver 570 or later): everything it holds on the device, its context included, goes to host memory and the GPU is free. The next CUDA call of any thread resumes it first and then returns what it would have. Not done while host memory is short, nor in a process that used managed memory or exported an IPC memory handle (the checkpoint API does not support them); each is said once.",
	  OPT(auto_suspend_ns), 0 },
	{ "GPUPOOL_AUTO_SUSPEND_COPY", GP_OPT_BOOL, "1", "1|0|true|false|yes|no|on|off",
	  "With GPUPOOL_VMM: VMM-backed blocks leave by gpupool's own copies, not the checkpoint API.",
	  "With GPUPOOL_AUTO_SUSPEND and GPUPOOL_VMM: the live blocks the pool backs with the virtual memory API leave the device by gpupool's own copies through a pinned staging ring made once (their addresses kept, their physical memory given back, mapped and copied back at the wake) before the checkpoint API parks the rest; 0 leaves them to the checkpoint API too.",
	  OPT(auto_suspend_copy), 0 },
	{ "GPUPOOL_REUSE_WAIT", GP_OPT_DURATION, "10ms", "a duration (20us, 1ms); 0 = do not wait",
	  "How long a miss waits for its size's fenced blocks before growing.",
	  "Once a stream exists, a freed block is reused only after the GPU work before its cudaFree is done; a cudaMalloc that finds only such blocks of its size (at least 2, and 64 MiB) waits this long for them before asking the driver for more memory.",
	  OPT(reuse_wait_ns), 0 },
	{ "GPUPOOL_REUSE_POLL", GP_OPT_DURATION, "0", "a duration (20us, 100us); 0 = one look",
	  "The same for sizes with few fenced blocks.",
	  "The same for a size with fewer such blocks: how long its cudaMalloc polls their fences before asking the driver (at most GPUPOOL_REUSE_WAIT). Matters with kernels running (on an idle GPU the fences are done at once): waiting lowers peak memory toward what the workload needs without kernels, for more time spent waiting. Set it where memory is tighter than time.",
	  OPT(reuse_poll_ns), 0 },
	{ "GPUPOOL_REUSE_AGE", GP_OPT_DURATION, "20us", "a duration (20us, 1ms); 0 = off",
	  "A miss above 1 MiB waits once its oldest fence is this old.",
	  "Such a size above 1 MiB waits as long as GPUPOOL_REUSE_WAIT all the same once the fence covering its oldest freed block was recorded at least this long ago: the GPU work queued after that fence keeps the GPU busy while the cudaMalloc waits (a wait for a fence just recorded lets it run dry), so the wait lowers the peak without idling the GPU.",
	  OPT(reuse_age_ns), 0 },
	{ "GPUPOOL_OVERSIZE", GP_OPT_RATIO, "2", "a number from 1 to 4 (1.5, 2); 1 = off",
	  "Above 1 MiB, a miss may take an idle block up to this many times larger.",
	  "Above 1 MiB, a cudaMalloc that would otherwise ask the driver for more memory may take an idle cached block up to this many times its size. Lowers peaks of workloads with many sizes, such as PyTorch in takeover mode; such a block stays in use, unreleasable, as long as the program holds it.",
	  OPT(oversize_pct), 0 },
	{ "GPUPOOL_VMM", GP_OPT_CHOICE, "off", "off|on|auto",
	  "Blocks above 1 MiB from the virtual memory API: idle memory serves every size.",
	  "on: blocks above 1 MiB are made with the driver's virtual memory API, in a few physical pieces, so idle memory cached under one size serves others: a cudaMalloc with no block of its size takes the end of a larger idle block where it lies (the rest stays cached), joins idle neighbours, or moves idle blocks of other sizes into its block before it asks for new memory; GPUPOOL_OVERSIZE then hands a larger block out whole only when no part of it will do. Less memory held by workloads with many sizes, for more time where sizes keep changing (every new size reshapes the cache). Legacy IPC handles (cudaIpcGetMemHandle) of such blocks are refused by the driver. auto: the same, but ordinary blocks in a PyTorch process that keeps its own cache (its default mode, where torch.multiprocessing shares tensors through IPC handles) and after the program first asks for an IPC handle (docs/DESIGN.md).",
	  OPT(vmm), 0 },
	{ "GPUPOOL_VMM_AGE", GP_OPT_DURATION, "0", "a duration (100ms, 1s); 0 = any idle block",
	  "With GPUPOOL_VMM: move or trim only blocks idle at least this long.",
	  "With GPUPOOL_VMM: only blocks idle for at least this long are moved into another size's block, or given back by GPUPOOL_VMM_TRIM (a size freed a moment ago is likely asked for again, and a cache hit costs less than a move or a new block).",
	  OPT(vmm_age_ns), 0 },
	{ "GPUPOOL_VMM_TRIM", GP_OPT_BOOL, "0", "1|0|true|false|yes|no|on|off",
	  "With GPUPOOL_VMM: give idle blocks of other sizes back before growing.",
	  "With GPUPOOL_VMM: a cudaMalloc that must still ask for new memory first gives back idle blocks of other sizes that could not serve it, as much as it asks for: the process holds about what it uses, at the price of new memory when those sizes come back. Blocks of 64 KiB to 1 MiB (real allocations of their own, which no other size can use) go only while the GPU is idle, as giving one back waits for the device; a miss of such a size gives back only such blocks, and one below 64 KiB none. Only blocks idle for GPUPOOL_VMM_AGE go: without it, a loop that asks for several sizes in turn gives back, at each miss, the block its next request needs. What the age kept from such a trim is given back once the process has allocated nothing for GPUPOOL_VMM_AGE, the blocks idle longest first; so is what the process holds beyond the most it asked for at once (requested bytes, not its blocks' rounded sizes) in its last two busy spells (from one such quiet moment to the next), when it asked the driver for memory in the last one.",
	  OPT(vmm_trim), 0 },
	{ "GPUPOOL_THREAD_CACHE", GP_OPT_SIZE, "64MiB", "a size (4MiB, 64MiB, bytes); 0 = off",
	  "Per thread: bytes of its freed blocks it keeps for its next cudaMalloc.",
	  "Per thread: while no stream has been created (reuse needs no fence), a block the thread frees stays in a cache of its own, up to this many bytes and 4 blocks of a size (a fuller size passes its oldest blocks to the shared cache), and its next cudaMalloc of that size takes it back with no lock; its cudaFree of a block its cache handed out takes no lock either (the first cudaFree by another thread of such a block costs one system call, once per cache). Releases take every thread's cache, a cudaMalloc about to ask the driver for more memory first takes what could serve it (its size, or a larger one GPUPOOL_OVERSIZE allows) from the threads' caches, and an exiting thread gives its cache back. A block's idle age counts from when it leaves the thread's cache (the free itself reads no clock): with GPUPOOL_IDLE_TIMEOUT, at most one idle check later (a quarter of the timeout, 1 s at most) than from its free. Needs Linux's membarrier (4.14 or later); without it, off.",
	  OPT(thread_cache), 0 },
	{ "GPUPOOL_STATIC_RUNTIME", GP_OPT_BOOL, "1", "1|0|true|false|yes|no|on|off",
	  "A static CUDA runtime's cudaMalloc/cudaFree come to the pool directly.",
	  "A program built with nvcc's default static CUDA runtime carries the runtime's cudaMalloc and cudaFree in its own code, where no preloaded library reaches them: at load, while the program has not started, gpupool finds them in the program's symbol table and makes their first instructions a jump to its own, so that a cached block costs what it costs through the shared runtime (the runtime's own function still runs for a thread's first call, NULL, several devices, pointers not the pool's and failures). x86-64 only; not in a stripped program, where its first instructions are not ones gpupool can move, nor where gpupool is loaded after a thread has run (said with GPUPOOL_LOG=info). 0: the program's code is left as it is, and its allocations come to the pool through the driver.",
	  OPT(static_runtime), 0 },
	{ "GPUPOOL_REPORT_CACHED_AS_FREE", GP_OPT_BOOL, "1", "1|0|true|false|yes|no|on|off",
	  "cudaMemGetInfo counts cached blocks as free.",
	  "cudaMemGetInfo counts this process's cached blocks as free (they are, for its next cudaMalloc).",
	  OPT(report_cached_as_free), 0 },
	{ "GPUPOOL_FRAMEWORK_FLUSH", GP_OPT_CHOICE, "auto", "auto|off",
	  "On a release, empty PyTorch's and CuPy's caches first.",
	  "On a release, first empty the caches of PyTorch and CuPy if the process runs them.",
	  OPT(framework_flush), 0 },
	{ "GPUPOOL_TORCH", GP_OPT_CHOICE, "default", "default|takeover",
	  "takeover: the pool is PyTorch's only cache.",
	  "takeover: set PYTORCH_NO_CUDA_MEMORY_CACHING=1 (unless set) so the pool is PyTorch's only cache.",
	  OPT(torch), 0 },
	{ "GPUPOOL_STATS_SHM", GP_OPT_BOOL, "1", "1|0|true|false|yes|no|on|off",
	  "Publish live statistics for gpupool stats and top.",
	  "Publish live statistics in `/dev/shm/gpupool.<pid>` (mode 0600) for `gpupool stats` and `gpupool top`.",
	  OPT(stats_shm), 0 },
	{ "GPUPOOL_STATS_FILE", GP_OPT_PATH, "off", "a file path (%p: the pid), or off",
	  "At exit, write the statistics to this file as JSON.",
	  "At exit, write the statistics to this file as JSON.", OPT(stats_file), 0 },
	{ "GPUPOOL_TRACE", GP_OPT_PATH, "off", "a file path (%p: the pid), or off",
	  "Write every allocation and free to this file (CSV).",
	  "Write every allocation and free to this file as CSV in RMM's log format; pool samples beside it (`x.csv` -> `x.pool.csv`).",
	  OPT(trace), 0 },
};

const struct gp_opt_def *gp_opt_table(size_t *count)
{
	*count = sizeof(table) / sizeof(table[0]);
	return table;
}

int gp_opt_parse_bool(const char *s, int *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return -1;
}

int gp_opt_parse_level(const char *s, int *out)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	for (int i = 0; i < 4; i++) {
		if (strcasecmp(s, names[i]) == 0) {
			*out = i;
			return 0;
		}
	}
	return -1;
}

/* A real-time signal by name: RTMIN, RTMAX, RTMIN+n, RTMAX-n ("SIG" already stripped). */
static int parse_rt(const char *s, int *out)
{
	long base, n = 0;
	char *end;

	if (strncasecmp(s, "RTMIN", 5) == 0)
		base = SIGRTMIN;
	else if (strncasecmp(s, "RTMAX", 5) == 0)
		base = SIGRTMAX;
	else
		return -1;
	s += 5;
	if (*s != '\0') {
		if ((*s != '+' || base != SIGRTMIN) && (*s != '-' || base != SIGRTMAX))
			return -1;
		if (s[1] < '0' || s[1] > '9')
			return -1;
		n = strtol(s + 1, &end, 10);
		if (*end != '\0' || n > SIGRTMAX - SIGRTMIN)
			return -1;
		if (*s == '-')
			n = -n;
	}
	*out = (int)(base + n);
	return 0;
}

/* Only signals that mean nothing to a program unless it says so: USR1, USR2 and the real-time
 * ones. Any other (TERM, SEGV, HUP...) has a meaning a handler of ours would take away: a
 * release handler on SIGSEGV turns a crash into a busy loop, one on SIGTERM makes every
 * preloaded process ignore it. */
int gp_opt_parse_signal(const char *s, int *out)
{
	char *end;
	long n;

	if (strcasecmp(s, "none") == 0 || strcmp(s, "0") == 0) {
		*out = 0;
		return 0;
	}
	n = strtol(s, &end, 10);
	if (*s != '\0' && *end == '\0') {
		if (n != SIGUSR1 && n != SIGUSR2 && (n < SIGRTMIN || n > SIGRTMAX))
			return -1;
		*out = (int)n;
		return 0;
	}
	if (strncasecmp(s, "SIG", 3) == 0)
		s += 3;
	if (strcasecmp(s, "USR1") == 0) {
		*out = SIGUSR1;
		return 0;
	}
	if (strcasecmp(s, "USR2") == 0) {
		*out = SIGUSR2;
		return 0;
	}
	return parse_rt(s, out);
}

/* A non-negative decimal with an optional fraction; *end is left after it. */
static int parse_number(const char *s, double *out, const char **end)
{
	double v = 0, scale = 1;
	int digits = 0;

	for (; *s >= '0' && *s <= '9'; s++, digits++)
		v = v * 10 + (*s - '0');
	if (*s == '.') {
		for (s++; *s >= '0' && *s <= '9'; s++, digits++) {
			scale /= 10;
			v += (*s - '0') * scale;
		}
	}
	*out = v;
	*end = s;
	return digits > 0 ? 0 : -1;
}

static const char *skip_space(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

struct unit {
	const char *name;
	double mult;
};

/* The multiplier of unit `u` (case aside, trailing blanks allowed), or 0 if it is not one. */
static double unit_mult(const struct unit *t, size_t n, const char *u)
{
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(t[i].name);
		if (strncasecmp(u, t[i].name, len) == 0 && *skip_space(u + len) == '\0')
			return t[i].mult;
	}
	return 0;
}

int gp_opt_parse_size(const char *s, struct gp_size *out)
{
	static const struct unit units[] = {
		{ "", 1 },	       { "B", 1 },	       { "K", 1e3 },
		{ "KB", 1e3 },	       { "M", 1e6 },	       { "MB", 1e6 },
		{ "G", 1e9 },	       { "GB", 1e9 },	       { "T", 1e12 },
		{ "TB", 1e12 },	       { "KiB", 1024.0 },      { "MiB", 1048576.0 },
		{ "GiB", 1073741824.0 }, { "TiB", 1099511627776.0 },
	};
	const char *u;
	double v, mult;

	if (parse_number(skip_space(s), &v, &u) != 0)
		return -1;
	u = skip_space(u);
	if (u[0] == '%' && *skip_space(u + 1) == '\0') {
		if (v > 100)
			return -1;
		out->bytes = 0;
		out->percent = v;
		return 0;
	}
	mult = unit_mult(units, sizeof(units) / sizeof(units[0]), u);
	if (mult == 0 || v * mult >= 18446744073709549568.0) /* the largest double below 2^64 */
		return -1;
	out->bytes = (uint64_t)(v * mult);
	out->percent = 0;
	return 0;
}

int gp_opt_parse_duration(const char *s, uint64_t *ns)
{
	static const struct unit units[] = { { "us", 1e3 }, { "ms", 1e6 }, { "s", 1e9 },
					     { "min", 60e9 } };
	const char *u;
	double v, mult;

	if (parse_number(skip_space(s), &v, &u) != 0)
		return -1;
	u = skip_space(u);
	if (*u == '\0' && v == 0) {
		*ns = 0;
		return 0;
	}
	mult = unit_mult(units, sizeof(units) / sizeof(units[0]), u);
	if (mult == 0 || v * mult >= 9.2e18)
		return -1;
	*ns = (uint64_t)(v * mult);
	return 0;
}

int gp_opt_parse_ratio(const char *s, int *pct)
{
	const char *end;
	double v;

	if (parse_number(skip_space(s), &v, &end) != 0)
		return -1;
	if (*end == 'x' || *end == 'X')
		end++;
	if (*skip_space(end) != '\0' || v < 1 || v > 4)
		return -1;
	*pct = (int)(v * 100 + 0.5);
	return 0;
}

int gp_opt_parse_choice(const char *s, const char *choices, int *out)
{
	size_t n = strlen(s);
	int i = 0;

	for (const char *c = choices; *c; i++) {
		const char *bar = strchr(c, '|');
		size_t len = bar ? (size_t)(bar - c) : strlen(c);
		if (n == len && n > 0 && strncasecmp(s, c, n) == 0) {
			*out = i;
			return 0;
		}
		c += len + (bar != NULL);
	}
	return -1;
}

uint64_t gp_opt_size_bytes(const struct gp_size *s, uint64_t total)
{
	if (s->percent > 0)
		return (uint64_t)((double)total * s->percent / 100.0);
	return s->bytes;
}

static int parse_path(const char *s, char *out)
{
	if (strlen(s) >= GP_OPT_PATH_MAX)
		return -1;
	strcpy(out, strcasecmp(s, "off") == 0 ? "" : s);
	return 0;
}

static int parse(const struct gp_opt_def *d, const char *s, struct gp_options *o)
{
	int *field = (int *)((char *)o + d->offset);

	switch (d->type) {
	case GP_OPT_BOOL:
		return gp_opt_parse_bool(s, field);
	case GP_OPT_LEVEL:
		return gp_opt_parse_level(s, field);
	case GP_OPT_SIGNAL:
		return gp_opt_parse_signal(s, field);
	case GP_OPT_SIZE:
		return gp_opt_parse_size(s, (struct gp_size *)(void *)field);
	case GP_OPT_CHOICE:
		return gp_opt_parse_choice(s, d->accepts, field);
	case GP_OPT_DURATION:
		if (gp_opt_parse_duration(s, (uint64_t *)(void *)field) != 0)
			return -1;
		return d->nonzero && *(uint64_t *)(void *)field < 1000000 ? -1 : 0;
	case GP_OPT_PATH:
		return parse_path(s, (char *)field);
	case GP_OPT_RATIO:
		return gp_opt_parse_ratio(s, field);
	}
	return -1;
}

int gp_opt_check(const struct gp_opt_def *d, const char *value)
{
	struct gp_options scratch;

	return parse(d, value, &scratch);
}

/* The variable's value from the environment, if set; a bad one gives the default, and `warn`
 * (may be NULL) a line naming the variable, the value and the accepted form. */
static void load_one(const struct gp_opt_def *d, struct gp_options *o,
		     void (*warn)(const char *line))
{
	const char *v = secure_getenv(d->name);
	char line[384];
	uint64_t ns;

	if (v == NULL || parse(d, v, o) == 0)
		return;
	parse(d, d->def, o);

	if (d->type == GP_OPT_DURATION && v[0] != '\0' && strspn(v, "0123456789.") == strlen(v) &&
	    gp_opt_parse_duration(v, &ns) != 0)
		snprintf(line, sizeof(line), "%s=%s is not valid: a duration needs its unit (500ms, "
			 "30s, 5min; accepted: %s); using %s", d->name, v, d->accepts, d->def);
	else
		snprintf(line, sizeof(line), "%s=%s is not valid (accepted: %s); using %s", d->name,
			 v, d->accepts, d->def);
	if (warn)
		warn(line);
}

/* Edits (insert, delete, replace one character) from a to b, case-insensitive; stops counting
 * past `limit` (returns limit + 1). Names are short: a row of the table on the stack. */
static size_t edit_distance(const char *a, const char *b, size_t limit)
{
	size_t la = strlen(a), lb = strlen(b), row[64], prev, cur;

	if (lb >= sizeof(row) / sizeof(row[0]) || (la > lb ? la - lb : lb - la) > limit)
		return limit + 1;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t best = row[0] = i;
		prev = i - 1;
		for (size_t j = 1; j <= lb; j++) {
			size_t sub = prev + ((a[i - 1] | 32) != (b[j - 1] | 32));
			cur = row[j] + 1 < row[j - 1] + 1 ? row[j] + 1 : row[j - 1] + 1;
			cur = sub < cur ? sub : cur;
			prev = row[j];
			row[j] = cur;
			best = cur < best ? cur : best;
		}
		if (best > limit)
			return limit + 1;
	}
	return row[lb];
}

/* A GPUPOOL_ variable close to a known name but not one (GPUPOOL_MAXCACHED): a misspelling that
 * would otherwise be ignored without a word. Names far from all (a script's GPUPOOL_BUILD_DIR)
 * are none of the library's business. */
static void warn_unknown(void (*warn)(const char *line))
{
	extern char **environ;
	char name[64], line[256];

	for (char **e = environ; e != NULL && *e != NULL; e++) {
		const char *eq = strchr(*e, '=');
		size_t n = eq ? (size_t)(eq - *e) : strlen(*e), best = SIZE_MAX, d;
		const char *nearest = NULL;

		if (n >= sizeof(name) || strncmp(*e, "GPUPOOL_", 8) != 0)
			continue;
		memcpy(name, *e, n);
		name[n] = '\0';
		for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
			if (strcmp(name, table[i].name) == 0) {
				nearest = NULL;
				best = 0;
				break;
			}
			d = edit_distance(name, table[i].name, 3);
			if (d < best) {
				best = d;
				nearest = table[i].name;
			}
		}
		if (nearest == NULL || best > 3)
			continue;
		snprintf(line, sizeof(line), "%s is not a gpupool setting (did you mean %s?); ignored",
			 name, nearest);
		warn(line);
	}
}

void gp_opt_load_only(struct gp_options *o, const char *const *names, size_t n)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		for (size_t k = 0; k < n; k++)
			if (strcmp(names[k], table[i].name) == 0)
				load_one(&table[i], o, NULL);
}

void gp_opt_load(struct gp_options *o, void (*warn)(const char *line))
{
	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		parse(&table[i], table[i].def, o); /* the default always parses */
		load_one(&table[i], o, warn);
	}
	if (warn != NULL)
		warn_unknown(warn);
}
