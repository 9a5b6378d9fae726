/* summary.h — the statistics at exit: a one-screen summary on stderr at GPUPOOL_LOG=info, and
 * JSON to the GPUPOOL_STATS_FILE file. Never calls CUDA. */
#ifndef GPUPOOL_SUMMARY_H
#define GPUPOOL_SUMMARY_H

#include "stats.h"

/* json_path: where to write the JSON (NULL: nowhere). Says at error level if it cannot. */
void gp_summary_write(const struct gp_stats_snapshot *s, const char *json_path);

#endif
