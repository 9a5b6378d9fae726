/* fences.c — whether gpupool's fences cover the GPU work that may still use a freed block, on the
 * stand-in's in-flight kernels (a kernel here waits at a gate the test opens: it runs, as on a
 * GPU, long after its launch returned). Modes (argv[1]):
 *   quiet      a kernel on a blocking stream still uses a freed block: a cudaMalloc of its size
 *              does not get it (the question "is the GPU idle?" asks that stream itself, not only
 *              the legacy stream, whose answer need not cover it).
 *   join       two blocking streams, one busy: the fence a miss records lets the other stream's
 *              next kernel run (an event on the legacy stream would make it wait for the busy
 *              one: a join of streams that were overlapping).
 *   destroyed  a stream destroyed during another stream's capture, while its kernel still uses a
 *              freed block: the block is not handed out until that kernel is done.
 *   gate       a capture begun while another thread is inside a fence call (stopped in the
 *              driver's cuEventRecord, standin_hold_event_records) waits for that call to end:
 *              the capture stays valid (a fence recorded on the legacy stream once a blocking
 *              stream captures would invalidate it).
 *   joined     a kernel on the legacy stream still uses a freed block, a non-blocking stream
 *              exists and is idle: in takeover mode (GPUPOOL_TORCH=takeover) a cudaMalloc of its
 *              size gets the block at once (no new allocation), and the non-blocking stream's
 *              next kernel waits for the legacy stream's kernel (the join: shim/fence.c); in
 *              the default mode it does not get it (a fence).
 *   inflight   the same join with a fence in flight: made while the non-blocking stream was
 *              busy (no join then), still incomplete (the legacy stream's kernel); once that
 *              stream is idle, the next miss joins and the block comes back.
 *   rejoin     two joins while the legacy stream's kernel still runs: the first leaves the
 *              non-blocking stream waiting for its event (pending until that kernel is done); the
 *              second still hands its block out at once, as that stream holds no work of the
 *              program's. Then the program queues a kernel there (behind those waits: it does not
 *              start while the legacy stream's runs) that uses a block it frees: the next
 *              cudaMalloc of its size does not get that block (the doors saw the launch: no join).
 *   settle     GPUPOOL_VMM=on, GPUPOOL_VMM_AGE=0 (VMM memory is unmapped without waiting for
 *              the device): a kernel on the legacy stream that will look at a freed block, the
 *              block made reusable by a join; then a larger size asked for (the block's pages
 *              could move into it at once), then a release (the block could go at once): when the
 *              kernel runs, the block is still mapped each time (a join orders later work after
 *              it; it does not finish it: the release waits for it, the move does not take it).
 *   lagloop    the same settings with GPUPOOL_VMM_TRIM=1 and the GPU 2 ms behind the host
 *              (standin_set_launch_delay_us), one idle non-blocking stream (joins hold): rounds of
 *              blocks of 2 to 96 MiB, growing, each written and then checked by kernels on the
 *              legacy stream and freed while those still wait to run: every check finds its block
 *              mapped and intact, and the pool did unmap memory during the rounds (a move, and the
 *              releases of a device of STANDIN_CAPACITY=1G running out). (A page
 *              unmapped while a check reads it ends the test with SIGSEGV, as a GPU's context is
 *              lost: ce40072's library does.)
 *   capjoin    after such a join, a non-blocking stream created while another stream captures
 *              (the legacy stream may not be touched then) waits for the join's event: its
 *              first kernel does not run beside the legacy stream's.
 *   created    no stream yet (one stream order: a freed block comes straight back), a kernel on
 *              the legacy stream still uses the block its next owner now has; a non-blocking
 *              stream created then starts behind that kernel: its first kernel does not run
 *              beside it.
 * Each fails against a library without the fix it names; each wait for something that must
 * happen is bounded (seconds), each look for something that must not is a short window. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e.h"

#define BYTES (4 * E2E_MIB)

/* A kernel that runs until the test opens its gate: keeps its stream busy, as a long kernel. */
struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int open;
	_Atomic int started;
};

static struct gate gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };
static _Atomic int flag;

static void gate_kernel(void **params)
{
	struct gate *g = *(struct gate **)params[0];

	atomic_store(&g->started, 1);
	pthread_mutex_lock(&g->lock);
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
}

static void flag_kernel(void **params)
{
	(void)params;
	atomic_store(&flag, 1);
}

/* The stand-in takes a kernel's arguments by reference: they stay valid until it ran. */
static struct gate *gate_arg = &gate;
static void *gate_args[] = { &gate_arg };

static void launch(void (*fn)(void **), void **args, cudaStream_t s)
{
	const void *f;

	memcpy(&f, &fn, sizeof(f)); /* a kernel is a host function on the stand-in */
	e2e_cuda(cudaLaunchKernel(f, (dim3){ 1, 1, 1 }, (dim3){ 1, 1, 1 }, args, 0, s),
		 "cudaLaunchKernel");
}

static void open_gate(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = 1;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

static int flag_set(void *arg)
{
	(void)arg;
	return atomic_load(&flag);
}

static int gate_started(void *arg)
{
	(void)arg;
	return atomic_load(&gate.started);
}

static void run_quiet(void)
{
	cudaStream_t s;
	void *p = NULL, *q = NULL;

	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate (blocking)");
	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	launch(gate_kernel, gate_args, s);
	e2e_check(e2e_poll(gate_started, NULL, 10000), "the kernel on the blocking stream runs");
	e2e_cuda(cudaFree(p), "cudaFree while the kernel uses the block");
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc of its size");
	e2e_check(q != p, "a block a running kernel on a blocking stream may use is not handed out");
	open_gate(&gate);
	e2e_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	e2e_cuda(cudaFree(q), "cudaFree");
	e2e_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
	printf("PASS e2e_fences_quiet\n");
}

static void run_join(void)
{
	cudaStream_t s1, s2, nb;
	void *p = NULL, *q = NULL;
	uint64_t records;

	e2e_cuda(cudaStreamCreate(&s1), "cudaStreamCreate (blocking)");
	e2e_cuda(cudaStreamCreate(&s2), "cudaStreamCreate (blocking)");
	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	/* Busy on a non-blocking stream too: the GPU is busy whatever the legacy stream answers. */
	launch(gate_kernel, gate_args, nb);
	launch(gate_kernel, gate_args, s1);
	e2e_check(e2e_poll(gate_started, NULL, 10000), "the kernel on the first stream runs");
	records = e2e_counters().event_records;
	e2e_cuda(cudaFree(p), "cudaFree");
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc: a miss that records a fence");
	e2e_check(e2e_counters().event_records > records, "the miss recorded a fence (%llu events)",
		  (unsigned long long)(e2e_counters().event_records - records));
	launch(flag_kernel, NULL, s2);
	e2e_check(e2e_poll(flag_set, NULL, 5000),
		  "the other blocking stream's next kernel runs while the first is busy: the fence "
		  "did not join the streams");
	open_gate(&gate);
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	e2e_cuda(cudaFree(q), "cudaFree");
	e2e_cuda(cudaStreamDestroy(s1), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(s2), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	printf("PASS e2e_fences_join\n");
}

static void run_destroyed(void)
{
	cudaStream_t a, b;
	cudaGraph_t g = NULL;
	void *p = NULL, *q[4];
	int handed = 0;

	e2e_cuda(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	launch(gate_kernel, gate_args, a);
	e2e_check(e2e_poll(gate_started, NULL, 10000), "the kernel on stream a runs");
	e2e_cuda(cudaFree(p), "cudaFree while a's kernel uses the block");
	e2e_cuda(cudaStreamBeginCapture(b, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture(b)");
	e2e_cuda(cudaStreamDestroy(a), "cudaStreamDestroy(a) during the capture");
	e2e_cuda(cudaStreamEndCapture(b, &g), "cudaStreamEndCapture(b)");
	for (int i = 0; i < 4; i++) {
		e2e_cuda(cudaMalloc(&q[i], BYTES), "cudaMalloc after the capture");
		handed += q[i] == p;
	}
	e2e_check(handed == 0, "the block a kernel of a stream destroyed during the capture still "
		  "uses is not handed out (%d of 4 times)", handed);
	open_gate(&gate);
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	for (int i = 0; i < 4; i++)
		e2e_cuda(cudaFree(q[i]), "cudaFree");
	if (g != NULL)
		e2e_cuda(cudaGraphDestroy(g), "cudaGraphDestroy");
	e2e_cuda(cudaStreamDestroy(b), "cudaStreamDestroy(b)");
	printf("PASS e2e_fences_destroyed\n");
}

/* gate mode: a thread whose cudaMalloc records a fence (stopped in cuEventRecord), and one that
 * captures a blocking stream meanwhile. */
static cudaStream_t captured;
static _Atomic int begun, may_end;
static cudaError_t begin_rc, end_rc;

static void *fencing(void *arg)
{
	void **q = arg;

	e2e_cuda(cudaMalloc(q, BYTES), "cudaMalloc that records a fence");
	return NULL;
}

static int is_set(void *arg)
{
	return atomic_load((_Atomic int *)arg);
}

static void *capturing(void *arg)
{
	cudaGraph_t g = NULL;

	(void)arg;
	begin_rc = cudaStreamBeginCapture(captured, cudaStreamCaptureModeGlobal);
	atomic_store(&begun, 1);
	e2e_poll(is_set, (void *)&may_end, 30000);
	end_rc = cudaStreamEndCapture(captured, &g);
	if (g != NULL)
		cudaGraphDestroy(g);
	return NULL;
}

static int records_held(void *arg)
{
	(void)arg;
	return standin_held_event_records() > 0;
}

static void run_gate(void)
{
	cudaStream_t busy;
	pthread_t t1, t2;
	void *p = NULL, *q = NULL;
	int begun_while_held;

	e2e_cuda(cudaStreamCreate(&captured), "cudaStreamCreate (blocking, to capture)");
	e2e_cuda(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	launch(gate_kernel, gate_args, busy); /* the GPU is not idle: a miss records a fence */
	e2e_check(e2e_poll(gate_started, NULL, 10000), "the kernel that keeps the GPU busy runs");
	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	e2e_cuda(cudaFree(p), "cudaFree");
	standin_hold_event_records(1);
	pthread_create(&t1, NULL, fencing, &q);
	if (!e2e_poll(records_held, NULL, 10000))
		e2e_fail("the miss's fence never reached cuEventRecord");
	pthread_create(&t2, NULL, capturing, NULL);
	/* A begin that does not wait for the fence call reaches the driver now. */
	begun_while_held = e2e_poll(is_set, (void *)&begun, 300);
	e2e_note("the capture's begin %s while the fence call was inside the driver",
		 begun_while_held ? "returned" : "waited");
	standin_hold_event_records(0);
	pthread_join(t1, NULL);
	atomic_store(&may_end, 1);
	pthread_join(t2, NULL);
	e2e_check(begin_rc == cudaSuccess && end_rc == cudaSuccess,
		  "the capture begun beside a fence call stays valid (begin: %s, end: %s)",
		  cudaGetErrorName(begin_rc), cudaGetErrorName(end_rc));
	open_gate(&gate);
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	e2e_cuda(cudaFree(q), "cudaFree");
	e2e_cuda(cudaStreamDestroy(busy), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(captured), "cudaStreamDestroy");
	printf("PASS e2e_fences_gate\n");
}

/* Not within a short window (scaled), then within seconds: kernel `flag` ran only after the
 * gate opened. */
static void flag_after_gate(const char *what)
{
	e2e_check(!e2e_poll(flag_set, NULL, 300), "%s: its kernel waits for the legacy stream's", what);
	open_gate(&gate);
	e2e_check(e2e_poll(flag_set, NULL, 10000), "%s: its kernel runs once that one is done", what);
}

/* A block freed while the gate kernel on the legacy stream still uses it: its address. */
static void *freed_under_legacy_kernel(void)
{
	void *p = NULL;

	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	launch(gate_kernel, gate_args, NULL);
	e2e_check(e2e_poll(gate_started, NULL, 10000), "the kernel on the legacy stream runs");
	e2e_cuda(cudaFree(p), "cudaFree while the kernel uses the block");
	return p;
}

static void run_joined(void)
{
	int takeover = getenv("GPUPOOL_TORCH") && strcmp(getenv("GPUPOOL_TORCH"), "takeover") == 0;
	cudaStream_t nb;
	void *p = NULL, *q = NULL;
	uint64_t mallocs;

	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	p = freed_under_legacy_kernel();
	mallocs = e2e_counters().mallocs; /* the free made no real call */
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc of its size");
	if (takeover) {
		e2e_check(q == p && e2e_counters().mallocs == mallocs,
			  "takeover mode, only the legacy stream busy: the freed block is handed out at "
			  "once (same block: %s, real allocations: %llu)", q == p ? "yes" : "no",
			  (unsigned long long)(e2e_counters().mallocs - mallocs));
		launch(flag_kernel, NULL, nb);
		flag_after_gate("the non-blocking stream after the join");
	} else {
		e2e_check(q != p, "default mode: the block waits for its fence (no join)");
		open_gate(&gate);
	}
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	e2e_cuda(cudaFree(q), "cudaFree");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	printf("PASS e2e_fences_joined (%s)\n", takeover ? "takeover" : "default");
}

static struct gate gate2 = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };
static struct gate *gate2_arg = &gate2;
static void *gate2_args[] = { &gate2_arg };

static int gate2_started(void *arg)
{
	(void)arg;
	return atomic_load(&gate2.started);
}

static void run_inflight(void)
{
	cudaStream_t nb;
	void *p = NULL, *q = NULL, *r = NULL;
	uint64_t mallocs;

	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	launch(gate_kernel, gate_args, NULL);  /* the legacy stream: uses p until the end */
	launch(gate_kernel, gate2_args, nb);   /* the non-blocking stream: busy for a while */
	e2e_check(e2e_poll(gate_started, NULL, 10000) && e2e_poll(gate2_started, NULL, 10000),
		  "both kernels run");
	e2e_cuda(cudaFree(p), "cudaFree while the legacy stream's kernel uses the block");
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc: a fence, no join (a stream is busy)");
	e2e_check(q != p, "the non-blocking stream busy: no join, the block waits for its fence");
	open_gate(&gate2);
	e2e_cuda(cudaStreamSynchronize(nb), "cudaStreamSynchronize(nb)");
	mallocs = e2e_counters().mallocs;
	e2e_cuda(cudaMalloc(&r, BYTES), "cudaMalloc: a join with that fence in flight");
	e2e_check(r == p && e2e_counters().mallocs == mallocs,
		  "the fence in flight (legacy kernel running) is covered by a join: the block comes "
		  "back at once (same block: %s)", r == p ? "yes" : "no");
	launch(flag_kernel, NULL, nb);
	flag_after_gate("the non-blocking stream after a join over a fence in flight");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	e2e_cuda(cudaFree(q), "cudaFree(q)");
	e2e_cuda(cudaFree(r), "cudaFree(r)");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	printf("PASS e2e_fences_inflight\n");
}

static void run_rejoin(void)
{
	cudaStream_t nb;
	void *p[3] = { NULL, NULL, NULL }, *q[3] = { NULL, NULL, NULL };
	uint64_t mallocs;

	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	for (int i = 0; i < 3; i++)
		e2e_cuda(cudaMalloc(&p[i], BYTES), "cudaMalloc");
	launch(gate_kernel, gate_args, NULL); /* the legacy stream: uses p[0], p[1] to the end */
	e2e_check(e2e_poll(gate_started, NULL, 10000), "the kernel on the legacy stream runs");
	mallocs = e2e_counters().mallocs;
	for (int i = 0; i < 2; i++) {
		e2e_cuda(cudaFree(p[i]), "cudaFree while the legacy stream's kernel uses the block");
		e2e_cuda(cudaMalloc(&q[i], BYTES), "cudaMalloc of its size: a join");
		e2e_check(q[i] == p[i] && e2e_counters().mallocs == mallocs,
			  "join %d, the non-blocking stream %s: the freed block is handed out at once "
			  "(same block: %s, real allocations: %llu)", i + 1,
			  i == 0 ? "idle" : "waiting only for the first join's event",
			  q[i] == p[i] ? "yes" : "no",
			  (unsigned long long)(e2e_counters().mallocs - mallocs));
	}
	launch(gate_kernel, gate2_args, nb); /* uses p[2]; queued behind the joins' waits */
	e2e_check(!e2e_poll(gate2_started, NULL, 300),
		  "the non-blocking stream's kernel waits for the legacy stream's (the joins)");
	e2e_cuda(cudaFree(p[2]), "cudaFree while a kernel queued on the non-blocking stream uses it");
	e2e_cuda(cudaMalloc(&q[2], BYTES), "cudaMalloc of its size");
	e2e_check(q[2] != p[2],
		  "a block that a kernel queued on the non-blocking stream still uses is not handed "
		  "out (that stream holds work of the program's: no join)");
	open_gate(&gate);
	e2e_check(e2e_poll(gate2_started, NULL, 10000), "the non-blocking stream's kernel then runs");
	open_gate(&gate2);
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	for (int i = 0; i < 3; i++)
		e2e_cuda(cudaFree(q[i]), "cudaFree");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	printf("PASS e2e_fences_rejoin\n");
}

/* A kernel that, once its gate opens, notes whether the block it was given is still mapped. */
static void *settle_block;
static _Atomic int settle_mapped = -1;

static void mapped_kernel(void **params)
{
	gate_kernel(params);
	atomic_store(&settle_mapped, standin_vmm_mapped(settle_block, NULL, NULL, NULL));
}

static void *open_gate_later(void *arg)
{
	usleep((useconds_t)e2e_scaled_ms(300) * 1000u);
	open_gate(arg);
	return NULL;
}

/* gate and gate2 closed, nb idle: a freed VMM block the legacy stream's kernel will look at,
 * made reusable by a join; give_back: a release (gate opened meanwhile by a thread, as the
 * release may wait for the kernel), else a larger size asked for. */
static void settle_case(struct gate *g, void **args, int give_back)
{
	void *p = NULL, *q = NULL, *r = NULL;
	pthread_t t;

	e2e_cuda(cudaMalloc(&p, BYTES), "cudaMalloc");
	e2e_check(standin_vmm_mapped(p, NULL, NULL, NULL), "the block is VMM-backed");
	settle_block = p;
	atomic_store(&settle_mapped, -1);
	launch(mapped_kernel, args, NULL);
	e2e_cuda(cudaFree(p), "cudaFree while the legacy stream's kernel will look at the block");
	e2e_cuda(cudaMalloc(&q, BYTES / 2), "cudaMalloc of another size: a join");
	if (give_back) {
		unsigned long long bytes = 0;
		e2e_check(pthread_create(&t, NULL, open_gate_later, g) == 0, "pthread_create");
		e2e_check(e2e_shim_release()(0, &bytes) == 0, "gpupool_release");
		pthread_join(t, NULL);
	} else {
		e2e_cuda(cudaMalloc(&r, 3 * BYTES), "cudaMalloc of a larger size");
		open_gate(g);
	}
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	e2e_check(atomic_load(&settle_mapped) == 1, "%s after a join: the kernel that looks at the "
		  "freed block ran with it %s", give_back ? "a release" : "a larger size",
		  atomic_load(&settle_mapped) == 1 ? "mapped" : "NOT mapped");
	e2e_cuda(cudaFree(q), "cudaFree");
	if (r != NULL)
		e2e_cuda(cudaFree(r), "cudaFree");
}

static void run_settle(void)
{
	cudaStream_t nb;

	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	settle_case(&gate, gate_args, 0);
	settle_case(&gate2, gate2_args, 1);
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	printf("PASS e2e_fences_settle\n");
}

/* A block's write or check, queued on the legacy stream; the kernel frees its job. */
struct lag_job {
	struct lag_job *self;
	void *argv[1];
	uint64_t *p;
	size_t bytes;
	uint64_t tag;
	int check;
};

static _Atomic unsigned long lag_bad, lag_unmapped;

static void lag_kernel(void **params)
{
	struct lag_job *j = *(struct lag_job **)params[0];

	for (size_t off = 0; off < j->bytes; off += 4096) {
		uint64_t *w = j->p + off / sizeof(uint64_t);
		if (off % (2 * E2E_MIB) == 0 && !standin_vmm_mapped(w, NULL, NULL, NULL)) {
			atomic_fetch_add(&lag_unmapped, 1); /* a page moved or unmapped under the kernel */
			break;
		}
		if (!j->check)
			*w = j->tag + off;
		else if (*w != j->tag + off)
			atomic_fetch_add(&lag_bad, 1);
	}
	free(j);
}

static void lag_launch(void *p, size_t bytes, uint64_t tag, int check)
{
	struct lag_job *j = malloc(sizeof(*j));

	e2e_check(j != NULL, "malloc");
	*j = (struct lag_job){ j, { NULL }, p, bytes, tag, check };
	j->argv[0] = &j->self;
	launch(lag_kernel, j->argv, NULL);
}

static void run_lagloop(void)
{
	int rounds = (int)(400 / e2e_time_scale());
	void *live[4] = { NULL, NULL, NULL, NULL };
	size_t bytes[4] = { 0, 0, 0, 0 };
	uint64_t tag[4] = { 0, 0, 0, 0 };
	unsigned seed = 12345;
	uint64_t unmaps;
	cudaStream_t nb;

	if (rounds < 100)
		rounds = 100;
	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	unmaps = e2e_counters().vmm_unmaps;
	standin_set_launch_delay_us(2000);
	for (int r = 0; r < rounds; r++) {
		int i = (int)(rand_r(&seed) % 4);
		if (live[i] != NULL) {
			lag_launch(live[i], bytes[i], tag[i], 1); /* its write, checked again */
			e2e_cuda(cudaFree(live[i]), "cudaFree while its check waits to run");
		}
		bytes[i] = (2 + 2 * (size_t)(r % 48)) * E2E_MIB; /* 2 to 96 MiB, growing */
		e2e_cuda(cudaMalloc(&live[i], bytes[i]), "cudaMalloc");
		tag[i] = (uint64_t)(r + 1) << 32;
		lag_launch(live[i], bytes[i], tag[i], 0);
		lag_launch(live[i], bytes[i], tag[i], 1);
	}
	for (int i = 0; i < 4; i++)
		e2e_cuda(cudaFree(live[i]), "cudaFree");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	standin_set_launch_delay_us(0);
	e2e_check(atomic_load(&lag_unmapped) == 0 && atomic_load(&lag_bad) == 0,
		  "%d rounds with the GPU behind: %lu checks found their block unmapped, %lu found "
		  "another's bytes", rounds, atomic_load(&lag_unmapped), atomic_load(&lag_bad));
	e2e_check(e2e_counters().vmm_unmaps > unmaps, "the pool unmapped memory during the rounds "
		  "(moves, trims, releases: %llu mappings removed)",
		  (unsigned long long)(e2e_counters().vmm_unmaps - unmaps));
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	printf("PASS e2e_fences_lagloop\n");
}

static void run_capjoin(void)
{
	cudaStream_t nb, cap, late;
	cudaGraph_t g = NULL;
	void *p = NULL, *q = NULL;

	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	e2e_cuda(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	p = freed_under_legacy_kernel();
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc: a join");
	e2e_check(q == p, "takeover mode: the join hands the block out at once");
	e2e_cuda(cudaStreamBeginCapture(cap, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
	e2e_cuda(cudaStreamCreateWithFlags(&late, cudaStreamNonBlocking),
		 "cudaStreamCreateWithFlags during the capture");
	launch(flag_kernel, NULL, late);
	e2e_check(!e2e_poll(flag_set, NULL, 300),
		  "a stream created during a capture after a join: its kernel waits for the legacy "
		  "stream's");
	e2e_cuda(cudaStreamEndCapture(cap, &g), "cudaStreamEndCapture");
	open_gate(&gate);
	e2e_check(e2e_poll(flag_set, NULL, 10000), "then runs");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	if (g != NULL)
		e2e_cuda(cudaGraphDestroy(g), "cudaGraphDestroy");
	e2e_cuda(cudaFree(q), "cudaFree");
	e2e_cuda(cudaStreamDestroy(late), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(cap), "cudaStreamDestroy");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	printf("PASS e2e_fences_capjoin\n");
}

static void run_created(void)
{
	cudaStream_t nb;
	void *p = NULL, *q = NULL;

	p = freed_under_legacy_kernel();
	e2e_cuda(cudaMalloc(&q, BYTES), "cudaMalloc of its size");
	e2e_check(q == p, "one stream order: the freed block comes straight back");
	e2e_cuda(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	launch(flag_kernel, NULL, nb);
	flag_after_gate("a non-blocking stream created while the previous owner's kernel runs");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	e2e_cuda(cudaFree(q), "cudaFree");
	e2e_cuda(cudaStreamDestroy(nb), "cudaStreamDestroy");
	printf("PASS e2e_fences_created\n");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	e2e_start("e2e_fences");
	e2e_cuda(cudaFree(NULL), "cudaFree(0)");
	if (strcmp(mode, "quiet") == 0)
		run_quiet();
	else if (strcmp(mode, "join") == 0)
		run_join();
	else if (strcmp(mode, "destroyed") == 0)
		run_destroyed();
	else if (strcmp(mode, "gate") == 0)
		run_gate();
	else if (strcmp(mode, "joined") == 0)
		run_joined();
	else if (strcmp(mode, "created") == 0)
		run_created();
	else if (strcmp(mode, "inflight") == 0)
		run_inflight();
	else if (strcmp(mode, "capjoin") == 0)
		run_capjoin();
	else if (strcmp(mode, "rejoin") == 0)
		run_rejoin();
	else if (strcmp(mode, "settle") == 0)
		run_settle();
	else if (strcmp(mode, "lagloop") == 0)
		run_lagloop();
	else
		e2e_fail("mode: quiet, join, destroyed, gate, joined, inflight, capjoin, rejoin, settle, "
			 "lagloop or created, not \"%s\"", mode);
	return 0;
}
