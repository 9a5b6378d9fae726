/* ipc.c — proves the takeover mode's IPC warning: with GPUPOOL_TORCH=takeover the first IPC
 * handle asked for, through the runtime door (cudaIpcGetMemHandle) or the driver door
 * (cuIpcGetMemHandle handed out by cuGetProcAddress), gets exactly one warning at GPUPOOL_LOG=warn
 * naming torch.multiprocessing, however many handles follow; without takeover, none. In every
 * case the call's answer is the stand-in's own: the handle holds the address, a NULL handle gets
 * the invalid-value error. With --native, the same children without the shim (no warning). */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "e2e.h"

#define WARNING "torch.multiprocessing"
#define HANDLES 3

static void check_handle(const void *handle, size_t len, const void *ptr)
{
	static const char zero[64];
	e2e_check(len >= sizeof(ptr) && memcmp(handle, &ptr, sizeof(ptr)) == 0 &&
			  memcmp((const char *)handle + sizeof(ptr), zero, len - sizeof(ptr)) == 0,
		  "the handle is the driver's own (the address)");
}

static int child_runtime(void)
{
	cudaIpcMemHandle_t h;
	void *p;

	e2e_cuda(cudaMalloc(&p, E2E_MIB), "cudaMalloc");
	for (int i = 0; i < HANDLES; i++) {
		memset(&h, 0xff, sizeof(h));
		e2e_cuda(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle");
		check_handle(&h, sizeof(h), p);
	}
	e2e_check(cudaIpcGetMemHandle(NULL, p) == cudaErrorInvalidValue,
		  "cudaIpcGetMemHandle(NULL) gets the invalid-value error");
	e2e_cuda(cudaFree(p), "cudaFree");
	return 0;
}

static int child_driver(void)
{
	CUresult (*get_proc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
	CUresult (*ipc)(CUipcMemHandle *, CUdeviceptr);
	void *lib, *sym, *fn = NULL;
	CUipcMemHandle h;
	void *p;

	e2e_cuda(cudaMalloc(&p, E2E_MIB), "cudaMalloc"); /* loads the driver, a context current */
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (lib == NULL || (sym = dlsym(lib, "cuGetProcAddress_v2")) == NULL)
		e2e_fail("no cuGetProcAddress_v2 in libcuda.so.1");
	memcpy(&get_proc, &sym, sizeof(sym));
	if (get_proc("cuIpcGetMemHandle", &fn, 12000, 0, NULL) != CUDA_SUCCESS || fn == NULL)
		e2e_fail("cuGetProcAddress(cuIpcGetMemHandle) failed");
	memcpy(&ipc, &fn, sizeof(fn));
	for (int i = 0; i < HANDLES; i++) {
		memset(&h, 0xff, sizeof(h));
		e2e_check(ipc(&h, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS, "cuIpcGetMemHandle");
		check_handle(&h, sizeof(h), p);
	}
	e2e_check(ipc(NULL, (CUdeviceptr)(uintptr_t)p) == CUDA_ERROR_INVALID_VALUE,
		  "cuIpcGetMemHandle(NULL) gets the invalid-value error");
	e2e_cuda(cudaFree(p), "cudaFree");
	return 0;
}

static int count(const char *text, const char *what)
{
	int n = 0;

	for (const char *s = text; (s = strstr(s, what)) != NULL; s += strlen(what))
		n++;
	return n;
}

static void run(const char *door, int takeover, int want)
{
	const char *args[] = { "--child", door, NULL };
	const char *env_take[] = { "GPUPOOL_LOG=warn", "GPUPOOL_TORCH=takeover", NULL };
	const char *env_plain[] = { "GPUPOOL_LOG=warn", "GPUPOOL_TORCH", NULL };
	struct e2e_child c;
	char why[64];

	if (e2e_run_self(args, takeover ? env_take : env_plain, 20000, &c) != 0)
		e2e_fail("could not run the %s child", door);
	c.err[c.err_len < sizeof(c.err) ? c.err_len : sizeof(c.err) - 1] = '\0';
	e2e_check(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0, "%s door%s: the child %s: %s",
		  door, takeover ? ", takeover" : "", e2e_status_text(c.status, why, sizeof(why)),
		  c.err);
	e2e_check(count(c.err, WARNING) == want, "%s door%s: %d warning(s), want %d: %s", door,
		  takeover ? ", takeover" : "", count(c.err, WARNING), want, c.err);
}

int main(int argc, char **argv)
{
	int native = argc > 1 && strcmp(argv[1], "--native") == 0;

	if (argc > 2 && strcmp(argv[1], "--child") == 0) {
		e2e_start("e2e_ipc_child");
		return strcmp(argv[2], "driver") == 0 ? child_driver() : child_runtime();
	}
	e2e_start(native ? "e2e_ipc_native" : "e2e_ipc");
	run("runtime", 1, native ? 0 : 1);
	run("driver", 1, native ? 0 : 1);
	run("runtime", 0, 0);
	run("driver", 0, 0);
	return 0;
}
