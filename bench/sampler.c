/* sampler.c — a sampling profiler for machines without perf (the GPU machine has none).
 * Preloaded, it gives every thread created after it loads a timer (wall clock, or the thread's
 * CPU clock with SAMPLER_CPU=1) that interrupts it every SAMPLER_US microseconds (default 250)
 * and notes where it was; at exit it writes one "object offset" line per sample to SAMPLER_OUT
 * (default /tmp/samples.txt) and a count to stderr. scripts/profile-symbolize turns the file
 * into histograms by function and by source line (addr2line; build RelWithDebInfo).
 *     SAMPLER_OUT=/tmp/s.txt LD_PRELOAD="libbench_sampler.so libgpupool.so" bench/threads ...
 * Wall-clock samples show blocked threads too (futex, poll): a thread that waits is visible.
 * The main thread is not sampled (threads bench: it sleeps while the workers run). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

#define MAX_SAMPLES (1u << 20)
static void *pcs[MAX_SAMPLES];
static atomic_uint nsamples, ntimers, nfailed;

static void on_prof(int sig, siginfo_t *si, void *ctx)
{
	unsigned i = atomic_fetch_add(&nsamples, 1);

	(void)sig;
	(void)si;
	if (i < MAX_SAMPLES)
		pcs[i] = (void *)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
}

static void start_timer(void)
{
	const char *us = getenv("SAMPLER_US");
	long period = us != NULL && atol(us) > 0 ? atol(us) : 250;
	struct itimerspec its = { { period / 1000000, period % 1000000 * 1000 },
				  { period / 1000000, period % 1000000 * 1000 } };
	struct sigevent ev;
	timer_t t;

	memset(&ev, 0, sizeof(ev));
	ev.sigev_notify = SIGEV_THREAD_ID;
	ev.sigev_signo = SIGPROF;
	ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
	if (timer_create(getenv("SAMPLER_CPU") ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ev,
			 &t) != 0 ||
	    timer_settime(t, 0, &its, NULL) != 0) {
		atomic_fetch_add(&nfailed, 1);
		return;
	}
	atomic_fetch_add(&ntimers, 1);
}

struct start {
	void *(*fn)(void *);
	void *arg;
};

static void *thread_main(void *p)
{
	struct start s = *(struct start *)p;

	free(p);
	start_timer();
	return s.fn(s.arg);
}

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	struct start *s = malloc(sizeof(*s));

	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "pthread_create");
	if (s == NULL)
		return real(th, attr, fn, arg);
	s->fn = fn;
	s->arg = arg;
	return real(th, attr, thread_main, s);
}

__attribute__((constructor)) static void sampler_load(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_prof;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGPROF, &sa, NULL);
}

__attribute__((destructor)) static void sampler_exit(void)
{
	const char *path = getenv("SAMPLER_OUT");
	unsigned n;
	FILE *f;

	signal(SIGPROF, SIG_IGN);
	n = atomic_load(&nsamples);
	fprintf(stderr, "sampler: %u samples from %u threads (%u timers failed)\n", n,
		atomic_load(&ntimers), atomic_load(&nfailed));
	f = fopen(path != NULL ? path : "/tmp/samples.txt", "w");
	if (f == NULL)
		return;
	for (unsigned i = 0; i < n && i < MAX_SAMPLES; i++) {
		Dl_info di;

		if (dladdr(pcs[i], &di) && di.dli_fname != NULL && di.dli_fname[0] != '\0')
			fprintf(f, "%s 0x%lx\n", di.dli_fname,
				(unsigned long)((char *)pcs[i] - (char *)di.dli_fbase));
		else
			fprintf(f, "? %p\n", pcs[i]);
	}
	fclose(f);
}
