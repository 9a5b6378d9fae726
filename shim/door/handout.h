/* handout.h — the driver door: our dlsym and cuGetProcAddress hand out our driver entry points
 * (driver.c, work.c) in place of the driver's own, to every runtime and library in the process;
 * never a function other than the one the caller would have got, or its wrapper. */
#ifndef GPUPOOL_DOOR_HANDOUT_H
#define GPUPOOL_DOOR_HANDOUT_H

/* Whether anyone has looked the driver up through us (cuGetProcAddress, or a driver name through
 * dlsym): until then the runtime's calls to the driver are not seen. */
int gp_door_seen(void);
/* Whether a lookup returned a driver function we could not match to our table: our entry points
 * may be missing where they are needed, so the pool must not serve allocations. */
int gp_door_blind(void);

#endif
