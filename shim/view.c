/* view.c — publishes the live view: /dev/shm/gpupool.<pid>, mode 0600, created with
 * O_CREAT|O_EXCL|O_NOFOLLOW at first CUDA use, refreshed by the control thread, removed at exit.
 * The layout and the seqlock are stats/view.c's; this file only owns the one mapping. */
#define _GNU_SOURCE
#include "view.h"
#include "log.h"
#include "../stats/view.h" /* the layout (this folder has its own view.h) */

#include <string.h>
#include <unistd.h>

static struct gp_stats_view *view;
static char path[64];

int gp_view_start(const struct gp_stats_snapshot *first)
{
	int rc;

	if (gp_stats_view_path((long)getpid(), path, sizeof(path)) != 0)
		return -1;
	rc = gp_stats_view_create(path, first, &view);
	if (rc != 0) {
		gp_log(GP_LOG_WARN, "no live statistics: cannot create %s: %s", path, strerror(-rc));
		view = NULL;
		return -1;
	}
	gp_log(GP_LOG_DEBUG, "live statistics in %s", path);
	return 0;
}

void gp_view_publish(const struct gp_stats_snapshot *s)
{
	if (view != NULL)
		gp_stats_view_publish(view, s);
}

void gp_view_stop(void)
{
	if (view == NULL)
		return;
	gp_stats_view_close(view, path);
	view = NULL;
}

uint64_t gp_view_requests(void)
{
	return view != NULL ? gp_stats_view_requests(view) : 0;
}
