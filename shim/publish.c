/* publish.c — publishes the live view: /dev/shm/gpupool.<pid>, mode 0600, created with
 * O_CREAT|O_EXCL|O_NOFOLLOW at first CUDA use, refreshed by the control thread, removed at exit.
 * The layout and the seqlock are stats/view.c's; this file only owns the one mapping, and never
 * acts on the view's request word (the control thread does). */
#define _GNU_SOURCE
#include "publish.h"
#include "log.h"
#include "state.h" /* gp_shim.obs: view, view_path */
#include "view.h" /* the layout (stats/view.h) */

#include <string.h>
#include <unistd.h>

int gp_view_start(const struct gp_stats_snapshot *first)
{
	int rc;

	if (gp_stats_view_path((long)getpid(), gp_shim.obs.view_path,
			       sizeof(gp_shim.obs.view_path)) != 0)
		return -1;
	rc = gp_stats_view_create(gp_shim.obs.view_path, first, &gp_shim.obs.view);
	if (rc != 0) {
		gp_log(GP_LOG_WARN, "no live statistics: cannot create %s: %s",
		       gp_shim.obs.view_path, strerror(-rc));
		gp_shim.obs.view = NULL;
		return -1;
	}
	gp_log(GP_LOG_DEBUG, "live statistics in %s", gp_shim.obs.view_path);
	return 0;
}

void gp_view_publish(const struct gp_stats_snapshot *s)
{
	if (gp_shim.obs.view != NULL)
		gp_stats_view_publish(gp_shim.obs.view, s);
}

void gp_view_stop(void)
{
	if (gp_shim.obs.view == NULL)
		return;
	gp_stats_view_close(gp_shim.obs.view, gp_shim.obs.view_path);
	gp_shim.obs.view = NULL;
}

uint64_t gp_view_requests(void)
{
	return gp_shim.obs.view != NULL ? gp_stats_view_requests(gp_shim.obs.view) : 0;
}

uint64_t gp_view_resume_requests(void)
{
	return gp_shim.obs.view != NULL ? gp_stats_view_resume_requests(gp_shim.obs.view) : 0;
}
