/* gpu_pressure.cu — two processes on one GPU (the thresholds issue's acceptance test).
 * Process A (this program, under the shim, GPUPOOL_MIN_FREE=30%) allocates and frees 60% of
 * the card, then idles. Process B (this program again with --taker, WITHOUT the shim) then
 * allocates 60% of the card in 1 GiB blocks, retrying a failed block for up to 10 s. B must get
 * it all because A gave its cache back; a control run with GPUPOOL_MIN_FREE unset shows that B
 * cannot. Reports how long A took to react (B's first failure to its last success). */
#include "gpu_common.cuh"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static int taker(double share)
{
	size_t total = 0, want, got = 0, free_b, last_free;
	void *p;
	uint64_t t0 = gt_now_ns(), t_below = 0, t_back = 0;

	gt_test = "gpu_pressure_taker";
	last_free = gt_mem_free(&total);
	want = (size_t)(share * (double)total) / GT_GIB;
	/* A's reaction: from the moment free memory fell below its 30% threshold to the first
	 * time free memory rose between two of our reads (only A frees anything). */
	while (got < want && gt_now_ns() - t0 < 10000000000ull) {
		if (cudaMalloc(&p, GT_GIB) == cudaSuccess)
			got++;
		else
			cudaGetLastError();
		free_b = gt_mem_free(NULL);
		if (t_below == 0 && free_b < (size_t)(0.3 * (double)total))
			t_below = gt_now_ns();
		if (t_below != 0 && t_back == 0 && free_b > last_free)
			t_back = gt_now_ns();
		last_free = free_b;
	}
	printf("INFO gpu_pressure taker: got %zu of %zu GiB in %.0f ms; holder reacted %s%.1f ms "
	       "after free memory fell below 30%%\n", got, want, (double)(gt_now_ns() - t0) / 1e6,
	       t_back ? "" : "(never) ", t_back ? (double)(t_back - t_below) / 1e6 : 0.0);
	fflush(stdout);
	return got == want ? 0 : 1;
}

/* Run B without the shim and return its exit status; its output goes to ours. */
static int run_taker(const char *self)
{
	pid_t pid = fork();

	if (pid == 0) {
		unsetenv("LD_PRELOAD");
		execl(self, self, "--taker", (char *)NULL);
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int main(int argc, char **argv)
{
	size_t total = 0, n;
	void **blocks;
	int expect_success;
	int rc;

	if (argc > 1 && strcmp(argv[1], "--taker") == 0)
		return taker(0.6);
	gt_test = "gpu_pressure";
	if (!gt_require_shim() || !gt_context())
		return gt_finish();
	expect_success = getenv("GPUPOOL_MIN_FREE") != NULL;
	gt_mem_free(&total);
	n = (size_t)(0.6 * (double)total) / GT_GIB;
	blocks = (void **)calloc(n, sizeof(void *));
	for (size_t i = 0; i < n; i++)
		if (!gt_ok(cudaMalloc(&blocks[i], GT_GIB), "cudaMalloc(1 GiB)"))
			return gt_finish();
	for (size_t i = 0; i < n; i++)
		cudaFree(blocks[i]);
	gt_info("holder", "allocated and freed %zu GiB of %.1f GiB; now idle", n, gt_gib(total));
	rc = run_taker("/proc/self/exe");
	if (expect_success)
		gt_check(rc == 0, "taker gets 60% of the card",
			 "with GPUPOOL_MIN_FREE=%s the holder gave its cache back (taker exit %d)",
			 getenv("GPUPOOL_MIN_FREE"), rc);
	else
		gt_check(rc != 0, "control: taker cannot get 60% of the card",
			 "without GPUPOOL_MIN_FREE the holder keeps its cache (taker exit %d)", rc);
	return gt_finish();
}
