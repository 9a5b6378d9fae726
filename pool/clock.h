/* clock.h — the one conversion between struct timespec and nanoseconds: a clock read as ns, and
 * ns as a timespec. Header only, libc only, so that the pool and the shim may both use it.
 * Never the wall clock unless asked for by id (waits and ages use the monotonic ones). */
#ifndef GPUPOOL_CLOCK_H
#define GPUPOOL_CLOCK_H

#include <stdint.h>
#include <time.h>

#define GP_NS_PER_S 1000000000u

/* Clock `id` (CLOCK_MONOTONIC, _COARSE, CLOCK_REALTIME) in ns. */
static inline uint64_t gp_clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * GP_NS_PER_S + (uint64_t)ts.tv_nsec;
}

static inline struct timespec gp_timespec_of(uint64_t ns)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(ns / GP_NS_PER_S);
	ts.tv_nsec = (long)(ns % GP_NS_PER_S);
	return ts;
}

#endif
