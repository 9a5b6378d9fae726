/* park_vmm.c — the fast park of VMM-backed blocks (shim/park_vmm.h) on the stand-in driver with
 * two devices (STANDIN_DEVICES=2). Argument: the memcpy workers (0: the parking thread copies).
 * Blocks of several sizes and pieces on both devices, two of them sharing a range (a split),
 * each holding its own pattern in every byte:
 *   - nothing to park: 0, and no staging ring is pinned;
 *   - a park: each device's live bytes fall by exactly its blocks' bytes, no handle is left,
 *     every address is still the pool's and reserved; a second park is refused;
 *   - the unpark: the same bytes at the same addresses, each device's live bytes as before; a
 *     second park and unpark pin no second ring;
 *   - a failure in the copies, and one in the releases (some blocks already given back), each
 *     leave every block mapped with its bytes, and the device as before;
 *   - a park whose put-back fails too leaves blocks parked, and an unpark brings them back;
 *   - an unpark that fails (a cuMemCreate, then a cuMemMap) keeps what it brought back, with its
 *     bytes, and the retry brings the rest;
 *   - host memory short (an address-space limit): nothing parked;
 *   - the blocks are freed at the end with no handle or range left (the registry took the new
 *     handles).
 * The shim's park, VMM, context and log files are compiled into this program and linked directly
 * against the stand-in driver, with the driver table filled from it: the functions are internal
 * to libgpupool.so, and a test hook exported from the library would widen its exports for every
 * user. The suspend sequence that calls them is tested with the shim (e2e_suspend*). */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ctx.h"
#include "door/lookup.h"
#include "e2e.h"
#include "park_vmm.h"
#include "state.h"
#include "vmm.h"

/* What the shim defines elsewhere (shim.c, lookup.c), for the files compiled in. */
struct gp_shim_state gp_shim = {
	.ctx = { .user_lock = PTHREAD_MUTEX_INITIALIZER },
	.vmm = { .lock = PTHREAD_MUTEX_INITIALIZER },
	.park = { .lock = PTHREAD_MUTEX_INITIALIZER },
};
struct gp_shim_early gp_shim_early;
struct gp_cu gp_cu;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

#define MIB E2E_MIB
#define NBLOCKS 7

struct block {
	int device;
	size_t bytes;
	CUdeviceptr va;
	unsigned char *want; /* its pattern */
};

static struct block blocks[NBLOCKS];
static uint64_t live0[2]; /* each device's live bytes with every block on it */
static size_t total;      /* bytes of all blocks */

/* Every row of the door's table from the driver this program is linked to. */
static void fill_table(void)
{
	void *p;

#define FILL(cls, name, base, version, flavour, params, args, stream)                              \
	p = dlsym(RTLD_DEFAULT, "cu" #name);                                                       \
	memcpy(&gp_cu.name, &p, sizeof(p));
	GP_DRIVER_ALL(FILL)
#undef FILL
}

static void drv(CUresult e, const char *what)
{
	if (e != CUDA_SUCCESS)
		e2e_fail("%s: CUDA error %d", what, (int)e);
}

static uint64_t live(int device)
{
	struct standin_counters c;

	standin_get(device, &c);
	return c.live_bytes;
}

static uint64_t counter(size_t offset)
{
	struct standin_counters c;

	standin_get(-1, &c);
	return *(const uint64_t *)((const char *)&c + offset);
}
#define COUNT(field) counter(offsetof(struct standin_counters, field))

/* A pattern in every byte, different for every block. */
static void pattern(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, n - i < 8 ? n - i : 8);
	}
}

static int mapped(const struct block *b)
{
	return standin_vmm_mapped((const void *)(uintptr_t)b->va, NULL, NULL, NULL);
}

/* The block's bytes are its pattern (read in place: the stand-in's device memory is the host's
 * once mapped with access). */
static int intact(const struct block *b)
{
	return memcmp((const void *)(uintptr_t)b->va, b->want, b->bytes) == 0;
}

/* Every block mapped, its bytes its own, each device's live bytes as with them all there. */
static void all_there(const char *when)
{
	int ok = 1;

	for (int i = 0; i < NBLOCKS; i++)
		ok = ok && mapped(&blocks[i]) && intact(&blocks[i]);
	e2e_check(ok, "%s: every block mapped at its address with its bytes", when);
	e2e_check(live(0) == live0[0] && live(1) == live0[1],
		  "%s: the devices hold what they held (%llu, %llu MiB)", when,
		  (unsigned long long)(live(0) / MIB), (unsigned long long)(live(1) / MIB));
	e2e_check(gp_park_vmm_parked() == 0, "%s: nothing left parked", when);
}

static void make_blocks(void)
{
	/* Sizes (MiB) and devices: one piece, three, nine (4 MiB pieces and a 2 MiB one), a 64 MiB
	 * block split into 40 + 24 (two blocks, one range), and two on the second device. */
	static const struct {
		int device;
		size_t mib;
	} spec[] = { { 0, 2 }, { 0, 6 }, { 0, 34 }, { 0, 64 }, { 1, 4 }, { 1, 32 } };
	size_t tail = 0;
	int n = 0, pushed;

	for (size_t i = 0; i < sizeof(spec) / sizeof(spec[0]); i++) {
		struct block *b = &blocks[n++];

		b->device = spec[i].device;
		b->bytes = spec[i].mib * MIB;
		if (gp_ctx_enter(b->device, &pushed) != 0)
			e2e_fail("no context on device %d", b->device);
		drv(gp_vmm_alloc(b->device, b->bytes, &b->va), "gp_vmm_alloc");
		gp_ctx_leave(pushed);
		if (spec[i].mib == 64) {
			drv(gp_vmm_split((void *)(uintptr_t)b->va, b->bytes, 24 * MIB, &tail),
			    "gp_vmm_split");
			blocks[n] = *b;
			blocks[n].bytes = tail;
			blocks[n].va = b->va + (b->bytes - tail);
			b->bytes -= tail;
			n++;
		}
	}
	if (n != NBLOCKS || tail != 24 * MIB)
		e2e_fail("made %d blocks, split off %zu bytes", n, tail);
	for (int i = 0; i < NBLOCKS; i++) {
		struct block *b = &blocks[i];

		b->want = malloc(b->bytes);
		if (b->want == NULL)
			e2e_fail("no host memory");
		pattern(b->want, b->bytes, (uint64_t)i + 1);
		drv(cuMemcpy(b->va, (CUdeviceptr)(uintptr_t)b->want, b->bytes), "cuMemcpy");
		total += b->bytes;
	}
	live0[0] = live(0);
	live0[1] = live(1);
}

static void park_ok(const char *when)
{
	struct gp_park_figures f = { 0, 0, 0, 0 };
	uint64_t on0 = 0, on1 = 0;
	int ok = 1, rc = gp_park_vmm(&f);

	e2e_check(rc == 0 && f.bytes == total && f.blocks == NBLOCKS,
		  "%s: park: %d, %llu bytes in %llu blocks (%zu, %d)", when, rc,
		  (unsigned long long)f.bytes, (unsigned long long)f.blocks, total, NBLOCKS);
	for (int i = 0; i < NBLOCKS; i++) {
		*(blocks[i].device == 0 ? &on0 : &on1) += blocks[i].bytes;
		ok = ok && !mapped(&blocks[i]) && gp_vmm_owns((void *)(uintptr_t)blocks[i].va);
	}
	e2e_check(live(0) == live0[0] - on0 && live(1) == live0[1] - on1,
		  "%s: each device's live bytes fell by exactly its blocks' (%llu, %llu MiB)", when,
		  (unsigned long long)(on0 / MIB), (unsigned long long)(on1 / MIB));
	e2e_check(ok && standin_vmm_handles(-1) == 0,
		  "%s: no block mapped, no handle left, every address still the pool's", when);
	e2e_check(gp_park_vmm_parked() == total && gp_park_vmm_bytes(NULL) == 0,
		  "%s: all of it parked, nothing more to park", when);
}

static void unpark_ok(const char *when)
{
	struct gp_park_figures f = { 0, 0, 0, 0 };
	int rc = gp_unpark_vmm(&f);

	e2e_check(rc == 0 && f.bytes == total && f.blocks == NBLOCKS,
		  "%s: unpark: %d, %llu bytes in %llu blocks back", when, rc,
		  (unsigned long long)f.bytes, (unsigned long long)f.blocks);
	all_there(when);
}

/* Host memory short: an address-space limit the host copy cannot fit in. */
static void host_short(void)
{
#ifdef UNDER_SANITIZER
	e2e_note("host memory short: not tried under a sanitizer (its shadow memory)");
#else
	struct rlimit was, lim;
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long long vm_kib = 0;
	int rc;

	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmSize: %llu kB", &vm_kib) == 1)
			break;
	if (f != NULL)
		fclose(f);
	if (vm_kib == 0 || getrlimit(RLIMIT_AS, &was) != 0) {
		e2e_note("host memory short: the address space could not be read; not tried");
		return;
	}
	lim = was;
	lim.rlim_cur = vm_kib * 1024 + total / 2;
	if (setrlimit(RLIMIT_AS, &lim) != 0) {
		e2e_note("host memory short: no address-space limit could be set; not tried");
		return;
	}
	rc = gp_park_vmm(NULL);
	setrlimit(RLIMIT_AS, &was);
	e2e_check(rc == CUDA_ERROR_OUT_OF_MEMORY, "host memory short: the park says so (%d)", rc);
	all_there("host memory short");
#endif
}

int main(int argc, char **argv)
{
	struct gp_park_figures f = { 1, 1, 1, 1 };
	unsigned threads = argc > 1 ? (unsigned)atoi(argv[1]) : 2;
	size_t host = 0, moved;
	uint64_t released;
	CUcontext c;
	int rc;

	e2e_start(threads == 0 ? "e2e_park_vmm_nothreads" : "e2e_park_vmm");
	fill_table();
	drv(cuInit(0), "cuInit");
	for (int d = 0; d < 2; d++) {
		drv(cuDevicePrimaryCtxRetain(&c, d), "cuDevicePrimaryCtxRetain");
		gp_ctx_note(d, c);
	}
	drv(cuCtxSetCurrent(gp_ctx_of(0)), "cuCtxSetCurrent");
	gp_shim.life.opts.vmm = GP_VMM_ON;
	gp_vmm_init(GP_VMM_ON);
	/* Slots of 4 MiB, so that blocks take several and the ring turns many times; a 2 MiB block
	 * and the 2 MiB ends of others fill a slot part way. */
	rc = gp_park_vmm_tune(3, 4 * MIB, threads);
	e2e_check(rc == 0, "the ring tuned: 3 slots of 4 MiB, %u workers", threads);

	rc = gp_park_vmm(&f);
	e2e_check(rc == 0 && f.bytes == 0 && f.blocks == 0 && COUNT(pinned_allocs) == 0,
		  "nothing to park: 0, and no ring pinned");
	make_blocks();
	moved = gp_park_vmm_bytes(&host);
	e2e_check(moved == total && host == total + 12 * MIB,
		  "a park would move %zu MiB and needs %zu MiB of host memory (the ring's 12 "
		  "included)", total / MIB, host / MIB);

	park_ok("first park");
	rc = gp_park_vmm(NULL);
	e2e_check(rc == CUDA_ERROR_ILLEGAL_STATE, "a second park before the unpark is refused");
	unpark_ok("first unpark");
	e2e_check(gp_unpark_vmm(NULL) == 0, "an unpark with nothing parked: 0");
	park_ok("second park");
	unpark_ok("second unpark");
	e2e_check(COUNT(pinned_allocs) == 1 && COUNT(pinned_frees) == 0,
		  "one ring pinned, kept and used by both parks");

	/* A copy fails (an event of the pipeline is not recorded): nothing was released yet. */
	standin_set_fault(STANDIN_FAULT_EVENT_RECORD, 5, 0);
	rc = gp_park_vmm(NULL);
	standin_set_fault(STANDIN_FAULT_EVENT_RECORD, 0, 0);
	e2e_check(rc != 0, "a copy that fails mid-park fails the park (%d)", rc);
	all_there("after a copy failed");

	/* An unmap fails after some blocks were given back (the 14th of the 29 pieces of the
	 * first device's blocks): those are put back. */
	released = COUNT(vmm_releases);
	standin_set_fault(STANDIN_FAULT_VMM_UNMAP, 14, 0);
	rc = gp_park_vmm(NULL);
	standin_set_fault(STANDIN_FAULT_VMM_UNMAP, 0, 0);
	e2e_check(rc != 0 && standin_faults(STANDIN_FAULT_VMM_UNMAP) == 1 &&
			  COUNT(vmm_releases) > released,
		  "an unmap that fails mid-park, after releases, fails the park (%d)", rc);
	all_there("after an unmap failed");

	/* ... and when putting back fails too, they stay parked until an unpark. */
	standin_set_fault(STANDIN_FAULT_VMM_UNMAP, 14, 0);
	standin_set_fault(STANDIN_FAULT_MALLOC, 1, 0);
	rc = gp_park_vmm(NULL);
	standin_set_fault(STANDIN_FAULT_MALLOC, 0, 0);
	standin_set_fault(STANDIN_FAULT_VMM_UNMAP, 0, 0);
	e2e_check(rc != 0 && gp_park_vmm_parked() != 0,
		  "a park whose put-back fails too leaves %zu MiB parked (%d)",
		  gp_park_vmm_parked() / MIB, rc);
	e2e_check(gp_unpark_vmm(NULL) == 0, "the unpark brings them back");
	all_there("after a failed put-back");

	/* An unpark fails: the 11th cuMemCreate (the first device's first block, of at most 10
	 * pieces, comes back; the 29 pieces of its blocks do not), then a cuMemMap; each retry
	 * carries on. */
	park_ok("third park");
	standin_set_fault(STANDIN_FAULT_MALLOC, 11, 0);
	rc = gp_unpark_vmm(&f);
	standin_set_fault(STANDIN_FAULT_MALLOC, 0, 0);
	{
		size_t left = gp_park_vmm_parked(), back = 0;
		int ok = 1;

		for (int i = 0; i < NBLOCKS; i++)
			if (mapped(&blocks[i])) {
				back += blocks[i].bytes;
				ok = ok && intact(&blocks[i]);
			}
		e2e_check(rc != 0 && left != 0 && left < total && back == total - left &&
				  back == f.bytes && ok,
			  "an unpark whose 11th cuMemCreate fails (%d): %zu MiB back with their "
			  "bytes, %zu MiB still parked", rc, back / MIB, left / MIB);
	}
	standin_set_fault(STANDIN_FAULT_VMM_MAP, 3, 0);
	rc = gp_unpark_vmm(NULL);
	standin_set_fault(STANDIN_FAULT_VMM_MAP, 0, 0);
	e2e_check(rc != 0 && gp_park_vmm_parked() != 0,
		  "a retry whose 3rd cuMemMap fails fails again (%d), %zu MiB still parked", rc,
		  gp_park_vmm_parked() / MIB);
	e2e_check(gp_unpark_vmm(NULL) == 0, "the next retry succeeds");
	all_there("after the retries");

	host_short();

	for (int i = 0; i < NBLOCKS; i++) {
		int pushed;

		gp_ctx_enter(blocks[i].device, &pushed);
		drv(gp_vmm_free((void *)(uintptr_t)blocks[i].va, 1), "gp_vmm_free");
		gp_ctx_leave(pushed);
		free(blocks[i].want);
	}
	e2e_check(live(0) == 0 && live(1) == 0 && standin_vmm_handles(-1) == 0 &&
			  COUNT(vmm_reserves) == COUNT(vmm_address_frees),
		  "every block freed: no byte, handle or range left");
	printf("PASS %s\n", threads == 0 ? "e2e_park_vmm_nothreads" : "e2e_park_vmm");
	return 0;
}
