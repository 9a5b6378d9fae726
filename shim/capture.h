/* capture.h — stream captures in progress (capture.c): while one is underway, nothing may make a
 * real free or record a fence (either would invalidate the capture). */
#ifndef GPUPOOL_CAPTURE_H
#define GPUPOOL_CAPTURE_H

#include <cuda.h>

/* Return 1 when the capture of `s` is (was) tracked: begin and end pair up on those. */
int gp_capture_begin(CUstream s);
int gp_capture_end(CUstream s);
int gp_capture_active(void); /* any thread */
unsigned gp_capture_count(void); /* captures in progress, for the live view */

#endif
