/* observe.h — what the shim tells the outside world: a statistics snapshot read from the pool,
 * published as the live view, sampled into the trace and summarised at exit. The hooks the rest
 * of the shim calls; none of them is on the allocation path (the trace's own hook is trace.h),
 * and none drives a release (it wakes the control thread through a callback). */
#ifndef GPUPOOL_OBSERVE_H
#define GPUPOOL_OBSERVE_H

#include "options.h"
#include "pool.h"
#include "stats.h"

#include <stdint.h>

/* At first CUDA use: set up the live view and the trace as the options say. Returns 1 when the
 * control thread has periodic work to do for them; `wake` wakes it sooner (observing never
 * drives it otherwise). */
int gp_obs_start(struct gp_pool *pool, const struct gp_options *opts, void (*wake)(void));
/* The live view is published: someone may look at what is measured for it. */
int gp_obs_viewing(void);
/* How long the control thread may sleep, given what it would sleep otherwise (0: forever). */
uint64_t gp_obs_sleep_ns(uint64_t ns);
/* On the control thread, every time it wakes: refresh what is due. */
void gp_obs_tick(void);
/* Whether the last view showed blocks pending (freed, their fences not yet seen done) while the
 * pool made and freed nothing over a whole period: the program is still, so nothing drives the
 * fences, and the view would show them pending after the GPU finished. The control thread then
 * drives them (gp_pool_advance) before its next tick. */
int gp_obs_unsettled(void);
/* A release has ended (any thread): it becomes the last release; the view is refreshed. */
void gp_obs_released(enum gp_release_cause cause, const struct gp_release_result *r);
/* An allocation on `device` was retried after an out-of-memory release (rare path). */
void gp_obs_oom_retry(int device);
/* The release requests made through the live view so far (gpupool release; 0 without one). */
uint64_t gp_obs_requests(void);
/* The resume requests made through the live view so far (gpupool resume of a process that
 * suspended itself; 0 without a view). */
uint64_t gp_obs_resume_requests(void);
/* The program took the release signal over: the view names no signal from now on, so that
 * `gpupool release` does not send it one it did not ask for. */
void gp_obs_signal_lost(void);
/* At exit, in the process that started it (not in a forked child): last trace rows, the
 * summary, and the live view removed. */
void gp_obs_exit(void);

#endif
