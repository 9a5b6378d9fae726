/* capture.h — stream captures in progress (capture.c): while one is underway, nothing may make a
 * real free or record, query or wait for a fence (any of them would invalidate the capture). */
#ifndef GPUPOOL_CAPTURE_H
#define GPUPOOL_CAPTURE_H

#include <cuda.h>

/* Return 1 when the capture of `s` is (was) tracked: begin and end pair up on those. */
int gp_capture_begin(CUstream s);
int gp_capture_end(CUstream s);
int gp_capture_active(void); /* any thread */
unsigned gp_capture_count(void); /* captures in progress, for the live view */
/* 1 when `s` is one of the streams being captured. */
int gp_capture_has(CUstream s);

/* The gate of the driver calls a capture forbids (recording, querying and waiting for fences,
 * real frees): enter returns 1 when no capture is underway, and then no capture's begin reaches
 * the driver until the caller leaves; 0 when one is (skip or defer the call). A check of
 * gp_capture_active() alone could be followed by a begin before the call. Never blocks. */
int gp_capture_gate_enter(void);
void gp_capture_gate_leave(void);

#endif
