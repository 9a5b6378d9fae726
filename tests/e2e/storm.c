/* storm.c — proves the release signal is harmless however it comes:
 *   --mode storm    a thread sends SIGUSR1 to the process as fast as it can (thousands a second,
 *                   at least --min-rate) for --ms while 4 threads allocate and free: no crash, no
 *                   owner pattern broken, no thread leaked, exact accounting at the end
 *   --mode fork     the same storm while the main thread forks 30 times; each child is stormed
 *                   too (a signal every 20 us) while it passes 3 cudaMalloc/cudaFree through;
 *                   all exit 0
 *   --mode exit     10 times: a child stormed by its own thread exits (main returns, or a worker
 *                   calls exit) in the middle: it exits 0 without hanging, nothing freed twice
 *   --mode release  a storm while a slow release (20 ms per cudaFree) is in progress: each block
 *                   goes back exactly once; then the program's cudaMalloc/cudaFree does not wait
 *                   for such a free (no pool lock is held across one), asked deterministically:
 *                   with frees of 300 ms, a pair made 100 ms after one free ended runs in the
 *                   middle of the next, and must come back before that one ends (on a loaded
 *                   machine the scheduler may delay a pair by tens of ms, not by 200: all pairs
 *                   but one must) */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"

#define WORKERS 4
#define SLOTS 16

static atomic_int stop_work;
static atomic_ulong max_pair_us; /* slowest cudaMalloc+cudaFree pair seen by a worker */

static void *worker(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg * 31u + 3u;
	void *slot[SLOTS] = { 0 };
	size_t size[SLOTS] = { 0 };
	uint64_t tag[SLOTS] = { 0 }, n = 0;
	int k;

	while (!atomic_load(&stop_work)) {
		k = rand_r(&seed) % SLOTS;
		if (slot[k] != NULL) {
			if (!e2e_verify(slot[k], size[k], tag[k]))
				e2e_fail("worker %d: a block lost its owner's pattern", (int)(uintptr_t)arg);
			if (cudaFree(slot[k]) != cudaSuccess)
				e2e_fail("worker %d: cudaFree failed", (int)(uintptr_t)arg);
			slot[k] = NULL;
			continue;
		}
		size[k] = (size_t)(rand_r(&seed) % 1024 + 1) << (rand_r(&seed) % 12);
		tag[k] = ((uint64_t)(uintptr_t)arg << 48) | n++;
		if (cudaMalloc(&slot[k], size[k]) != cudaSuccess)
			e2e_fail("worker %d: cudaMalloc(%zu) failed", (int)(uintptr_t)arg, size[k]);
		e2e_fill(slot[k], size[k], tag[k]);
	}
	for (k = 0; k < SLOTS; k++)
		if (slot[k] != NULL && cudaFree(slot[k]) != cudaSuccess)
			e2e_fail("cudaFree failed");
	return NULL;
}

/* Times a cudaMalloc+cudaFree of a size nothing else uses (a cache hit after the first). */
static void *timed_worker(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_work)) {
		struct timespec a, b;
		unsigned long us, cur;
		void *p = NULL;

		clock_gettime(CLOCK_MONOTONIC, &a);
		if (cudaMalloc(&p, 3 * E2E_KIB) != cudaSuccess || cudaFree(p) != cudaSuccess)
			e2e_fail("timed worker: cudaMalloc/cudaFree failed");
		clock_gettime(CLOCK_MONOTONIC, &b);
		us = (unsigned long)((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000);
		cur = atomic_load(&max_pair_us);
		while (us > cur && !atomic_compare_exchange_weak(&max_pair_us, &cur, us))
			;
		e2e_sleep_ms(1);
	}
	return NULL;
}

struct storm {
	pid_t target;
	unsigned gap_us; /* between two signals; 0: as fast as kill() goes */
	atomic_int stop;
	unsigned long sent;
};

static struct storm self_storm;

/* Sends SIGUSR1 to the target until told to stop. A single-threaded target needs a gap: a
 * flood faster than its handler runs (ASan slows the handler) would never let it make progress,
 * with or without the shim. */
static void *stormer(void *arg)
{
	struct storm *st = arg;
	struct timespec gap = { 0, (long)st->gap_us * 1000L };

	while (!atomic_load(&st->stop)) {
		kill(st->target, SIGUSR1);
		st->sent++;
		if (st->gap_us > 0)
			nanosleep(&gap, NULL);
	}
	return NULL;
}

static void storm_start(struct storm *st, pthread_t *t, pid_t target, unsigned gap_us)
{
	st->target = target;
	st->gap_us = gap_us;
	atomic_store(&st->stop, 0);
	st->sent = 0;
	if (pthread_create(t, NULL, stormer, st) != 0)
		e2e_fail("pthread_create");
}

static unsigned long storm_stop(struct storm *st, pthread_t t)
{
	atomic_store(&st->stop, 1);
	pthread_join(t, NULL);
	return st->sent;
}

static void start_workers(pthread_t *t, int n)
{
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0)
			e2e_fail("pthread_create");
}

static void join_all(pthread_t *t, int n)
{
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
}

static void final_release(void)
{
	struct standin_counters c;

	kill(getpid(), SIGUSR1);
	if (!e2e_wait_live(0, 0, 10000)) {
		c = e2e_counters();
		e2e_fail("10 s after the last signal the runtime still holds %llu allocations / %llu B",
			 (unsigned long long)c.live_allocs, (unsigned long long)c.live_bytes);
	}
	c = e2e_counters();
	e2e_check(c.mallocs == c.frees && c.bad_frees == 0,
		  "exact accounting: %llu real allocations, each given back once, no bad free",
		  (unsigned long long)c.mallocs);
}

static void mode_storm(int ms, int min_rate)
{
	pthread_t t[WORKERS], s;
	unsigned long n;
	int threads0;
	uint64_t t0;
	double rate;

	e2e_cuda(cudaFree(NULL), "cudaFree(NULL)"); /* CUDA in use: the control thread runs */
	{
		void *p = NULL;
		e2e_cuda(cudaMalloc(&p, 512), "cudaMalloc");
		e2e_cuda(cudaFree(p), "cudaFree");
	}
	threads0 = e2e_threads();
	start_workers(t, WORKERS);
	t0 = e2e_now_ms();
	storm_start(&self_storm, &s, getpid(), 0);
	e2e_sleep_ms(ms);
	n = storm_stop(&self_storm, s);
	rate = (double)n * 1000.0 / (double)(e2e_now_ms() - t0);
	atomic_store(&stop_work, 1);
	join_all(t, WORKERS);
	e2e_check(rate >= min_rate, "%lu SIGUSR1 in %d ms (%.0f a second, want >= %d) while %d threads "
		  "allocated and freed: no crash, no owner pattern broken", n, ms, rate, min_rate,
		  WORKERS);
	e2e_check(e2e_threads() == threads0, "no thread was created by the storm (%d threads)",
		  e2e_threads());
	e2e_check(e2e_counters().frees > 0, "the control thread released during the storm (%llu real "
		  "frees)", (unsigned long long)e2e_counters().frees);
	final_release();
}

static void fork_child(void)
{
	struct standin_counters c0, c;
	void *p = NULL;
	int i;

	for (i = 0; i < 3; i++) {
		c0 = e2e_counters();
		if (cudaMalloc(&p, E2E_MIB) != cudaSuccess)
			_exit(2);
		e2e_fill(p, E2E_MIB, 9);
		e2e_sleep_ms(5);
		if (!e2e_verify(p, E2E_MIB, 9) || cudaFree(p) != cudaSuccess)
			_exit(3);
		c = e2e_counters();
		if (c.mallocs != c0.mallocs + 1 || c.frees != c0.frees + 1)
			_exit(4);
	}
	_exit(0);
}

static void mode_fork(void)
{
	pthread_t t[WORKERS], s, cs;
	struct storm child_storm;
	unsigned long to_children = 0;
	char buf[128];
	int i, status = 0;

	e2e_cuda(cudaFree(NULL), "cudaFree(NULL)");
	start_workers(t, 2);
	storm_start(&self_storm, &s, getpid(), 0);
	for (i = 0; i < 30; i++) {
		uint64_t end = e2e_now_ms() + (uint64_t)e2e_scaled_ms(10000);
		siginfo_t info;
		pid_t child;
		int exited = 0;

		fflush(stdout);
		child = fork();
		if (child < 0)
			e2e_fail("fork failed");
		if (child == 0)
			fork_child();
		/* Storm the child too. Its pid stays its own until it is reaped (WNOWAIT below). */
		storm_start(&child_storm, &cs, child, 20);
		while (!exited && e2e_now_ms() < end) {
			memset(&info, 0, sizeof(info));
			if (waitid(P_PID, (id_t)child, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
			    info.si_pid == child)
				exited = 1;
			else
				e2e_sleep_ms(1);
		}
		to_children += storm_stop(&child_storm, cs);
		if (!exited)
			kill(child, SIGKILL);
		waitpid(child, &status, 0);
		if (!exited)
			e2e_fail("fork %d: the child hung (killed after 10 s)", i);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			e2e_fail("fork %d: the child %s (want exit 0: 3 pass-through cudaMalloc/cudaFree)",
				 i, e2e_status_text(status, buf, sizeof(buf)));
	}
	e2e_note("30 forks under a storm of %lu SIGUSR1 to the parent and %lu to the children: every "
		 "child passed straight through and exited 0 (each checked)", storm_stop(&self_storm, s),
		 to_children);
	atomic_store(&stop_work, 1);
	join_all(t, 2);
	final_release();
}

/* ---- exit in the middle of a storm ---- */

static int exit_child(const char *how)
{
	pthread_t t[WORKERS], s;

	e2e_cuda(cudaFree(NULL), "cudaFree(NULL)");
	start_workers(t, 2);
	storm_start(&self_storm, &s, getpid(), 0);
	e2e_sleep_ms(20 + (int)(getpid() % 40));
	if (strcmp(how, "exit") == 0)
		exit(0); /* from main while the others run */
	return 0;    /* main returns while the others run */
}

static void mode_exit(void)
{
	char report[256], env_report[300], buf[128];
	const char *env[] = { env_report, NULL };
	struct e2e_child ch;
	int i;

	snprintf(report, sizeof(report), "/tmp/gpupool-e2e-storm-exit-%d.txt", (int)getpid());
	snprintf(env_report, sizeof(env_report), "STANDIN_REPORT=%s", report);
	for (i = 0; i < 10; i++) {
		const char *args[] = { "--mode", "exit-child", i % 2 ? "exit" : "return", NULL };
		long bad;

		unlink(report);
		if (e2e_run_self(args, env, 10000, &ch) != 0)
			e2e_fail("could not start the child");
		if (ch.timed_out || !WIFEXITED(ch.status) || WEXITSTATUS(ch.status) != 0) {
			fprintf(stderr, "%s", ch.err);
			e2e_fail("run %d (%s): the child %s%s (want exit 0)", i, args[2],
				 e2e_status_text(ch.status, buf, sizeof(buf)),
				 ch.timed_out ? ", killed after 10 s" : "");
		}
		bad = e2e_report_value(report, "bad_frees");
		if (bad != 0)
			e2e_fail("run %d: the runtime saw %ld bad frees", i, bad);
	}
	unlink(report);
	e2e_note("10 exits (main returning, or exit()) in the middle of a storm and of allocations: "
		 "each exited 0 without hanging, no bad free (each checked)");
}

/* ---- a storm during a slow release ---- */

#define REL_BLOCKS 40
#define REL_FREE_US 20000
#define LOCK_BLOCKS 8        /* the slow release that asks whether a pair waits for a free */
#define LOCK_FREE_US 300000  /* each of its real frees */
#define LOCK_AFTER_MS 100    /* a pair this long after a free ended: in the middle of the next */

static uint64_t frees_now(void)
{
	return e2e_counters().frees;
}

/* A release of LOCK_BLOCKS blocks at LOCK_FREE_US a real free, one after the other; after each
 * free but the last, once LOCK_AFTER_MS have passed (unless we woke too late: the next free over
 * already), a cudaMalloc+cudaFree of a cached size. *made: the pairs made; returns how many came
 * back before the free under way ended (the count of frees unchanged). A pool lock held across a
 * real free holds the pair until that free ends: none would. */
static int pairs_during_frees(int *made)
{
	void *p[LOCK_BLOCKS], *q = NULL;
	uint64_t f0, seen;
	int i, within = 0;

	*made = 0;
	for (i = 0; i < LOCK_BLOCKS; i++)
		e2e_cuda(cudaMalloc(&p[i], 2 * E2E_MIB + (size_t)i * 64 * E2E_KIB), "cudaMalloc");
	for (i = 0; i < LOCK_BLOCKS; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	e2e_cuda(cudaMalloc(&q, 3 * E2E_KIB), "cudaMalloc"); /* the pairs' size, cached */
	e2e_cuda(cudaFree(q), "cudaFree");
	standin_set_free_delay_us(LOCK_FREE_US);
	f0 = frees_now();
	kill(getpid(), SIGUSR1);
	for (i = 1; i < LOCK_BLOCKS; i++) {
		uint64_t end = e2e_now_ms() + (uint64_t)e2e_scaled_ms(10000);

		while ((seen = frees_now()) < f0 + (uint64_t)i && e2e_now_ms() < end)
			e2e_sleep_ms(1);
		if (seen != f0 + (uint64_t)i)
			break; /* the frees went faster than we looked, or not at all: no sample */
		e2e_sleep_ms(LOCK_AFTER_MS);
		if (frees_now() != seen)
			continue; /* we were late: the next free is over already */
		e2e_cuda(cudaMalloc(&q, 3 * E2E_KIB), "cudaMalloc");
		e2e_cuda(cudaFree(q), "cudaFree");
		within += frees_now() == seen;
		(*made)++;
	}
	standin_set_free_delay_us(0);
	kill(getpid(), SIGUSR1); /* the last pair's block too */
	if (!e2e_wait_live(0, 0, 10000))
		e2e_fail("the slow release of %d blocks did not end", LOCK_BLOCKS);
	return within;
}

static void mode_release(void)
{
	pthread_t t[WORKERS], s, tw;
	struct standin_counters c0, c;
	void *p[REL_BLOCKS];
	uint64_t t0;
	unsigned long n;
	int i, k;

	for (i = 0; i < REL_BLOCKS; i++)
		p[i] = NULL;
	for (i = 0; i < REL_BLOCKS; i++)
		e2e_cuda(cudaMalloc(&p[i], (size_t)(i % 16 + 1) * 4 * E2E_KIB + E2E_MIB), "cudaMalloc");
	for (i = 0; i < REL_BLOCKS; i++)
		e2e_cuda(cudaFree(p[i]), "cudaFree");
	c0 = e2e_counters();
	standin_set_free_delay_us(REL_FREE_US);
	start_workers(t, 2);
	if (pthread_create(&tw, NULL, timed_worker, NULL) != 0)
		e2e_fail("pthread_create");
	e2e_sleep_ms(20);
	atomic_store(&max_pair_us, 0);
	t0 = e2e_now_ms();
	kill(getpid(), SIGUSR1);
	while (e2e_counters().frees == c0.frees && e2e_now_ms() - t0 < (uint64_t)e2e_scaled_ms(5000))
		e2e_sleep_ms(1);
	storm_start(&self_storm, &s, getpid(), 0);
	while (e2e_counters().frees < c0.frees + REL_BLOCKS &&
	       e2e_now_ms() - t0 < (uint64_t)e2e_scaled_ms(30000))
		e2e_sleep_ms(5);
	n = storm_stop(&self_storm, s);
	c = e2e_counters();
	e2e_check(c.frees >= c0.frees + REL_BLOCKS && c.bad_frees == 0,
		  "a %d-block release at %d ms per cudaFree ran %.1f s under %lu more signals: every "
		  "block went back once, no bad free", REL_BLOCKS, REL_FREE_US / 1000,
		  (double)(e2e_now_ms() - t0) / 1000.0, n);
	atomic_store(&stop_work, 1);
	join_all(t, 2);
	pthread_join(tw, NULL);
	e2e_note("meanwhile the slowest cudaMalloc+cudaFree of the program took %lu us, against %d us "
		 "for each real cudaFree (the scheduler's share of it unknown)",
		 atomic_load(&max_pair_us), REL_FREE_US);
	standin_set_free_delay_us(0);
	final_release();
	i = pairs_during_frees(&k);
	e2e_check(k >= 4 && i >= k - 1, "the program's cudaMalloc+cudaFree does not wait for a real "
		  "cudaFree of a release (no pool lock is held across one): %d of %d pairs made %d ms "
		  "into a %d ms free came back before it ended (want 4 pairs made, all but one back)",
		  i, k, LOCK_AFTER_MS, LOCK_FREE_US / 1000);
}

int main(int argc, char **argv)
{
	const char *mode = "storm";
	int ms = 3000, min_rate = 1000, i;
	char name[64];

	for (i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--mode") == 0)
			mode = argv[i + 1];
		else if (strcmp(argv[i], "--ms") == 0)
			ms = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--min-rate") == 0)
			min_rate = atoi(argv[i + 1]);
	}
	if (strcmp(mode, "exit-child") == 0)
		return exit_child(argc > 3 ? argv[3] : "return");
	snprintf(name, sizeof(name), "e2e_storm_%s", mode);
	e2e_start(name);
	if (strcmp(mode, "storm") == 0)
		mode_storm(ms, min_rate);
	else if (strcmp(mode, "fork") == 0)
		mode_fork();
	else if (strcmp(mode, "exit") == 0)
		mode_exit();
	else if (strcmp(mode, "release") == 0)
		mode_release();
	else
		e2e_fail("unknown mode %s", mode);
	printf("PASS %s\n", name);
	return 0;
}
