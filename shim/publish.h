/* publish.h — the shim's side of the live view (stats/view.h): create /dev/shm/gpupool.<pid> at
 * first CUDA use, publish snapshots into it, remove it at exit. Callers serialise; never called
 * from the allocation path. */
#ifndef GPUPOOL_SHIM_PUBLISH_H
#define GPUPOOL_SHIM_PUBLISH_H

#include "stats.h"

/* 0, or -1 after saying why at warn level (the program runs on without a view). */
int gp_view_start(const struct gp_stats_snapshot *first);
void gp_view_publish(const struct gp_stats_snapshot *s);
void gp_view_stop(void);
/* The release requests made through the view so far (0 without a view). */
uint64_t gp_view_requests(void);
/* The resume requests made through the view so far (0 without a view). */
uint64_t gp_view_resume_requests(void);

#endif
