/* fuzz_pool.c — libFuzzer target for the pool's public operations on the fake backend
 * (tests/unit/fake_backend.c): the input is a program of up to 1,000 operations on 4 devices —
 * alloc, free, double and foreign frees, release (any device, target and cause), idle release,
 * fence driving, fences completed or failing, the GPU idle or not (the backend's quiet), ordered
 * mode off, the clock, caps, a device forgotten (and reset), capacity limits, failing backend
 * frees, no releases allowed, frees held for a graph (gp_pool_hold) and given to the pool later
 * (gp_pool_unhold), a block freed behind the pool's back (its address then handed out again by
 * the fake: the pool drops the stale block); the first byte picks ordered mode, oversize (a reused block of a
 * larger class, at most 200%) and fence batching (small classes grow to 4 fenced blocks before a
 * fence is recorded on a miss). After every operation the backend must hold the model's live
 * bytes plus what the pool says it caches; every 32nd (and at the end) all the invariants are
 * checked: the pool's stats match a model of the program's live blocks; the backend holds
 * exactly live + cached blocks; a cached block comes back only when the pool is ordered, a fence
 * recorded after its free has completed or the GPU was found idle after it, and is of the
 * request's class (or, oversize, a larger one within the limit); every live block keeps its
 * owner's tag; bad frees change nothing; a release to a target leaves at most the target;
 * over_cap comes only above the cap; the backend saw no misuse, and no call made with a pool lock
 * held; every list is in free order, its counters right, its pending figures at least what it
 * holds fenced (gp_pool_test_check_lists). At the end everything is freed and released: the
 * backend holds nothing. Built with clang -fsanitize=fuzzer (GPUPOOL_FUZZ=ON), or with replay.c
 * to rerun saved inputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "pool.h"
#include "hooks.h"

#define DEVICES 4
#define MAX_LIVE 64
#define MAX_FREED 4096
#define MAX_OPS 1000
#define MiB ((size_t)1 << 20)
#define DEVICE_CAPACITY (512 * MiB)

struct live {
	void *ptr;
	size_t req, bytes;
	int dev;
	uint64_t tag;
};

struct held {
	struct live l;
	uint32_t ticket;
};

struct freed {
	void *ptr;
	size_t bytes;  /* the block's size */
	size_t fences; /* fences recorded when it was freed */
	uint64_t quiet_yes; /* the backend's "the GPU is idle" answers by then */
};

static struct {
	struct fake_backend fake;
	struct gp_pool *pool;
	struct live live[MAX_LIVE];
	int nlive;
	struct freed freed[MAX_FREED];
	int nfreed;
	struct held held[MAX_LIVE]; /* held for a graph: in use for the pool */
	int nheld;
	/* Freed behind the pool's back and not dropped yet: still in use for the pool. */
	struct live behind[MAX_LIVE];
	int nbehind;
	uint64_t stale[DEVICES]; /* of those, dropped when the fake handed the address out again */
	int ordered;
	unsigned oversize_pct; /* the pool's cfg.oversize_pct: 0 or 200 */
	int remap;             /* the pool remaps movable blocks (cfg.remap_min_bytes) */
	uint64_t cap[DEVICES];
	uint64_t failed[DEVICES]; /* allocations that failed */
	uint64_t op;
	const char *what;
} m;

struct input {
	const uint8_t *p;
	size_t n;
};

static unsigned u8(struct input *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

static unsigned u16(struct input *in)
{
	return u8(in) | u8(in) << 8;
}

static void fail(const char *why)
{
	fprintf(stderr, "fuzz_pool: op %llu (%s): %s\n", (unsigned long long)m.op, m.what, why);
	abort();
}

static void check(int ok, const char *why)
{
	if (!ok)
		fail(why);
}

/* 1 B to 64 KiB about log-uniform, one in 16 up to 64 MiB (the fake's memory is real host
 * memory: large blocks are what make an input slow). */
static size_t size_of(struct input *in)
{
	unsigned b = u8(in), shift = b % 16 == 0 ? 11 + b / 16 : b % 17;
	uint64_t v = ((uint64_t)(u16(in) | 1) << shift) >> 15;

	return (size_t)(v == 0 ? 1 : v > 64 * MiB ? 64 * MiB : v);
}

/* Byte j of a block is byte j % 8 of its owner's tag, for its first and last 8 bytes (which
 * overlap, and agree, in blocks under 16 bytes). */
static void tag(const struct live *l, int write)
{
	unsigned char *b = l->ptr;
	size_t n = l->req < 8 ? l->req : 8;

	for (size_t k = 0; k < 2 * n; k++) {
		size_t j = k < n ? k : l->req - 1 - (k - n);
		unsigned char v = (unsigned char)(l->tag >> (j % 8 * 8));

		if (write)
			b[j] = v;
		else if (b[j] != v)
			fail("a live block lost its owner's tag");
	}
}

static void on_over_cap(void *arg, int device)
{
	(void)arg;
	check(device >= 0 && device < DEVICES, "over_cap for a device never used");
	check(m.cap[device] > 0 && gp_pool_cached_bytes(m.pool, device) > m.cap[device],
	      "over_cap while the cache is not above the cap");
}

/* The newest free of a block that held p (a split hands out the end of a cached block: the free
 * that cached it is the last one of those bytes). */
static int freed_find(const void *p)
{
	for (int i = m.nfreed - 1; i >= 0; i--)
		if ((const char *)p >= (const char *)m.freed[i].ptr &&
		    (const char *)p < (const char *)m.freed[i].ptr + m.freed[i].bytes)
			return i;
	return -1;
}

static int live_find(const void *p)
{
	for (int i = 0; i < m.nlive; i++)
		if (m.live[i].ptr == p)
			return i;
	return -1;
}

/* After every operation: what the backend holds is the program's live (and held) bytes plus what
 * the pool says it caches (cheap: no walk over the size classes). */
static void check_cheap(void)
{
	check(fake_misuse(&m.fake) == 0, "the backend saw a contract breach");
	check(fake_locked_calls(&m.fake, NULL) == 0, "a backend call was made under a pool lock");
	for (int d = 0; d < DEVICES; d++) {
		uint64_t lb = 0;

		for (int i = 0; i < m.nlive; i++)
			if (m.live[i].dev == d)
				lb += m.live[i].bytes;
		for (int i = 0; i < m.nheld; i++)
			if (m.held[i].l.dev == d)
				lb += m.held[i].l.bytes;
		check(fake_used(&m.fake, d) == lb + gp_pool_cached_bytes(m.pool, d),
		      "the backend holds other than live + cached bytes");
	}
}

static void check_all(void)
{
	uint64_t blocks = 0;

	check(fake_misuse(&m.fake) == 0, "the backend saw a contract breach");
	check(gp_pool_test_check_lists(m.pool) == 0, "a list is out of free order or miscounted");
	for (int d = 0; d < DEVICES; d++) {
		struct gp_pool_dev_stats s;
		uint64_t lb = 0, lr = 0, n = 0, hb = 0, hn = 0, bb = 0, bn = 0, fb, fn;

		for (int i = 0; i < m.nlive; i++) {
			if (m.live[i].dev != d)
				continue;
			lb += m.live[i].bytes;
			lr += m.live[i].req;
			n++;
		}
		for (int i = 0; i < m.nheld; i++) {
			if (m.held[i].l.dev != d)
				continue;
			hb += m.held[i].l.bytes;
			lr += m.held[i].l.req;
			hn++;
		}
		for (int i = 0; i < m.nbehind; i++) {
			if (m.behind[i].dev != d)
				continue;
			bb += m.behind[i].bytes;
			lr += m.behind[i].req;
			bn++;
		}
		check(gp_pool_dev_stats(m.pool, d, &s) == GP_OK, "dev_stats failed");
		check(s.live_blocks == n + hn + bn && s.live_bytes == lb + hb + bb &&
			      s.requested_bytes == lr,
		      "live stats differ from the program's live (held, freed behind) blocks");
		check(s.held_blocks == hn && s.held_bytes == hb, "held stats differ from the model");
		check(s.stale_evictions == m.stale[d], "stale blocks miscounted");
		check(s.failed_allocs == m.failed[d], "failed allocations miscounted");
		check(fake_used(&m.fake, d) + bb == s.live_bytes + s.idle_bytes + s.pending_bytes,
		      "the backend holds other than live + cached bytes");
		check(gp_pool_cached_bytes(m.pool, d) == s.idle_bytes + s.pending_bytes,
		      "cached_bytes differs from the stats");
		check(gp_pool_test_fenced(m.pool, d, &fb, &fn) == GP_OK && s.pending_bytes >= fb &&
			      s.pending_blocks >= fn,
		      "the stats say fewer bytes pending than the lists hold fenced");
		blocks += s.live_blocks + s.idle_blocks + s.pending_blocks - bn;
	}
	check(fake_blocks(&m.fake) == blocks, "the backend holds other than live + cached blocks");
	for (int i = 0; i < m.nheld; i++)
		check(gp_pool_block_size(m.pool, m.held[i].l.ptr, NULL) == 0,
		      "block_size of a held block is not 0");
	for (int i = 0; i < m.nlive; i++) {
		int dev = -1;
		size_t bytes = 0;

		check(gp_pool_block_size(m.pool, m.live[i].ptr, &dev) == m.live[i].bytes &&
			      dev == m.live[i].dev,
		      "block_size of a live block is wrong");
		check(fake_holds(&m.fake, m.live[i].ptr, &dev, &bytes) && bytes == m.live[i].bytes,
		      "a live block is not held by the backend");
		tag(&m.live[i], 0);
	}
}

/* A cached block may come back only if the pool is ordered, or a fence recorded after its free
 * has completed, or the backend said the GPU was idle after its free. */
static void check_reuse(void *p)
{
	int f = freed_find(p);
	size_t recorded = fake_fences_recorded(&m.fake);

	check(f >= 0, "a hit returned a block the program never freed");
	if (m.ordered || fake_quiet_yes(&m.fake) > m.freed[f].quiet_yes)
		return;
	for (size_t seq = m.freed[f].fences + 1; seq <= recorded; seq++)
		if (fake_fence_complete(&m.fake, seq))
			return;
	fail("a block came back before any fence after its free completed");
}

/* A new block at p: a block freed behind the pool's back there (its address handed out again,
 * by the fake's reissue or by malloc reusing the freed host memory) has been dropped. */
static void behind_dropped(const void *p)
{
	for (int i = 0; i < m.nbehind; i++) {
		if (m.behind[i].ptr == p) {
			m.stale[m.behind[i].dev]++;
			memmove(&m.behind[i], &m.behind[i + 1],
				(size_t)(m.nbehind - i - 1) * sizeof(m.behind[0]));
			m.nbehind--;
			return;
		}
	}
}

static void op_alloc(struct input *in)
{
	int dev = (int)(u8(in) % DEVICES), retried = 0, rc;
	size_t req = size_of(in);
	struct fake_counts c0, c1;
	void *p = NULL;

	m.what = "alloc";
	if (m.nlive == MAX_LIVE)
		return;
	fake_get_counts(&m.fake, &c0);
	rc = gp_pool_alloc(m.pool, dev, req, &p, &retried);
	fake_get_counts(&m.fake, &c1);
	if (rc != GP_OK) {
		check(rc == GP_ENOMEM, "alloc failed other than out of memory");
		m.failed[dev]++;
		return;
	}
	check(p != NULL && live_find(p) < 0, "alloc returned a block that is live");
	behind_dropped(p);
	if (c1.allocs_ok == c0.allocs_ok && c1.remaps_ok == c0.remaps_ok)
		check_reuse(p);
	{
		size_t want = gp_pool_class_bytes(gp_pool_class_of(req)), got;
		int bdev = -1;

		/* Its own class's size, or (oversize, above 1 MiB, a reused block) a larger class of
		 * at most oversize_pct of the request, or (remap) a block that gave part of itself
		 * and kept more than the largest class it serves, below the next class. */
		got = gp_pool_block_size(m.pool, p, &bdev);
		check(bdev == dev, "alloc returned a block of another device");
		check(got == want ||
			      (got > want && c1.allocs_ok == c0.allocs_ok &&
			       c1.remaps_ok == c0.remaps_ok && want > MiB &&
			       (uint64_t)got * 100 <= (uint64_t)req * m.oversize_pct) ||
			      (got > want && m.remap &&
			       got < gp_pool_class_bytes(gp_pool_class_of(req) + 1)),
		      "alloc returned a block of the wrong size");
		m.live[m.nlive] = (struct live){ p, req, got, dev, m.op * 0x9e3779b97f4a7c15ull + 1 };
	}
	tag(&m.live[m.nlive], 1);
	m.nlive++;
}

static void op_free(struct input *in)
{
	unsigned k = u8(in);
	struct live l;

	m.what = "free";
	if (m.nlive == 0)
		return;
	k %= (unsigned)m.nlive;
	l = m.live[k];
	tag(&l, 0);
	check(gp_pool_free(m.pool, l.ptr) == GP_OK, "free of a live block failed");
	m.nlive--;
	m.live[k] = m.live[m.nlive];
	if (m.nfreed == MAX_FREED)
		fail("model: too many frees");
	m.freed[m.nfreed++] =
		(struct freed){ l.ptr, l.bytes, fake_fences_recorded(&m.fake), fake_quiet_yes(&m.fake) };
}

/* A pointer freed before and not live now: the pool answers GP_EINVAL when it still has the
 * block (cached), GP_ENOTOWNED when it gave it back; nothing moves (the live figures are checked
 * against the model by check_all). */
static void op_double_free(struct input *in)
{
	unsigned k = u16(in);
	uint64_t before[DEVICES];
	void *p;
	int rc, held;

	m.what = "double free";
	if (m.nfreed == 0)
		return;
	p = m.freed[k % (unsigned)m.nfreed].ptr;
	if (live_find(p) >= 0)
		return; /* its address went to a new live block: that would be a use after free */
	for (int i = 0; i < m.nbehind; i++)
		if (m.behind[i].ptr == p)
			return; /* and to one freed behind the pool's back since: the same */
	for (int d = 0; d < DEVICES; d++)
		before[d] = gp_pool_cached_bytes(m.pool, d);
	held = fake_holds(&m.fake, p, NULL, NULL);
	rc = gp_pool_free(m.pool, p);
	check(held ? rc == GP_EINVAL : rc == GP_ENOTOWNED, "a double free got the wrong answer");
	for (int d = 0; d < DEVICES; d++)
		check(gp_pool_cached_bytes(m.pool, d) == before[d], "a double free changed the cache");
}

static void op_foreign_free(struct input *in)
{
	int local = 0;
	void *p = u8(in) & 1 ? (void *)&local : NULL;

	m.what = "foreign free";
	check(gp_pool_free(m.pool, p) == GP_ENOTOWNED, "a foreign pointer was not refused");
}

static void op_release(struct input *in)
{
	int dev = (int)(u8(in) % (DEVICES + 1)) - 1;
	uint64_t target = (uint64_t)u8(in) % 4 == 0 ? 0 : (uint64_t)u8(in) * 256 * 1024;
	enum gp_release_cause cause = (enum gp_release_cause)(u8(in) % GP_CAUSE_COUNT);
	uint64_t counts0[GP_CAUSE_COUNT], counts1[GP_CAUSE_COUNT];
	struct gp_release_result r;
	int rc;

	m.what = "release";
	gp_pool_release_counts(m.pool, counts0, NULL);
	rc = gp_pool_release(m.pool, dev, target, cause, &r);
	gp_pool_release_counts(m.pool, counts1, NULL);
	check(rc == GP_OK || rc == GP_EBACKEND, "release failed");
	check(counts1[cause] == counts0[cause] + 1, "a release was not counted under its cause");
	for (int d = 0; d < DEVICES; d++)
		if (dev < 0 || d == dev)
			check(gp_pool_cached_bytes(m.pool, d) <= target,
			      "a release left more than its target cached");
}

static void op_release_idle(struct input *in)
{
	int dev = (int)(u8(in) % (DEVICES + 1)) - 1;
	uint64_t age = (uint64_t)u8(in) * 1000000ull, now = fake_clock(&m.fake);
	struct gp_release_result r;
	int rc;

	m.what = "release idle";
	rc = gp_pool_release_idle(m.pool, dev, now > age ? now - age : 0, GP_CAUSE_IDLE, &r);
	check(rc == GP_OK || rc == GP_EBACKEND, "idle release failed");
}

/* Held for a graph (a free during a capture): in use for the pool, no longer for the program; a
 * second free of it is a double free. */
static void op_hold(unsigned k)
{
	struct live l;
	uint32_t ticket = 0;
	size_t bytes = 0;
	int dev = -1;

	m.what = "hold";
	if (m.nlive == 0)
		return;
	k %= (unsigned)m.nlive;
	l = m.live[k];
	tag(&l, 0);
	check(gp_pool_hold(m.pool, l.ptr, &ticket, &bytes, &dev) == GP_OK && bytes == l.bytes &&
		      dev == l.dev,
	      "hold of a live block failed");
	check(gp_pool_free(m.pool, l.ptr) == GP_EINVAL, "a free of a held block was not refused");
	check(gp_pool_hold(m.pool, l.ptr, NULL, NULL, NULL) == GP_EINVAL,
	      "a second hold was not refused");
	m.nlive--;
	m.live[k] = m.live[m.nlive];
	m.held[m.nheld++] = (struct held){ l, ticket };
}

/* The graph is done with a held block: the pool caches it as a free would. */
static void op_unhold(unsigned k)
{
	struct held h;

	m.what = "unhold";
	if (m.nheld == 0)
		return;
	k %= (unsigned)m.nheld;
	h = m.held[k];
	check(gp_pool_unhold(m.pool, h.l.ptr, h.ticket + (1u << 2)) != GP_OK,
	      "an unhold with another ticket was taken");
	check(gp_pool_unhold(m.pool, h.l.ptr, h.ticket) == GP_OK, "unhold of a held block failed");
	m.nheld--;
	m.held[k] = m.held[m.nheld];
	if (m.nfreed == MAX_FREED)
		fail("model: too many frees");
	m.freed[m.nfreed++] = (struct freed){ h.l.ptr, h.l.bytes, fake_fences_recorded(&m.fake),
					      fake_quiet_yes(&m.fake) };
}

/* The program frees a live block through the driver, past the pool: the pool still counts it in
 * use until its address is handed out again (by the fake, to the next alloc it fits, or by malloc
 * reusing its host memory), maybe never. */
static void op_free_behind(unsigned k)
{
	struct live l;

	m.what = "free behind";
	if (m.nlive == 0 || m.nbehind == MAX_LIVE)
		return;
	k %= (unsigned)m.nlive;
	l = m.live[k];
	check(fake_free_behind(&m.fake, l.ptr) == 0, "the fake does not hold a live block");
	m.nlive--;
	m.live[k] = m.live[m.nlive];
	m.behind[m.nbehind++] = l;
}

/* cudaDeviceReset: the pool forgets the device, then the reset frees everything on it. */
static void op_forget(int dev)
{
	m.what = "forget device";
	gp_pool_forget_device(m.pool, dev);
	for (int i = 0; i < m.nlive;) {
		if (m.live[i].dev == dev) {
			m.nlive--;
			m.live[i] = m.live[m.nlive];
		} else {
			i++;
		}
	}
	for (int i = 0; i < m.nheld;) {
		if (m.held[i].l.dev == dev) {
			m.nheld--;
			m.held[i] = m.held[m.nheld];
		} else {
			i++;
		}
	}
	for (int i = 0; i < m.nbehind;) {
		if (m.behind[i].dev == dev) {
			memmove(&m.behind[i], &m.behind[i + 1],
				(size_t)(m.nbehind - i - 1) * sizeof(m.behind[0]));
			m.nbehind--;
		} else {
			i++;
		}
	}
	fake_reset_device(&m.fake, dev);
}

static void op_misc(struct input *in)
{
	unsigned k = u8(in), v = u8(in);
	int dev = (int)(v % DEVICES);

	switch (k % 11) {
	case 0:
		op_forget(dev);
		break;
	case 8:
		op_hold(v);
		break;
	case 9:
		op_unhold(v);
		break;
	case 10:
		op_free_behind(v);
		break;
	case 1:
		m.what = "capacity";
		fake_set_capacity(&m.fake, dev, v & 0x80 ? DEVICE_CAPACITY : (uint64_t)(v & 0x7f) * 4 * MiB);
		break;
	case 2:
		m.what = "free rc";
		fake_set_free_rc(&m.fake, v & 1 ? GP_EBACKEND : GP_OK);
		break;
	case 3:
		m.what = "may release";
		fake_set_may_release(&m.fake, v & 1);
		break;
	case 4:
		m.what = "fence auto, quiet";
		fake_set_fence_auto(&m.fake, v % 4);
		fake_set_quiet(&m.fake, (v >> 2) & 1);
		break;
	case 5:
		m.what = "set cap";
		m.cap[dev] = (uint64_t)(v >> 2) * 512 * 1024;
		gp_pool_set_cap(m.pool, dev, m.cap[dev]);
		check(gp_pool_cap(m.pool, dev) == m.cap[dev], "cap not kept");
		break;
	case 6:
		m.what = "clock";
		fake_advance_clock(&m.fake, (uint64_t)v * 1000000ull);
		break;
	default:
		m.what = "complete all fences";
		fake_complete_all_fences(&m.fake);
		break;
	}
}

static void run(struct input *in)
{
	while (in->n > 0 && m.op < MAX_OPS) {
		unsigned op = u8(in) % 16;
		size_t recorded;
		int full = m.op % 32 == 31; /* the stats walk every size class: every 32nd op */

		m.op++;
		switch (op) {
		case 0: case 1: case 2: case 3:
			op_alloc(in);
			break;
		case 4: case 5: case 6:
			op_free(in);
			break;
		case 7:
			op_double_free(in);
			break;
		case 8:
			op_foreign_free(in);
			break;
		case 9:
			op_release(in);
			break;
		case 10:
			op_release_idle(in);
			break;
		case 11:
			m.what = "advance";
			check(gp_pool_advance(m.pool, (int)(u8(in) & 1)) != GP_EINVAL, "advance failed");
			break;
		case 12:
			m.what = "complete a fence";
			recorded = fake_fences_recorded(&m.fake);
			if (recorded > 0)
				fake_complete_fence(&m.fake, 1 + u16(in) % recorded);
			break;
		case 13:
			m.what = "fence record rc";
			fake_set_fence_record_rc(&m.fake, u8(in) % 3 == 0 ? GP_EAGAIN : GP_OK);
			break;
		case 14:
			m.what = "unordered";
			if (u8(in) % 4 == 0) {
				gp_pool_set_ordered(m.pool, 0);
				m.ordered = 0;
			}
			break;
		default:
			op_misc(in);
			break;
		}
		check_cheap();
		if (full)
			check_all();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = { data, size };
	struct gp_pool_config cfg = { .ordered = 0, .over_cap = on_over_cap, .arg = NULL };
	struct gp_release_result r;

	memset(&m, 0, sizeof(m));
	fake_init(&m.fake);
	for (int d = 0; d < DEVICES; d++)
		fake_set_capacity(&m.fake, d, DEVICE_CAPACITY);
	{
		unsigned first = u8(&in);

		cfg.ordered = m.ordered = (int)(first & 1);
		cfg.oversize_pct = m.oversize_pct = first & 2 ? 200 : 0;
		cfg.fence_batch = first & 4 ? 4 : 0;
		cfg.fence_batch_bytes = first & 64 ? 64 * 1024 : 0; /* up to 16 a batch when batching */
		/* A miss may wait for fenced blocks of its class (a few microseconds of real time:
		 * the fake's fences complete only when this input says so, or never). */
		cfg.reuse_wait_ns = first & 8 ? 20000 : 0;
		cfg.reuse_poll_ns = first & 16 ? 5000 : 0;
		cfg.reuse_age_ns = first & 32 ? 1 : 0; /* any recorded fence is old enough */
		/* Blocks of 4 MiB and more are movable, and a miss may remap them (GPUPOOL_VMM), and
		 * when it also batches fences, give back idle blocks first (GPUPOOL_VMM_TRIM). */
		if (first & 128) {
			fake_set_movable(&m.fake, 4 * MiB);
			cfg.remap_min_bytes = 4 * MiB;
			cfg.remap_trim = (first & 4) != 0;
			fake_set_split(&m.fake, 1, GP_OK);
			m.remap = 1;
		}
	}
	if (gp_pool_create(&m.fake.be, &cfg, &m.pool) != GP_OK)
		abort();
	run(&in);

	m.what = "the end";
	fake_set_free_rc(&m.fake, GP_OK);
	while (m.nheld > 0) {
		m.nheld--;
		check(gp_pool_unhold(m.pool, m.held[m.nheld].l.ptr, m.held[m.nheld].ticket) == GP_OK,
		      "a last unhold failed");
	}
	while (m.nlive > 0) {
		m.nlive--;
		tag(&m.live[m.nlive], 0);
		check(gp_pool_free(m.pool, m.live[m.nlive].ptr) == GP_OK, "a last free failed");
	}
	gp_pool_release(m.pool, -1, 0, GP_CAUSE_API, &r);
	check_all();
	check(fake_blocks(&m.fake) == 0, "after freeing and releasing everything the backend holds blocks");
	gp_pool_destroy(m.pool);
	fake_fini(&m.fake);
	return 0;
}
