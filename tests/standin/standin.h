/* standin.h — the stand-in for CUDA (tests/standin), for the e2e test programs: what it models,
 * its environment variables and its control and inspection API. A stand-in driver
 * (libcuda.so.1) holds all the state; a stand-in runtime (libcudart.so.13) sits on top of it and
 * reaches it the way the real runtime does. Never used by the shim or the pool. */
/*
 * The two libraries:
 *   libcuda.so.1 (driver*.c)  every driver entry point listed in driver_proc.c, under its real
 *       ABI name (cuMemAlloc_v2, cuStreamQuery_ptsz...), and cuGetProcAddress / _v2, which
 *       resolve a base name and version to one of them (the versions of cudaTypedefs.h; the
 *       _ptsz/_ptds flavour when the flags ask for the per-thread default stream and the name
 *       has one). It keeps "device" memory (host memory), its accounting, devices, one primary
 *       context per device (a stable handle), the current context per thread (a stack: push,
 *       pop, set), streams, events, the stream-capture rules, graphs, the counters, fault
 *       injection and the report. Calls that need a context (allocation, creating a stream, an
 *       event or a graph, synchronising the context, anything on a default stream) fail with
 *       CUDA_ERROR_INVALID_CONTEXT when none is current; every call but cuGetProcAddress and
 *       cuDriverGetVersion fails with CUDA_ERROR_NOT_INITIALIZED before cuInit.
 *   libcudart.so.13 (runtime*.c)  the runtime's entry points under the version node
 *       libcudart.so.13. At its first call it loads the libcuda.so.1 beside it, takes
 *       cuGetProcAddress_v2 from it with dlsym, asks that for "cuGetProcAddress", and gets every
 *       driver function it uses from the function that came back (base name, version 13000;
 *       the per-thread flavours for its own _ptsz/_ptds entry points): it never calls the
 *       driver by symbol, so a preloaded library that hooks dlsym or cuGetProcAddress sees and
 *       may replace every driver call. It keeps the per-thread last error (cudaErrorNotReady is
 *       a status, not an error) and the per-thread current device; a thread has a context
 *       current once a runtime call of that thread did work (cudaGetDevice, cudaGetDeviceCount,
 *       cudaGetLastError... do not): the runtime then makes its device's primary context current
 *       (cuDevicePrimaryCtxRetain, cuCtxSetCurrent), and again whenever it finds another one
 *       current. cudaFree(NULL) only does that. A driver call never touches the last error.
 *       It also exports the control API below, forwarded to libcuda.so.1, for programs that
 *       load only the runtime.
 *   libcudart_standin_static.a (the same runtime*.c, static_entry.c)  the runtime linked into
 *       the program, as nvcc links the real one by default: nothing of it exported, the
 *       stand-in driver loaded by its path. Its cudaMalloc and cudaFree begin with the real
 *       static runtime's first instructions (x86-64 only) and count their calls
 *       (standin_static_calls).
 * Streams and their work (driver_work.c): each stream's work runs asynchronously, in queue
 * order, on a thread of the stream's own, started with its first item (all signals blocked):
 * every stream of cuStreamCreate*, each device's legacy default stream (NULL, CU_STREAM_LEGACY,
 * the synchronous calls), and each thread's per-thread default stream of each device
 * (CU_STREAM_PER_THREAD, the _ptsz/_ptds flavours): a blocking stream of that thread, made at
 * its first work, that ends with the thread or a reset of the device. Work is: a kernel
 * (cuLaunchKernel/_ptsz, cudaLaunchKernel: the CUfunction, the `func` pointer, is a host
 * function `void fn(void **kernelParams)`); a host function
 * (cuLaunchHostFunc/_ptsz, cudaLaunchHostFunc); an asynchronous copy or memset (cuMemcpyAsync,
 * cuMemsetD8Async, their _ptsz flavours; cudaMemcpyAsync, cudaMemsetAsync); a synchronous one
 * (cuMemcpy and cuMemsetD8_v2 on the legacy stream, their _ptds flavours on the per-thread one;
 * cudaMemcpy, cudaMemset): queued, and the call waits for it, as with pageable host memory; an
 * event's marker (cuEventRecord); a wait (cuStreamWaitEvent); and a stream-ordered free
 * (cuMemFreeAsync on a stream with work to wait for; otherwise it frees at once). The call that
 * queues returns at once (a bad argument fails it then); the stream's worker runs the item
 * later, outside the driver's lock, once
 *   - the items queued before it on its stream are complete;
 *   - on the legacy stream: the work queued before it on every blocking stream of its device
 *     (made without CU_STREAM_NON_BLOCKING; per-thread ones and destroyed ones still running
 *     included) is complete; on a blocking stream: the work queued before it on its device's
 *     legacy stream is. A non-blocking stream never waits for the legacy stream, nor it for one;
 *   - for a wait: the event's point is reached (an event never recorded, or recorded in a
 *     capture, is nothing to wait for);
 *   - for a kernel, a host function, an asynchronous copy or memset: STANDIN_LAUNCH_DELAY_US
 *     have passed since it was queued.
 *   So work on the legacy stream joins the blocking streams, and their later work waits for it.
 *   An item only ever waits for work queued before it. kernelParams is passed as it is, not
 *   copied (the stand-in knows no kernel's parameters): it, and what it points to, must stay
 *   valid until the kernel ran. A kernel may call CUDA, but a call that would wait for the
 *   kernel itself does not: a synchronous copy or memset is done at once, synchronising the
 *   kernel's own stream returns, cuMemFree_v2 and cuCtxSynchronize wait only for the work queued
 *   before the kernel (CUDA forbids host functions such calls). To hold work back, a test
 *   launches a kernel that waits on a gate of its own (a semaphore the test posts later, and
 *   must: whatever waits for the kernel waits as long): what is queued behind it on its stream,
 *   and what depends on that, waits; tests/e2e/standin_selftest.c shows how.
 * Events are reached in their stream's order: when the worker passes the marker (the work queued
 * before it on the stream, and what that waited for, is complete); recorded on a stream that has
 * nothing to wait for (its own work complete and, for the legacy stream, its blocking streams',
 * for a blocking stream, the legacy stream's), an event is reached at once, with no marker.
 * cuEventQuery answers CUDA_SUCCESS once reached (see the overlays below); cuEventSynchronize
 * waits until it is. cuStreamQuery answers CUDA_ERROR_NOT_READY while the work queued on that
 * stream is not complete, and cuStreamSynchronize waits for that work: for the legacy stream,
 * its own items (each of which waited for what the blocking streams had queued before it), not
 * what blocking streams queued after its last one (a blocking stream busy on its own leaves the
 * legacy stream idle: record an event on the legacy stream to cover them); for a per-thread
 * stream, the calling thread's. cuCtxSynchronize (cudaDeviceSynchronize) and cuMemFree_v2
 * (cudaFree of a live allocation: its device) wait until the work queued on every stream of
 * the device before the call is complete. cuStreamDestroy returns at once: the stream's work
 * still runs and its events are reached, then its worker ends. cuDevicePrimaryCtxReset
 * (cudaDeviceReset) first waits until the device has no work left (what other threads queue
 * meanwhile included: no work is dropped, and none touches freed memory); releasing a primary
 * context frees nothing, so its work goes on. A checkpoint lock waits until no stream has work.
 * A forked child has no workers: the work the parent had queued is dropped there as complete,
 * and new work starts new workers. At exit the workers are left running (detached, never
 * joined, so a gated kernel cannot hang the exit); an item completed after the exit report was
 * written rewrites it.
 * Graphs: capture yields a graph object; instantiate, clone, child nodes, exec update and launch
 * give handles and record nothing (cuGraphLaunch queues nothing: graphs hold no nodes); work
 * issued to a capturing stream (a launch, a host function, an asynchronous memset or copy, an
 * event record, a wait) is captured, not queued nor run.
 * Virtual memory management (driver_vmm.c): cuMemGetAllocationGranularity (2 MiB, minimum and
 * recommended), cuMemCreate, cuMemRelease, cuMemAddressReserve, cuMemAddressFree, cuMemMap,
 * cuMemUnmap, cuMemSetAccess, cuMemGetAccess; pinned memory on a device location only, flags 0.
 *   A handle (cuMemCreate) is a memfd of its size, which must be a multiple of 2 MiB; it needs
 *       no current context; it is charged against its device's capacity as cuMemAlloc_v2 of that
 *       size (CUDA_ERROR_OUT_OF_MEMORY beyond it; the MALLOC fault kind fails it too), and while
 *       its memory lives it counts in live_allocs (one) and live_bytes (its size). cuMemRelease
 *       invalidates the handle at once; its memory (and charge) goes then if it is not mapped,
 *       else with its last mapping. A second release fails.
 *   A reservation (cuMemAddressReserve) is PROT_NONE anonymous memory, a multiple of 2 MiB,
 *       aligned to 2 MiB or the alignment asked (the address hint is ignored); it costs no
 *       capacity. cuMemAddressFree needs the exact start and size and nothing of it mapped.
 *   cuMemMap maps [offset, offset + size) of a live handle, all 2 MiB aligned, into one
 *       reservation where nothing is mapped yet: the memfd MAP_SHARED | MAP_FIXED, PROT_NONE,
 *       so touching it before cuMemSetAccess faults, as on a GPU. cuMemUnmap takes whole
 *       mappings only (one or several back to back). cuMemSetAccess takes whole mappings
 *       only, descriptors of valid devices with PROT_NONE, READ or READWRITE; the host's
 *       protection is the union over devices. A physical allocation keeps its bytes when
 *       unmapped and mapped again elsewhere.
 *   The rest of the driver: copies and memsets (cuMemcpy*, cuMemsetD8*, so every cudaMemcpy
 *       and cudaMemset) that reach into a reservation must lie in one and be all mapped, with
 *       write access for the destination and read for the source, else
 *       CUDA_ERROR_INVALID_VALUE; they may span several mappings. cuMemGetAddressRange_v2
 *       answers the one mapping the pointer lies in (as the real driver does: not the range
 *       made of several handles); cuPointerGetAttribute(s) answers RANGE_START_ADDR/RANGE_SIZE
 *       with the whole reservation (as the real one does), MAPPING_BASE_ADDR/MAPPING_SIZE
 *       with the mapping, MEMORY_TYPE device, DEVICE_ORDINAL the handle's device, CONTEXT
 *       NULL, MAPPED 1, IS_LEGACY_CUDA_IPC_CAPABLE 0; reserved but unmapped space is unknown
 *       to them. cuMemFree_v2 / cuMemFreeAsync (cudaFree...) of VMM memory fails with
 *       CUDA_ERROR_INVALID_VALUE and counts a bad free; cuIpcGetMemHandle of reserved space
 *       fails with CUDA_ERROR_INVALID_VALUE (both as the real driver does). Not modelled:
 *       shareable handles, cuMemRetainAllocationHandle, per-device access for copies, the
 *       capture rules, cudaDeviceReset and checkpoints of VMM memory; a forked child shares
 *       the memfds.
 * Other allocations: cuMemAllocManaged (flags CU_MEM_ATTACH_GLOBAL or _HOST) and
 *   cuMemAllocPitch_v2 (rows rounded up to 512 bytes, element size 4, 8 or 16; pitch x height
 *   bytes) are allocations like cuMemAlloc_v2 on the current context's device: charged the same,
 *   counted in mallocs, failed by the MALLOC fault kind, freed by cuMemFree_v2.
 * Pinned host memory: cuMemHostAlloc (any flags; a context current) gives page-aligned host
 *   memory, cuMemFreeHost gives it back (anything else fails with CUDA_ERROR_INVALID_VALUE);
 *   neither is charged to a device, both are counted (pinned_allocs, pinned_frees). Copies treat
 *   it as any host memory.
 * Contexts of the program's own: cuCtxCreate_v2 and _v4 (no creation parameters) make one on a
 *   device and push it current; cuCtxDestroy_v2 destroys it (popped from the calling thread's
 *   stack; a primary context is refused). Allocations made while one is current are the
 *   device's like any other; its destroy does not free them. At most 16 at once.
 * The stand-in NVML (nvml.c, libnvidia-ml.so.1, built beside the driver; a process loads it
 *   through LD_LIBRARY_PATH, as the gpupool command does): the driver of each process that has a
 *   context publishes, after every call that took its lock, each device's charged bytes
 *   (cuMemAlloc*, managed, pitched, async, VMM handles) plus STANDIN_CONTEXT_BYTES on every
 *   device where it has a context (its primary context retained, or one of its own) in
 *   /dev/shm/standin-nvml.<pid> (nvml_file.h; made at its first context, removed at exit).
 *   NVML answers nvmlInit_v2, nvmlShutdown, nvmlErrorString, nvmlDeviceGetCount_v2 (from
 *   STANDIN_DEVICES in the caller's environment), nvmlDeviceGetHandleByIndex_v2 and
 *   nvmlDeviceGetHandleByUUID, nvmlDeviceGetUUID (the driver's UUIDs, cuDeviceGetUuid_v2,
 *   written as NVML writes them: "GPU-5354414e-4449-4e2d-4750-5500000000" and the ordinal in
 *   two hex digits), nvmlDeviceGetMemoryInfo (total: the largest capacity a live process has,
 *   else STANDIN_CAPACITY; used: the sum over live processes; free: the difference) and nvmlDeviceGetComputeRunningProcesses_v3 (every live
 *   process with a context on the device, with its figure); the graphics list is always empty.
 *   A checkpointed process (STANDIN_CHECKPOINT) holds nothing there, its context neither.
 *   A file whose process is gone is skipped and removed. Device-wide figures count every live
 *   stand-in process of the machine (tests running beside each other included): only a
 *   process's own figure is exact for a test.
 * The capture rules (cuThreadExchangeStreamCaptureMode, per thread): during a global-mode
 * capture, allocation, free, event and stream queries and synchronisation from a thread not in
 * relaxed mode fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, touching the legacy stream fails
 * with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, and either invalidates the capture.
 *
 * Environment, read once (by libcuda.so.1):
 *   STANDIN_DEVICES=n        devices (default 1, at most 8; 0: cuInit fails with no device)
 *   STANDIN_CAPACITY=bytes   per-device capacity, K/M/G suffixes allowed (default 1 GiB)
 *   STANDIN_MANUAL_EVENTS=1  events complete only once reached and told, and no stream is ever
 *                            idle to cuStreamQuery (see standin_set_manual_events)
 *   STANDIN_LAUNCH_DELAY_US=n  each kernel, host function and asynchronous copy or memset starts
 *                            at least n µs after it was queued (default 0; see
 *                            standin_set_launch_delay_us)
 *   STANDIN_CONTEXT_BYTES=bytes  what the stand-in NVML counts for the process's context and
 *                            libraries on each device where it has a context (K/M suffixes;
 *                            default 300 MiB)
 *   STANDIN_REPORT=path      the counters summed over devices, `name=value` a line, written there
 *                            when the driver is unloaded at exit (and rewritten after any later call)
 *   STANDIN_TRACE=1          name on stderr every call that broke the stream-capture rules
 * Fault injection (see standin_set_fault; read once, changeable at run time):
 *   STANDIN_FAIL_<KIND>_EVERY=n  every n-th call of that kind fails (1: all), KIND one of MALLOC
 *                                (cuMemAlloc_v2 and a valid cuMemCreate), FREE (cuMemFree_v2 of a live allocation),
 *                                EVENT_RECORD (cuEventRecord), EVENT_QUERY (cuEventQuery),
 *                                VMM_MAP (cuMemMap), VMM_UNMAP (cuMemUnmap), all in
 *                                the driver, so runtime and direct driver callers both see them;
 *                                GETDEVICE (cudaGetDevice) in the runtime
 *   STANDIN_FAIL_<KIND>_ERROR=e  the cudaError_t number it fails with (default: see the enum); the
 *                                driver returns the CUresult of that number (equal for every
 *                                error the kinds use: 2, 4, 400, 600, 719, 900-908, 999)
 *   STANDIN_FAIL_FREE_KEEPS=1    a failed free leaves the allocation live (the driver refused);
 *                                default: it is freed and the error reported, as when cudaFree
 *                                reports the error of an earlier asynchronous launch
 *   STANDIN_UNLOADING=1          every driver call fails with CUDA_ERROR_DEINITIALIZED and every
 *                                runtime call with cudaErrorCudartUnloading (the state of both while
 *                                the process exits), and does nothing
 *   STANDIN_EVENT_LATENCY_US=n   cuEventQuery reports an event done only once reached and n µs
 *                                after its record (as a GPU that takes time to reach it; once
 *                                synchronised past, it is done at once), and cuStreamQuery never
 *                                finds a stream idle
 *   STANDIN_FREE_DELAY_US=n      cuMemFree_v2 sleeps n µs first (outside the driver's lock): a slow
 *                                device, to catch a release in progress
 *   STANDIN_NO_VMM=1             (read at each call) cuDeviceGetAttribute says the device lacks the
 *                                virtual memory API (the driver's calls still work)
 *   STANDIN_MMAP=1               device memory from mmap (always so under ASan; reserved, not
 *                                committed): a block freed and the next of its size usually share
 *                                an address, as on a GPU
 *   STANDIN_PROC_HIDDEN_MEMFREE=1  (read at each lookup) cuGetProcAddress answers "cuMemFree" with a
 *                                function that is not an exported symbol: a door that cannot
 *                                vouch for it goes blind
 *   STANDIN_CHECKPOINT=1         the process answers the checkpoint API (cuCheckpointProcess*,
 *                                driver_ckpt.c) that another process calls with its pid: from its
 *                                first cuInit a thread of its own serves /dev/shm/standin-ckpt.<pid>;
 *                                lock waits until no stream has work queued and then holds every
 *                                call of the process (and so all new work); checkpoint parks the
 *                                device memory in host memory (the device's copy dropped or
 *                                poisoned, its capacity free); restore puts it back; a process
 *                                without it is not a CUDA process to the API
 *   STANDIN_CHECKPOINT_RESTORE_FAILS=n  its first n restores fail with CUDA_ERROR_OUT_OF_MEMORY
 *                                and change nothing (a device that lacks the memory now)
 * Read by the runtime at its first call:
 *   STANDIN_DRIVER_TOO_OLD=1  after looking the driver's functions up, the runtime unloads it
 *                             (dlclose) and answers every call cudaErrorInsufficientDriver, as
 *                             the real runtime does with a driver older than itself
 */
#ifndef GPUPOOL_STANDIN_H
#define GPUPOOL_STANDIN_H

#include <stdint.h>

/* What reached the DRIVER, per device, whoever called it (the stand-in runtime or a program or
 * library calling the driver directly). A call without a device of its own (a free of a pointer
 * that is not live, a query of an event) counts on the current context's device, else device 0. */
struct standin_counters {
	uint64_t mallocs;         /* successful cuMemAlloc_v2 calls */
	uint64_t frees;           /* successful cuMemFree_v2 calls on a non-NULL pointer */
	uint64_t failed_mallocs;  /* cuMemAlloc_v2/cuMemAllocAsync calls that returned an error */
	uint64_t bad_frees;       /* cuMemFree_v2/cuMemFreeAsync of a pointer that is not a live allocation */
	uint64_t async_mallocs;   /* successful cuMemAllocAsync calls */
	uint64_t async_frees;     /* successful cuMemFreeAsync calls on a non-NULL pointer */
	uint64_t live_allocs;     /* allocations now live (both kinds, and VMM handles whose memory lives) */
	uint64_t live_bytes;      /* bytes the live allocations cost on the "device" (see standin_charge),
				   * VMM handles' included */
	uint64_t event_records;   /* cuEventRecord calls */
	uint64_t event_queries;   /* cuEventQuery calls */
	uint64_t syncs;           /* cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize */
	uint64_t stream_creates;  /* successful cuStreamCreate* calls */
	uint64_t stream_destroys; /* successful cuStreamDestroy_v2 calls */
	uint64_t mem_get_info;    /* cuMemGetInfo_v2 calls */
	uint64_t pool_trims;      /* cuMemPoolTrimTo calls */
	uint64_t frees_off_device; /* cuMemFree_v2 of this device's memory while another device's
				    * context was current */
	uint64_t stream_queries;  /* cuStreamQuery calls */
	uint64_t launches;        /* successful cuLaunchKernel calls (flush.py and mp.py in tests/e2e
				   * mirror this layout) */
	/* VMM (driver_vmm.c), appended. A call is counted on its handle's device; a reservation, its
	 * free and cuMemSetAccess on the current context's device, else device 0. */
	uint64_t vmm_creates;       /* successful cuMemCreate calls (also in live_allocs/live_bytes) */
	uint64_t vmm_failed_creates; /* cuMemCreate calls that returned an error (not failed_mallocs) */
	uint64_t vmm_releases;      /* successful cuMemRelease calls */
	uint64_t vmm_maps;          /* successful cuMemMap calls */
	uint64_t vmm_unmaps;        /* mappings removed by cuMemUnmap (one call may remove several) */
	uint64_t vmm_reserves;      /* successful cuMemAddressReserve calls */
	uint64_t vmm_address_frees; /* successful cuMemAddressFree calls */
	uint64_t vmm_set_access;    /* successful cuMemSetAccess calls */
	/* The streams' work (driver_work.c), appended; on the stream's device. */
	uint64_t work_queued;       /* items queued on a stream: kernels, host functions, copies and
				     * memsets (synchronous ones too), stream-ordered frees, event
				     * markers, waits for an event */
	uint64_t work_done;         /* of those, complete (not those dropped in a forked child) */
	uint64_t kernels_run;       /* kernels that ran to their end */
	uint64_t host_funcs_run;    /* host functions (cuLaunchHostFunc) that ran to their end */
	/* Pinned host memory (cuMemHostAlloc, cuMemFreeHost: plain host memory here), appended; on
	 * the current context's device. */
	uint64_t pinned_allocs;     /* successful cuMemHostAlloc calls */
	uint64_t pinned_frees;      /* successful cuMemFreeHost calls */
};

/* A copy of the counters of `device`; device -1 sums all devices. An invalid device gives zeros. */
void standin_get(int device, struct standin_counters *out);

/* Capacity of `device` in bytes (default: STANDIN_CAPACITY, else 1 GiB). */
void standin_set_capacity(int device, uint64_t bytes);

/* 1: an event recorded from now on stays not ready, even once reached, until
 * standin_complete_events() or a synchronizing call past it: cuCtxSynchronize and cuMemFree_v2
 * (every event), cuStreamSynchronize (the events reached on that stream; on the legacy stream,
 * those on its device's blocking streams too), cuEventSynchronize (the event, and those recorded
 * before it on its stream); and cuStreamQuery always answers CUDA_ERROR_NOT_READY (as it does
 * with STANDIN_EVENT_LATENCY_US). The work itself runs regardless (a wait waits for the point
 * to be reached, not told). 0 (default, unless STANDIN_MANUAL_EVENTS=1): an event is complete
 * once reached, and a stream is idle once the work queued on it is complete. */
void standin_set_manual_events(int on);

/* Every recorded event is complete once reached (the test's word for manual events and the
 * latency; the streams' work still runs at its own pace). */
void standin_complete_events(void);

/* Each kernel, host function and asynchronous copy or memset queued from now on starts at least
 * `us` µs after it was queued (0: as soon as its turn comes). */
void standin_set_launch_delay_us(unsigned us);

/* Work items queued on the streams of `device` (-1: every device) and not yet complete: running
 * or waiting for their turn. */
uint64_t standin_device_busy(int device);

/* 1: every cuEventRecord call from now on waits at its entry, holding no lock of the driver's,
 * until 0 (a test stops a caller between its own checks and the driver call). */
void standin_hold_event_records(int on);
/* cuEventRecord calls waiting now (standin_hold_event_records). */
int standin_held_event_records(void);

/* 1 if p is the start of a live allocation of the stand-in, else 0. */
int standin_owns(const void *p);

/* The size that was asked of the driver for the live allocation that starts at p, else 0. */
uint64_t standin_size(const void *p);
/* (standin_owns and standin_size know cuMemAlloc_v2/cuMemAllocAsync allocations only: for VMM
 * memory, mapped or not, they answer 0; ask standin_vmm_mapped.) */

/* 1 if p lies in a mapped VMM range (cuMemMap), else 0 (then nothing is written). *range_start and
 * *range_size: the reservation it lies in (cuMemAddressReserve); *handle_bytes: the size of the
 * physical allocation (cuMemCreate) whose mapping p lies in. Any of them may be NULL. */
int standin_vmm_mapped(const void *p, uint64_t *range_start, uint64_t *range_size,
		       uint64_t *handle_bytes);

/* VMM physical allocations of `device` (-1: all) whose memory is live: created and not yet
 * released, or released but still mapped. */
uint64_t standin_vmm_handles(int device);

/* What an allocation of `bytes` costs on the device, as the driver accounts it: up to 1 MiB the
 * request rounded up to 512 B, above 1 MiB the request rounded up to a multiple of 2 MiB. */
uint64_t standin_charge(uint64_t bytes);

/* Fault kinds, with the error each fails with unless told otherwise. */
enum standin_fault {
	STANDIN_FAULT_MALLOC = 0,  /* cuMemAlloc_v2, cuMemCreate: cudaErrorMemoryAllocation */
	STANDIN_FAULT_FREE,        /* cuMemFree_v2 of a live allocation: cudaErrorLaunchFailure */
	STANDIN_FAULT_EVENT_RECORD, /* cuEventRecord (nothing recorded): cudaErrorUnknown */
	STANDIN_FAULT_EVENT_QUERY, /* cuEventQuery (the event is unchanged): cudaErrorUnknown */
	STANDIN_FAULT_GETDEVICE,   /* cudaGetDevice (*device untouched): cudaErrorUnknown */
	STANDIN_FAULT_VMM_MAP,     /* cuMemMap of valid arguments (nothing mapped):
				    * cudaErrorMemoryAllocation */
	STANDIN_FAULT_VMM_UNMAP,   /* cuMemUnmap of whole mappings (nothing unmapped):
				    * cudaErrorUnknown */
	STANDIN_FAULT_COUNT
};

/* From now on every `every`-th call of `kind` fails with `error` (0: the kind's default);
 * every = 0 turns the fault off. The count of calls restarts. */
void standin_set_fault(enum standin_fault kind, unsigned every, int error);

/* Calls of `kind` failed by injection since the program started. */
uint64_t standin_faults(enum standin_fault kind);

/* 1: a failed free leaves the allocation live; 0: frees it (see STANDIN_FAIL_FREE_KEEPS). */
void standin_set_free_keeps(int on);

/* 1: every driver and runtime call fails (CUDA_ERROR_DEINITIALIZED, cudaErrorCudartUnloading)
 * and does nothing; 0: back to normal. */
void standin_set_unloading(int on);

/* cuMemFree_v2 sleeps this long before it takes the driver's lock (0: not at all). */
void standin_set_free_delay_us(unsigned us);

/* For the stand-in runtime only (libcuda.so.1 exports them, libcudart.so.13 does not): whether
 * standin_set_unloading is on, and a call of a runtime fault `kind` (GETDEVICE): the cudaError_t
 * it fails with by injection, counted in standin_faults, else 0. */
int standin_unloading(void);
int standin_inject(enum standin_fault kind);

/* The static flavour only: how many calls its own cudaMalloc and cudaFree have had. */
void standin_static_calls(unsigned long *n_malloc, unsigned long *n_free);

#endif
