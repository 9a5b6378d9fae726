/* gpu_race.cu — reuse is as safe as native cudaFree: a block freed while a kernel that will
 * still write into it is running must not reach a new owner before that kernel is done.
 * Phase 1 (no stream created: one stream order) may reuse at once, the order makes it safe.
 * Phase 2 runs the slow kernel on a non-blocking stream and the new owner on another
 * non-blocking stream or on the legacy stream: neither waits for it, only the pool can.
 * Phase 3 runs the slow kernel on a stream that is destroyed before or after the free: its
 * queued work still runs, and the pool must still wait for it.
 * Phase 4 runs the slow kernel on a blocking stream (cudaStreamCreate), kept or destroyed, and
 * the new owner on a non-blocking one: the pool records no event on blocking streams (the one
 * on the legacy stream waits for them, shim/fence.h), and this is where that would show.
 * Asserted: the new owner's data is never clobbered. Reported: how often B == A, and how long
 * the host's cudaFree + cudaMalloc took (native cudaFree would wait for the slow kernel). */
#include "gpu_common.cuh"

#define PAT_OLD 0xDEADBEEFu
#define PAT_NEW_KERNEL 0x600DF00Du
#define PAT_NEW_MEMSET 0x5C5C5C5Cu /* cudaMemset with byte 0x5C */
#define SPIN_NS 200000000ull       /* the slow kernel's wall time before it writes */

static const size_t sizes[] = { 4096, GT_MIB, 16 * GT_MIB, 64 * GT_MIB };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* How the slow writer's stream ends: kept, or destroyed before or after cudaFree(A). */
enum destroy { KEEP, DESTROY_BEFORE_FREE, DESTROY_AFTER_FREE };

struct round_cfg {
	uint64_t spin_ns;
	cudaStream_t slow;   /* where the slow writer runs (created per round when destroyed) */
	cudaStream_t fast;   /* where the new owner writes */
	int use_memset;      /* new owner: cudaMemsetAsync instead of a kernel */
	enum destroy destroy;
	unsigned slow_flags; /* for a slow stream created per round */
};

struct tally {
	int iters, same, exercised, clobbered, errors; /* rounds */
	uint64_t max_host_ns; /* longest cudaFree(A) + cudaMalloc(B) on the host */
};

/* One round: A gets a slow writer, is freed, B of the same size is allocated and written by
 * the new owner; after everything, B must hold the new owner's pattern. */
static void round_trip(size_t size, struct round_cfg c, struct tally *t)
{
	void *a = NULL, *b = NULL;
	uint32_t want = c.use_memset ? PAT_NEW_MEMSET : PAT_NEW_KERNEL;
	unsigned long long bad;
	uint64_t t_launch, t0, dt;

	t->iters++;
	if (c.destroy != KEEP &&
	    !gt_ok(cudaStreamCreateWithFlags(&c.slow, c.slow_flags), "cudaStreamCreate")) {
		t->errors++;
		return;
	}
	if (!gt_ok(cudaMalloc(&a, size), "cudaMalloc(A)")) {
		t->errors++;
		return;
	}
	t_launch = gt_now_ns();
	gt_slow_fill_kernel<<<GT_GRID, GT_BLOCK, 0, c.slow>>>((uint32_t *)a, size / 4, PAT_OLD,
								 c.spin_ns);
	if (!gt_ok(cudaGetLastError(), "slow kernel launch")) {
		t->errors++;
		return;
	}
	if (c.destroy == DESTROY_BEFORE_FREE)
		gt_ok(cudaStreamDestroy(c.slow), "cudaStreamDestroy(slow)");
	t0 = gt_now_ns();
	if (!gt_ok(cudaFree(a), "cudaFree(A)")) {
		t->errors++;
		cudaDeviceSynchronize();
		return;
	}
	if (c.destroy == DESTROY_AFTER_FREE)
		gt_ok(cudaStreamDestroy(c.slow), "cudaStreamDestroy(slow)");
	if (!gt_ok(cudaMalloc(&b, size), "cudaMalloc(B)")) {
		t->errors++;
		cudaDeviceSynchronize();
		return;
	}
	dt = gt_now_ns() - t0;
	t->max_host_ns = dt > t->max_host_ns ? dt : t->max_host_ns;
	if (c.use_memset)
		gt_ok(cudaMemsetAsync(b, 0x5C, size, c.fast), "cudaMemsetAsync(B)");
	else
		gt_fill(b, size, want, c.fast);
	/* The slow kernel ends no sooner than spin_ns after its launch: if B's data was queued
	 * before that, the round raced it. (B == A after the kernel ended: the pool waited.) */
	t->exercised += gt_now_ns() - t_launch < c.spin_ns || b == a;
	if (!gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) {
		t->errors++;
		return;
	}
	bad = gt_count_ne(b, size, want);
	if (bad != 0) {
		t->clobbered++;
		printf("FAIL %s clobbered: size %zu, B %s A, %llu of %zu words not the new owner's\n",
		       gt_test, size, b == a ? "==" : "!=", bad, size / 4);
	}
	t->same += b == a;
	gt_ok(cudaFree(b), "cudaFree(B)");
}

static void report(const char *phase, size_t size, const struct tally *t)
{
	char what[96];

	if (size)
		snprintf(what, sizeof(what), "%s %zu B", phase, size);
	else
		snprintf(what, sizeof(what), "%s (%zu sizes)", phase, NSIZES);
	gt_check(t->clobbered == 0 && t->errors == 0, what,
		 "%d rounds, %d raced the slow kernel, B == A %d times, clobbered %d, errors %d, "
		 "slowest host free+malloc %.3f ms",
		 t->iters, t->exercised, t->same, t->clobbered, t->errors,
		 (double)t->max_host_ns / 1e6);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 6;
	cudaStream_t s1, s2, sb;
	int exercised = 0, rounds = 0;

	gt_test = "gpu_race";
	if (!gt_require_shim() || !gt_context())
		return gt_finish();
	if (iters < 1)
		iters = 1;

	/* Phase 1: everything on the legacy stream, before any stream exists. */
	for (size_t i = 0; i < NSIZES; i++) {
		struct tally t = { 0, 0, 0, 0, 0, 0 };
		for (int k = 0; k < 2; k++) {
			struct round_cfg c = { 20000000ull, 0, 0, k & 1, KEEP, 0 };
			round_trip(sizes[i], c, &t);
		}
		report("ordered legacy", sizes[i], &t);
	}

	/* Phase 2: the slow writer on a non-blocking stream; the new owner elsewhere. Even
	 * rounds: a kernel on s2. Odd rounds: cudaMemsetAsync on the legacy stream, which does
	 * not wait for non-blocking streams either. */
	if (!gt_ok(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), "cudaStreamCreate(s1)") ||
	    !gt_ok(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), "cudaStreamCreate(s2)"))
		return gt_finish();
	for (size_t i = 0; i < NSIZES; i++) {
		struct tally t = { 0, 0, 0, 0, 0, 0 };
		for (int k = 0; k < iters; k++) {
			int memset_round = k & 1;
			struct round_cfg c = { SPIN_NS, s1, memset_round ? 0 : s2, memset_round, KEEP,
					       0 };
			round_trip(sizes[i], c, &t);
		}
		exercised += t.exercised;
		rounds += t.iters;
		report("non-blocking", sizes[i], &t);
	}

	/* Phase 3: the slow writer's stream is destroyed while its kernel still runs. */
	for (int d = DESTROY_BEFORE_FREE; d <= DESTROY_AFTER_FREE; d++) {
		struct tally t = { 0, 0, 0, 0, 0, 0 };
		for (size_t i = 0; i < NSIZES; i++) {
			struct round_cfg c = { SPIN_NS, 0, s2, 0, (enum destroy)d,
					       cudaStreamNonBlocking };
			round_trip(sizes[i], c, &t);
		}
		exercised += t.exercised;
		rounds += t.iters;
		report(d == DESTROY_BEFORE_FREE ? "stream destroyed before free"
						: "stream destroyed after free",
		       0, &t);
	}

	/* Phase 4: the slow writer on a blocking stream, kept or destroyed; the new owner's kernel
	 * on the non-blocking s2 (a memset on the legacy stream would wait for it). */
	if (!gt_ok(cudaStreamCreate(&sb), "cudaStreamCreate(blocking)"))
		return gt_finish();
	for (int d = KEEP; d <= DESTROY_AFTER_FREE; d++) {
		struct tally t = { 0, 0, 0, 0, 0, 0 };
		for (size_t i = 0; i < NSIZES; i++) {
			struct round_cfg c = { SPIN_NS, d == KEEP ? sb : 0, s2, 0, (enum destroy)d,
					       cudaStreamDefault };
			round_trip(sizes[i], c, &t);
		}
		exercised += t.exercised;
		rounds += t.iters;
		report(d == KEEP		  ? "blocking stream"
		       : d == DESTROY_BEFORE_FREE ? "blocking stream destroyed before free"
						  : "blocking stream destroyed after free",
		       0, &t);
	}
	cudaStreamDestroy(sb);

	/* If the slow kernel was never still running, the rounds above proved nothing. */
	gt_check(exercised * 2 >= rounds, "race exercised",
		 "%d of %d rounds queued B's data while the slow kernel was still running "
		 "(or got B == A)", exercised, rounds);
	cudaStreamDestroy(s2);
	cudaStreamDestroy(s1);
	return gt_finish();
}
