/* gate_owner.c — the gate's owner as the e2e test of the gate plays it (gate.c), linked into
 * libgpupool_gatetest.so: the shim's own sources built once more with gp_gate_pass, gp_gate_hook
 * and gp_suspend_meminfo wrapped (-Wl,--wrap: every call of them between the shim's objects comes
 * here first). It counts the passes by name and the hooks by kind, and exports gatetest_* for the
 * test to close the gate and to play a suspended process (answers run, queries answered). While
 * the test holds the gate closed it alone answers, whatever owner the build has (the door's weak
 * defaults, or auto-suspend, whose own state machine must not see the test's gate); otherwise
 * every call goes on to that owner. Test-only: libgpupool.so has none of it, and exports nothing
 * of the gate. */
#include "gate.h"

#include <pthread.h>
#include <string.h>

#define GATETEST_EXPORT __attribute__((visibility("default")))
#define GATETEST_NAMES 64

void *__real_gp_gate_pass(const struct gp_gate_fn *f);
int __real_gp_gate_hook(enum gp_gate_kind kind);
int __real_gp_suspend_meminfo(size_t *free_b, size_t *total_b);
void *__wrap_gp_gate_pass(const struct gp_gate_fn *f);
int __wrap_gp_gate_hook(enum gp_gate_kind kind);
int __wrap_gp_suspend_meminfo(size_t *free_b, size_t *total_b);

/* Every field under lock. */
static struct {
	pthread_mutex_t lock;
	struct {
		char name[64];
		unsigned long passes;
		int kind;
	} seen[GATETEST_NAMES];
	int nseen;
	unsigned long hooks[2]; /* by enum gp_gate_kind */
	int closed;             /* the test closed the gate: this file answers */
	int suspended;          /* played: answers run, GP_GATE(QUERY) says 1 */
} gt = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int test_closed(void)
{
	int closed;

	pthread_mutex_lock(&gt.lock);
	closed = gt.closed;
	pthread_mutex_unlock(&gt.lock);
	return closed;
}

void *__wrap_gp_gate_pass(const struct gp_gate_fn *f)
{
	void *to = test_closed() ? f->real : __real_gp_gate_pass(f);
	int i;

	pthread_mutex_lock(&gt.lock);
	for (i = 0; i < gt.nseen && strcmp(gt.seen[i].name, f->name) != 0; i++)
		;
	if (i == gt.nseen && i < GATETEST_NAMES) {
		strncpy(gt.seen[i].name, f->name, sizeof(gt.seen[i].name) - 1);
		gt.nseen++;
	}
	if (i < GATETEST_NAMES) {
		gt.seen[i].passes++;
		gt.seen[i].kind = (int)f->kind;
	}
	if (gt.suspended && f->answer != NULL)
		to = f->answer;
	pthread_mutex_unlock(&gt.lock);
	return to;
}

int __wrap_gp_gate_hook(enum gp_gate_kind kind)
{
	int r = test_closed() ? 0 : __real_gp_gate_hook(kind);

	pthread_mutex_lock(&gt.lock);
	gt.hooks[kind == GP_GATE_QUERY]++;
	if (gt.suspended && kind == GP_GATE_QUERY)
		r = 1;
	pthread_mutex_unlock(&gt.lock);
	return r;
}

/* A suspended process's memory, as the test expects it: 12345 free of 67890 bytes. */
int __wrap_gp_suspend_meminfo(size_t *free_b, size_t *total_b)
{
	int suspended;

	pthread_mutex_lock(&gt.lock);
	suspended = gt.suspended;
	pthread_mutex_unlock(&gt.lock);
	if (!suspended)
		return __real_gp_suspend_meminfo(free_b, total_b);
	*free_b = 12345;
	*total_b = 67890;
	return 1;
}

GATETEST_EXPORT void gatetest_close(int closed)
{
	pthread_mutex_lock(&gt.lock);
	gt.closed = closed;
	pthread_mutex_unlock(&gt.lock);
	atomic_store(&gp_gate_closed, closed ? 1 : 0);
}

GATETEST_EXPORT void gatetest_suspend(int on)
{
	pthread_mutex_lock(&gt.lock);
	gt.suspended = on;
	pthread_mutex_unlock(&gt.lock);
}

/* The passes of `name`, or of every name when NULL. */
GATETEST_EXPORT unsigned long gatetest_passes(const char *name)
{
	unsigned long n = 0;

	pthread_mutex_lock(&gt.lock);
	for (int i = 0; i < gt.nseen; i++)
		if (name == NULL || strcmp(gt.seen[i].name, name) == 0)
			n += gt.seen[i].passes;
	pthread_mutex_unlock(&gt.lock);
	return n;
}

/* The kind the last pass of `name` carried, -1 if none. */
GATETEST_EXPORT int gatetest_kind(const char *name)
{
	int kind = -1;

	pthread_mutex_lock(&gt.lock);
	for (int i = 0; i < gt.nseen; i++)
		if (strcmp(gt.seen[i].name, name) == 0)
			kind = gt.seen[i].kind;
	pthread_mutex_unlock(&gt.lock);
	return kind;
}

GATETEST_EXPORT unsigned long gatetest_hooks(int kind)
{
	unsigned long n;

	pthread_mutex_lock(&gt.lock);
	n = gt.hooks[kind == GP_GATE_QUERY];
	pthread_mutex_unlock(&gt.lock);
	return n;
}
