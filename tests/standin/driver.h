/* driver.h — what the files of the stand-in driver (driver*.c, libcuda.so.1) share: its state,
 * the prologue and lock of an entry point, the pointer map, the streams' work, the stream and
 * capture rules, and the prototypes of the entry points that cuda.h does not declare (the
 * per-thread flavours and cuGetProcAddress v1). Internal: standin.h is the API. */
#ifndef STANDIN_DRIVER_H
#define STANDIN_DRIVER_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "standin.h"

#define STANDIN_MAX_DEVICES 8
#define STANDIN_MAP_BUCKETS 4096
#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)

struct alloc {
	struct alloc *next;
	void *ptr;
	uint64_t size;    /* bytes asked for */
	uint64_t charged; /* bytes counted against the device */
	size_t span;      /* st.use_mmap: bytes mapped, this record first */
	int device;
	int async;        /* from cuMemAllocAsync: counted in the pool's attributes */
};

/* A device's primary context; the handle is stable for the life of the process. */
struct CUctx_st {
	int device;
	int retained; /* cuDevicePrimaryCtxRetain minus release: active while > 0 */
	int own;      /* a context of the program's own (cuCtxCreate), not a primary one */
};

#define STANDIN_MAX_OWN_CONTEXTS 16

struct CUmemPoolHandle_st {
	int device;
	uint64_t release_threshold;
};

struct work; /* one item of a stream's work (driver_work.c) */

/* A stream: a handle the program created (in st.streams), a thread's per-thread default stream
 * (in st.streams too, its handle never given out) or a device's legacy stream (in st.dev). Its
 * work (driver_work.c) runs in queue order on a thread of its own. */
struct CUstream_st {
	struct CUstream_st *next;   /* st.streams, or st.zombies once retired */
	int device;
	unsigned flags;
	int priority;
	int capturing;
	int capture_invalid;
	CUstreamCaptureMode capture_mode;
	const void *capture_thread; /* the token of the thread that began the capture */
	CUgraph capture_graph;      /* cuStreamBeginCaptureToGraph: the graph it ends in */
	/* Its work (driver_work.c), under st.lock: */
	struct work *head, *tail;   /* queued and not yet complete; the head may be running */
	uint64_t queued;            /* items ever queued: the n-th is complete once done >= n */
	uint64_t done;              /* items completed, in queue order */
	unsigned refs;              /* its handle, its worker, and every event point, dependency and
				     * waiter that names it: freed at 0 (a legacy stream never is) */
	int legacy;                 /* a device's legacy default stream */
	int per_thread;             /* a thread's per-thread default stream */
	int retired;                /* its handle is gone (destroy, thread exit, reset): on st.zombies,
				     * its worker ends once its work is done */
	int worker;                 /* its worker thread was started and has not ended */
	pthread_cond_t wake;        /* where its worker waits for work */
};

struct device {
	uint64_t capacity;    /* bytes */
	uint64_t used;        /* bytes, as charged */
	uint64_t async_used;  /* of which from cuMemAllocAsync */
	uint64_t outstanding; /* work items queued on its streams and not yet complete */
	uint64_t resets;      /* cuDevicePrimaryCtxReset calls: a per-thread stream made before is gone */
	int user_contexts;    /* contexts of the program's own on it (cuCtxCreate minus destroy) */
	struct standin_counters c;
	struct CUmemPoolHandle_st pool;
	struct CUctx_st ctx;
	struct CUstream_st legacy; /* its legacy default stream */
};

struct CUevent_st {
	struct CUevent_st *next;
	int device;
	unsigned flags;
	int recorded;
	int held;                   /* manual events: recorded with them on, not yet told complete */
	int captured;               /* recorded into a capture: not a point in real execution */
	struct CUstream_st *stream; /* the handle it was recorded on, NULL: a default stream */
	struct CUstream_st *on;     /* the stream it was recorded on (held), NULL: none */
	uint64_t point;             /* its marker's place in `on` (reached once on->done >= point),
				     * 0: reached when recorded */
	uint64_t seq;               /* record order, for cuEventSynchronize */
	uint64_t done_at_ns;        /* STANDIN_EVENT_LATENCY_US: "the GPU" reaches it then */
};

/* Graphs hold no nodes here: handles only, so that graph lifetimes can be tested. */
struct CUgraph_st {
	int device;
};

struct CUgraphExec_st {
	int device;
};

/* Everything below st.lock guards (the settings after it are atomics). */
struct state {
	pthread_mutex_t lock;
	int ndevices;
	int manual_events;
	int captures; /* streams now capturing */
	int reported; /* the exit report was written: rewrite it on every later call */
	int trace;    /* STANDIN_TRACE=1 */
	int use_mmap; /* device memory from mmap (see driver_mem.c) */
	int checkpointed; /* driver_ckpt.c: the device memory is parked; NVML sees none, context too */
	uint64_t record_seq;
	struct device dev[STANDIN_MAX_DEVICES];
	struct alloc *map[STANDIN_MAP_BUCKETS];
	struct CUstream_st *streams;
	struct CUstream_st *zombies; /* retired streams whose work or dependants are not done */
	struct CUevent_st *events;
	/* The program's own contexts (cuCtxCreate), NULL where none: written under the lock, read
	 * with __atomic loads by ctx_of, which runs without it. */
	struct CUctx_st *own_ctx[STANDIN_MAX_OWN_CONTEXTS];
	pthread_cond_t progress;     /* broadcast when a work item completes (CLOCK_MONOTONIC) */
	uint64_t ticket;             /* work items ever queued, all streams: the order of the process */
	char report_path[4096];
};

extern struct state st;
extern _Atomic int st_unloading, st_free_keeps, st_initialised;
extern _Atomic unsigned st_free_delay_us, st_event_latency_us, st_launch_delay_us;

/* driver_state.c: setup, prologues, faults, the report. */
void st_setup(void);                   /* reads the environment, once */
CUresult check_call(void);             /* set up, not unloading, cuInit done */
CUresult enter(void);                  /* check_call, then st.lock taken */
CUresult enter_ctx(int *device);       /* enter, a context current: its device */
CUresult enter_stream(CUstream s, int *device); /* enter; a default stream needs a context */
void lock_state(void);                 /* st.lock for the control API: no checks */
void leave(void);                      /* rewrites the report if due, drops st.lock */
CUresult inject(enum standin_fault kind);
void set_fault(enum standin_fault kind, unsigned every, int error);
uint64_t faults_injected(enum standin_fault kind);
void sum_counters(int device, struct standin_counters *out);
uint64_t charge(uint64_t bytes);
uint64_t mono_ns(void);
void report_if_due(void);              /* st.lock held: rewrites the report once the exit one is */

/* driver_nvml.c: each device's charge and context into /dev/shm/standin-nvml.<pid> for the
 * stand-in NVML (st.lock held; leave calls it). */
void nvml_publish(void);

/* driver_ckpt.c: the checkpoint API's serving thread (STANDIN_CHECKPOINT=1), started by cuInit. */
void ckpt_start(void);

/* driver_work.c: the "GPU". Each stream's work runs in queue order on a thread of the stream's
 * own, outside st.lock, once the work it depends on is complete (st.lock held by the callers
 * unless said otherwise). */
enum work_kind {
	WORK_KERNEL,  /* kernel(params), outside st.lock */
	WORK_HOST_FN, /* host(arg), outside st.lock */
	WORK_COPY,    /* memmove(dst, src, n), outside st.lock */
	WORK_MEMSET,  /* memset(dst, value, n), outside st.lock */
	WORK_LOCKED,  /* locked(arg, device) with st.lock held: a stream-ordered free */
	WORK_MARKER,  /* nothing: an event's point in the stream */
	WORK_WAIT,    /* nothing, once wait_on has completed its wait_seq-th item (cuStreamWaitEvent) */
};

struct work_args {
	enum work_kind kind;
	void (*kernel)(void **params);
	void (*host)(void *arg);
	void (*locked)(void *arg, int device);
	void **params;
	void *arg;
	void *dst;
	const void *src;
	int value;
	size_t n;
	struct CUstream_st *wait_on; /* WORK_WAIT */
	uint64_t wait_seq;
	int delayed;                 /* starts STANDIN_LAUNCH_DELAY_US after it was queued, at least */
};

void work_setup(void);                 /* once, from st_setup */
void work_after_fork(void);            /* a forked child: the parent's work is dropped */
CUresult queue_work(struct CUstream_st *s, const struct work_args *a, uint64_t *seq);
int stream_blocking(const struct CUstream_st *s); /* one the legacy stream synchronises with */
int stream_busy(const struct CUstream_st *s);     /* work queued on it is not complete */
int stream_settled(const struct CUstream_st *s);  /* nor what work queued now would wait for */
void stream_hold(struct CUstream_st *s);
void stream_drop(struct CUstream_st *s);          /* frees it with its last reference */
void stream_retire(struct CUstream_st *s);        /* its handle is gone (off st.streams already) */
void wait_stream(struct CUstream_st *s, uint64_t seq); /* drops st.lock while it waits */
void wait_device(int device);          /* for the work queued before the call; drops st.lock */
void drain_device(int device);         /* until none is left; drops st.lock */
int in_worker(void);                   /* the calling thread is a stream's worker */
uint64_t work_outstanding(int device); /* -1: all devices */

/* driver_ctx.c: this thread's current context. */
int ctx_device(void);                  /* its device, -1: none */
int here(int fallback);                /* the device a call is counted on */

/* driver_mem.c */
struct alloc *map_find(const void *p);
void free_device_memory(int device);

/* driver_vmm.c (st.lock held): where a pointer lies in VMM memory, and whether a copy or memset
 * may touch [p, p + n) (CUDA_ERROR_INVALID_VALUE if it reaches into a reservation where it is not
 * all mapped with the access it needs; CUDA_SUCCESS if it touches none). */
struct vmm_where {
	uint64_t range_start, range_size; /* the reservation */
	uint64_t map_start, map_size;     /* the one mapping p lies in */
	uint64_t handle, handle_size;
	int device;                       /* the handle's */
	int prot;                         /* PROT_* the host has on it (the union over devices) */
};
int vmm_find(const void *p, struct vmm_where *w); /* 1 if p lies in a mapping */
int vmm_reserved(const void *p);                   /* p lies in a reservation, mapped or not */
CUresult vmm_check(const void *p, size_t n, int write);

/* driver_stream.c: streams and the capture rules (st.lock held). */
CUresult check_unsafe_call(const char *fn);
CUresult capture_error(const char *fn, int device, CUresult rc);
int legacy_stream_blocked(int device);
int device_capturing(int device);
int is_default_stream(CUstream s);
int is_legacy_stream(CUstream s);
int stream_valid(CUstream s);
int stream_device(CUstream s, int ctx_dev);
CUresult stream_work(const char *fn, CUstream s, int *device, int *run);
struct CUstream_st *stream_of(CUstream s, int device, int create);
void destroy_device_streams(int device);
void streams_setup(void);
const void *thread_token(void);

/* driver_event.c (st.lock held) */
int event_valid(CUevent e);
int event_reached(const struct CUevent_st *e);
void complete_all(int device);
void complete_stream(struct CUstream_st *s);
void forget_stream(CUstream s);
void destroy_device_events(int device);

/* driver_graph.c */
CUresult new_graph(CUgraph *out, int device);

/* The flavours cuda.h declares only under other names or not at all (its macros map the base
 * names to them in builds with per-thread default streams). */
#undef cuGetProcAddress /* cuda.h maps it to cuGetProcAddress_v2; the driver has both */
#undef cuDeviceGetUuid  /* the same with cuDeviceGetUuid_v2 */
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuStreamQuery_ptsz(CUstream hStream);
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
					  const CUgraphNode *dependencies,
					  const CUgraphEdgeData *dependencyData,
					  size_t numDependencies, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph);
CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
					   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
			     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
			     void **kernelParams, void **extra);

#endif
