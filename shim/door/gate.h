/* gate.h — one gate in front of every driver entry point the process can reach: the functions
 * cuGetProcAddress and dlsym hand out, the cu* symbols a program linked to libcuda.so.1 binds, and
 * our own entry points (driver.c, work.c, the runtime door). While the gate is open a call costs
 * one load and a predictable branch; while it is closed every call first passes gp_gate_pass,
 * which the owner of the gate (auto-suspend, shim/suspend.c) uses to see activity, to wake a
 * suspended process before its call reaches the driver, and to answer the calls that only ask
 * while the process is suspended. The gate never changes a caller's arguments or return value:
 * the call goes on to the real function, or to an answer of the same signature. */
#ifndef GPUPOOL_DOOR_GATE_H
#define GPUPOOL_DOOR_GATE_H

#include <stdatomic.h>
#include <stddef.h>

/* 0: open (every call goes straight on). Anything else: closed, every call passes gp_gate_pass.
 * Written by the gate's owner only (gate.c defines it, 0). */
extern _Atomic unsigned char gp_gate_closed;

enum gp_gate_kind {
	GP_GATE_WORK,  /* launches, copies, allocations, frees, anything not known to only ask */
	GP_GATE_QUERY, /* only asks (event and stream queries, attributes, pointer and memory info):
			* not activity; while suspended answered by `answer` when it has one */
	GP_GATE_RECALL, /* only asks, and what it answers changes only by the calling thread's own
			 * work (its current context): `answer` runs whenever the gate is closed, asks
			 * the driver and remembers while the process runs, and answers from that
			 * memory while it is suspended (gp_gate_recall) */
};

/* A gated function: what a stub or an entry point of ours stands in front of. */
struct gp_gate_fn {
	const char *name;       /* the driver's symbol, "cuEventQuery" */
	void *real;             /* the driver's function */
	void *answer;           /* NULL, or a function of the same signature that answers for a
				 * suspended process without calling the driver */
	enum gp_gate_kind kind;
};

/* The slow path of a closed gate, called with the caller's arguments saved: returns the function
 * to run them with, f->real or f->answer. Never NULL. May block (a wake in progress).
 * gp_gate_pass, gp_gate_hook and gp_suspend_meminfo are the owner's (shim/suspend.c). The door
 * (gate.c) defines them weak, as an owner that never closes the gate would (pass: f->real; hook:
 * 0; meminfo: 0), so that the door builds and is tested alone; the owner's strong definitions
 * replace them at link time. */
void *gp_gate_pass(const struct gp_gate_fn *f);

/* For our own entry points written in C: GP_GATE(kind) at their top (every GP_EXPORT of the door
 * that reaches the driver; cuMemGetInfo_v2 and cudaMemGetInfo as QUERY, the others WORK). A WORK
 * call wakes a suspended process and counts as activity; a QUERY call returns 1 when the process
 * is suspended (the entry point then answers it itself, from what was true at the suspend), else
 * 0. */
int gp_gate_hook(enum gp_gate_kind kind);
#define GP_GATE(kind)                                                                              \
	(__builtin_expect(atomic_load_explicit(&gp_gate_closed, memory_order_relaxed) != 0, 0) ?   \
		 gp_gate_hook(kind) :                                                              \
		 0)

/* For a QUERY entry point of ours that asks for memory (cuMemGetInfo_v2, cudaMemGetInfo) after
 * GP_GATE returned 1: 1 with *free_b and *total_b (bytes) as they were at the suspend, or 0 (not
 * answered: the entry point goes on to the driver). */
int gp_suspend_meminfo(size_t *free_b, size_t *total_b);

/* For the answers of GP_GATE_RECALL functions (gate_table.c), from the gate's owner. While the
 * process runs (the gate closed but not suspended): 0, and *epoch the watch under way (a count
 * of the owner's arms; a thread's remembered answer is valid for that watch only, since any work
 * of the thread ends it). While suspended: 1, and *epoch the watch that ended in the suspend;
 * when the thread remembers nothing of that watch the answer calls gp_gate_wake first and then
 * the driver. */
int gp_gate_recall(unsigned long *epoch);
void gp_gate_wake(const char *why);

/* The kind of a driver function by its name, and its answer for a suspended process (NULL: a
 * suspended process is woken for it): gate_table.c, by base name (_v2, _ptsz, ... taken off).
 * A stub's gp_gate_fn carries both, taken from there when the stub is made. */
enum gp_gate_kind gp_gate_kind_of(const char *name);
void *gp_gate_answer_of(const char *name);

/* A stub in front of `real` (a driver function named `name`), for cuGetProcAddress and dlsym to
 * hand out: the same stub for the same function. `real` itself when no stub can be made (the
 * stubs ran out, or an architecture without them: then only our own entry points are gated).
 * Stubs exist on x86-64 and aarch64 (stubs.c; stub_asm.h says what one does). Thread-safe. */
void *gp_gate_stub(const char *name, void *real);

#endif
