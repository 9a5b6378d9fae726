/* multidev.c — one process, two stand-in devices (STANDIN_DEVICES=2), cudaSetDevice back and
 * forth and frees issued with the other device current: each block returns to its own device's
 * pool, is never handed out for the other device, and is given back on its own device (the
 * stand-in counts frees made while another device was current). The caller's current device
 * is left as it was. */
#define _POSIX_C_SOURCE 200809L
#include "e2e.h"

#include <signal.h>
#include <unistd.h>

#define MIB E2E_MIB

static struct standin_counters dev(int d)
{
	struct standin_counters c;
	standin_get(d, &c);
	return c;
}

struct want {
	uint64_t b0, b1;
};

static int live_is(void *arg)
{
	struct want *w = arg;
	return dev(0).live_bytes == w->b0 && dev(1).live_bytes == w->b1;
}

/* The block moved between devices: above 1 MiB, where a freed block is reused as soon as its
 * fence completes (smaller ones wait for a batch of fenced frees: cfg.fence_batch). */
#define BIG (2 * MIB)

int main(void)
{
	void *a0, *a1, *b0, *x, *keep0, *keep1;
	int cur = -1, released;
	struct want w = { 1 * MIB, 2 * MIB };

	e2e_start("e2e_multidev");
	e2e_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
	e2e_cuda(cudaMalloc(&a0, BIG), "cudaMalloc on device 0");
	e2e_cuda(cudaMalloc(&keep0, MIB), "cudaMalloc on device 0");
	e2e_fill(keep0, MIB, 100);
	e2e_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
	e2e_cuda(cudaMalloc(&a1, MIB), "cudaMalloc on device 1");
	e2e_cuda(cudaMalloc(&keep1, 2 * MIB), "cudaMalloc on device 1");
	e2e_fill(keep1, 2 * MIB, 101);

	/* Device 1 current: free device 0's block; it goes back to device 0's pool. */
	e2e_cuda(cudaFree(a0), "cudaFree(device 0 block) with device 1 current");
	e2e_cuda(cudaMalloc(&x, BIG), "cudaMalloc on device 1");
	e2e_check(x != a0, "device 1 is not handed device 0's cached block");
	e2e_check(dev(1).mallocs == 3, "device 1 made a real allocation for it (%llu)",
		  (unsigned long long)dev(1).mallocs);
	e2e_cuda(cudaFree(x), "cudaFree on device 1");
	e2e_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
	e2e_cuda(cudaMalloc(&b0, BIG), "cudaMalloc on device 0");
	e2e_check(b0 == a0 && dev(0).mallocs == 2, "device 0 gets its own cached block back, no new real "
		  "allocation");

	/* Device 0 current: free device 1's block. */
	e2e_cuda(cudaFree(a1), "cudaFree(device 1 block) with device 0 current");
	e2e_cuda(cudaFree(b0), "cudaFree on device 0");
	e2e_cuda(cudaSetDevice(1), "cudaSetDevice(1)");

	kill(getpid(), SIGUSR1);
	released = e2e_poll(live_is, &w, 5000); /* before the figures below are read */
	e2e_check(released,
		  "SIGUSR1 releases both devices' caches: device 0 holds %llu B, device 1 %llu B "
		  "(only the live blocks)", (unsigned long long)dev(0).live_bytes,
		  (unsigned long long)dev(1).live_bytes);
	e2e_check(dev(0).frees_off_device == 0 && dev(1).frees_off_device == 0,
		  "every real cudaFree ran with the block's own device current");
	e2e_check(dev(0).frees == 1 && dev(1).frees == 2,
		  "real frees: 1 on device 0, 2 on device 1 (%llu, %llu)",
		  (unsigned long long)dev(0).frees, (unsigned long long)dev(1).frees);
	e2e_cuda(cudaGetDevice(&cur), "cudaGetDevice");
	e2e_check(cur == 1, "the caller's current device is still 1 (%d)", cur);
	e2e_check(e2e_verify(keep0, MIB, 100) && e2e_verify(keep1, 2 * MIB, 101),
		  "live blocks on both devices kept their data");
	printf("PASS e2e_multidev\n");
	return 0;
}
