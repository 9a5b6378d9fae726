/* control.h — the release signal and the control thread that does every release.
 * The handler only wakes the thread: it never calls CUDA, locks or allocates. The thread is
 * started on first CUDA use. */
#ifndef GPUPOOL_CONTROL_H
#define GPUPOOL_CONTROL_H

#include "options.h"
#include "pool.h"

/* At load time: install the handler for `signo` (0: none), unless the signal already has a
 * handler or is ignored (inherited from the parent): that is kept. Starts nothing. */
int gp_control_install_signal(int signo);
/* The signal whose handler was installed (0: none, kept as it was, or sigaction failed); says
 * once, at info, when GPUPOOL_SIGNAL's signal was kept. */
int gp_control_signal(void);
/* Before start: whether releases on the control thread first flush framework caches. */
void gp_control_configure(int framework_flush);
/* At init, before start: set auto-suspend up (suspend.h), with this file's release before a
 * suspend. 1 when it needs the control thread. */
int gp_control_auto_suspend(const struct gp_options *o);
/* At first CUDA use: start the control thread for `pool`. */
int gp_control_start(struct gp_pool *pool);
/* Ask for a release from ordinary code (not a signal handler). */
void gp_control_request(void);
/* At exit: stop starting releases; wait (bounded) for one in progress to end. */
void gp_control_stop(void);
/* After fork, in the child: there is no control thread there. */
void gp_control_forget(void);
/* Wake the control thread for its periodic work only (statistics, trace); any thread. */
void gp_control_wake(void);
/* The pool's over_cap callback: the free path took `device`'s cache over its cap (any thread,
 * no lock held). The control thread brings it down. */
void gp_control_over_cap(void *arg, int device);
/* The pool's cfg.owed: a device owes a trim (GPUPOOL_VMM_TRIM with GPUPOOL_VMM_AGE); the thread
 * pays it once the program has allocated nothing for the age. */
void gp_control_owed(void *arg, int device);
void gp_control_release_now(struct gp_pool *pool, int device, enum gp_release_cause cause,
			    struct gp_release_result *out);

#endif
