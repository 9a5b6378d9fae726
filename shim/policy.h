/* policy.h — the automatic release policies: cache cap, idle age, device pressure.
 * Each turns a setting into a target and calls one release function of the pool; all run on
 * the control thread, never on the hot path. */
#ifndef GPUPOOL_POLICY_H
#define GPUPOOL_POLICY_H

#include "options.h"
#include "pool.h"

#include <stdint.h>

void gp_policy_init(struct gp_pool *pool, const struct gp_options *opts);
/* Any policy set that needs the control thread? */
int gp_policy_needs_thread(void);
/* How long the control thread may sleep before the next timed check (0 = until woken). */
uint64_t gp_policy_period_ns(void);
/* A device was used for the first time, on the calling thread (it is current there). */
void gp_policy_device_seen(int device);
/* The pool said a device went over its cap (any thread, no lock held). */
void gp_policy_over_cap(void *arg, int device);
/* On the control thread: run what is due. */
void gp_policy_run(void);

#endif
