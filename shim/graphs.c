/* graphs.c — blocks freed during a CUDA graph capture, held for the graphs that use them
 * (graphs.h says why). Which capture a free belongs to cannot be told (cudaFree names no
 * stream), so a free during any capture is held for every graph ended while it was open: a
 * "hold" collects the frees from the first capture's begin until no capture is left, and each
 * graph, executable graph or copy made from one of its graphs counts as one reference to it.
 * Unknown destroys (a graph destroyed through the driver API) only keep blocks longer. */
#include "graphs.h"
#include "capture.h"
#include "fence.h"
#include "grow.h"
#include "log.h"
#include "pool.h"
#include "shim.h"
#include "state.h" /* gp_shim.graphs */

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct held {
	void *ptr;
	size_t bytes;
	int dev;
	uint32_t ticket; /* the held allocation, for gp_pool_unhold */
};

struct hold {
	struct held *b;
	int n;
	size_t cap; /* room for n (gp_grow) */
	int refs;  /* graphs and executable graphs that may use the blocks */
	int open;  /* captures are still underway: more frees may come */
	struct hold *next;
};

struct owner {
	const void *handle;
	struct hold *h;
};

static void unlink_hold(struct hold *h)
{
	for (struct hold **pp = &gp_shim.graphs.holds; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == h) {
			*pp = h->next;
			return;
		}
	}
}

/* No lock held: the blocks go to the pool as freed (which never calls the backend), each only if
 * it is still the allocation that was held (after a device reset the pool forgot it). */
static void drop(struct hold *h)
{
	while (h != NULL) {
		struct hold *next = h->next;
		for (int i = 0; i < h->n; i++)
			gp_pool_unhold(gp_shim.life.pool, h->b[i].ptr, h->b[i].ticket);
		if (h->n > 0)
			gp_log(GP_LOG_DEBUG, "%d block(s) freed during a graph capture go back to the pool: "
			       "no graph made from that capture is left", h->n);
		free(h->b);
		free(h);
		h = next;
	}
}

void gp_graphs_capture_begin(void)
{
	pthread_mutex_lock(&gp_shim.graphs.lock);
	if (gp_shim.graphs.cur == NULL) {
		struct hold *h = calloc(1, sizeof(*h));

		gp_shim.graphs.cur = h;
		if (h != NULL) {
			h->open = 1;
			h->next = gp_shim.graphs.holds;
			gp_shim.graphs.holds = h;
		} else {
			gp_log(GP_LOG_WARN, "out of host memory: blocks freed during this graph capture "
			       "are not kept for the graph");
		}
	}
	pthread_mutex_unlock(&gp_shim.graphs.lock);
}

static int add_owner(const void *handle, struct hold *h)
{
	if (gp_grow((void **)&gp_shim.graphs.owners, &gp_shim.graphs.capowners,
		    (size_t)gp_shim.graphs.nowners + 1, sizeof(*gp_shim.graphs.owners)) != 0)
		return -1;
	gp_shim.graphs.owners[gp_shim.graphs.nowners].handle = handle;
	gp_shim.graphs.owners[gp_shim.graphs.nowners].h = h;
	gp_shim.graphs.nowners++;
	h->refs++;
	atomic_store(&gp_shim.graphs.any_owner, 1);
	return 0;
}

void gp_graphs_capture_end(CUgraph g)
{
	struct hold *h, *dead = NULL;

	pthread_mutex_lock(&gp_shim.graphs.lock);
	h = gp_shim.graphs.cur;
	if (h != NULL && g != NULL && h->n > 0 && add_owner(g, h) != 0) {
		/* Without a record of the graph the blocks can never be given back safely: they
		 * stay held (lost to reuse, never to correctness). */
		h->refs++;
		gp_log(GP_LOG_WARN, "out of host memory: %d block(s) freed during a graph capture "
		       "stay allocated for good", h->n);
	}
	/* The capture that ended is no longer counted: close the hold when none is left. A capture
	 * begun meanwhile keeps it open, and its own end closes it. */
	if (!gp_capture_active() && h != NULL) {
		h->open = 0;
		gp_shim.graphs.cur = NULL;
		if (h->refs == 0) {
			unlink_hold(h);
			h->next = NULL;
			dead = h;
		}
	}
	pthread_mutex_unlock(&gp_shim.graphs.lock);
	drop(dead);
}

__attribute__((noinline)) int gp_graphs_hold(void *ptr) /* cold: not flattened */
{
	struct hold *cur;
	struct held b = { ptr, 0, -1, 0 };
	int rc, room;

	pthread_mutex_lock(&gp_shim.graphs.lock);
	cur = gp_shim.graphs.cur;
	if (cur == NULL) {
		pthread_mutex_unlock(&gp_shim.graphs.lock);
		return 0;
	}
	room = gp_grow((void **)&cur->b, &cur->cap, (size_t)cur->n + 1, sizeof(*cur->b)) == 0;
	/* The pool's state says whether it is a live block of the pool (held now), one freed already
	 * (during this capture or before: a double free) or not the pool's. */
	rc = gp_pool_hold(gp_shim.life.pool, ptr, &b.ticket, &b.bytes, &b.dev);
	if (rc == GP_OK && room)
		cur->b[cur->n++] = b;
	pthread_mutex_unlock(&gp_shim.graphs.lock);
	if (rc == GP_OK && !room)
		gp_log_capped(GP_LOG_WARN, &gp_shim.graphs.said_no_memory, "out of host "
			      "memory: a block freed during a graph capture stays allocated "
			      "for good");
	return rc == GP_OK ? 1 : rc == GP_EINVAL ? -1 : 0;
}

void gp_graphs_link(const void *from, const void *to)
{
	if (from == NULL || to == NULL || !atomic_load(&gp_shim.graphs.any_owner))
		return;
	pthread_mutex_lock(&gp_shim.graphs.lock);
	for (int i = 0, n = gp_shim.graphs.nowners; i < n; i++) {
		struct hold *h = gp_shim.graphs.owners[i].h;

		if (gp_shim.graphs.owners[i].handle == from && add_owner(to, h) != 0) {
			/* `to` would use blocks that `from`'s destroy could give away: keep them. */
			h->refs++;
			gp_log(GP_LOG_WARN, "out of host memory: blocks of a captured graph stay "
			       "allocated for good");
		}
	}
	pthread_mutex_unlock(&gp_shim.graphs.lock);
}

void gp_graphs_gone(const void *handle)
{
	struct hold *dead = NULL;

	if (handle == NULL || !atomic_load(&gp_shim.graphs.any_owner))
		return;
	pthread_mutex_lock(&gp_shim.graphs.lock);
	for (int i = 0; i < gp_shim.graphs.nowners;) {
		struct hold *h = gp_shim.graphs.owners[i].h;
		if (gp_shim.graphs.owners[i].handle != handle) {
			i++;
			continue;
		}
		gp_shim.graphs.owners[i] = gp_shim.graphs.owners[--gp_shim.graphs.nowners];
		if (--h->refs == 0 && !h->open) {
			unlink_hold(h);
			h->next = dead;
			dead = h;
		}
	}
	if (gp_shim.graphs.nowners == 0)
		atomic_store(&gp_shim.graphs.any_owner, 0);
	pthread_mutex_unlock(&gp_shim.graphs.lock);
	drop(dead);
}

void gp_graphs_device_reset(int device)
{
	pthread_mutex_lock(&gp_shim.graphs.lock);
	for (struct hold *h = gp_shim.graphs.holds; h != NULL; h = h->next) {
		int k = 0;
		for (int i = 0; i < h->n; i++)
			if (device >= 0 && h->b[i].dev != device)
				h->b[k++] = h->b[i];
		h->n = k;
	}
	pthread_mutex_unlock(&gp_shim.graphs.lock);
}
