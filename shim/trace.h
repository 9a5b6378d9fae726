/* trace.h — GPUPOOL_TRACE: every pooled allocation and free, written as CSV in the format of
 * RMM's logging_resource_adaptor. On the allocation path only gp_trace() is called: a relaxed
 * load when tracing is off; a timestamp and an append to the thread's own ring when on: never a
 * lock or a system call there. */
#ifndef GPUPOOL_TRACE_H
#define GPUPOOL_TRACE_H

#include "state.h"
#include "stats.h"

#include <stdatomic.h>
#include <stddef.h>

enum gp_trace_action { GP_TRACE_ALLOC = 0, GP_TRACE_FREE, GP_TRACE_FAIL };

/* The slow halves below are never inlined: the hit path is flattened (shim.c) and stops at them. */

__attribute__((noinline)) void gp_trace_event(int action, const void *ptr, size_t bytes);

/* An allocation (or its failure), just after it happened. bytes: what the program asked for. */
static inline void gp_trace(int action, const void *ptr, size_t bytes)
{
	if (__builtin_expect(atomic_load_explicit(&gp_shim.trace.on, memory_order_relaxed), 0))
		gp_trace_event(action, ptr, bytes);
}

/* A free is stamped before the pool takes the block back (begin), so that its row comes before
 * the row of whichever thread gets the block next; end appends it if the free happened (ptr not
 * NULL). Its size is found at flush, from its allocation. */
__attribute__((noinline)) uint64_t gp_trace_free_begin_slow(void);
__attribute__((noinline)) void gp_trace_free_end_slow(uint64_t ns, const void *ptr);

static inline uint64_t gp_trace_free_begin(void)
{
	if (__builtin_expect(atomic_load_explicit(&gp_shim.trace.on, memory_order_relaxed), 0))
		return gp_trace_free_begin_slow();
	return 0;
}

static inline void gp_trace_free_end(uint64_t ns, const void *ptr)
{
	if (__builtin_expect(ns != 0, 0))
		gp_trace_free_end_slow(ns, ptr);
}

/* Open `path` (truncated) and its samples file; 0, or -1 after saying why. `wake` (may be NULL)
 * is called when a thread's ring is half full, to have it flushed soon. */
int gp_trace_start(const char *path, void (*wake)(void));
/* Write out what the threads have recorded (the control thread, and a thread whose ring filled). */
void gp_trace_flush(void);
/* One row per device of `s` in the samples file; `event` names why ("tick", a release cause). */
void gp_trace_sample(const struct gp_stats_snapshot *s, const char *event);
/* At exit: stop recording, write everything, a last sample, close. */
void gp_trace_stop(const struct gp_stats_snapshot *s);

#endif
