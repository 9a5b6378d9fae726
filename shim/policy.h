/* policy.h — the automatic release policies: cache cap, idle age, device pressure, and when they
 * reach the frameworks' own caches. The policy decides and acts on nothing: the control thread
 * measures what it is asked for, hands the figures in, and carries out the plan it gets back.
 * Everything here runs on the control thread, never on the hot path, except
 * gp_policy_device_seen. */
#ifndef GPUPOOL_POLICY_H
#define GPUPOOL_POLICY_H

#include "options.h"
#include "pool.h"

#include <stdint.h>

/* What one tick of the control thread looks at (gp_policy_due). */
enum { GP_POLICY_POLL = 1, GP_POLICY_IDLE = 2 };

/* What the control thread measured this tick. */
struct gp_policy_input {
	uint64_t now_ns;
	unsigned due;          /* GP_POLICY_* from gp_policy_due */
	uint64_t pool_allocs;  /* allocations the pool has served so far, all devices */
	uint64_t measured;     /* devices whose free memory was read (the mask gp_policy_due gave) */
	uint64_t free_bytes[GP_MAX_DEVICES];
	int fw_known;          /* the frameworks were probed (gp_policy_wants_probe) */
	uint64_t fw_cached;    /* bytes their caches hold and have not handed out */
	uint64_t fw_activity;  /* changes whenever they hand out memory */
};

/* What to do, in this order: flush, then the pressure releases, then the idle ones. */
struct gp_policy_plan {
	int flush;                      /* empty the frameworks' caches into the pool first */
	uint64_t pressure;              /* devices short of free memory */
	uint64_t deficit[GP_MAX_DEVICES]; /* bytes: how far below GPUPOOL_MIN_FREE each is */
	int idle_all;                   /* the whole process is idle: release everything cached */
	uint64_t idle_before_ns;        /* else release blocks freed before this (0: none) */
};

void gp_policy_init(struct gp_pool *pool, const struct gp_options *opts);
/* Any policy set that needs the control thread? */
int gp_policy_needs_thread(void);
/* How long the control thread may sleep before the next timed check (0 = until woken). */
uint64_t gp_policy_period_ns(void);
/* A device was used for the first time, on the calling thread (it is current there). */
void gp_policy_device_seen(int device);
/* Which checks are due at `now` (marking them done), and in *measure the devices whose free
 * memory the plan needs. */
unsigned gp_policy_due(uint64_t now_ns, uint64_t *measure);
/* Whether the plan needs the frameworks probed (which takes Python's GIL): only when a flush
 * could follow, or to see whether the process is still allocating. */
int gp_policy_wants_probe(const struct gp_policy_input *in);
void gp_policy_plan(const struct gp_policy_input *in, struct gp_policy_plan *out);

#endif
