/* gpu_race_random.cu — gpu_race with random timing across 4 streams, one of them
 * blocking (the pool records no event on it: the legacy stream's covers it), 3 non-blocking:
 * reuse stays as safe as native cudaFree however frees, new allocations and writers interleave.
 * Each round: K (1..4) blocks of random sizes (480 B .. 64 MiB, two sizes per size class)
 * each get a slow writer (spin 0..3 ms, then write) on a random one of the 4 streams.
 * Then, in a random interleaving with random host delays (0..500 us, often none; 1 in 8 up to
 * 4 ms, so that some blocks are reused), each block is
 * freed and a block of its size is allocated (after its free) and written at once by a new owner:
 * a kernel on another of the 4 streams, cudaMemsetAsync on the legacy stream (which waits for the
 * blocking stream only), or sometimes a kernel on the writer's own stream. In 1 round of 10
 * a writer's stream is destroyed (its queued work still runs) and recreated just before that
 * block's free. After cudaDeviceSynchronize every new block must hold its new owner's pattern.
 * Asserted: no new block clobbered, no CUDA error; no freed block handed out again while its
 * writer cannot yet have finished (host clock); the race was exercised in >= 1/4 of the blocks.
 * Usage: gpu_race_random [ROUNDS [SEED]] (defaults 300, a seed from the clock; the seed is
 * printed: the same seed replays the same choices, not the same timing). */
#include "gpu_common.cuh"

#include <unistd.h>

#define NSTREAMS 4
#define MAXK 4
#define MAX_SPIN_NS 3000000ull  /* a slow writer spins 0..3 ms before it writes */
#define MAX_DELAY_NS 500000ull  /* host delay before a free or an allocation: 0..500 us */
#define EARLY_MARGIN_NS 100000ull /* slack for the host clock vs the GPU's globaltimer */
#define TIME_LIMIT_NS 30000000000ull /* no round starts after 30 s (device time is scarce) */
#define MAX_ERRORS 10           /* stop after this many failed CUDA calls */
#define MAX_FAIL_LINES 10       /* early reuses and clobbered blocks printed, at most */
#define PAT_OLD 0xDEAD0000u     /* | round and index: the slow writer's pattern */
#define PAT_NEW_KERNEL 0x600D0000u
/* Slow writers get a quarter of the usual grid: 4 of them spinning at once then hold a quarter
 * of the GPU's thread slots, not all of them, so the new owners' kernels can run meanwhile. */
#define SLOW_GRID (GT_GRID / 4)

/* Sizes in pairs of one size class each (pool/sizeclass.c), so that a freed block can serve
 * another size of the set: 480 and 512 -> 512 B; 3872 -> 4 KiB; 63488 -> 64 KiB; 1 MiB - 4 KiB
 * -> 1 MiB; 3 MiB -> 4 MiB; 15 MiB + 4 KiB -> 16 MiB; 62 MiB -> 64 MiB. */
static const size_t sizes[] = {
	480,           512,          3872,         4096,
	63488,         65536,        GT_MIB - 4096, GT_MIB,
	3 * GT_MIB,    4 * GT_MIB,   15 * GT_MIB + 4096, 16 * GT_MIB,
	62 * GT_MIB,   64 * GT_MIB,
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

enum owner { OWN_OTHER, OWN_LEGACY, OWN_SAME, OWN_KINDS };
static const char *const owner_name[OWN_KINDS] = { "other stream", "legacy memset", "same stream" };

struct blk {
	size_t size;
	void *old, *nw;        /* the block the slow writer writes; the new owner's block */
	uint32_t want;         /* the new owner's pattern */
	int ws, wgen;          /* writer's stream slot and its generation at launch */
	uint64_t spin_ns, t_launch; /* host time just before the writer's launch */
	enum owner owner;
	int ordered;           /* new owner queued behind the writer in one stream order */
	int raced;             /* new owner queued while the writer could still be running */
	int clear;             /* ... on a stream with no slow writer of this round ahead of it */
	int freed;             /* old has been freed */
	int reused_from;       /* index of the freed block whose address nw got, or -1 */
};

struct tally {
	int rounds, blocks, reused, raced, raced_clear, clobbered, early, dup, destroyed, fail_lines;
	int owners[OWN_KINDS], spin0;
};

static cudaStream_t streams[NSTREAMS];
static const unsigned stream_flags[NSTREAMS] = { cudaStreamDefault, cudaStreamNonBlocking,
						 cudaStreamNonBlocking, cudaStreamNonBlocking };
static int gen[NSTREAMS]; /* bumped when a slot's stream is destroyed and recreated */
static int busy[NSTREAMS]; /* a slow writer was queued on the slot's stream in this round */
static uint64_t rng;

static uint64_t rnd(uint64_t n) /* 0 .. n-1 */
{
	return gt_splitmix64(&rng) % n;
}

/* A host delay of 0..500 us (none one time in three), spun for precision; one time in eight
 * 0..4 ms instead, so that some writers finish before their block's next allocation and the
 * pool really reuses addresses (else "reuse only after the writer" would hold vacuously). */
static void host_delay(void)
{
	uint64_t ns = rnd(8) == 0 ? rnd(MAX_SPIN_NS + 1000001ull)
		    : rnd(3) == 0 ? 0 : rnd(MAX_DELAY_NS + 1), t0 = gt_now_ns();

	while (gt_now_ns() - t0 < ns)
		;
}

/* Allocate the new block of b->size, then queue its new owner's write at once. */
static void renew_block(struct blk *bs, int k, int i, int round, struct tally *t)
{
	struct blk *b = &bs[i];
	uint64_t t_alloc, t_queued;
	int ss;

	if (!gt_ok(cudaMalloc(&b->nw, b->size), "cudaMalloc(new)")) {
		b->nw = NULL;
		return;
	}
	t_alloc = gt_now_ns();
	/* The address of a block freed in this round: reuse. Its writer ends no sooner than its
	 * spin after its launch; handed out before then, the pool broke the invariant. */
	for (int j = 0; j < k; j++) {
		if (bs[j].old != b->nw || !bs[j].freed)
			continue;
		b->reused_from = j;
		if (t_alloc + EARLY_MARGIN_NS < bs[j].t_launch + bs[j].spin_ns) {
			t->early++;
			if (t->fail_lines++ < MAX_FAIL_LINES)
				printf("FAIL %s early reuse: round %d, %zu B block handed out %.3f ms "
				       "before its writer (spin %.3f ms) can have finished\n",
				       gt_test, round, bs[j].size,
				       (double)(bs[j].t_launch + bs[j].spin_ns - t_alloc) / 1e6,
				       (double)bs[j].spin_ns / 1e6);
		}
	}
	/* Never the address of a block still live: a new one, or an old one not yet freed. */
	for (int j = 0; j < k; j++)
		t->dup += (j != i && bs[j].nw == b->nw) || (bs[j].old == b->nw && !bs[j].freed);

	/* The new owner: another of the 4 streams (55%), the legacy stream (30%), the writer's
	 * own slot (15%; one stream order unless that stream was recreated meanwhile). */
	uint64_t r = rnd(20);
	b->owner = r < 3 ? OWN_SAME : r < 9 ? OWN_LEGACY : OWN_OTHER;
	t->owners[b->owner]++;
	if (b->owner == OWN_LEGACY) {
		int byte = 0x10 + (round * MAXK + i) % 0xD0; /* all 4 bytes equal: never a kernel's */
		b->want = 0x01010101u * (uint32_t)byte;
		gt_ok(cudaMemsetAsync(b->nw, byte, b->size, 0), "cudaMemsetAsync(new)");
		/* The legacy stream waits for the blocking stream's work (not a destroyed one's:
		 * not relied on) and for no other stream's. */
		b->ordered = stream_flags[b->ws] == cudaStreamDefault && gen[b->ws] == b->wgen;
		b->clear = 1;
		for (int s = 0; s < NSTREAMS; s++)
			b->clear &= stream_flags[s] != cudaStreamDefault || !busy[s];
	} else {
		ss = b->owner == OWN_SAME ? b->ws : (b->ws + 1 + (int)rnd(NSTREAMS - 1)) % NSTREAMS;
		b->want = PAT_NEW_KERNEL | (uint32_t)((round * MAXK + i) & 0xFFFF);
		gt_fill(b->nw, b->size, b->want, streams[ss]);
		b->ordered = ss == b->ws && gen[ss] == b->wgen;
		b->clear = !busy[ss];
	}
	t_queued = gt_now_ns();
	/* Queued (launch returned) before the writer of the block it replaces can have ended, on
	 * a stream that does not wait for that writer: had the pool handed that block over now,
	 * the writer's late write could land on the new owner's data. */
	b->raced = !b->ordered && t_queued < b->t_launch + b->spin_ns;
	b->clear = b->clear && b->raced;
}

static void one_round(int round, struct tally *t)
{
	struct blk bs[MAXK];
	int k = 1 + (int)rnd(MAXK), order[MAXK], pending[MAXK], nfree = 0, npend = 0, nrenew = 0;
	int destroy_at = rnd(10) == 0 ? (int)rnd((uint64_t)k) : -1;

	t->rounds++;
	memset(busy, 0, sizeof(busy));
	for (int i = 0; i < k; i++) {
		struct blk *b = &bs[i];

		memset(b, 0, sizeof(*b));
		b->reused_from = -1;
		b->size = sizes[rnd(NSIZES)];
		b->spin_ns = rnd(8) == 0 ? 0 : rnd(MAX_SPIN_NS + 1);
		t->spin0 += b->spin_ns == 0;
		b->ws = (int)rnd(NSTREAMS);
		b->wgen = gen[b->ws];
		if (!gt_ok(cudaMalloc(&b->old, b->size), "cudaMalloc(old)")) {
			b->old = NULL;
			continue;
		}
		b->t_launch = gt_now_ns();
		busy[b->ws] = 1;
		gt_slow_fill_kernel<<<SLOW_GRID, GT_BLOCK, 0, streams[b->ws]>>>(
			(uint32_t *)b->old, b->size / 4, PAT_OLD | (uint32_t)((round & 0xFFF) << 4) |
							    (uint32_t)i, b->spin_ns);
		gt_ok(cudaGetLastError(), "slow kernel launch");
	}
	for (int i = 0; i < k; i++)
		order[i] = i;
	for (int i = k - 1; i > 0; i--) { /* the frees in random order */
		int j = (int)rnd((uint64_t)i + 1), x = order[i];
		order[i] = order[j];
		order[j] = x;
	}
	/* Interleave: each step frees the next block or renews one already freed. */
	while (nrenew < k) {
		int do_free = nfree < k && (npend == 0 || rnd(2) == 0);

		host_delay();
		if (do_free) {
			int i = order[nfree++];

			if (i == destroy_at) {
				int s = bs[i].ws;
				gt_ok(cudaStreamDestroy(streams[s]), "cudaStreamDestroy");
				if (!gt_ok(cudaStreamCreateWithFlags(&streams[s], stream_flags[s]),
					   "cudaStreamCreate"))
					streams[s] = 0; /* the legacy stream: still a valid handle */
				gen[s]++;
				busy[s] = 0; /* a new, empty stream */
				t->destroyed++;
			}
			if (bs[i].old != NULL) {
				gt_ok(cudaFree(bs[i].old), "cudaFree(old)");
				bs[i].freed = 1;
				pending[npend++] = i;
			} else {
				nrenew++; /* never allocated: nothing to renew */
			}
		} else {
			int p = (int)rnd((uint64_t)npend), i = pending[p];

			pending[p] = pending[--npend];
			renew_block(bs, k, i, round, t);
			nrenew++;
		}
	}

	if (!gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))
		return;
	for (int i = 0; i < k; i++) {
		struct blk *b = &bs[i];
		unsigned long long bad;

		if (b->nw == NULL)
			continue;
		t->blocks++;
		t->reused += b->reused_from >= 0;
		t->raced += b->raced;
		t->raced_clear += b->clear;
		bad = gt_count_ne(b->nw, b->size, b->want);
		if (bad != 0 && bad != ~0ull) { /* ~0: the check itself failed (a FAIL line said so) */
			t->clobbered++;
			if (t->fail_lines++ < MAX_FAIL_LINES)
				printf("FAIL %s clobbered: round %d, %zu B, new owner %s, %s, "
				       "writer spin %.3f ms%s, %s, %llu of %zu words not the new owner's\n",
				       gt_test, round, b->size, owner_name[b->owner],
				       b->reused_from >= 0 ? "a freed block's address" : "a new address",
				       (double)b->spin_ns / 1e6,
				       b->wgen != gen[b->ws] ? " (stream destroyed)" : "",
				       b->raced ? "raced" : "not raced", bad, b->size / 4);
		}
	}
	for (int i = 0; i < k; i++)
		if (bs[i].nw != NULL)
			gt_ok(cudaFree(bs[i].nw), "cudaFree(new)");
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 300;
	uint64_t seed, t0;
	struct tally t;
	int base_failures;

	gt_test = "gpu_race_random";
	if (!gt_require_shim() || !gt_context())
		return gt_finish();
	if (rounds < 1)
		rounds = 1;
	seed = argc > 2 ? strtoull(argv[2], NULL, 0)
			: gt_now_ns() ^ ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
	rng = seed;
	gt_info("seed", "%llu (replay the same choices, not the same timing: %s %d %llu)",
		(unsigned long long)seed, argv[0], rounds, (unsigned long long)seed);

	for (int s = 0; s < NSTREAMS; s++)
		if (!gt_ok(cudaStreamCreateWithFlags(&streams[s], stream_flags[s]),
			   "cudaStreamCreate"))
			return gt_finish();
	memset(&t, 0, sizeof(t));
	base_failures = gt_failures;
	t0 = gt_now_ns();
	for (int r = 0; r < rounds; r++) {
		if (gt_failures - base_failures >= MAX_ERRORS) {
			gt_info("stopped", "after %d failed CUDA calls, %d of %d rounds done",
				gt_failures - base_failures, r, rounds);
			break;
		}
		if (gt_now_ns() - t0 > TIME_LIMIT_NS) {
			gt_info("stopped", "time limit of %llu s reached, %d of %d rounds done",
				TIME_LIMIT_NS / 1000000000ull, r, rounds);
			break;
		}
		one_round(r, &t);
	}
	cudaDeviceSynchronize();
	int errs = gt_failures - base_failures;

	if (t.fail_lines > MAX_FAIL_LINES)
		printf("FAIL %s %d more early-reuse or clobbered blocks not shown\n", gt_test,
		       t.fail_lines - MAX_FAIL_LINES);
	gt_info("figures",
		"%d rounds in %.1f s, %d new blocks checked, %d got a freed block's address, "
		"%d streams destroyed, new owners %d other stream / %d legacy memset / %d same "
		"stream, %d writers with spin 0",
		t.rounds, (double)(gt_now_ns() - t0) / 1e9, t.blocks, t.reused, t.destroyed,
		t.owners[OWN_OTHER], t.owners[OWN_LEGACY], t.owners[OWN_SAME], t.spin0);
	gt_check(t.clobbered == 0 && errs == 0, "new owners intact",
		 "%d of %d new blocks clobbered, %d failed CUDA calls", t.clobbered, t.blocks, errs);
	gt_check(t.early == 0 && t.dup == 0, "reuse only after the writer",
		 "%d of %d reuses before the writer can have finished, %d addresses handed to two "
		 "live blocks", t.early, t.reused, t.dup);
	/* Without reuses the check above holds vacuously. */
	gt_check(t.rounds < 100 || t.reused > 0, "reuse exercised",
		 "%d of %d new blocks got the address of a block freed in their round (want >= 1 "
		 "from 100 rounds)", t.reused, t.blocks);
	/* If the writers were never still running when the new owners wrote, this proved nothing. */
	gt_check(t.blocks > 0 && t.raced * 4 >= t.blocks, "race exercised",
		 "%d of %d new owners queued their write, on a stream not ordered after the writer, "
		 "while the writer of the block they replace could still be running (%d of them on "
		 "a stream with no slow writer ahead: free to run at once)",
		 t.raced, t.blocks, t.raced_clear);
	for (int s = 0; s < NSTREAMS; s++)
		if (streams[s] != 0)
			cudaStreamDestroy(streams[s]);
	return gt_finish();
}
