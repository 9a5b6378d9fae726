/* account.c — `gpupool stats PID`'s accounting end to end, on the stand-in and its NVML: a child
 * under the shim holds pooled blocks (live and idle) and memory that passes the pool (its own
 * VMM handle, a cudaMallocAsync allocation, managed and pitched memory, an allocation in a
 * context of its own), and frees one of each kind again. It proves: each line shows (text and
 * JSON) with the bytes the program holds of that kind, frees subtracted; the lines and the rest
 * add up exactly to the stand-in NVML's figure for the process, which is what the driver charges
 * it plus its context (STANDIN_CONTEXT_BYTES), and the rest is exactly that context; after a
 * release the idle line is 0 and NVML's figure dropped by exactly what was idle; without NVML
 * the table still shows the lines and says the rest is unknown (JSON null). Then a block freed
 * while a kernel on the program's stream still uses it shows as pending while that kernel runs,
 * however long, and as idle once it is done, although the program makes no further call (the
 * control thread drives the fences of a still program: control.c).
 * Usage: e2e_account --cli GPUPOOL --standin DIR --no-nvml DIR --shim PRELOAD
 *        e2e_account --serve (the child, steered through stdin and stdout) */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

#define CONTEXT_BYTES (256 * E2E_MIB) /* STANDIN_CONTEXT_BYTES for the child */
#define BLOCK (4 * E2E_MIB)           /* pooled blocks: 2 live, 1 idle */
#define VMM_BYTES (6 * E2E_MIB)       /* one handle kept; one of 2 MiB released */
#define ASYNC_BYTES (3 * E2E_MIB)     /* charged 4 MiB; one of 2 MiB freed */
#define MANAGED_BYTES (3 * E2E_MIB)   /* charged 4 MiB; one of 1 MiB freed */
#define PITCH_W 1000                  /* a 1024-byte pitch: 1000 rows of it */
#define PITCH_H 1000
#define OWN_BYTES (5 * E2E_MIB)       /* in a context of its own: charged 6 MiB; 1 MiB freed */
#define PEND_BYTES (8 * E2E_MIB)      /* freed under a running kernel: pending, then idle */

/* The driver's charge, as the stand-in makes it (standin_charge). */
#define CHARGED(b) ((b) <= E2E_MIB ? ((b) + 511) / 512 * 512 : ((b) + 2 * E2E_MIB - 1) / (2 * E2E_MIB) * (2 * E2E_MIB))

/* ---- the child ---- */

static void cu(CUresult rc, const char *what)
{
	if (rc != CUDA_SUCCESS)
		e2e_fail("%s: CUresult %d", what, (int)rc);
}

static CUmemGenericAllocationHandle vmm_create(size_t bytes)
{
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	cu(cuMemCreate(&h, bytes, &prop, 0), "cuMemCreate");
	return h;
}

/* A kernel (a host function on the stand-in) that runs until the test says "open". */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open;
static _Atomic int gate_started;

static void gate_kernel(void **params)
{
	(void)params;
	atomic_store(&gate_started, 1);
	pthread_mutex_lock(&gate_lock);
	while (!gate_open)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

static int started(void *arg)
{
	(void)arg;
	return atomic_load(&gate_started);
}

/* A stream of the program's own (frees wait for fences from now on), a kernel on it that runs
 * until "open", and a block freed while the kernel may use it. */
static void pend(void)
{
	void (*fn)(void **) = gate_kernel;
	cudaStream_t s;
	const void *f;
	void *p;

	memcpy(&f, &fn, sizeof(f));
	e2e_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
	e2e_cuda(cudaMalloc(&p, PEND_BYTES), "cudaMalloc");
	e2e_cuda(cudaLaunchKernel(f, (dim3){ 1, 1, 1 }, (dim3){ 1, 1, 1 }, NULL, 0, s),
		 "cudaLaunchKernel");
	if (!e2e_poll(started, NULL, 10000))
		e2e_fail("the kernel did not start");
	e2e_cuda(cudaFree(p), "cudaFree while the kernel runs");
}

static int serve(void)
{
	void *pooled[3], *async_kept, *async_gone;
	CUdeviceptr managed_kept, managed_gone, pitched, own_kept, own_gone;
	CUmemGenericAllocationHandle h;
	CUcontext own, popped;
	size_t pitch = 0;
	char line[64];

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* A program that calls the driver initialises it first. (The shim initialises at the
	 * first call it sees and passes everything through if the driver it finds loaded says it
	 * has no device yet.) */
	cu(cuInit(0), "cuInit");
	e2e_cuda(cudaFree(NULL), "cudaFree(NULL)"); /* the runtime's context, current */
	for (int i = 0; i < 3; i++)
		e2e_cuda(cudaMalloc(&pooled[i], BLOCK), "cudaMalloc");
	e2e_cuda(cudaFree(pooled[2]), "cudaFree"); /* idle in the pool */

	h = vmm_create(VMM_BYTES);
	cu(cuMemRelease(vmm_create(2 * E2E_MIB)), "cuMemRelease");

	e2e_cuda(cudaMallocAsync(&async_kept, ASYNC_BYTES, NULL), "cudaMallocAsync");
	e2e_cuda(cudaMallocAsync(&async_gone, 2 * E2E_MIB, NULL), "cudaMallocAsync");
	e2e_cuda(cudaFreeAsync(async_gone, NULL), "cudaFreeAsync");

	cu(cuMemAllocManaged(&managed_kept, MANAGED_BYTES, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
	cu(cuMemAllocManaged(&managed_gone, E2E_MIB, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
	cu(cuMemFree(managed_gone), "cuMemFree (managed)");

	cu(cuMemAllocPitch(&pitched, &pitch, PITCH_W, PITCH_H, 4), "cuMemAllocPitch");

	cu(cuCtxCreate(&own, NULL, 0, 0), "cuCtxCreate");
	cu(cuMemAlloc(&own_kept, OWN_BYTES), "cuMemAlloc (own context)");
	cu(cuMemAlloc(&own_gone, E2E_MIB), "cuMemAlloc (own context)");
	cu(cuMemFree(own_gone), "cuMemFree (own context)");
	cu(cuCtxPopCurrent(&popped), "cuCtxPopCurrent");
	e2e_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

	printf("ready %zu\n", pitch);
	while (fgets(line, sizeof(line), stdin) != NULL) {
		if (strcmp(line, "charged\n") == 0) { /* what the stand-in driver charges us */
			struct standin_counters c;

			standin_get(0, &c);
			printf("%llu\n", (unsigned long long)c.live_bytes);
		} else if (strcmp(line, "pend\n") == 0) {
			pend();
			printf("pended\n");
		} else if (strcmp(line, "open\n") == 0) {
			pthread_mutex_lock(&gate_lock);
			gate_open = 1;
			pthread_cond_broadcast(&gate_cond);
			pthread_mutex_unlock(&gate_lock);
			printf("opened\n");
		} else {
			break;
		}
	}
	(void)h;
	return 0;
}

/* ---- the test ---- */

static const char *cli, *standin_dir, *no_nvml_dir, *shim;
static char out[1 << 16];
static pid_t child_pid;

static void kill_child(void)
{
	if (child_pid > 0)
		kill(child_pid, SIGKILL);
}

struct child {
	pid_t pid;
	int in, out;
};

static struct child spawn(void)
{
	int to[2], from[2];
	struct child c;

	if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0)
		e2e_fail("pipe: %s", strerror(errno));
	c.pid = fork();
	if (c.pid == 0) {
		char ctx[32];

		dup2(to[0], 0);
		dup2(from[1], 1);
		snprintf(ctx, sizeof(ctx), "%zu", (size_t)CONTEXT_BYTES);
		setenv("STANDIN_CONTEXT_BYTES", ctx, 1);
		setenv("GPUPOOL_SIGNAL", "none", 1); /* the view's request word alone asks */
		setenv("LD_PRELOAD", shim, 1);
		execl("/proc/self/exe", "e2e_account", "--serve", (char *)NULL);
		_exit(127);
	}
	child_pid = c.pid;
	close(to[0]);
	close(from[1]);
	c.in = to[1];
	c.out = from[0];
	return c;
}

static int hear(struct child *c, char *buf, size_t len, int timeout_ms)
{
	size_t n = 0;
	uint64_t end = e2e_now_ms() + (uint64_t)e2e_scaled_ms(timeout_ms);

	while (n + 1 < len) {
		struct pollfd p = { c->out, POLLIN, 0 };
		int left = (int)(end > e2e_now_ms() ? end - e2e_now_ms() : 0);

		if (poll(&p, 1, left) <= 0 || read(c->out, buf + n, 1) != 1)
			return 0;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return 1;
}

/* What the stand-in driver charges the child now, as it says. */
static unsigned long long charged_now(struct child *c)
{
	char line[64];

	if (write(c->in, "charged\n", 8) != 8 || !hear(c, line, sizeof(line), 5000))
		e2e_fail("the child did not say what it is charged");
	return strtoull(line, NULL, 10);
}

/* The gpupool command with `libdir` on the library path (the stand-in NVML there, or none);
 * stdout and stderr in out. Returns its exit status. */
static int run_cli_in(const char *libdir, const char *arg, ...)
{
	char path[4200];
	const char *env[] = { "LD_PRELOAD", "STANDIN_DEVICES", path, NULL };
	int rc;
	va_list ap;

	snprintf(path, sizeof(path), "LD_LIBRARY_PATH=%s", libdir);
	va_start(ap, arg);
	rc = e2e_run_capture_v(cli, env, out, sizeof(out), arg, ap);
	va_end(ap);
	if (rc < 0)
		e2e_fail("%s %s did not exit normally", cli, arg);
	return rc;
}

/* The integer after "key": in out; `missing` when absent, null or not a number. */
static long long json_value(const char *key, long long missing)
{
	char pat[64];
	const char *p;
	char *end;
	long long v;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(out, pat);
	if (p == NULL)
		return missing;
	p += strlen(pat);
	v = strtoll(p, &end, 10);
	return end == p ? missing : v;
}

struct lines {
	long long in_use, framework, idle, pending, vmm, async, managed, pitched, unpooled, other,
		nvml, taken;
};

static struct lines read_json(const char *pid)
{
	struct lines l;

	if (run_cli_in(standin_dir, "stats", pid, "--json", NULL) != 0)
		e2e_fail("gpupool stats %s --json failed: %s", pid, out);
	l.in_use = json_value("in_use_bytes", -1);
	l.framework = json_value("framework_cached_bytes", -1);
	l.idle = json_value("idle_bytes", -1);
	l.pending = json_value("pending_bytes", -1);
	l.vmm = json_value("passed_vmm_bytes", -1);
	l.async = json_value("passed_async_bytes", -1);
	l.managed = json_value("passed_managed_bytes", -1);
	l.pitched = json_value("passed_pitched_bytes", -1);
	l.unpooled = json_value("passed_unpooled_bytes", -1);
	l.other = json_value("other_bytes", -1);
	l.nvml = json_value("nvml_process_bytes", -1);
	l.taken = json_value("taken_time_ns", -1);
	return l;
}

static long long sum(const struct lines *l)
{
	return l->in_use + l->idle + l->pending + l->vmm + l->async + l->managed + l->pitched +
	       l->unpooled;
}

/* The line of out that starts with `label`, or NULL. */
static const char *line_of(const char *label)
{
	size_t n = strlen(label);

	for (const char *l = out; *l != '\0'; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != 0))
		if (strncmp(l, label, n) == 0)
			return l;
	return NULL;
}

/* The text's row `label` shows `value` (a human size) in its first column. */
static void text_row(const char *label, const char *value)
{
	const char *l = line_of(label);
	size_t len = l != NULL ? strcspn(l, "\n") : 0;
	char row[256];

	snprintf(row, sizeof(row), "%.*s", (int)len, l != NULL ? l : "");
	e2e_check(l != NULL && strstr(row, value) != NULL, "the text's row \"%s\" shows %s (%s)",
		  label, value, l != NULL ? row : "no such row");
}

int main(int argc, char **argv)
{
	struct child c;
	struct lines l, before;
	long long pitch, expect_pitched, charged;
	uint64_t ready_ns;
	char pid[16], line[64];

	if (argc > 1 && strcmp(argv[1], "--serve") == 0)
		return serve();
	e2e_start("e2e_account");
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--cli") == 0)
			cli = argv[i + 1];
		else if (strcmp(argv[i], "--standin") == 0)
			standin_dir = argv[i + 1];
		else if (strcmp(argv[i], "--no-nvml") == 0)
			no_nvml_dir = argv[i + 1];
		else if (strcmp(argv[i], "--shim") == 0)
			shim = argv[i + 1];
	}
	if (cli == NULL || standin_dir == NULL || no_nvml_dir == NULL || shim == NULL)
		e2e_fail("usage: e2e_account --cli GPUPOOL --standin DIR --no-nvml DIR --shim PRELOAD");
	signal(SIGPIPE, SIG_IGN);
	atexit(kill_child);

	c = spawn();
	if (!hear(&c, line, sizeof(line), 10000) || sscanf(line, "ready %lld", &pitch) != 1)
		e2e_fail("the child did not get ready: \"%s\"", line);
	ready_ns = e2e_wall_ns();
	snprintf(pid, sizeof(pid), "%ld", (long)c.pid);
	expect_pitched = (long long)CHARGED((size_t)pitch * PITCH_H);

	/* The async pool is asked, and the view published, by the child's control thread: at
	 * most 200 ms each; wait until its figure is in, in a view read after the child was ready
	 * (the figures are read while the program runs: one begun before may miss a move). */
	for (int i = 0; i < 200; i++) {
		l = read_json(pid);
		if (l.async == (long long)CHARGED(ASYNC_BYTES) && l.taken > (long long)ready_ns)
			break;
		e2e_sleep_ms(25);
	}
	e2e_check(l.in_use == 2 * (long long)BLOCK, "in use: the 2 live pooled blocks (%lld)", l.in_use);
	e2e_check(l.idle == (long long)BLOCK, "idle: the pooled block freed (%lld)", l.idle);
	e2e_check(l.pending == 0, "pending: none (%lld)", l.pending);
	e2e_check(l.framework == 0, "no framework's cache in a C program (%lld)", l.framework);
	e2e_check(l.vmm == (long long)VMM_BYTES,
		  "VMM: the handle kept, the one released subtracted (%lld)", l.vmm);
	e2e_check(l.async == (long long)CHARGED(ASYNC_BYTES),
		  "cudaMallocAsync: the default pool's reserved bytes, the freed one gone (%lld)",
		  l.async);
	e2e_check(l.managed == (long long)CHARGED(MANAGED_BYTES),
		  "managed: the allocation kept, the one freed subtracted (%lld)", l.managed);
	e2e_check(pitch == 1024 && l.pitched == expect_pitched,
		  "pitched: pitch x height (%lld x %d: %lld)", pitch, PITCH_H, l.pitched);
	e2e_check(l.unpooled == (long long)CHARGED(OWN_BYTES),
		  "cuMemAlloc in a context of its own: passed through, the one freed subtracted (%lld)",
		  l.unpooled);
	charged = (long long)charged_now(&c);
	e2e_check(l.nvml == charged + (long long)CONTEXT_BYTES,
		  "the stand-in NVML's figure for the process is its charge plus its context "
		  "(%lld = %lld + %zu)", l.nvml, charged, (size_t)CONTEXT_BYTES);
	e2e_check(sum(&l) + l.other == l.nvml && l.other == (long long)CONTEXT_BYTES,
		  "the lines add up exactly to NVML's figure (%lld + %lld = %lld), the rest being "
		  "the context", sum(&l), l.other, l.nvml);

	e2e_check(run_cli_in(standin_dir, "stats", pid, NULL) == 0 &&
			  strstr(out, "device memory, every byte") != NULL,
		  "gpupool stats %s shows the accounting table", pid);
	text_row("in use by the program (gpupool's blocks)", "8.00 MiB");
	text_row("idle in gpupool's cache", "4.00 MiB");
	text_row("  VMM memory it maps itself", "6.00 MiB");
	text_row("  cudaMallocAsync pool, reserved", "4.00 MiB");
	text_row("  managed memory", "4.00 MiB");
	text_row("  pitched memory", "1000 KiB");
	text_row("  cuMemAlloc, not pooled", "6.00 MiB");
	text_row("CUDA context, libraries (rest)", "256 MiB");
	text_row("= NVML: held by the process", "289 MiB");
	e2e_check(strstr(out, "NVML's figure unknown") == NULL, "NVML's figure is known");

	before = l;
	e2e_check(run_cli_in(standin_dir, "release", pid, "--wait", NULL) == 0,
		  "gpupool release %s --wait: %s", pid, out);
	l = read_json(pid);
	e2e_check(l.idle == 0, "after the release the idle line is 0 (%lld)", l.idle);
	e2e_check(l.nvml == before.nvml - before.idle,
		  "NVML's figure dropped by exactly what was idle (%lld -> %lld, %lld idle)",
		  before.nvml, l.nvml, before.idle);
	e2e_check(sum(&l) + l.other == l.nvml && l.other == (long long)CONTEXT_BYTES,
		  "the lines still add up to NVML's figure (%lld + %lld = %lld)", sum(&l), l.other,
		  l.nvml);

	/* A block freed under a running kernel: pending over several of the view's periods (the
	 * control thread drives the fences of the still program; the kernel holds them), idle
	 * once the kernel is done, with no call of the program's in between. */
	if (write(c.in, "pend\n", 5) != 5 || !hear(&c, line, sizeof(line), 10000) ||
	    strcmp(line, "pended") != 0)
		e2e_fail("the child did not free its block under a kernel: \"%s\"", line);
	e2e_sleep_ms(e2e_scaled_ms(1000)); /* five of the view's periods and more */
	l = read_json(pid);
	e2e_check(l.pending == (long long)PEND_BYTES && l.idle == 0,
		  "while the kernel runs the freed block is pending, not idle (%lld, %lld)", l.pending,
		  l.idle);
	if (write(c.in, "open\n", 5) != 5 || !hear(&c, line, sizeof(line), 10000))
		e2e_fail("the child did not open its kernel's gate");
	for (int i = 0; i < 200; i++) {
		l = read_json(pid);
		if (l.pending == 0)
			break;
		e2e_sleep_ms(e2e_scaled_ms(25));
	}
	e2e_check(l.pending == 0 && l.idle == (long long)PEND_BYTES,
		  "once the kernel is done the block shows idle, the program still (%lld pending, "
		  "%lld idle)", l.pending, l.idle);

	/* Without NVML: a library path with none on it. A host with a real NVML in its default
	 * path finds that one instead, and there the check means nothing. (Not dlopen here: this
	 * program's run path has the stand-in's folder.) */
	if (system("ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\\.so\\.1 '") == 0) {
		e2e_note("this host has an NVML of its own: the check without NVML is skipped");
	} else {
		e2e_check(run_cli_in(no_nvml_dir, "stats", pid, NULL) == 0 &&
				  strstr(out, "NVML is not here") != NULL &&
				  strstr(out, "NVML's figure unknown on a device") != NULL,
			  "without NVML the command says so, and that the rest is unknown");
		text_row("  VMM memory it maps itself", "6.00 MiB");
		text_row("CUDA context, libraries (rest)", "unknown");
		e2e_check(run_cli_in(no_nvml_dir, "stats", pid, "--json", NULL) == 0 &&
				  strstr(out, "\"other_bytes\":null,\"nvml_process_bytes\":null") != NULL &&
				  json_value("passed_vmm_bytes", -1) == (long long)VMM_BYTES,
			  "without NVML, JSON has the lines and null for NVML's rows");
	}
	close(c.in);
	waitpid(c.pid, NULL, 0);
	child_pid = 0;
	return 0;
}
