/* stats.h — every counter and gauge gpupool reports, written once as X-macro lists and expanded
 * into the snapshot struct, the reset, and the text, JSON and Prometheus renderings.
 * libc only: no CUDA, no environment, no logging. Renders from a plain snapshot; who fills it
 * (the shim, from the pool) and who reads it (the gpupool command, from the live view) is
 * not this layer's business. */
#ifndef GPUPOOL_STATS_H
#define GPUPOOL_STATS_H

#include <stddef.h>
#include <stdint.h>

#define GP_STATS_MAX_DEVICES 64
#define GP_STATS_CMD_MAX 256 /* bytes of the command line kept, with its NUL */

/* How a value is kept and shown. */
enum gp_stats_kind { GP_STATS_GAUGE, GP_STATS_COUNTER };
enum gp_stats_unit {
	GP_STATS_BYTES, /* bytes */
	GP_STATS_COUNT, /* a number of things */
	GP_STATS_NS,    /* a duration, ns */
	GP_STATS_TIME,  /* a moment, ns since the Unix epoch (0: never) */
	GP_STATS_CAUSE, /* an index into the release causes */
	GP_STATS_SBYTES, /* bytes, a signed 64-bit figure stored in the word (may be below 0) */
};

/* A figure nobody has measured (the NVML rows, until a reader fills them in): JSON null, no
 * Prometheus sample, "unknown" in the text. */
#define GP_STATS_UNKNOWN UINT64_MAX

/*
 * Per device. X(name, kind, unit, label, help): `name` is the struct field and the JSON key
 * (gpupool_<name>[_total] in Prometheus), `label` what the text shows, `help` one sentence.
 * Bytes are real block sizes (what the device is charged), except requested_bytes.
 */
#define GP_STATS_DEVICE(X)                                                                        \
	X(in_use_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "in use",                                \
	  "Bytes handed out to the program.")                                                      \
	X(in_use_blocks, GP_STATS_GAUGE, GP_STATS_COUNT, "  blocks",                              \
	  "Blocks handed out to the program.")                                                     \
	X(requested_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "  requested",                         \
	  "Bytes the program asked for, of those in use.")                                         \
	X(held_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "  held for graphs",                        \
	  "Of those in use, bytes freed during a CUDA graph capture, kept while its graphs live.") \
	X(idle_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "idle (cached)",                            \
	  "Bytes cached and ready for reuse.")                                                     \
	X(idle_blocks, GP_STATS_GAUGE, GP_STATS_COUNT, "  blocks", "Blocks cached and ready.")     \
	X(pending_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "pending",                               \
	  "Bytes freed by the program, cached until the GPU is done with them.")                   \
	X(pending_blocks, GP_STATS_GAUGE, GP_STATS_COUNT, "  blocks",                             \
	  "Blocks freed, waiting for the GPU.")                                                    \
	X(vmm_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "VMM-backed",                                \
	  "Of in use + idle + pending, bytes in blocks made with the virtual memory API (GPUPOOL_VMM).") \
	X(peak_in_use_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "peak in use",                       \
	  "Highest in-use bytes since start (threads: an upper bound, at most peak reserved).")    \
	X(peak_reserved_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "peak reserved",                   \
	  "Highest in use + idle + pending bytes since start.")                                    \
	X(allocs, GP_STATS_COUNTER, GP_STATS_COUNT, "allocations",                                \
	  "Successful allocations served by the pool.")                                            \
	X(hits, GP_STATS_COUNTER, GP_STATS_COUNT, "  cache hits",                                 \
	  "Allocations served from the cache, with no cudaMalloc.")                                \
	X(oversize_hits, GP_STATS_COUNTER, GP_STATS_COUNT, "    a larger class",                  \
	  "Cache hits served by a block of a larger size class (GPUPOOL_OVERSIZE).")               \
	X(splits, GP_STATS_COUNTER, GP_STATS_COUNT, "    part of a larger block",             \
	  "Cache hits served by the end of a larger idle block, the rest kept (GPUPOOL_VMM).")    \
	X(merges, GP_STATS_COUNTER, GP_STATS_COUNT, "    neighbours made one",                \
	  "Idle blocks side by side made one again for a larger request (GPUPOOL_VMM).")          \
	X(remaps, GP_STATS_COUNTER, GP_STATS_COUNT, "  remapped",                                \
	  "Misses served by moving idle blocks of other sizes into a new block (GPUPOOL_VMM).")   \
	X(remapped_bytes, GP_STATS_COUNTER, GP_STATS_BYTES, "    moved",                          \
	  "Bytes of idle blocks those moves reused instead of new memory.")                        \
	X(fence_waits, GP_STATS_COUNTER, GP_STATS_COUNT, "  waited for a fence",                  \
	  "Misses that waited for a freed block's GPU work to end (GPUPOOL_REUSE_WAIT).")          \
	X(fence_wait_timeouts, GP_STATS_COUNTER, GP_STATS_COUNT, "    gave up",                    \
	  "Of those, waits that ran out and made a real cudaMalloc instead.")                      \
	X(fence_joins, GP_STATS_COUNTER, GP_STATS_COUNT, "  fences joined on the GPU",          \
	  "Fences made a wait of the streams on the GPU (takeover mode): freed blocks reused at once.") \
	X(frees, GP_STATS_COUNTER, GP_STATS_COUNT, "frees", "Blocks the program freed.")          \
	X(thread_caches, GP_STATS_GAUGE, GP_STATS_COUNT, "threads' caches",                       \
	  "Threads holding a cache of their own freed blocks now (GPUPOOL_THREAD_CACHE).")        \
	X(thread_caches_shared, GP_STATS_GAUGE, GP_STATS_COUNT, "  shared",                       \
	  "Of those, caches whose blocks another thread has freed: their owner's frees take a locked instruction from then on.") \
	X(real_mallocs, GP_STATS_COUNTER, GP_STATS_COUNT, "cudaMalloc calls",                     \
	  "Real cudaMalloc calls that succeeded.")                                                 \
	X(real_frees, GP_STATS_COUNTER, GP_STATS_COUNT, "cudaFree calls",                         \
	  "Real cudaFree calls (blocks given back to the driver).")                                \
	X(trims, GP_STATS_COUNTER, GP_STATS_COUNT, "  to make room",                              \
	  "Of those, idle blocks of other sizes given back before the pool grew (GPUPOOL_VMM_TRIM).") \
	X(trimmed_bytes, GP_STATS_COUNTER, GP_STATS_BYTES, "    given back",                       \
	  "Bytes of the blocks given back to make room.")                                          \
	X(owed_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "    owed",                                  \
	  "Bytes GPUPOOL_VMM_AGE kept from those (blocks too young to go), given back once the process has allocated nothing for the age.") \
	X(failed_allocs, GP_STATS_COUNTER, GP_STATS_COUNT, "failed allocations",                  \
	  "Allocations that returned an error to the program.")                                   \
	X(oom_retries, GP_STATS_COUNTER, GP_STATS_COUNT, "OOM retries",                           \
	  "Allocations retried after the cache was released on out-of-memory.")                   \
	X(bad_frees, GP_STATS_COUNTER, GP_STATS_COUNT, "double frees",                            \
	  "Frees of a block that was not in use (refused, nothing changed).")                      \
	X(unseen_frees, GP_STATS_COUNTER, GP_STATS_COUNT, "freed unseen",                         \
	  "Blocks dropped because the driver handed their address out again: freed by a call gpupool did not see.")

/*
 * Per device: every byte the process holds on the device, line by line (the accounting table of
 * `gpupool stats`). With in_use_bytes, idle_bytes and pending_bytes above, these lines and
 * other_bytes (GP_STATS_NVML) add up to NVML's figure for the process. Filled by the shim:
 * framework_cached_bytes is inside in_use_bytes (not a line of its own); the passed_* lines are
 * memory the program got past the pool, counted as it passed the doors (live bytes now), except
 * passed_async_bytes, which the driver's default memory pool reports. X(name, kind, unit, label,
 * help) as above.
 */
#define GP_STATS_ACCOUNT(X)                                                                       \
	X(framework_cached_bytes, GP_STATS_GAUGE, GP_STATS_BYTES,                                 \
	  "  of which PyTorch/CuPy cache, unused",                                                \
	  "Of in use, bytes PyTorch's or CuPy's own cache holds and has not handed out (PyTorch: reserved minus allocated; CuPy: its default pool's free bytes, read on device 0).") \
	X(passed_vmm_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "VMM memory it maps itself",        \
	  "Bytes of physical memory the program made itself with the virtual memory API (cuMemCreate, until cuMemRelease): passed through.") \
	X(passed_async_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "cudaMallocAsync pool, reserved", \
	  "Bytes the device's default memory pool (cudaMallocAsync) reserves, as the driver reports them: passed through.") \
	X(passed_managed_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "managed memory",               \
	  "Bytes of managed memory live (cuMemAllocManaged), on the device current when allocated: passed through.") \
	X(passed_pitched_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "pitched memory",               \
	  "Bytes of pitched memory live (cuMemAllocPitch): passed through.")                     \
	X(passed_unpooled_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "cuMemAlloc, not pooled",     \
	  "Bytes of cuMemAlloc allocations live that the pool did not serve: made in a context of the program's own (or while the pool could not serve).")

/*
 * Per device, from NVML: filled by the reader (the gpupool command, which loads NVML), never by
 * the preloaded library; GP_STATS_UNKNOWN until then. other_bytes is NVML's figure for the
 * process minus every line above (gp_stats_account): the CUDA context (the code of the kernels
 * loaded, their local memory, the driver's structures), and whatever an estimated line missed.
 */
#define GP_STATS_NVML(X)                                                                          \
	X(other_bytes, GP_STATS_GAUGE, GP_STATS_SBYTES, "CUDA context, libraries (rest)",      \
	  "NVML's figure for the process minus every line gpupool counts: the CUDA context and the libraries' own memory.") \
	X(nvml_process_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "NVML: held by the process",      \
	  "Bytes NVML says the process holds on the device (what nvidia-smi shows).")            \
	X(nvml_used_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "NVML: device in use, all",          \
	  "Bytes in use on the device, by every process and the driver (NVML).")                \
	X(nvml_total_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "NVML: device total",               \
	  "The device's memory, bytes (NVML).")

/* The causes of a release, in the pool's order (enum gp_release_cause). */
#define GP_STATS_CAUSES(X) X(signal) X(cap) X(idle) X(pressure) X(oom) X(api)

/* Per process, one value per cause. X(name, kind, unit, label, help). */
#define GP_STATS_PER_CAUSE(X)                                                                     \
	X(releases, GP_STATS_COUNTER, GP_STATS_COUNT, "releases", "Releases done, by cause.")    \
	X(released_bytes, GP_STATS_COUNTER, GP_STATS_BYTES, "released",                           \
	  "Bytes given back to the driver, by cause.")

/* Per process: the last release. X(name, kind, unit, label, help). */
#define GP_STATS_PROCESS(X)                                                                       \
	X(release_count, GP_STATS_COUNTER, GP_STATS_COUNT, "releases reported",                   \
	  "Releases reported so far (the last one is described below).")                          \
	X(last_release_cause, GP_STATS_GAUGE, GP_STATS_CAUSE, "last release",                     \
	  "Why the last release ran.")                                                             \
	X(last_release_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "  released",                       \
	  "Bytes the last release gave back.")                                                     \
	X(last_release_blocks, GP_STATS_GAUGE, GP_STATS_COUNT, "  blocks",                        \
	  "Blocks the last release gave back.")                                                    \
	X(last_release_duration_ns, GP_STATS_GAUGE, GP_STATS_NS, "  took",                        \
	  "How long the last release took.")                                                       \
	X(last_release_time_ns, GP_STATS_GAUGE, GP_STATS_TIME, "  at",                            \
	  "When the last release ended.")

/* Per process: its state. Suspension is written into the live view by `gpupool suspend` and
 * `gpupool resume` (the suspended process cannot write it), captures by the process itself.
 * X(name, kind, unit, label, help). */
#define GP_STATS_STATE(X)                                                                         \
	X(suspended_since_ns, GP_STATS_GAUGE, GP_STATS_TIME, "suspended since",                   \
	  "When gpupool suspend, or the process itself (auto-suspend), checkpointed the process (0, null in JSON: running).") \
	X(parked_bytes, GP_STATS_GAUGE, GP_STATS_BYTES, "  parked",                               \
	  "Bytes of device memory the checkpoint moved to host memory (0 while running); suspended by itself: what it held on the device at the suspend (the pool's blocks and what passed the pool), its context not counted.") \
	X(captures, GP_STATS_GAUGE, GP_STATS_COUNT, "graph captures",                             \
	  "CUDA graph captures in progress (a suspend waits for none).")                          \
	X(framework_read_ns, GP_STATS_GAUGE, GP_STATS_TIME, "framework caches read",             \
	  "When PyTorch's and CuPy's caches were last read for framework_cached_bytes (0, null in JSON: no framework seen).") \
	X(self_suspended, GP_STATS_GAUGE, GP_STATS_COUNT, "  by itself",                         \
	  "1 while the process is suspended by itself (GPUPOOL_AUTO_SUSPEND): its next CUDA call resumes it; else 0.") \
	X(auto_suspend_ns, GP_STATS_GAUGE, GP_STATS_NS, "auto-suspend after",                     \
	  "GPUPOOL_AUTO_SUSPEND: how long the process stays idle before it suspends itself (0: off).") \
	X(suspends, GP_STATS_COUNTER, GP_STATS_COUNT, "  suspends",                               \
	  "Times the process suspended itself (GPUPOOL_AUTO_SUSPEND).")                           \
	X(resumes, GP_STATS_COUNTER, GP_STATS_COUNT, "  resumes",                                 \
	  "Times it resumed itself: at a CUDA call, or asked by gpupool resume.")                 \
	X(last_resume_duration_ns, GP_STATS_GAUGE, GP_STATS_NS, "  last resume took",            \
	  "How long its last resume took (restore and unlock; 0 before the first).")               \
	X(last_suspend_duration_ns, GP_STATS_GAUGE, GP_STATS_NS, "  last suspend took",          \
	  "How long its last suspend took, from the release to the end of the checkpoint (0 before the first).")

#define GP_STATS_COUNT_ONE(...) +1
enum {
	GP_STATS_NCAUSES = 0 GP_STATS_CAUSES(GP_STATS_COUNT_ONE),
	GP_STATS_NDEVICE_FIELDS = 0 GP_STATS_DEVICE(GP_STATS_COUNT_ONE),
	GP_STATS_NACCOUNT_FIELDS = 0 GP_STATS_ACCOUNT(GP_STATS_COUNT_ONE),
	GP_STATS_NNVML_FIELDS = 0 GP_STATS_NVML(GP_STATS_COUNT_ONE),
	GP_STATS_NPROCESS_FIELDS = 0 GP_STATS_PROCESS(GP_STATS_COUNT_ONE),
	GP_STATS_NSTATE_FIELDS = 0 GP_STATS_STATE(GP_STATS_COUNT_ONE),
};

#define GP_STATS_FIELD(name, ...) uint64_t name;
#define GP_STATS_ARRAY(name, ...) uint64_t name[GP_STATS_NCAUSES];

#define GP_STATS_UUID_MAX 48 /* bytes: "GPU-" and 36 characters, NUL-padded */

struct gp_stats_device {
	uint64_t device; /* the CUDA device ordinal */
	/* The device's UUID as NVML and nvidia-smi write it ("GPU-..."); empty when unknown. */
	char uuid[GP_STATS_UUID_MAX];
	GP_STATS_DEVICE(GP_STATS_FIELD)
	GP_STATS_ACCOUNT(GP_STATS_FIELD)
	GP_STATS_NVML(GP_STATS_FIELD) /* GP_STATS_UNKNOWN until a reader fills them */
};

/* Fixed-size, fixed-layout (all 64-bit words but the command): the live view stores it as is. */
struct gp_stats_snapshot {
	/* Who; set once when the process starts publishing. */
	int64_t pid;
	uint64_t uid;
	int64_t signo;      /* release signal, 0 = none */
	uint64_t start_ns;  /* Unix time, ns */
	uint64_t taken_ns;  /* Unix time, ns, when these figures were read */
	char cmd[GP_STATS_CMD_MAX]; /* command line, arguments separated by spaces */

	GP_STATS_STATE(GP_STATS_FIELD)
	GP_STATS_PROCESS(GP_STATS_FIELD)
	GP_STATS_PER_CAUSE(GP_STATS_ARRAY)
	uint64_t ndev; /* entries used in dev[] */
	struct gp_stats_device dev[GP_STATS_MAX_DEVICES];
};

/* Name of release cause i ("signal", ...), or "?" out of range. */
const char *gp_stats_cause_name(uint64_t i);

/* Zero every counter and gauge; who (pid, uid, signal, start, command) stays. */
void gp_stats_reset(struct gp_stats_snapshot *s);

/* The entry of device `device` in s->dev, added (zeroed) when absent and room is left. */
struct gp_stats_device *gp_stats_device_entry(struct gp_stats_snapshot *s, int device);

/* The program a command line runs: its first word's base name (after the last '/'), cut to fit
 * `len` bytes with the NUL, control characters shown as '?'. `gpupool top` shows it, and the
 * Prometheus rendering's gpupool_process_info carries it as `program`. */
void gp_stats_program_name(const char *cmdline, char *out, size_t len);
/* The bytes of the device's accounting lines gpupool counts itself: in use, idle, pending and
 * every passed_* line (framework_cached_bytes is inside in use). */
uint64_t gp_stats_accounted_bytes(const struct gp_stats_device *d);
/* After a reader set nvml_process_bytes: other_bytes = NVML's figure minus the lines gpupool
 * counts (as a signed figure: below 0 when an estimated line is too high), or GP_STATS_UNKNOWN
 * when NVML's figure is. */
void gp_stats_account(struct gp_stats_device *d);

/* Hit rate of a device in percent (0 when nothing was allocated). */
double gp_stats_hit_rate(const struct gp_stats_device *d);

/*
 * Renderings. Each writes at most `len` bytes (NUL included) into `buf` and returns the length
 * the full text has (like snprintf): a caller whose buffer was too small retries with more.
 * text: for people, one screen for a process with a few devices.
 * json: one object (gp_stats_json) or an array of them (n snapshots, gp_stats_json_many).
 * prometheus: the text exposition format (0.0.4), n processes, labels pid and device or cause;
 * who each process is in one info family joined on pid (gpupool_process_info: command, program,
 * signal, container) and each device's UUID in another (gpupool_device_info). `container`: n
 * container IDs, one per process ("" or NULL: none), or NULL when none is known.
 */
size_t gp_stats_text(const struct gp_stats_snapshot *s, char *buf, size_t len);
size_t gp_stats_json(const struct gp_stats_snapshot *s, char *buf, size_t len);
size_t gp_stats_json_many(const struct gp_stats_snapshot *s, size_t n, char *buf, size_t len);
size_t gp_stats_prometheus(const struct gp_stats_snapshot *s, size_t n, const char *const *container,
			   char *buf, size_t len);

/* The accounting table for people: one column per device, the lines that add up to NVML's
 * figure for the process (GP_STATS_ACCOUNT, GP_STATS_NVML), and what is unknown or estimated
 * said under it. Like the renderings above. */
size_t gp_stats_account_text(const struct gp_stats_snapshot *s, char *buf, size_t len);

/* "1.5 GiB", "512 B", "3.0 MiB": bytes for people, into buf. */
const char *gp_stats_human_bytes(uint64_t bytes, char *buf, size_t len);

#endif
