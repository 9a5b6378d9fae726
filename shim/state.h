/* state.h — the shim's mutable state in one place: gp_shim, one part per concern, named after it.
 * Each field says which file writes it and under which lock or in which order, and its unit. A
 * part belongs to its files: the others reach it through that part's functions (its header),
 * never through its fields, except where a field says so (the inline reads of the hot path in
 * shim.h and trace.h). Types private to a file (fence.c's streams and events, graphs.c's holds,
 * trace.c's records and rings) stay in it: the state holds pointers to them.
 *
 * What stays outside gp_shim, on purpose:
 *  - gp_shim_early (below): what the constructor and the signal handler touch, kept apart so that
 *    a process that never uses CUDA pays no page fault for it.
 *  - Thread-local variables (gp_shim_in_real, shim.c's in_init and a thread's first runtime call,
 *    the backend's last error, trace.c's ring of the thread): one per thread, not per process.
 *  - gp_cu and gp_real (door/lookup.h) and framework.c's table of Python's functions: tables
 *    of real functions, found once, not state. So are the gate's stubs and their entries
 *    (door/stubs.c, door/named.c), which the assembler names; gp_gate_closed (door/gate.h)
 *    stands alone, for the stubs to load it in one instruction.
 *  - log.c's level: log.c is also linked without the shim (the options' tests and fuzzer, the
 *    README check), where there is no gp_shim. */
#ifndef GPUPOOL_STATE_H
#define GPUPOOL_STATE_H

#include "options.h"
#include "pool.h"
#include "stats.h"

#include <cuda.h>
#include <linux/limits.h> /* PATH_MAX, also for files compiled without _GNU_SOURCE */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

/* Bytes: each part starts a cache line of its own, so that a lock taken often in one (the fence
 * registry's, the trace flusher's) never shares a line with what the hot path reads in another. */
#define GP_SHIM_LINE 64
#define GP_CAPTURE_MAX 64  /* captures tracked at once (capture.c) */
#define GP_CTX_MAX_USER 64 /* program-created contexts tracked; beyond, every context counts */
#define GP_WORK_SLOTS 64   /* counters of work on created streams, by stream (fence.c) */

struct gp_stats_view;
struct stream_ent; /* fence.c */
struct ev;         /* fence.c */
struct hold;       /* graphs.c */
struct owner;      /* graphs.c */
struct ring;       /* trace.c */
struct rec;        /* trace.c */

/* shim.c: initialisation, and what both doors' entry points share. The first six fields are read
 * on the allocation and free paths (shim.h, shim.c). */
struct gp_shim_life {
	/* enum gp_state. Written by init under init_lock (a release store), by the constructor
	 * (GPUPOOL_DISABLE) and in a fork's child; gp_shim_active reads it with acquire. */
	_Atomic int state;
	/* Written once by init under init_lock, before state becomes GP_ACTIVE; any file of the
	 * shim reads it once gp_shim_active() said so (door/runtime.c, graphs.c). */
	struct gp_pool *pool;
	/* 1 for good once the program made a context of its own or the door went blind (any
	 * thread); relaxed: gp_shim_pooling then asks the slow way. */
	_Atomic int driver_caution;
	/* The driver door cannot vouch for what it hands out (gp_shim_door_blind: door/handout.c
	 * tells, shim.c decides): set once, read relaxed by gp_shim_driver_pooling_slow. */
	_Atomic int door_blind;
	/* One visible device (the current device is always 0): set once by init; relaxed, as the
	 * tracking paths may read it while another thread initialises (0 only costs a call). */
	_Atomic int single_device;
	_Atomic uint64_t seen_devices;   /* devices used so far: fetch_or by any thread */
	_Atomic uint64_t policy_devices; /* devices the policy was told of: fetch_or, once each */
	/* Work left one stream order before the pool existed (a stream created first), and the
	 * pool once it does: whichever of the two is written second sees the other. Cleared by
	 * unordered() (any thread); pool_made stored by init. */
	_Atomic int ordered_from_start;
	_Atomic(struct gp_pool *) pool_made;
	_Atomic int said_unordered;    /* unordered() said so: exchange, once */
	_Atomic int said_vmm;          /* gp_shim_vmm_seen said so: exchange, once */
	_Atomic int said_ipc;          /* gp_shim_ipc_seen said so: exchange, once */
	_Atomic int said_stale;        /* stale_block said so: exchange, once */
	_Atomic int atfork_set;        /* init_locked registered its fork handler (it may run twice) */
	_Atomic int per_thread_stream; /* a per-thread default stream was used: exchange, once */
	_Atomic int said_streams;      /* streams created so far that were named at info: add */
	pthread_mutex_t init_lock;     /* one initialisation */
	/* Read from the environment by init under init_lock; read only after (add_cached). */
	struct gp_options opts;
};

/* door/handout.c and door/lookup.c: the driver door, the real driver's table being filled, the
 * dlsym behind ours. gp_door_route reads some of it for every dlsym of the process, also while a
 * sanitizer's runtime initialises: atomics or __atomic builtins there, no lock. (lookup.c's
 * constructed flag is in gp_shim_early: the constructor writes it.) */
struct gp_shim_door {
	/* handout.c: a lookup returned a driver function we could not match (set once, exchange);
	 * read relaxed by every runtime-door allocation and by gp_shim_driver_pooling_slow. */
	_Atomic int blind;
	_Atomic int seen; /* handout.c: someone looked the driver up through us; relaxed */
	/* lookup.c: gp_cu is filled. Stored (release) under resolve_lock; read with acquire
	 * first. */
	_Atomic int resolved;
	pthread_mutex_t resolve_lock; /* lookup.c: one resolution of gp_cu at a time */
	/* lookup.c: the next dlsym after ours (another hook's, or libc's), found once our
	 * constructor ran; __atomic release/acquire, no lock (two racing threads find the same
	 * one). */
	void *real_dlsym;
	/* lookup.c: this library's address range; __atomic: self_lo (relaxed) then self_hi
	 * (release), not 0 once found (two racing threads find the same range). */
	uintptr_t self_lo, self_hi;
	_Atomic int said_missing; /* lookup.c: "not found in the driver" said (gp_log_capped) */
};

/* ctx.c: the devices' primary contexts and the program's own contexts. */
struct gp_shim_ctx {
	/* Each device's primary context, noted by any thread (release), NULL after a reset. */
	_Atomic(CUcontext) primary[GP_MAX_DEVICES];
	/* Entries of user[]: changed under user_lock; read relaxed without it to skip the lock
	 * while the program has none. */
	_Atomic int nuser;
	/* More than GP_CTX_MAX_USER at once: every context counts as the program's (set under
	 * user_lock, for good). */
	_Atomic int user_overflow;
	pthread_mutex_t user_lock; /* serialises the changes of user[] and nuser */
	/* The program's own contexts, [0, nuser): written under user_lock, read without it (an
	 * allocation must not wait for a lock): a destroy moves the last entry into the hole before
	 * nuser shrinks, so a reader never misses a live context. */
	_Atomic(CUcontext) user[GP_CTX_MAX_USER];
};

/* fence.c: the stream registry and the events fences are made of. Under lock, but the atomics;
 * lock is also held while events are recorded on the streams (fence.c says why). */
struct gp_shim_fence {
	pthread_mutex_t lock;       /* the registry's */
	struct stream_ent *streams; /* streams the program created; lock */
	int nstreams;               /* entries; lock */
	size_t capstreams;          /* room (gp_grow); lock */
	struct ev *retired; /* last events of destroyed streams, not yet in a fence; lock */
	int nretired;             /* entries; lock */
	size_t capretired;        /* room (gp_grow); lock */
	struct ev *spare;         /* recycled events; lock */
	int nspare;               /* entries; lock */
	size_t capspare;          /* room (gp_grow); lock */
	_Atomic uint64_t devmask; /* devices in use: fetch_or by any thread, never cleared */
	/* Primary-context resets per device: added under lock, read relaxed by anyone. */
	_Atomic unsigned resets[GP_MAX_DEVICES];
	/* A stream is missing from the registry: no fence can be trusted (for good, exchange). */
	_Atomic int blind;
	/* Work was queued on a legacy or per-thread default stream since the last fence that
	 * recorded on the legacy streams: set (relaxed, only when 0) by any thread after the work
	 * was queued (gp_fence_note_legacy_work, from the doors' work entry points), exchanged to 0
	 * by the fence that records there. */
	_Atomic int legacy_used;
	_Atomic int said_legacy; /* gp_fence_note_legacy_work said so at debug level: once */
	/* Devices with work of a stream destroyed while it was itself being captured, covered by no
	 * event: fetch_or by the destroy, exchanged by the next fence, which waits for the device. */
	_Atomic uint64_t unfenced;
	_Atomic int warned_query; /* cuEventQuery failures said (gp_log_capped) */
	/* gp_fence_join: allowed (takeover mode: set by init), and joins made (any thread). */
	int join_on;
	_Atomic uint64_t joins;
	/* A stream was destroyed: its last event went into a fence (retire), which a join does not
	 * cover while that fence is in flight. Set under lock, for good. */
	_Atomic int retired_ever;
	/* The last join's event (on the legacy stream, kept recorded): a stream created during a
	 * capture, when the legacy stream may not be touched, waits for it instead. lock. */
	struct ev *join_ev;
	/* Work queued on streams other than the default ones, counted by slot (the stream's address
	 * hashed; streams may share one): added by any thread after the work was queued
	 * (gp_fence_note_stream_work, from the doors' work entry points), read by a join. Each on a
	 * line of its own: every launch on such a stream adds to one. */
	struct {
		_Alignas(GP_SHIM_LINE) _Atomic uint64_t n;
	} work[GP_WORK_SLOTS];
};

/* capture.c: the streams being captured into a graph. */
struct gp_shim_capture {
	/* Captures tracked: stored under lock; read without it by every free (capture_active). */
	_Atomic int n;
	pthread_mutex_t lock;             /* serialises begins and ends */
	CUstream streams[GP_CAPTURE_MAX]; /* [0, n); lock */
	/* Driver calls inside the gate (capture.h): added and taken off by the callers (fences,
	 * real frees; sequentially consistent, against n), waited to 0 by a begin. On a line of its
	 * own: every free reads n. */
	_Alignas(GP_SHIM_LINE) _Atomic int gate;
};

/* graphs.c: blocks freed during a capture, held for the graphs made from it. */
struct gp_shim_graphs {
	pthread_mutex_t lock; /* guards the holds, their blocks and the owners */
	struct hold *holds;   /* every hold not yet given to the pool; lock */
	struct hold *cur;     /* the open one, while captures are underway; lock */
	struct owner *owners; /* graph and executable-graph handles, and the hold each uses; lock */
	int nowners;            /* entries; lock */
	size_t capowners;       /* room (gp_grow); lock */
	/* nowners != 0: stored under lock; read without it, to skip the lock while none. */
	_Atomic int any_owner;
	_Atomic int said_no_memory;   /* "stays allocated for good" said (gp_log_capped) */
};

/* control.c: requests for releases, and the control thread that carries them out (the fields
 * the signal handler touches are in gp_shim_early). */
struct gp_shim_control {
	_Atomic int requested;  /* gp_control_request (any thread); exchanged by the thread */
	/* The free path went over a cap: set by it, cleared by the control thread. */
	_Atomic int policy_due;
	_Atomic int started;    /* gp_control_start ran (exchange); 0 again in a fork's child */
	_Atomic int stopping;   /* set at exit: the control thread ends at its next wake */
	_Atomic int releasing;  /* releases in progress (any thread); exit waits for 0 */
	/* Devices whose cache went over the cap: fetch_or by the free path, exchanged to 0 by the
	 * control thread. */
	_Atomic uint64_t over_cap;
	/* One release at a time (signal, policy, idle, gpupool_release): a release asked for while
	 * another one frees the blocks it took returns after them, so that its caller finds the
	 * memory back. Never held while waiting for a framework's lock (the GIL): the flush comes
	 * first. Initialised again in a fork's child. */
	pthread_mutex_t release_lock;
	/* Written by gp_control_start before it creates the thread (pthread_create orders it). */
	struct gp_pool *pool;
	int flush_frameworks; /* gp_control_configure, at init before the start; read only after */
	pthread_t thread;     /* the control thread, written by gp_control_start; read by release */
	/* The program replaced our handler of the release signal: set once by the thread. */
	int handler_lost;
	_Atomic int said_kept; /* gp_control_signal said the signal's own disposition was kept */
	/* A device owes a trim (gp_control_owed, any thread); exchanged by the thread when it pays.
	 * owed_allocs, owed_since: the pool's allocation count the thread last saw and since when
	 * (the thread's only). */
	_Atomic int owed;
	uint64_t owed_allocs, owed_since;
};

/* policy.c: the release policies. Written by gp_policy_init before the control thread starts,
 * then by that thread only; seen and min_free by gp_policy_device_seen (any thread, once per
 * device: min_free before seen). */
struct gp_shim_policy {
	struct gp_pool *pool;
	struct gp_options opt;
	_Atomic uint64_t seen;               /* devices in use */
	uint64_t min_free[GP_MAX_DEVICES];   /* bytes */
	uint64_t last_idle_check, last_poll; /* ns */
	uint64_t pool_allocs, fw_activity;   /* as last seen */
	uint64_t active_ns;                  /* ns: when the process was last seen allocating */
	uint64_t last_flush_ns, flush_gap_ns; /* ns: pressure flushes */
	int quiet_since_flush;               /* a poll since the last flush found no device short */
};

/* observe.c, and publish.c (the live view, last). gp_obs_start writes the settings during init,
 * before the control thread starts; publish_lock serialises the publishers after that (the
 * control thread, a gpupool_release caller, exit). */
struct gp_shim_obs {
	struct gp_pool *pool; /* set at start */
	pid_t owner;          /* the process that started; 0: not started (a fork's child is not) */
	/* The trace, the live view, are on: set at start, cleared at exit under publish_lock. */
	_Atomic int tracing, viewing;
	uint64_t period_ns;    /* ns: how often the control thread publishes; set at start */
	uint64_t last_tick_ns; /* ns: the last tick that published; control thread only */
	/* The pool's allocations and frees, all devices, at the last publish (publish_lock), and
	 * whether that publish found blocks pending with none made or freed since the one before:
	 * the fences then want driving for the view (observe.c gp_obs_unsettled). */
	uint64_t last_activity;
	_Atomic int unsettled;
	char stats_file[GP_OPT_PATH_MAX + PATH_MAX]; /* GPUPOOL_STATS_FILE expanded; at start */
	_Atomic uint64_t oom_retries[GP_MAX_DEVICES]; /* relaxed adds by the allocating threads */
	pthread_mutex_t publish_lock; /* serialises the publishers (above) */
	struct gp_stats_snapshot who;     /* pid, uid, signal, start, command: set at start */
	struct gp_stats_snapshot scratch; /* the figures being published (large: off the stacks) */
	/* The last release, under publish_lock: how many so far, cause, bytes, blocks, how long it
	 * took (ns) and when it ended (CLOCK_REALTIME, ns). */
	uint64_t last_count, last_cause, last_bytes, last_blocks, last_ns, last_at;
	/* Each device's UUID, asked once (observe.c device_uuid); publish_lock. */
	char uuid[GP_MAX_DEVICES][GP_STATS_UUID_MAX];
	unsigned char uuid_tried[GP_MAX_DEVICES];
	/* publish.c: /dev/shm/gpupool.<pid> mapped (NULL: none) and its path; callers serialise. */
	struct gp_stats_view *view;
	char view_path[64];
};

/* trace.c: GPUPOOL_TRACE. The producers (every allocating thread) touch on, rings, lost and
 * waker (and their own rings); the rest is the flusher's. */
struct gp_ptrmap;

struct gp_shim_trace {
	/* Recording: set by gp_trace_start, cleared by gp_trace_stop (flush_lock held); read
	 * relaxed inline by every allocation and free (trace.h). */
	_Atomic int on;
	_Atomic(struct ring *) rings; /* every ring: pushed by CAS, never removed */
	/* Records dropped (no ring memory, or written after the end): relaxed adds by anyone. */
	_Atomic uint64_t lost;
	void (*waker)(void); /* wakes the flusher; set by gp_trace_start, before on */
	pthread_key_t owner_key; /* made by gp_trace_start: a thread's exit disowns its ring */
	/* The flusher's (the control thread, or a thread whose ring is full), under flush_lock. */
	pthread_mutex_t flush_lock;
	int fd;        /* the CSV; -1: not open */
	FILE *samples; /* the pool samples' file; NULL: none */
	int64_t wall_offset; /* ns: CLOCK_REALTIME - CLOCK_MONOTONIC */
	/* The records being written: runs, each in time order (what was held back from the last
	 * flush, then one per ring), merged in place with spare. */
	struct rec *batch, *spare;
	size_t batch_cap, held; /* records; batch[0, held): held back by the last flush */
	size_t *runs, runs_cap, nruns; /* start of each run; runs[nruns] = the end */
	/* Formatted rows (OUT_BYTES), allocated when tracing starts: as an array in here its
	 * 1 MiB would cost every process the library is preloaded into, tracing or not. */
	char *out;
	size_t out_n; /* bytes */
	time_t shown_sec;   /* the second whose local time is in shown_hms; -1: none yet */
	char shown_hms[16];
	/* pointer -> bytes asked for, of the live allocations seen so far (trace.c: the pool's
	 * pointer map, the size stored in place of a pointer); made by gp_trace_start, kept for
	 * the process's life */
	struct gp_ptrmap *sizes;
};

/* vmm.c: blocks made with the driver's virtual memory API (GPUPOOL_VMM). */
struct gp_vmm_block;
struct gp_vmm_dev {
	int known;        /* 1: looked at; stored last (release), read first (acquire) */
	int usable;       /* the device supports the API, with 2 MiB granules */
	int rdma;         /* ... and GPUDirect RDMA on such memory */
	int npeers;
	int peer[GP_MAX_DEVICES]; /* devices that can access this one's memory */
};
struct gp_shim_vmm {
	/* 1 while new blocks above 1 MiB are made with the API: set by init (GPUPOOL_VMM on or
	 * auto), cleared for good at the first IPC call in auto mode or when a call of the API
	 * fails for a reason other than memory (any thread; relaxed: one more legacy or VMM block
	 * is harmless). */
	_Atomic int on;
	_Atomic int said_broken, said_ipc; /* exchange, once each */
	_Atomic int said_release; /* gp_vmm_evict said a release failed: exchange, once */
	pthread_mutex_t lock; /* the registry and dev[]; never held across a driver call */
	/* base address -> block, chained; allocated by the first block (release store under lock;
	 * an acquire load of NULL without it: no block was ever made) */
	struct gp_vmm_block **bucket;
	size_t count;
	struct gp_vmm_dev dev[GP_MAX_DEVICES];
};

/* park_vmm.c: the fast park of VMM-backed blocks, for auto-suspend: their bytes through a pinned
 * staging ring to host memory and back. */
#define GP_PARK_MAX_SLOTS 4   /* slots of the ring */
#define GP_PARK_MAX_THREADS 8 /* memcpy workers of a park */
struct gp_park_held; /* park_vmm.c */
struct gp_shim_park {
	/* One park or unpark at a time, held throughout, across driver calls (no pool lock is held
	 * then; under it only vmm.c's lock and the park's own workers' are taken). Every field
	 * below is written under it. */
	pthread_mutex_t lock;
	/* The ring: `slots` slots of slot_bytes of pinned host memory at ring (NULL: not made),
	 * made in ring_device's context at the first park that moves anything (that device's resets
	 * then: ring_resets, a reset frees it) and kept for the process's life. threads: memcpy
	 * workers per park (0: the parking thread copies). Set by gp_park_vmm_tune, or defaults. */
	void *ring;
	size_t slot_bytes; /* bytes */
	unsigned slots, threads;
	int ring_device;
	unsigned ring_resets;
	/* Per device: a private non-blocking stream and an event per slot, made at the first park
	 * there and kept; made_at: the device's resets then, plus 1 (0: none made). */
	CUstream stream[GP_MAX_DEVICES];
	CUevent ev[GP_MAX_DEVICES][GP_PARK_MAX_SLOTS];
	unsigned made_at[GP_MAX_DEVICES];
	/* The blocks of the last park until every one is back on its device, and their bytes in
	 * one host mapping (host, host_bytes). */
	struct gp_park_held *held;
	size_t nheld;
	char *host;
	size_t host_bytes;
	/* Bytes of blocks off their device now: stored under lock, read without it. */
	_Atomic uint64_t off_device;
};

/* backend.c: real frees that a capture begun during a release made wait (capture.h's gate). */
struct gp_deferred_free {
	void *ptr;
	size_t bytes;
	int device;
	int settled;
};
struct gp_shim_defer {
	pthread_mutex_t lock;           /* the list's; never held across a driver call */
	struct gp_deferred_free *frees; /* [0, n); lock */
	size_t n, cap;                  /* entries, room (gp_grow); lock */
	_Atomic uint64_t bytes;         /* bytes in the list (statistics): added, taken off anywhere */
};

/* account.c: device memory outside the pool's blocks, for the accounting table. The doors'
 * pass-through calls write the maps and the live bytes; the control thread writes the rest. */
#define GP_ACCOUNT_NKINDS 4 /* enum gp_account_kind */
struct gp_shim_account {
	/* Live pass-through allocations: pointer -> kind, device and bytes (the pool's pointer map
	 * type, as trace.c's sizes: writers hold the shard's lock, no lock-free reader), and VMM
	 * handles the same way. Made at the first pass-through allocation under make_lock (release
	 * store); NULL until then, and every pass-through free skips the map while entries is 0. */
	_Atomic(struct gp_ptrmap *) ptrs, handles;
	pthread_mutex_t make_lock;
	_Atomic int64_t entries; /* in both maps: added and taken off by the doors' threads */
	_Atomic int said_no_memory; /* a map could not be made or grown: said once (exchange) */
	/* Bytes live per kind and device: relaxed adds and subtractions by the doors' threads. */
	_Atomic uint64_t live[GP_ACCOUNT_NKINDS][GP_MAX_DEVICES];
	/* The control thread's measures (gp_account_measure), read relaxed by the publisher: each
	 * device's default memory pool's reserved bytes, PyTorch's and CuPy's unused cache bytes,
	 * when they were read (CLOCK_REALTIME ns, 0: no framework seen) and when each was last
	 * asked (CLOCK_MONOTONIC ns, control thread only). */
	_Atomic uint64_t async_reserved[GP_MAX_DEVICES];
	_Atomic uint64_t fw_cached[GP_MAX_DEVICES];
	_Atomic uint64_t fw_read_ns;
	uint64_t async_asked_ns, fw_asked_ns;
};

/* suspend.c: auto-suspend (GPUPOOL_AUTO_SUSPEND). Its state word is the door's gate
 * (gp_gate_closed, door/gate.h: enum gp_suspend_gate): the control thread arms it and suspends,
 * any thread's call opens it, waits on it, or resumes. */
struct gp_shim_suspend {
	uint64_t after_ns; /* GPUPOOL_AUTO_SUSPEND (ns, 0 off): set by gp_suspend_init, then read */
	/* Never again (no checkpoint API, exit, a fork's child): stored by anyone, read relaxed. */
	_Atomic int off;
	/* Leaving SUSPENDING or RESUMING happens under lock and is broadcast on changed: the gate's
	 * slow path waits there. Never held across a driver call. */
	pthread_mutex_t lock;
	pthread_cond_t changed; /* CLOCK_MONOTONIC */
	/* The control thread's own: */
	uint64_t armed_ns; /* CLOCK_MONOTONIC ns: when the gate was last armed (WATCH) */
	int blocked;       /* a suspend was refused: not tried again before the next busy period */
	int said_quiet;    /* "work in flight" said (debug) in this busy period */
	/* Asked for by `gpupool resume` (the view's word, through the control thread): exchange. */
	_Atomic int wake_asked;
	_Atomic int ipc_exported; /* an IPC memory handle was handed out (any thread, set once) */
	/* What `stats` shows: relaxed stores by the suspending and the resuming thread. */
	_Atomic uint64_t suspends, resumes;
	_Atomic uint64_t last_resume_ns; /* ns the last restore and unlock took */
	_Atomic uint64_t last_suspend_ns; /* ns the last suspend took, release to checkpoint */
	_Atomic unsigned long epoch;      /* arms so far: what a thread recalls is of one watch */
	_Atomic uint64_t copied_bytes;    /* of parked_bytes, what our copies moved (park_vmm.h) */
	int copy_vmm;                     /* GPUPOOL_AUTO_SUSPEND_COPY */
	_Atomic int said_copy;            /* a failed copy said: once */
	_Atomic unsigned long suspend_epoch; /* the watch that ended in the suspend */
	_Atomic uint64_t since_ns;       /* CLOCK_REALTIME ns of the suspend; 0 running */
	_Atomic uint64_t parked_bytes;   /* bytes held on the device at the suspend (context aside) */
	/* cuMemGetInfo's answer at the suspend for the one device in use (meminfo_ok), for
	 * gp_suspend_meminfo; written by the control thread before the gate says SUSPENDED. */
	size_t meminfo_free, meminfo_total;
	int meminfo_ok;
	/* Said once (gp_log_capped): no API, a refused feature, short host memory, restores. */
	_Atomic int said_api, said_ipc, said_managed, said_host, said_lock, said_restore;
};

/* door/lookup.c: the shared runtime's table (gp_real) is filled once. */
struct gp_shim_real {
	pthread_once_t once; /* resolve() runs once, on the first thread that asks */
	int resolved_ok; /* written inside once; read after pthread_once returned */
};

/* The parts the hot path reads come first (life, door, capture, trace). */
struct gp_shim_state {
	_Alignas(GP_SHIM_LINE) struct gp_shim_life life;
	_Alignas(GP_SHIM_LINE) struct gp_shim_door door;
	_Alignas(GP_SHIM_LINE) struct gp_shim_capture capture;
	_Alignas(GP_SHIM_LINE) struct gp_shim_trace trace;
	_Alignas(GP_SHIM_LINE) struct gp_shim_ctx ctx;
	_Alignas(GP_SHIM_LINE) struct gp_shim_fence fence;
	_Alignas(GP_SHIM_LINE) struct gp_shim_graphs graphs;
	_Alignas(GP_SHIM_LINE) struct gp_shim_control control;
	_Alignas(GP_SHIM_LINE) struct gp_shim_policy policy;
	_Alignas(GP_SHIM_LINE) struct gp_shim_obs obs;
	_Alignas(GP_SHIM_LINE) struct gp_shim_real real;
	_Alignas(GP_SHIM_LINE) struct gp_shim_vmm vmm;
	_Alignas(GP_SHIM_LINE) struct gp_shim_park park;
	_Alignas(GP_SHIM_LINE) struct gp_shim_defer defer;
	_Alignas(GP_SHIM_LINE) struct gp_shim_account account;
	_Alignas(GP_SHIM_LINE) struct gp_shim_suspend suspend;
};

/* What the constructor (gp_shim_load) and the signal handler touch: every process the library
 * is preloaded into pays for these, CUDA or not. Apart from gp_shim, in the part of .data that
 * the dynamic linker writes anyway (shim.c, LOAD_TIME, says where and why). */
struct gp_shim_early {
	struct {
		/* Posted by the handler and by the wake calls (once sem_ready), waited on by the
		 * control thread; set up by the control thread's start (wake_setup). */
		sem_t wake;
		_Atomic int sem_ready; /* wake is set up: stored once, by gp_control_start */
		/* A release signal came: set by the handler (lock-free), exchanged to 0 by the
		 * control thread. */
		_Atomic int signalled;
		int installed_signo; /* the handler's signal (0: none); written at load only */
		/* GPUPOOL_SIGNAL's signal had a disposition of its own at load (a handler, or
		 * ignored): kept, not replaced. Written at load only. */
		int kept_signo, kept_ignored;
	} control;
	struct {
		/* door/lookup.c: our constructor ran (__atomic release, acquire in
		 * gp_real_dlsym_fn). */
		int constructed;
	} door;
};

/* Hidden: the hot path reads it directly, never through the GOT. */
extern struct gp_shim_state gp_shim __attribute__((visibility("hidden")));
extern struct gp_shim_early gp_shim_early __attribute__((visibility("hidden")));

#endif
