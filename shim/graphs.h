/* graphs.h — blocks freed during a CUDA graph capture, held for the graphs that use them.
 * A captured graph keeps the addresses it was captured with: a block freed during the capture
 * (a temporary of the captured work, or an older block the work read) is used again by every
 * replay. Such a block is neither reused nor released while the graph, or anything made from
 * it (executable graphs, clones, graphs it was embedded in), still exists; when the last of
 * them is destroyed, the block goes to the pool like any freed block (fenced: a launch may
 * still be running). Slow path only: the hot path is untouched while no capture is underway. */
#ifndef GPUPOOL_GRAPHS_H
#define GPUPOOL_GRAPHS_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* A capture began / ended (whatever the outcome; g is the graph it produced, or NULL); called
 * after fence.c counted the begin / the end. */
void gp_graphs_capture_begin(void);
void gp_graphs_capture_end(CUgraph g);

/* cudaFree while a capture may be underway. Returns 1 when `ptr`, a live pool block, is now held
 * for the captures underway (the pool's held state: gp_pool_hold); 0 when none is or it is not a
 * pool block (free it as usual); -1 when the pool's block is not in use (held already or cached:
 * a double free, nothing changed). */
int gp_graphs_hold(void *ptr);

/* `to` (an executable graph, a clone, a parent graph) now uses what `from` uses. */
void gp_graphs_link(const void *from, const void *to);
/* A graph or an executable graph was destroyed: what only it used goes to the pool. */
void gp_graphs_gone(const void *handle);

/* cudaDeviceReset of `device` (< 0: unknown, all): its blocks are gone with its graphs. */
void gp_graphs_device_reset(int device);


#endif
