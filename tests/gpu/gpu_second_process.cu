/* gpu_second_process.cu — memory the pool gives back is seen by other processes: the point of
 * the release signal. The parent (under the shim) allocates ~8 GiB, frees it (cached, so still
 * held), then sends itself SIGUSR1; a child started without LD_PRELOAD (this program again,
 * with --child) reports cudaMemGetInfo on request, and must see free memory rise by
 * >= 7.5 GiB within 5 s. Protocol: the parent writes "m\n" or "q\n"; the child answers
 * "<free> <total>\n" in bytes, or "error <code>\n". */
#include "gpu_common.cuh"

#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define NBLK 32
#define BLK (256 * GT_MIB)

static int child_main(void)
{
	char line[16];
	size_t f = 0, t = 0;
	cudaError_t e;

	if (gt_shim_release() != NULL) {
		printf("error shim-loaded\n");
		return 1;
	}
	e = cudaDeviceSynchronize(); /* create the context before the first answer */
	while (fgets(line, sizeof(line), stdin) != NULL && line[0] != 'q') {
		if (e == cudaSuccess)
			e = cudaMemGetInfo(&f, &t);
		if (e == cudaSuccess)
			printf("%zu %zu\n", f, t);
		else
			printf("error %d\n", (int)e);
		fflush(stdout);
	}
	return 0;
}

struct child {
	pid_t pid;
	FILE *to, *from;
};

/* The environment without LD_PRELOAD, for the child. */
static char **env_without_preload(void)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n] != NULL)
		n++;
	env = (char **)calloc(n + 1, sizeof(*env));
	if (env == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			env[k++] = environ[i];
	return env;
}

static int child_start(struct child *c)
{
	int to[2], from[2], rc = -1;
	char self[4096];
	char arg[] = "--child";
	char *argv[] = { self, arg, NULL };
	char **env = env_without_preload();
	posix_spawn_file_actions_t fa;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (env == NULL || n <= 0 || pipe(to) != 0 || pipe(from) != 0)
		goto out;
	self[n] = '\0';
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, to[0], 0);
	posix_spawn_file_actions_adddup2(&fa, from[1], 1);
	posix_spawn_file_actions_addclose(&fa, to[1]);
	posix_spawn_file_actions_addclose(&fa, from[0]);
	rc = posix_spawn(&c->pid, self, &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	close(to[0]);
	close(from[1]);
	if (rc != 0) {
		rc = -1;
		goto out;
	}
	c->to = fdopen(to[1], "w");
	c->from = fdopen(from[0], "r");
	rc = c->to && c->from ? 0 : -1;
out:
	free(env);
	return rc;
}

/* The child's view of device free memory (bytes), 0 when it could not tell. */
static size_t child_free(struct child *c)
{
	char line[128];
	unsigned long long f = 0, t = 0;

	fputs("m\n", c->to);
	fflush(c->to);
	if (fgets(line, sizeof(line), c->from) == NULL)
		return 0;
	if (sscanf(line, "%llu %llu", &f, &t) != 2) {
		printf("INFO %s child: %s", gt_test, line);
		return 0;
	}
	return (size_t)f;
}

static void child_stop(struct child *c)
{
	int status = 0;

	fputs("q\n", c->to);
	fclose(c->to);
	fclose(c->from);
	waitpid(c->pid, &status, 0);
}

int main(int argc, char **argv)
{
	const size_t want = (size_t)(7.5 * (double)GT_GIB);
	struct child c;
	void *b[NBLK];
	size_t c0, c1, c2, c3 = 0;
	uint64_t t0;
	int n;

	if (argc > 1 && strcmp(argv[1], "--child") == 0)
		return child_main();
	gt_test = "gpu_second_process";
	if (!gt_require_shim())
		return gt_finish();
	signal(SIGPIPE, SIG_IGN); /* a dead child must fail a check, not kill the parent */
	if (!gt_context())
		return gt_finish();
	if (!gt_check(child_start(&c) == 0, "child started", "helper without LD_PRELOAD"))
		return gt_finish();
	c0 = child_free(&c);
	if (!gt_check(c0 != 0, "child reads cudaMemGetInfo", "%.2f GiB free", gt_gib(c0))) {
		child_stop(&c);
		return gt_finish();
	}

	for (n = 0; n < NBLK; n++) {
		if (!gt_ok(cudaMalloc(&b[n], BLK), "cudaMalloc(256 MiB)"))
			break;
		gt_ok(cudaMemset(b[n], n, BLK), "cudaMemset(256 MiB)");
	}
	gt_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	c1 = child_free(&c);
	for (int i = 0; i < n; i++)
		gt_ok(cudaFree(b[i]), "cudaFree(256 MiB)");
	c2 = child_free(&c);
	gt_info("figures", "child sees free %.2f GiB at start, %.2f GiB with %d x 256 MiB live, "
		"%.2f GiB after cudaFree", gt_gib(c0), gt_gib(c1), n, gt_gib(c2));
	gt_check(n == NBLK && c1 + want <= c0, "child sees the allocation",
		 "free fell by %.2f GiB (want >= 7.5)", c0 > c1 ? gt_gib(c0 - c1) : 0.0);
	gt_check(c2 <= c1 + BLK, "freed memory stays cached",
		 "free rose by %.1f MiB after cudaFree (limit 256)", c2 > c1 ? gt_mib(c2 - c1) : 0.0);

	t0 = gt_now_ns();
	raise(SIGUSR1);
	while (gt_now_ns() - t0 < 5000000000ull) {
		c3 = child_free(&c);
		if (c3 >= c2 + want)
			break;
		usleep(20000);
	}
	gt_check(c3 >= c2 + want, "other process sees the release",
		 "child's free memory rose by %.2f GiB (%.2f -> %.2f) %.0f ms after SIGUSR1 "
		 "(want >= 7.5 GiB within 5 s)",
		 c3 > c2 ? gt_gib(c3 - c2) : 0.0, gt_gib(c2), gt_gib(c3),
		 (double)(gt_now_ns() - t0) / 1e6);
	child_stop(&c);
	return gt_finish();
}
