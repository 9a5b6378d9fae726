/* fence.c — keeping pooled reuse as safe as native cudaFree without a stall per free.
 * The registry lock guards the stream list and is held while events are recorded on those
 * streams, so a stream is never used after its destroy; the hot path never takes it. Each call
 * is made in the context of the device it concerns (ctx.h), pushed when it is not current, and
 * inside the capture gate (capture.h): never while a capture is underway.
 * A stream that could not be registered (no host memory) would be missing from every fence:
 * from then on no fence is made at all (blocks wait for a real free, which waits for the
 * device), never an unsafe one. */
#include "fence.h"
#include "capture.h"
#include "grow.h"
#include "ctx.h"
#include "door/lookup.h"
#include "log.h"
#include "pool.h"
#include "state.h" /* gp_shim.fence */

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct stream_ent {
	CUstream s;
	int dev;
	int blocking; /* orders with its device's legacy stream (created without NON_BLOCKING) */
	/* The program destroyed it while a capture was underway, when no event may be recorded: the
	 * real destroy waits for the end of the captures (gp_fence_captures_over), and fences keep
	 * recording on it meanwhile. */
	int doomed;
	/* Its work slot's count when it last held no work of the program's (at its creation, or at
	 * a join that found it so), and the count a join attempt read (see holds_no_work). */
	uint64_t settled, seen;
};

struct ev {
	CUevent e;
	int dev;
	unsigned gen; /* resets[dev] when the event was made: a later reset destroyed it */
};

struct fence {
	int n, next; /* events, and the first not yet seen complete */
	struct ev ev[];
};

static int push(void **arr, int *n, size_t *cap, size_t size, const void *item)
{
	if (gp_grow(arr, cap, (size_t)*n + 1, size) != 0)
		return -1;
	memcpy((char *)*arr + (size_t)*n * size, item, size);
	(*n)++;
	return 0;
}

static void spare_event(const struct ev *e)
{
	if (push((void **)&gp_shim.fence.spare, &gp_shim.fence.nspare, &gp_shim.fence.capspare,
		 sizeof(*e), e) != 0)
		gp_cu.EventDestroy_v2(e->e);
}

void gp_fence_blind(void)
{
	atomic_store(&gp_shim.fence.blind, 1);
}

/* Called after every piece of work the driver door sees queued on a default stream: a plain
 * relaxed load, and a store only when the flag was clear. */
void gp_fence_note_legacy_work(void)
{
	if (atomic_load_explicit(&gp_shim.fence.legacy_used, memory_order_relaxed))
		return;
	atomic_store_explicit(&gp_shim.fence.legacy_used, 1, memory_order_relaxed);
	if (!atomic_load_explicit(&gp_shim.fence.said_legacy, memory_order_relaxed) &&
	    !atomic_exchange(&gp_shim.fence.said_legacy, 1))
		gp_log(GP_LOG_DEBUG, "work was queued on a legacy or per-thread default stream");
}

/* The counter of work on stream s (streams may share one: a join then asks the driver). */
static _Atomic uint64_t *work_count(CUstream s)
{
	uint64_t h = (uint64_t)(uintptr_t)s * 0x9e3779b97f4a7c15ULL;

	return &gp_shim.fence.work[(h >> 32) % GP_WORK_SLOTS].n;
}

/* The fence: a free the program makes after this work reads the pool's epoch after the add (even
 * a thread cache's relaxed read), so a join that advanced the epoch (sequentially consistent)
 * before that read reads the new count, or the free is not among those the join covers. */
void gp_fence_note_stream_work(CUstream s)
{
	atomic_fetch_add(work_count(s), 1);
	atomic_thread_fence(memory_order_seq_cst);
}

void gp_fence_use_device(int device)
{
	uint64_t bit = 1ULL << (device & (GP_MAX_DEVICES - 1));

	if (!(atomic_load_explicit(&gp_shim.fence.devmask, memory_order_relaxed) & bit))
		atomic_fetch_or(&gp_shim.fence.devmask, bit);
}

/* With gp_shim.fence.lock held and `dev`'s context current. */
static int event_get(int dev, struct ev *out)
{
	out->dev = dev;
	out->gen = atomic_load(&gp_shim.fence.resets[dev]);
	for (int i = gp_shim.fence.nspare - 1; i >= 0; i--) {
		if (gp_shim.fence.spare[i].dev == dev) {
			out->e = gp_shim.fence.spare[i].e;
			gp_shim.fence.spare[i] = gp_shim.fence.spare[--gp_shim.fence.nspare];
			return 0;
		}
	}
	return gp_cu.EventCreate(&out->e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS ? 0 : -1;
}

/* The event's device was reset since it was made: the event is gone, and so is the work. */
static int stale(const struct ev *e)
{
	return e->gen != atomic_load_explicit(&gp_shim.fence.resets[e->dev], memory_order_relaxed);
}

static int keep_live(struct ev *arr, int n, int dev)
{
	int k = 0;

	for (int i = 0; i < n; i++)
		if (arr[i].dev != dev)
			arr[k++] = arr[i];
	return k;
}

void gp_fence_device_reset(int device)
{
	if (device < 0 || device >= GP_MAX_DEVICES)
		return;
	pthread_mutex_lock(&gp_shim.fence.lock);
	atomic_fetch_add(&gp_shim.fence.resets[device], 1);
	gp_shim.fence.nspare = keep_live(gp_shim.fence.spare, gp_shim.fence.nspare, device);
	gp_shim.fence.nretired = keep_live(gp_shim.fence.retired, gp_shim.fence.nretired, device);
	for (int i = 0; i < gp_shim.fence.nstreams;) {
		if (gp_shim.fence.streams[i].dev == device)
			gp_shim.fence.streams[i] = gp_shim.fence.streams[--gp_shim.fence.nstreams];
		else
			i++;
	}
	pthread_mutex_unlock(&gp_shim.fence.lock);
}

/* A stream created while the legacy stream of its device has work in flight: made to wait for
 * that work when blocks may have been handed out on the strength of the legacy stream's order
 * (before the first stream, GPU work was in one stream order and freed blocks were reused at
 * once; after a join, the same holds for the blocks it released). A blocking stream waits by
 * itself (CUDA's implicit synchronization); a non-blocking one would not, and its work could run
 * beside a previous owner's. With the registry lock held. */
static void start_behind_legacy(CUstream s, int dev)
{
	struct ev e;
	int pushed;

	if (gp_cu.StreamWaitEvent == NULL || gp_ctx_enter(dev, &pushed) != 0)
		return;
	if (!gp_capture_gate_enter()) {
		/* A capture: the legacy stream may not be touched. One stream order ended when the
		 * captured stream was created (which waited then); what a join released is behind its
		 * event. */
		const struct ev *j = gp_shim.fence.join_ev;
		if (j != NULL && j->e != NULL && j->dev == dev && !stale(j))
			gp_cu.StreamWaitEvent(s, j->e, 0);
		gp_ctx_leave(pushed);
		return;
	}
	if (gp_cu.StreamQuery(CU_STREAM_LEGACY) != CUDA_SUCCESS && event_get(dev, &e) == 0) {
		if (gp_cu.EventRecord(e.e, CU_STREAM_LEGACY) != CUDA_SUCCESS ||
		    gp_cu.StreamWaitEvent(s, e.e, 0) != CUDA_SUCCESS)
			gp_cu.StreamSynchronize(CU_STREAM_LEGACY); /* the same, from the host */
		spare_event(&e); /* a wait holds the record it saw: the event may be used again */
	}
	gp_capture_gate_leave();
	gp_ctx_leave(pushed);
}

void gp_fence_stream_created(CUstream s, unsigned flags)
{
	CUcontext c;
	/* No work of the program's on it yet: its handle is not the program's until this returns. */
	struct stream_ent e = { s, gp_ctx_current(&c), !(flags & CU_STREAM_NON_BLOCKING), 0,
				atomic_load(work_count(s)), 0 };
	int failed;

	/* A stream of a context the program created cannot touch pooled memory (it lives in the
	 * primary contexts). One of an unknown device could: no fence can cover it. */
	if (e.dev >= 0 && gp_ctx_in_user())
		return;
	pthread_mutex_lock(&gp_shim.fence.lock);
	failed = e.dev < 0 || e.dev >= GP_MAX_DEVICES ||
		 push((void **)&gp_shim.fence.streams, &gp_shim.fence.nstreams,
		      &gp_shim.fence.capstreams, sizeof(e), &e) != 0;
	if (!failed && !e.blocking &&
	    (atomic_load(&gp_shim.life.ordered_from_start) || atomic_load(&gp_shim.fence.joins)))
		start_behind_legacy(s, e.dev);
	pthread_mutex_unlock(&gp_shim.fence.lock);
	if (failed && !atomic_exchange(&gp_shim.fence.blind, 1))
		gp_log(GP_LOG_ERROR, "a stream could not be registered for the fences: freed blocks "
				     "are reused only after a real free from now on");
	else if (!failed)
		gp_ctx_note(e.dev, c);
}

/* The last event of stream `se`, destroyed now: the next fence takes it over (the work queued on
 * the stream must still be waited for). When it cannot be recorded, that work is waited for now.
 * With gp_shim.fence.lock held, inside the capture gate. */
static void retire(const struct stream_ent *se)
{
	struct ev r;
	int pushed, recorded = 0;

	atomic_store(&gp_shim.fence.retired_ever, 1);
	if (gp_ctx_enter(se->dev, &pushed) == 0) {
		if (event_get(se->dev, &r) == 0) {
			if (gp_cu.EventRecord(r.e, se->s) == CUDA_SUCCESS &&
			    push((void **)&gp_shim.fence.retired, &gp_shim.fence.nretired,
				 &gp_shim.fence.capretired, sizeof(r), &r) == 0)
				recorded = 1;
			else
				gp_cu.EventDestroy_v2(r.e);
		}
		if (!recorded)
			gp_cu.StreamSynchronize(se->s);
		gp_ctx_leave(pushed);
	}
}

int gp_fence_stream_destroying(CUstream s)
{
	int deferred = 0;

	pthread_mutex_lock(&gp_shim.fence.lock);
	for (int i = 0; i < gp_shim.fence.nstreams; i++) {
		struct stream_ent *se = &gp_shim.fence.streams[i];
		if (se->s != s || se->doomed)
			continue;
		if (gp_capture_gate_enter()) {
			retire(se);
			gp_capture_gate_leave();
		} else if (!gp_capture_has(s)) {
			/* Neither an event nor a wait is allowed now: the stream stays alive, and in the
			 * fences, until the captures are over (a destroy only ever runs later). */
			se->doomed = 1;
			deferred = 1;
			break;
		} else {
			/* The stream is itself being captured: what was queued on it before the capture
			 * began is waited for with the whole device before the next fence. */
			atomic_fetch_or(&gp_shim.fence.unfenced, 1ULL << se->dev);
		}
		*se = gp_shim.fence.streams[--gp_shim.fence.nstreams];
		break;
	}
	pthread_mutex_unlock(&gp_shim.fence.lock);
	return deferred;
}

void gp_fence_captures_over(void)
{
	CUresult (*destroy)(CUstream) = gp_cu.StreamDestroy_v2 ? gp_cu.StreamDestroy_v2
							       : gp_cu.StreamDestroy;

	pthread_mutex_lock(&gp_shim.fence.lock);
	for (int i = 0; i < gp_shim.fence.nstreams;) {
		struct stream_ent se = gp_shim.fence.streams[i];
		int pushed;

		if (!se.doomed) {
			i++;
			continue;
		}
		if (!gp_capture_gate_enter())
			break; /* another capture began: its end comes back here */
		retire(&se);
		if (destroy != NULL && gp_ctx_enter(se.dev, &pushed) == 0) {
			destroy(se.s);
			gp_ctx_leave(pushed);
		}
		gp_capture_gate_leave();
		gp_shim.fence.streams[i] = gp_shim.fence.streams[--gp_shim.fence.nstreams];
	}
	pthread_mutex_unlock(&gp_shim.fence.lock);
}

/* Record one event on `s` of `dev` into f. With gp_shim.fence.lock held. */
static int record_one(struct fence *f, int dev, CUstream s)
{
	struct ev *e = &f->ev[f->n];
	int pushed, rc = -1;

	if (gp_ctx_enter(dev, &pushed) != 0)
		return -1;
	if (event_get(dev, e) == 0) {
		if (gp_cu.EventRecord(e->e, s) == CUDA_SUCCESS) {
			f->n++;
			rc = 0;
		} else {
			spare_event(e);
		}
	}
	gp_ctx_leave(pushed);
	return rc;
}

/* Whether a stream of `dev` is idle now: cuStreamQuery in the device's context; 1 idle, 0 not
 * (or not known). */
static int stream_idle(int dev, CUstream s)
{
	int pushed, idle = 0;

	if (gp_ctx_enter(dev, &pushed) != 0)
		return 0;
	idle = gp_cu.StreamQuery(s) == CUDA_SUCCESS;
	gp_ctx_leave(pushed);
	return idle;
}

/* Whether this fence records on the devices' legacy streams. An event there waits for the work
 * before it on every blocking stream, and their later work waits for it (CUDA's implicit
 * synchronization): a join of streams that would otherwise overlap. So only when work was
 * queued there since the last such event (seen by the doors' work entry points), when a
 * per-thread default stream is in use (another thread's cannot be named here), or when it costs
 * no overlap: no blocking stream has work in flight (then the join waits for nothing), which also
 * covers work queued there by a path the doors did not see. With the registry lock held. */
static int legacy_wanted(void)
{
	if (atomic_exchange(&gp_shim.fence.legacy_used, 0) ||
	    atomic_load_explicit(&gp_shim.life.per_thread_stream, memory_order_relaxed))
		return 1;
	for (int i = 0; i < gp_shim.fence.nstreams; i++) {
		const struct stream_ent *se = &gp_shim.fence.streams[i];
		if (se->blocking && !stream_idle(se->dev, se->s))
			return 0;
	}
	return 1;
}

/* Work queued on a stream that was destroyed while it was being captured: covered by no event,
 * waited for with its whole device once, before the next fence. With the registry lock held,
 * inside the gate. */
static void settle_unfenced(void)
{
	uint64_t mask = atomic_exchange(&gp_shim.fence.unfenced, 0);

	for (int d = 0; d < GP_MAX_DEVICES && mask != 0; d++) {
		int pushed;
		if (!(mask & (1ULL << d)))
			continue;
		mask &= ~(1ULL << d);
		if (gp_ctx_enter(d, &pushed) == 0) {
			gp_cu.CtxSynchronize();
			gp_ctx_leave(pushed);
		}
	}
}

/* Fences record an event on every stream the program created, blocking or not, and on the
 * legacy stream of each device in use when legacy_wanted says so, plus the destroyed streams'
 * last events. */
int gp_fence_record(void *ctx, void **out)
{
	uint64_t mask = atomic_load(&gp_shim.fence.devmask);
	struct fence *f;
	int failed = 0, legacy;

	(void)ctx;
	*out = NULL;
	if (atomic_load(&gp_shim.fence.blind) || gp_cu.EventRecord == NULL)
		return GP_EAGAIN;
	if (!gp_capture_gate_enter())
		return GP_EAGAIN;
	pthread_mutex_lock(&gp_shim.fence.lock);
	f = malloc(sizeof(*f) + sizeof(struct ev) * (size_t)(__builtin_popcountll(mask) +
							      gp_shim.fence.nstreams +
							      gp_shim.fence.nretired));
	if (f == NULL) {
		pthread_mutex_unlock(&gp_shim.fence.lock);
		gp_capture_gate_leave();
		return GP_EAGAIN;
	}
	f->n = f->next = 0;
	if (atomic_load_explicit(&gp_shim.fence.unfenced, memory_order_relaxed))
		settle_unfenced();
	legacy = legacy_wanted();
	for (int d = 0; d < GP_MAX_DEVICES && !failed && legacy; d++)
		if (mask & (1ULL << d))
			failed = record_one(f, d, CU_STREAM_LEGACY) != 0;
	for (int i = 0; i < gp_shim.fence.nstreams && !failed; i++)
		failed = record_one(f, gp_shim.fence.streams[i].dev, gp_shim.fence.streams[i].s) != 0;
	if (failed) {
		/* A fence that misses a stream would be unsafe: dropped, its events kept. */
		for (int i = 0; i < f->n; i++)
			spare_event(&f->ev[i]);
		free(f);
		if (legacy)
			gp_fence_note_legacy_work(); /* the next fence still owes the legacy streams one */
		pthread_mutex_unlock(&gp_shim.fence.lock);
		gp_capture_gate_leave();
		return GP_EAGAIN;
	}
	for (int i = 0; i < gp_shim.fence.nretired; i++)
		f->ev[f->n++] = gp_shim.fence.retired[i];
	gp_shim.fence.nretired = 0;
	pthread_mutex_unlock(&gp_shim.fence.lock);
	gp_capture_gate_leave();
	*out = f;
	return GP_OK;
}

/* Whether the streams may be asked at all (quiet, join): not blind, no per-thread default stream
 * in use (another thread's cannot be asked here), no work of a stream destroyed during its
 * capture. */
static int streams_askable(void)
{
	return !atomic_load(&gp_shim.fence.blind) && gp_cu.StreamQuery != NULL &&
	       !atomic_load_explicit(&gp_shim.life.per_thread_stream, memory_order_relaxed) &&
	       !atomic_load_explicit(&gp_shim.fence.unfenced, memory_order_relaxed);
}

/* Whether no destroyed stream's event is pending and every stream the program created is idle.
 * With the registry lock held. */
static int created_idle(void)
{
	int idle = gp_shim.fence.nretired == 0;

	for (int i = 0; i < gp_shim.fence.nstreams && idle; i++)
		idle = stream_idle(gp_shim.fence.streams[i].dev, gp_shim.fence.streams[i].s);
	return idle;
}

/* Whether every stream a fence would cover is idle now (all work queued on it so far is done),
 * which covers the same work without an event: each device's legacy stream and every stream the
 * program created, each asked itself (whether an idle answer for the legacy stream also means its
 * blocking streams are idle is not assumed). Not with events of destroyed streams still pending
 * (a fence takes those over), nor with a per-thread default stream in use (another thread's
 * cannot be asked here), nor with work of a stream destroyed during its capture. */
int gp_fence_quiet(void *ctx)
{
	uint64_t mask = atomic_load(&gp_shim.fence.devmask);
	int idle;

	(void)ctx;
	if (!streams_askable() || !gp_capture_gate_enter())
		return 0;
	pthread_mutex_lock(&gp_shim.fence.lock);
	idle = 1;
	for (int d = 0; d < GP_MAX_DEVICES && idle; d++)
		if (mask & (1ULL << d))
			idle = stream_idle(d, CU_STREAM_LEGACY);
	idle = idle && created_idle();
	pthread_mutex_unlock(&gp_shim.fence.lock);
	gp_capture_gate_leave();
	return idle;
}

/* Whether stream `se` holds no work of the program's now: none was queued on it since it last held
 * none (the count of its slot is what it was then; what may still be pending there is only earlier
 * joins' waits, which stay pending until the legacy stream reaches their event and would otherwise
 * make every join while the GPU lags behind find the stream busy), or the driver says it is idle.
 * The count is read first and kept in se->seen: work queued after that read either makes the
 * driver's answer busy or changes the count the next join compares. This rests on the doors
 * seeing every call that queues work on a stream (table.h's work rows), as legacy_wanted does; a
 * count that moved (work seen, or a stream sharing the slot) asks the driver, as before. With the
 * registry lock held. */
static int holds_no_work(struct stream_ent *se)
{
	se->seen = atomic_load(work_count(se->s));
	return se->seen == se->settled || stream_idle(se->dev, se->s);
}

/* created_idle for a join: every stream the program created is of device `dev` and holds no work
 * of the program's, and no destroyed stream's event is pending. With the registry lock held. */
static int created_settled(int dev)
{
	int ok = gp_shim.fence.nretired == 0;

	for (int i = 0; i < gp_shim.fence.nstreams && ok; i++)
		ok = gp_shim.fence.streams[i].dev == dev && holds_no_work(&gp_shim.fence.streams[i]);
	return ok;
}

/* The join's event, kept recorded (start_behind_legacy waits for it during a capture): made
 * once, and again after a device reset destroyed it (one device: joins need one). NULL when it
 * cannot be made. With the registry lock held and dev's context current. */
static struct ev *join_event(int dev)
{
	struct ev *j = gp_shim.fence.join_ev;

	if (j == NULL && (j = gp_shim.fence.join_ev = calloc(1, sizeof(*j))) == NULL)
		return NULL;
	if ((j->e == NULL || stale(j)) && event_get(dev, j) != 0) {
		j->e = NULL;
		return NULL;
	}
	return j;
}

/* A fence of one event on the legacy stream of `dev` (the registry lock held): complete once
 * every GPU operation issued before it is, when no stream the program created holds work of the
 * program's (a join's). NULL when it cannot be made. */
static struct fence *legacy_fence(int dev)
{
	struct fence *f = malloc(sizeof(*f) + sizeof(struct ev));

	if (f != NULL) {
		f->n = f->next = 0;
		if (record_one(f, dev, CU_STREAM_LEGACY) != 0) {
			free(f);
			f = NULL;
		}
	}
	return f;
}

/* The frees made so far need no fence when no stream the program created holds work of the
 * program's (holds_no_work): what work they used may still be doing is then on the legacy stream
 * (one device only), and an event recorded there now, which every non-blocking stream is made to
 * wait for, comes after it in every stream's order: the legacy stream's own, blocking (and
 * per-thread default) streams' by CUDA's implicit synchronization with it, non-blocking ones' by
 * the wait, streams created later by a wait at their creation (start_behind_legacy). So a block
 * freed before this call may be handed out at once, as PyTorch's own cache does on one stream,
 * where a fence would leave it pending until the GPU has caught up and let the pool grow
 * meanwhile. Only in takeover mode (join_on): a later kernel on a non-blocking stream now waits
 * for the legacy stream's earlier work, which a program whose kernels wait for each other across
 * streams could not afford. Not with a capture (the gate), destroyed streams' events pending (or,
 * with fences in flight, ever: those fences may hold one, which is on no stream the join
 * reaches), a per-thread default stream, work of a stream destroyed during its capture, or a
 * second device. Fences in flight are otherwise covered: their events are on the legacy stream
 * (before the join's) or on streams that hold no work of the program's. 1 joined, 0 not (nothing
 * done that matters: a wait already queued only delays a stream). The work itself may still run
 * on the GPU after a join: `settle`, when asked for, gets a fence that completes once it is done
 * (legacy_fence); until then the blocks may be reused but not unmapped or given back without a
 * wait (pool.h). */
int gp_fence_join(void *ctx, int inflight, void **settle)
{
	uint64_t mask = atomic_load(&gp_shim.fence.devmask);
	int dev = mask ? __builtin_ctzll(mask) : -1, ok, pushed;

	(void)ctx;
	if (!gp_shim.fence.join_on || dev < 0 || (mask & (mask - 1)) != 0 ||
	    (inflight && atomic_load(&gp_shim.fence.retired_ever)) ||
	    gp_cu.StreamWaitEvent == NULL || !streams_askable() || !gp_capture_gate_enter())
		return 0;
	pthread_mutex_lock(&gp_shim.fence.lock);
	ok = created_settled(dev);
	if (ok && (ok = gp_ctx_enter(dev, &pushed) == 0)) {
		struct ev *j = join_event(dev);
		ok = j != NULL && gp_cu.EventRecord(j->e, CU_STREAM_LEGACY) == CUDA_SUCCESS;
		for (int i = 0; i < gp_shim.fence.nstreams && ok; i++)
			if (!gp_shim.fence.streams[i].blocking)
				ok = gp_cu.StreamWaitEvent(gp_shim.fence.streams[i].s, j->e, 0) ==
				     CUDA_SUCCESS;
		if (ok && settle != NULL)
			*settle = legacy_fence(dev);
		gp_ctx_leave(pushed);
	}
	if (ok) {
		atomic_fetch_add(&gp_shim.fence.joins, 1);
		for (int i = 0; i < gp_shim.fence.nstreams; i++)
			gp_shim.fence.streams[i].settled = gp_shim.fence.streams[i].seen;
	}
	pthread_mutex_unlock(&gp_shim.fence.lock);
	gp_capture_gate_leave();
	return ok;
}

/* One event of a fence: 1 complete, 0 not (or not known to be). */
static int event_done(const struct ev *ev)
{
	CUresult r;
	int pushed;

	if (stale(ev))
		return 1;
	if (gp_ctx_enter(ev->dev, &pushed) != 0)
		return 0;
	r = gp_cu.EventQuery(ev->e);
	gp_ctx_leave(pushed);
	if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY)
		return r == CUDA_SUCCESS;
	/* Not known to be complete (a capture begun on another thread, a transient error): not
	 * reused yet. In a broken context nothing completes, and nothing needs to: every real
	 * allocation fails there anyway. */
	gp_log_capped(GP_LOG_WARN, &gp_shim.fence.warned_query, "cuEventQuery failed (error %d); "
		      "fence not complete", (int)r);
	return 0;
}

int gp_fence_query(void *ctx, void *fence)
{
	struct fence *f = fence;
	int done = 1;

	(void)ctx;
	if (!gp_capture_gate_enter())
		return 0;
	while (f->next < f->n && (done = event_done(&f->ev[f->next])) != 0)
		f->next++;
	gp_capture_gate_leave();
	return done;
}

/* Each wait in the gate of its own: a capture begun meanwhile waits for one event at most. */
int gp_fence_wait(void *ctx, void *fence)
{
	struct fence *f = fence;

	(void)ctx;
	while (f->next < f->n) {
		const struct ev *ev = &f->ev[f->next];
		int pushed;
		if (!gp_capture_gate_enter())
			return GP_EAGAIN;
		if (!stale(ev) && gp_ctx_enter(ev->dev, &pushed) == 0) {
			gp_cu.EventSynchronize(ev->e);
			gp_ctx_leave(pushed);
		}
		gp_capture_gate_leave();
		f->next++;
	}
	return GP_OK;
}

void gp_fence_destroy(void *ctx, void *fence)
{
	struct fence *f = fence;

	(void)ctx;
	if (f == NULL)
		return;
	pthread_mutex_lock(&gp_shim.fence.lock);
	for (int i = 0; i < f->n; i++)
		if (!stale(&f->ev[i]))
			spare_event(&f->ev[i]);
	pthread_mutex_unlock(&gp_shim.fence.lock);
	free(f);
}
