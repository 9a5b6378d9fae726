/* standin.h — control and inspection API of the stand-in CUDA runtime (tests/standin), for the
 * e2e test programs. These functions live in the stand-in libcudart.so.13 itself, so a program
 * sees the counters of the runtime that really served its calls (under LD_PRELOAD: what got
 * past the shim). Never used by the shim or the pool. */
/*
 * Environment, read once:
 *   STANDIN_DEVICES=n        devices (default 1, at most 8)
 *   STANDIN_CAPACITY=bytes   per-device capacity, K/M/G suffixes allowed (default 1 GiB)
 *   STANDIN_MANUAL_EVENTS=1  events complete only when told, and no stream is ever idle to
 *                            cudaStreamQuery (see standin_set_manual_events)
 *   STANDIN_REPORT=path      the counters summed over devices, `name=value` a line, written there
 *                            when the library is unloaded at exit (and rewritten after any later call)
 *   STANDIN_TRACE=1          name on stderr every call that broke the stream-capture rules
 * Fault injection (see standin_set_fault; read once, changeable at run time):
 *   STANDIN_FAIL_<KIND>_EVERY=n  every n-th call of that kind fails (1: all), KIND one of MALLOC,
 *                                FREE, EVENT_RECORD, EVENT_QUERY, GETDEVICE
 *   STANDIN_FAIL_<KIND>_ERROR=e  the cudaError_t number it fails with (default: see the enum)
 *   STANDIN_FAIL_FREE_KEEPS=1    a failed cudaFree leaves the allocation live (the runtime refused);
 *                                default: it is freed and the error reported, as when cudaFree
 *                                reports the error of an earlier asynchronous launch
 *   STANDIN_UNLOADING=1          every entry point fails with cudaErrorCudartUnloading (the state
 *                                of the runtime while the process exits) and does nothing
 *   STANDIN_EVENT_LATENCY_US=n   cudaEventQuery reports an event done only n µs after its record
 *                                (as a GPU that takes time to reach it; synchronising is immediate),
 *                                and cudaStreamQuery never finds a stream idle
 *   STANDIN_FREE_DELAY_US=n      cudaFree sleeps n µs first (outside the runtime's lock): a slow
 *                                device, to catch a release in progress
 *   STANDIN_MMAP=1               device memory from mmap (always so under ASan): a block freed and
 *                                the next of its size usually share an address, as on a GPU
 *   STANDIN_NO_DRIVER=1          the stand-in does not load its libcuda.so.1 (see below)
 * The driver: at its first call the stand-in loads the libcuda.so.1 beside it (tests/standin/
 * driver.c), as the real runtime loads the driver, unless STANDIN_NO_DRIVER=1. It answers the few
 * driver-API calls the shim makes from the runtime's state: a thread has a context current once
 * a runtime call of that thread did work (cudaGetDevice does not), that of its current device;
 * cuStreamQuery, cuEventRecord and cuEventQuery do what their runtime twins do (the same fault
 * injection included), leaving the thread's last error alone.
 * Graphs: capture yields a graph object; instantiate, clone, child nodes and exec update give
 * handles and record nothing (no kernels run here).
 * The stand-in applies the runtime's capture rules (cudaThreadExchangeStreamCaptureMode): during a
 * global-mode capture, cudaMalloc, cudaFree, event/stream queries and synchronisation from a
 * thread not in relaxed mode fail with cudaErrorStreamCaptureUnsupported, touching the legacy
 * stream fails with cudaErrorStreamCaptureImplicit, and either invalidates the capture.
 */
#ifndef GPUPOOL_STANDIN_H
#define GPUPOOL_STANDIN_H

#include <stdint.h>

/* What reached the runtime, per device. Every cuda* call of the stand-in counts here. */
struct standin_counters {
	uint64_t mallocs;         /* successful cudaMalloc calls */
	uint64_t frees;           /* successful cudaFree calls on a non-NULL pointer */
	uint64_t failed_mallocs;  /* cudaMalloc/cudaMallocAsync calls that returned an error */
	uint64_t bad_frees;       /* cudaFree/cudaFreeAsync of a pointer that is not a live allocation */
	uint64_t async_mallocs;   /* successful cudaMallocAsync calls */
	uint64_t async_frees;     /* successful cudaFreeAsync calls on a non-NULL pointer */
	uint64_t live_allocs;     /* allocations now live (both kinds) */
	uint64_t live_bytes;      /* bytes the live allocations cost on the "device" (see standin_charge) */
	uint64_t event_records;   /* cudaEventRecord and cuEventRecord calls */
	uint64_t event_queries;   /* cudaEventQuery and cuEventQuery calls */
	uint64_t syncs;           /* cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize */
	uint64_t stream_creates;  /* successful cudaStreamCreate* calls */
	uint64_t stream_destroys; /* successful cudaStreamDestroy calls */
	uint64_t mem_get_info;    /* cudaMemGetInfo calls */
	uint64_t pool_trims;      /* cudaMemPoolTrimTo calls */
	uint64_t frees_off_device; /* cudaFree of this device's memory while another was current */
	uint64_t stream_queries;  /* cudaStreamQuery calls */
	uint64_t drv_stream_queries; /* cuStreamQuery calls, through the stand-in libcuda.so.1 */
	uint64_t drv_event_records;  /* cuEventRecord calls (also in event_records) */
	uint64_t drv_event_queries;  /* cuEventQuery calls (also in event_queries) (flush.py and
				      * mp.py in tests/e2e mirror this layout) */
};

/* A copy of the counters of `device`; device -1 sums all devices. An invalid device gives zeros. */
void standin_get(int device, struct standin_counters *out);

/* Capacity of `device` in bytes (default: STANDIN_CAPACITY, else 1 GiB). */
void standin_set_capacity(int device, uint64_t bytes);

/* 1: a recorded event stays not ready until standin_complete_events() or a synchronizing call
 * (cudaDeviceSynchronize, cudaFree, cudaStreamSynchronize, cudaEventSynchronize), and
 * cudaStreamQuery always answers cudaErrorNotReady (as it does with STANDIN_EVENT_LATENCY_US).
 * 0 (default, unless STANDIN_MANUAL_EVENTS=1): an event completes as soon as it is recorded,
 * and a stream is idle unless an event recorded on it is not yet complete. */
void standin_set_manual_events(int on);

/* Complete every recorded event (the "GPU" catches up with all work issued so far). */
void standin_complete_events(void);

/* 1 if p is the start of a live allocation of the stand-in, else 0. */
int standin_owns(const void *p);

/* The size that was asked of the runtime for the live allocation that starts at p, else 0. */
uint64_t standin_size(const void *p);

/* What an allocation of `bytes` costs on the device, as the driver accounts it: up to 1 MiB the
 * request rounded up to 512 B, above 1 MiB the request rounded up to a multiple of 2 MiB. */
uint64_t standin_charge(uint64_t bytes);

/* Fault kinds, with the error each fails with unless told otherwise. */
enum standin_fault {
	STANDIN_FAULT_MALLOC = 0,  /* cudaMalloc: cudaErrorMemoryAllocation */
	STANDIN_FAULT_FREE,        /* cudaFree of a live allocation: cudaErrorLaunchFailure */
	STANDIN_FAULT_EVENT_RECORD, /* cudaEventRecord (nothing recorded): cudaErrorUnknown */
	STANDIN_FAULT_EVENT_QUERY, /* cudaEventQuery (the event is unchanged): cudaErrorUnknown */
	STANDIN_FAULT_GETDEVICE,   /* cudaGetDevice (*device untouched): cudaErrorUnknown */
	STANDIN_FAULT_COUNT
};

/* From now on every `every`-th call of `kind` fails with `error` (0: the kind's default);
 * every = 0 turns the fault off. The count of calls restarts. */
void standin_set_fault(enum standin_fault kind, unsigned every, int error);

/* Calls of `kind` failed by injection since the program started. */
uint64_t standin_faults(enum standin_fault kind);

/* 1: a failed cudaFree leaves the allocation live; 0: frees it (see STANDIN_FAIL_FREE_KEEPS). */
void standin_set_free_keeps(int on);

/* 1: every entry point fails with cudaErrorCudartUnloading and does nothing; 0: back to normal. */
void standin_set_unloading(int on);

/* cudaFree sleeps this long before it takes the runtime's lock (0: not at all). */
void standin_set_free_delay_us(unsigned us);

/* For the stand-in libcuda.so.1 (driver.c) only. The device whose context is current on this
 * thread, -1 if none; and what cudaStreamQuery, cudaEventRecord and cudaEventQuery answer
 * (counted as the driver's calls), the thread's last error untouched. */
int standin_drv_context(void);
int standin_drv_stream_query(void *stream);
int standin_drv_event_record(void *event, void *stream);
int standin_drv_event_query(void *event);

#endif
