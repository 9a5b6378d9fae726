/* secure.c — the program check_secure.sh runs, set-user-ID (to nobody) and plainly, to prove
 * that GPUPOOL_* settings are read with secure_getenv: in a secure-execution process (AT_SECURE)
 * they are ignored. It links neither the runtime nor the shim; both are opened by path.
 *   secure maps                   prints "shim: loaded" or "shim: absent" (was it preloaded?)
 *   secure settings <standin> <libgpupool>
 *                                 opens both, makes one cudaMalloc/cudaFree through the shim,
 *                                 prints "secure: 0|1", "signal: USR1|USR2|none" (which one
 *                                 has the shim's handler) and "pool: on|off"
 * The caller sets GPUPOOL_SIGNAL=USR2 and GPUPOOL_LOG=info and compares. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include <cuda_runtime_api.h>

#include "standin.h"

static int shim_mapped(void)
{
	char line[4096];
	FILE *f = fopen("/proc/self/maps", "r");
	int found = 0;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strstr(line, "libgpupool") != NULL)
			found = 1;
	fclose(f);
	return found;
}

static int handled(int sig)
{
	struct sigaction sa;

	if (sigaction(sig, NULL, &sa) != 0)
		return 0;
	return (sa.sa_flags & SA_SIGINFO) || (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN);
}

static void *sym(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (p == NULL) {
		fprintf(stderr, "secure: %s not found: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

int main(int argc, char **argv)
{
	cudaError_t (*cmalloc)(void **, size_t), (*cfree)(void *);
	void (*counters)(int, struct standin_counters *);
	struct standin_counters c;
	void *rt, *shim, *p = NULL, *sp;
	uint64_t m0;

	if (argc >= 2 && strcmp(argv[1], "maps") == 0) {
		printf("shim: %s\n", shim_mapped() == 1 ? "loaded" : "absent");
		return 0;
	}
	if (argc < 4 || strcmp(argv[1], "settings") != 0) {
		fprintf(stderr, "usage: secure maps | secure settings <standin> <libgpupool.so>\n");
		return 2;
	}
	rt = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
	shim = rt != NULL ? dlopen(argv[3], RTLD_NOW) : NULL;
	if (rt == NULL || shim == NULL) {
		fprintf(stderr, "secure: dlopen: %s\n", dlerror());
		return 2;
	}
	sp = sym(shim, "cudaMalloc");
	memcpy(&cmalloc, &sp, sizeof(sp));
	sp = sym(shim, "cudaFree");
	memcpy(&cfree, &sp, sizeof(sp));
	sp = sym(rt, "standin_get");
	memcpy(&counters, &sp, sizeof(sp));
	counters(0, &c);
	m0 = c.mallocs;
	if (cmalloc(&p, 4096) != cudaSuccess || cfree(p) != cudaSuccess ||
	    cmalloc(&p, 4096) != cudaSuccess || cfree(p) != cudaSuccess)
		return 3;
	counters(0, &c);
	printf("secure: %lu\n", getauxval(AT_SECURE));
	printf("signal: %s\n", handled(SIGUSR2) ? "USR2" : handled(SIGUSR1) ? "USR1" : "none");
	printf("pool: %s\n", c.mallocs == m0 + 1 ? "on" : "off");
	return 0;
}
