/* gpu_ipc.cu — CUDA IPC on pooled blocks: a block the pool hands out (and one it hands out a
 * second time, from its cache) gives an IPC handle that another process opens and reads the
 * right data through. No splitting keeps this true: a block is a whole cudaMalloc. The child
 * runs without the shim. */
#include "gpu_common.cuh"

#include <sys/wait.h>
#include <unistd.h>

#define BYTES (64 * GT_MIB)

static int child(const char *hex, unsigned char want)
{
	cudaIpcMemHandle_t h;
	unsigned char *host = (unsigned char *)malloc(BYTES);
	void *p = NULL;
	size_t bad = 0;

	gt_test = "gpu_ipc_child";
	for (size_t i = 0; i < sizeof(h); i++)
		sscanf(hex + 2 * i, "%2hhx", &((unsigned char *)&h)[i]);
	if (!gt_ok(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle"))
		return 1;
	gt_ok(cudaMemcpy(host, p, BYTES, cudaMemcpyDeviceToHost), "cudaMemcpy");
	for (size_t i = 0; i < BYTES; i++)
		bad += host[i] != want;
	cudaIpcCloseMemHandle(p);
	printf("CHILD bad=%zu\n", bad);
	return bad != 0;
}

static int share(const char *self, void *p, unsigned char v, const char *what)
{
	cudaIpcMemHandle_t h;
	char hex[2 * sizeof(h) + 1], val[8];
	int status = 0;

	if (!gt_ok(cudaMemset(p, v, BYTES), "cudaMemset") || !gt_ok(cudaDeviceSynchronize(), "sync") ||
	    !gt_ok(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle"))
		return 0;
	for (size_t i = 0; i < sizeof(h); i++)
		sprintf(hex + 2 * i, "%02x", ((unsigned char *)&h)[i]);
	snprintf(val, sizeof(val), "%d", v);
	pid_t pid = fork();
	if (pid == 0) {
		unsetenv("LD_PRELOAD");
		execl(self, self, "--child", hex, val, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	return gt_check(WIFEXITED(status) && WEXITSTATUS(status) == 0, what,
			"another process opened the IPC handle and read 64 MiB of 0x%02x (exit %d)", v,
			WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

int main(int argc, char **argv)
{
	void *a, *b;

	if (argc == 4 && strcmp(argv[1], "--child") == 0)
		return child(argv[2], (unsigned char)atoi(argv[3]));
	gt_test = "gpu_ipc";
	if (!gt_require_shim() || !gt_context())
		return gt_finish();
	gt_ok(cudaMalloc(&a, BYTES), "cudaMalloc");
	share("/proc/self/exe", a, 0x5a, "fresh pooled block");
	gt_ok(cudaFree(a), "cudaFree");
	gt_ok(cudaMalloc(&b, BYTES), "cudaMalloc again");
	gt_check(a == b, "reused from the cache", "same block handed out again: %s", a == b ? "yes" : "no");
	share("/proc/self/exe", b, 0xa5, "reused pooled block");
	gt_ok(cudaFree(b), "cudaFree");
	return gt_finish();
}
