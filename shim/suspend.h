/* suspend.h — auto-suspend (GPUPOOL_AUTO_SUSPEND): an idle process gives its device memory back
 * and then parks everything else through the driver's checkpoint API (park.h), on its own; the
 * next CUDA call of any thread resumes it. The decisions are here (suspend.c): when the process
 * is idle, what refuses a suspend, who resumes. The door's gate (door/gate.h) is its state word;
 * this file is the owner of the gate and writes gp_gate_pass, gp_gate_hook and
 * gp_suspend_meminfo. The control thread drives it; nothing here runs in a signal handler. */
#ifndef GPUPOOL_SHIM_SUSPEND_H
#define GPUPOOL_SHIM_SUSPEND_H

#include "options.h"
#include "stats.h"

#include <stddef.h>
#include <stdint.h>

/* The values of gp_gate_closed (door/gate.h). */
enum gp_suspend_gate {
	GP_SUSPEND_OPEN = 0,   /* running, not watched: calls go straight on */
	GP_SUSPEND_WATCH,      /* armed: the first call that does work opens it (activity) */
	GP_SUSPEND_SUSPENDING, /* the control thread is locking and checkpointing: calls wait */
	GP_SUSPEND_SUSPENDED,  /* checkpointed: work resumes first; queries are answered */
	GP_SUSPEND_RESUMING,   /* one thread restores and unlocks: the others wait */
};

/* At init, before the control thread starts: the setting, and what suspend.c asks of the control
 * thread's file (the release before a suspend, with the frameworks' flush) and of the view (a
 * publish soon). 1 when the control thread is needed. */
int gp_suspend_init(const struct gp_options *o, void (*release_all)(void), void (*wake)(void));
/* Control thread, at every wake: arms the gate, suspends once idle long enough, resumes when
 * `gpupool resume` asked. Returns the longest it may sleep before the next call (ns; 0: no
 * limit). */
uint64_t gp_suspend_tick(void);
/* 1 while the driver may be called (running: open or watched), 0 while suspending, suspended or
 * resuming: the control thread and the shim's own calls outside the gate then make none. */
int gp_suspend_running(void);
/* The calling thread passes the gate untouched from now on (the control thread: the release
 * before a suspend calls the doors, through the frameworks' flush). */
void gp_suspend_exempt_thread(void);
/* An IPC memory handle was handed out: the checkpoint API cannot park such memory. */
void gp_suspend_note_ipc(void);
/* `gpupool resume` asked through the view (control thread). */
void gp_suspend_wake_request(void);
/* At exit: resume if suspended (the runtime's teardown calls the driver), and never again. */
void gp_suspend_stop(void);
/* In a fork's child: the parent's state is not the child's; never suspend. */
void gp_suspend_forget(void);
/* The auto-suspend figures of the live view (stats.h's GP_STATS_STATE). */
void gp_suspend_fill(struct gp_stats_snapshot *s);
/* While suspended: cuMemGetInfo's answer as it was at the suspend (1), or 0 when there is none
 * (the caller then resumes the process first). */
int gp_suspend_meminfo(size_t *free_b, size_t *total_b);

#endif
