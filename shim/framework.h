/* framework.h — frameworks that keep their own cache (PyTorch, CuPy): asking them to empty it
 * before a release, so their idle segments flow into the pool and go back with the rest;
 * and PyTorch's takeover mode. Never takes the GIL during interpreter finalisation. */
#ifndef GPUPOOL_FRAMEWORK_H
#define GPUPOOL_FRAMEWORK_H

#include <stdint.h>

/* At load time, in takeover mode: PYTORCH_NO_CUDA_MEMORY_CACHING=1 unless the user set it. */
void gp_framework_load_takeover(void);
/* At first CUDA use: warn about PyTorch set-ups that never call cudaMalloc, and, in takeover
 * mode, about inductor's CUDA graphs (which need PyTorch's own cache). */
void gp_framework_check_config(int takeover);
/* On the control thread, no pool lock held: empty the frameworks' caches. Returns 1 if Python
 * ran the flush, 0 if there is no (live) interpreter. */
int gp_framework_flush(void);
#define GP_FW_MAX_DEVICES 64 /* = GP_MAX_DEVICES (framework.c checks): the devices covered */

/* What the frameworks' own caches hold, read under the GIL (gp_framework_probe). */
struct gp_fw_state {
	int present;       /* a framework with a cache of its own runs in this process */
	uint64_t cached;   /* bytes: reserved by their caches and not handed out (PyTorch, CuPy) */
	/* The same per device: PyTorch's per device, CuPy's on the device current for the calling
	 * thread (its pool answers for that one only: 0 for the control thread). */
	uint64_t cached_device[GP_FW_MAX_DEVICES];
	uint64_t activity; /* changes whenever they hand out memory (PyTorch's allocation count,
			    * CuPy's pool figures); equal values: no allocation between two probes */
};

/* On the control thread, no pool lock held: read what the frameworks' caches hold. Returns 1
 * when Python ran the probe, 0 when there is no (live) interpreter (*out is zeroed). */
int gp_framework_probe(struct gp_fw_state *out);
/* On the control thread: trim the runtime's stream-ordered pools (cudaMallocAsync). */
void gp_framework_trim_async_pools(void);

#endif
