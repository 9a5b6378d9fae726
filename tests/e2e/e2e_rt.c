/* e2e_rt.c — the helpers of e2e.h that talk to the runtime (errors, stand-in counters). Linked
 * against the stand-in, never against libgpupool: the shim arrives only through LD_PRELOAD. */
#include "e2e.h"

void e2e_cuda(cudaError_t rc, const char *what)
{
	if (rc != cudaSuccess)
		e2e_fail("%s returned %s (%d): %s", what, cudaGetErrorName(rc), (int)rc,
			 cudaGetErrorString(rc));
}

struct standin_counters e2e_counters(void)
{
	struct standin_counters c;

	standin_get(0, &c);
	return c;
}

struct live_want {
	uint64_t allocs;
	uint64_t bytes;
};

static int live_is(void *arg)
{
	const struct live_want *w = arg;
	struct standin_counters c = e2e_counters();

	return c.live_allocs == w->allocs && c.live_bytes == w->bytes;
}

int e2e_wait_live(uint64_t allocs, uint64_t bytes, int timeout_ms)
{
	struct live_want w = { allocs, bytes };

	return e2e_poll(live_is, &w, timeout_ms);
}

