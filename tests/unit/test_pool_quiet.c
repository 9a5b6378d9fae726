/* test_pool_quiet.c — how a miss drives the fences. The backend's `quiet` (the GPU is idle:
 * every operation issued so far is done) stands in for a fence: asked only with no fence in
 * flight, less and less often while it answers no, and an answer of yes covers exactly the frees
 * made before it was asked. A miss that finds another thread driving waits for it, unless a
 * larger block is reusable now. A thread whose own list of a size is fenced drives the fences
 * before it takes another thread's block, unless its list is shorter than a fence batch. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <time.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pool_fixture.h"

#define SIZE (2 * MiB) /* above the batching limit: every fenced miss drives the fences */

/* Free the block, allocate one of its size again; returns the new block. */
static void *cycle(struct fx *fx, void *p)
{
	fx_free(fx, p);
	return fx_alloc(fx, 0, SIZE);
}

/* Proves: on an idle GPU a miss reuses the just-freed block with no fence recorded, one question
 * asked, and no new backend allocation. */
static void test_idle_gpu_needs_no_fence(void **state)
{
	struct fx *fx = *state;
	void *a, *b;

	fake_set_quiet(&fx->fake, 1);
	a = fx_alloc(fx, 0, SIZE);
	b = cycle(fx, a);
	assert_ptr_equal(a, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 1);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	for (int i = 0; i < 100; i++)
		b = cycle(fx, b);
	assert_ptr_equal(a, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 101);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 0);
	fx_free(fx, b);
}

/* Proves: a block freed after the GPU was found idle is not covered by that answer: with the
 * GPU busy since, it waits for a fence of its own. */
static void test_answer_covers_earlier_frees_only(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *c, *d;

	fake_set_quiet(&fx->fake, 1);
	a = fx_alloc(fx, 0, SIZE);
	b = fx_alloc(fx, 0, SIZE);
	fx_free(fx, a);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* idle: covers a */
	fake_set_quiet(&fx->fake, 0);
	fx_free(fx, b);
	c = fx_alloc(fx, 0, SIZE);
	assert_ptr_equal(c, a);
	d = fx_alloc(fx, 0, SIZE); /* b is fenced: the GPU was busy when asked */
	assert_ptr_not_equal(d, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 1);
	fake_complete_all_fences(&fx->fake);
	fx_free(fx, c);
	fx_free(fx, d);
	fx_settle(fx);
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 0);
}

/* Proves: while the GPU stays busy the question is asked less and less often (at most about
 * log2 of the fences, then one in 65), every fence is still recorded, and once the GPU is
 * idle again the answer is taken within 65 fences and fences stop. */
static void test_busy_gpu_backs_off(void **state)
{
	struct fx *fx = *state;
	uint64_t asked, recorded;
	void *p;

	fake_set_fence_auto(&fx->fake, 1); /* each fence complete at its first poll */
	p = fx_alloc(fx, 0, SIZE);
	for (int i = 0; i < 200; i++)
		p = cycle(fx, p);
	asked = fake_calls(&fx->fake, FAKE_OP_QUIET);
	recorded = fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD);
	assert_int_equal(recorded, 200);
	assert_true(asked >= 3 && asked <= 10);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);

	fake_set_quiet(&fx->fake, 1);
	for (int i = 0; i < 65; i++)
		p = cycle(fx, p);
	recorded = fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD);
	asked = fake_calls(&fx->fake, FAKE_OP_QUIET);
	assert_true(recorded < 200 + 65);
	for (int i = 0; i < 50; i++)
		p = cycle(fx, p);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), recorded);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), asked + 50);
	fx_free(fx, p);
}

/* Proves: with a fence in flight (the GPU is behind) the question is not asked, and that does
 * not use up the back-off: once the fence completes it is asked again after one skipped fence. */
static void test_not_asked_with_fence_in_flight(void **state)
{
	struct fx *fx = *state;
	void *p[5];

	for (int i = 0; i < 5; i++)
		p[i] = fx_alloc(fx, 0, SIZE);
	fx_free(fx, p[0]);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* asked (no), fence 1 */
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 1);
	assert_int_equal(fake_fences_recorded(&fx->fake), 1);
	fake_set_quiet(&fx->fake, 1);
	for (int i = 1; i < 4; i++) {
		fx_free(fx, p[i]);
		assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	}
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 1);
	assert_int_equal(fake_fences_recorded(&fx->fake), 4);
	fake_complete_all_fences(&fx->fake);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* all reaped, nothing dirty */
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 0);
	fx_free(fx, p[4]);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* skipped once: fence 5 */
	assert_int_equal(fake_fences_recorded(&fx->fake), 5);
	fake_complete_all_fences(&fx->fake);
	p[4] = fx_alloc(fx, 0, SIZE);
	fx_free(fx, p[4]);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* asked: idle, no fence */
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 2);
	assert_int_equal(fake_fences_recorded(&fx->fake), 5);
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 0);
}

/* Proves: in ordered mode (no stream) nothing is asked: blocks come straight back. */
static void test_ordered_asks_nothing(void **state)
{
	struct fx *fx = *state;
	void *p = fx_alloc(fx, 0, SIZE);

	fake_set_quiet(&fx->fake, 1);
	for (int i = 0; i < 10; i++)
		p = cycle(fx, p);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_QUIET), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 0);
	fx_free(fx, p);
}

/* Another thread that drives the fences, held inside its quiet call until the test lets go. */
struct driver {
	struct fx *fx;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int inside, release;
};

static void hold_in_quiet(void *arg, enum fake_op op)
{
	struct driver *dr = arg;

	if (op != FAKE_OP_QUIET)
		return;
	pthread_mutex_lock(&dr->lock);
	if (!pthread_equal(pthread_self(), dr->thread)) {
		pthread_mutex_unlock(&dr->lock);
		return;
	}
	dr->inside = 1;
	pthread_cond_broadcast(&dr->cv);
	while (!dr->release)
		pthread_cond_wait(&dr->cv, &dr->lock);
	pthread_mutex_unlock(&dr->lock);
}

static void *drive(void *arg)
{
	struct driver *dr = arg;

	assert_int_equal(gp_pool_advance(dr->fx->pool, 0), GP_OK);
	return NULL;
}

static void *let_go_later(void *arg)
{
	struct driver *dr = arg;
	struct timespec ts = { 0, 50 * 1000 * 1000 };

	nanosleep(&ts, NULL); /* the miss is waiting by then (or, if slower, finds no driver) */
	pthread_mutex_lock(&dr->lock);
	dr->release = 1;
	pthread_cond_broadcast(&dr->cv);
	pthread_mutex_unlock(&dr->lock);
	return NULL;
}

static int setup_long_drive_wait(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .drive_wait_ns = 10ull * 1000 * 1000 * 1000 };

	return fx_setup_cfg(state, &cfg);
}

/* Proves: a miss that needs the fences driven while another thread is driving them waits for
 * that thread (whose drive finds the GPU idle and covers the free) and reuses the block, rather
 * than making a real allocation at once. */
static void test_miss_waits_for_the_driver(void **state)
{
	struct fx *fx = *state;
	struct driver dr = { .fx = fx };
	pthread_t helper;
	void *a, *b;

	pthread_mutex_init(&dr.lock, NULL);
	pthread_cond_init(&dr.cv, NULL);
	fake_set_quiet(&fx->fake, 1);
	a = fx_alloc(fx, 0, SIZE);
	fx_free(fx, a);
	fake_set_hook(&fx->fake, hold_in_quiet, &dr);
	pthread_mutex_lock(&dr.lock); /* dr.thread is set before the hook can read it */
	assert_int_equal(pthread_create(&dr.thread, NULL, drive, &dr), 0);
	while (!dr.inside)
		pthread_cond_wait(&dr.cv, &dr.lock);
	pthread_mutex_unlock(&dr.lock);
	assert_int_equal(pthread_create(&helper, NULL, let_go_later, &dr), 0);
	b = fx_alloc(fx, 0, SIZE); /* the other thread is driving */
	pthread_join(helper, NULL);
	pthread_join(dr.thread, NULL);
	fake_set_hook(&fx->fake, NULL, NULL);
	assert_ptr_equal(a, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	fx_free(fx, b);
	pthread_cond_destroy(&dr.cv);
	pthread_mutex_destroy(&dr.lock);
}

static int setup_long_drive_wait_oversize(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .drive_wait_ns = 10ull * 1000 * 1000 * 1000,
				      .oversize_pct = 200 };

	return fx_setup_cfg(state, &cfg);
}

/* Proves: a miss whose own block is fenced while another thread drives the fences takes an idle
 * larger block at once (within cfg.oversize_pct) instead of waiting for that thread (10 s here):
 * since the pool drives the fences before it looks at larger classes, this is the one look it
 * gets before the wait. Fails, taking 10 s, if reuse_fenced waits first. */
static void test_larger_block_before_waiting_for_the_driver(void **state)
{
	struct fx *fx = *state;
	struct driver dr = { .fx = fx };
	uint64_t t0, took;
	void *a, *big, *b;

	pthread_mutex_init(&dr.lock, NULL);
	pthread_cond_init(&dr.cv, NULL);
	fake_set_quiet(&fx->fake, 1);
	big = fx_alloc(fx, 0, 2 * SIZE);
	a = fx_alloc(fx, 0, SIZE);
	fx_free(fx, big);
	fx_settle(fx); /* big: reusable */
	fx_free(fx, a);  /* a: fenced */
	fake_set_hook(&fx->fake, hold_in_quiet, &dr);
	pthread_mutex_lock(&dr.lock);
	assert_int_equal(pthread_create(&dr.thread, NULL, drive, &dr), 0);
	while (!dr.inside)
		pthread_cond_wait(&dr.cv, &dr.lock);
	pthread_mutex_unlock(&dr.lock);
	t0 = fx_mono_ns();
	b = fx_alloc(fx, 0, SIZE); /* the other thread is driving */
	took = fx_mono_ns() - t0;
	pthread_mutex_lock(&dr.lock);
	dr.release = 1;
	pthread_cond_broadcast(&dr.cv);
	pthread_mutex_unlock(&dr.lock);
	pthread_join(dr.thread, NULL);
	fake_set_hook(&fx->fake, NULL, NULL);
	assert_ptr_equal(b, big);
	assert_true(took < 5ull * 1000 * 1000 * 1000);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fx_free(fx, b);
	pthread_cond_destroy(&dr.cv);
	pthread_mutex_destroy(&dr.lock);
}

/* Each thread allocates from its own list of a size (its stripe, handed out in thread order:
 * two threads that allocate one after the other get different ones). */
struct two_lists {
	struct fx *fx;
	size_t size;
	void *other;     /* allocated by the first thread: on that thread's list once freed */
	void *own, *got; /* the second thread's block, and what its allocation after the free got */
	uint64_t quiet_asked;
};

static void *first_thread(void *arg)
{
	struct two_lists *t = arg;

	t->other = fx_alloc(t->fx, 0, t->size);
	return NULL;
}

/* The other thread's block is freed and covered (reusable); this thread's own block is freed
 * after that (fenced); then this thread allocates the size again. */
static void *second_thread(void *arg)
{
	struct two_lists *t = arg;
	uint64_t asked;

	t->own = fx_alloc(t->fx, 0, t->size);
	fx_free(t->fx, t->other);
	assert_int_equal(gp_pool_advance(t->fx->pool, 0), GP_OK); /* idle: covers other */
	fx_free(t->fx, t->own);
	asked = fake_calls(&t->fx->fake, FAKE_OP_QUIET);
	t->got = fx_alloc(t->fx, 0, t->size);
	t->quiet_asked = fake_calls(&t->fx->fake, FAKE_OP_QUIET) - asked;
	return NULL;
}

static void run_two_lists(struct two_lists *t)
{
	pthread_t th;

	fake_set_quiet(&t->fx->fake, 1);
	assert_int_equal(pthread_create(&th, NULL, first_thread, t), 0);
	pthread_join(th, NULL);
	assert_int_equal(pthread_create(&th, NULL, second_thread, t), 0);
	pthread_join(th, NULL);
	assert_int_equal(fake_calls(&t->fx->fake, FAKE_OP_ALLOC), 2);
}

/* Proves: a thread whose own block of a size is fenced asks whether the GPU is idle (a fence
 * covers every thread's frees) and reuses its own block, leaving another thread's reusable block
 * on that thread's list, where taking it would write to that thread's lines and leave it to
 * take one back. */
static void test_own_list_drives_before_taking_another(void **state)
{
	struct two_lists t = { .fx = *state, .size = SIZE };

	run_two_lists(&t);
	assert_ptr_equal(t.got, t.own);
	assert_int_equal(t.quiet_asked, 1);
	fx_free(t.fx, t.got);
}

static int setup_batch8(void **state)
{
	struct gp_pool_config cfg = { .ordered = 0, .fence_batch = 8 };

	return fx_setup_cfg(state, &cfg);
}

/* Proves: a thread whose own list of a small size is shorter than a fence batch takes another
 * thread's reusable block before any fence call: a thread's list grows to a batch that way
 * before it drives fences for it. */
static void test_short_own_list_takes_another_first(void **state)
{
	struct two_lists t = { .fx = *state, .size = 64 * KiB };

	run_two_lists(&t);
	assert_ptr_equal(t.got, t.other);
	assert_int_equal(t.quiet_asked, 0);
	fx_free(t.fx, t.got);
}

/* Proves: a join (the backend made every stream wait on the GPU) stands in for a fence: the
 * just-freed block is reused at once, no fence recorded, no new backend allocation. */
static void test_join_reuses_at_once(void **state)
{
	struct fx *fx = *state;
	void *a, *b;

	fake_set_join(&fx->fake, 1);
	a = fx_alloc(fx, 0, SIZE);
	b = cycle(fx, a);
	assert_ptr_equal(a, b);
	assert_true(fake_calls(&fx->fake, FAKE_OP_JOIN) >= 1);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 0);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 1);
	fx_free(fx, b);
}

/* Proves: a join with a fence in flight covers it (told `inflight`): the block that fence covers
 * is reused although the fence is not complete, with nothing freed since; when that fence
 * completes later, what is done does not go back (a block freed after the join still waits). */
static void test_join_covers_fence_in_flight(void **state)
{
	struct fx *fx = *state;
	void *a, *b, *c, *d, *e;

	a = fx_alloc(fx, 0, SIZE);
	b = cycle(fx, a); /* no join: a fence for a, in flight */
	assert_ptr_not_equal(a, b);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 1);
	fake_set_join(&fx->fake, 1);
	c = fx_alloc(fx, 0, SIZE); /* nothing new to cover: the join completes the fence in flight */
	assert_ptr_equal(c, a);
	assert_int_equal(fx->fake.join_inflight, 1);
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_ALLOC), 2);
	fake_set_join(&fx->fake, 0);
	fx_free(fx, b); /* after the join: fenced */
	fake_complete_all_fences(&fx->fake); /* the old fence completes: reaped, done stays */
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK);
	d = fx_alloc(fx, 0, SIZE);
	assert_ptr_not_equal(d, b); /* b's own fence was recorded busy, and is not complete */
	fake_complete_all_fences(&fx->fake);
	e = cycle(fx, d);
	assert_true(e == b || e == d);
	fx_free(fx, c);
	fx_free(fx, e);
	fake_complete_all_fences(&fx->fake);
	fx_settle(fx);
	assert_int_equal(fx_stats(fx, 0).pending_blocks, 0);
}

/* Proves: a join makes a freed block reusable at once but not settled (its GPU work may still
 * run): until the settle fence that join asked for completes, a release gives it back as
 * unsettled (the backend then waits for the device first); once it completes, a block freed
 * before the join that asked for it goes back settled. One settle fence at a time: a join while
 * one is pending asks for none. */
static void test_join_settles_with_its_fence(void **state)
{
	struct fx *fx = *state;
	struct gp_release_result r;
	void *a, *b;

	fake_set_join(&fx->fake, 1);
	a = fx_alloc(fx, 0, SIZE);
	b = cycle(fx, a); /* the join: the block back at once, a settle fence asked for */
	assert_ptr_equal(a, b);
	assert_int_equal(fx->fake.join_settle_asked, 1);
	fx_free(fx, b);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* joined again: none asked for */
	assert_true(fake_calls(&fx->fake, FAKE_OP_JOIN) >= 2);
	assert_int_equal(fx->fake.join_settle_asked, 1);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, &r), GP_OK);
	assert_int_equal(r.blocks, 1);
	assert_int_equal(fx->fake.counts.frees_unsettled, 1);

	fake_complete_all_fences(&fx->fake); /* the first settle fence: reaped by the next drive */
	a = fx_alloc(fx, 0, SIZE);
	fx_free(fx, a);
	assert_int_equal(gp_pool_advance(fx->pool, 0), GP_OK); /* a join, a new settle fence */
	assert_int_equal(fx->fake.join_settle_asked, 2);
	fake_complete_all_fences(&fx->fake);
	assert_int_equal(gp_pool_release(fx->pool, 0, 0, GP_CAUSE_API, &r), GP_OK);
	assert_int_equal(r.blocks, 1);
	assert_int_equal(fx->fake.counts.frees_unsettled, 1); /* settled: no new unsettled free */
	assert_int_equal(fake_calls(&fx->fake, FAKE_OP_FENCE_RECORD), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_idle_gpu_needs_no_fence, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_answer_covers_earlier_frees_only,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_busy_gpu_backs_off, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_not_asked_with_fence_in_flight,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_ordered_asks_nothing, fx_setup_ordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_miss_waits_for_the_driver,
						setup_long_drive_wait, fx_teardown),
		cmocka_unit_test_setup_teardown(test_larger_block_before_waiting_for_the_driver,
						setup_long_drive_wait_oversize, fx_teardown),
		cmocka_unit_test_setup_teardown(test_own_list_drives_before_taking_another,
						fx_setup_unordered, fx_teardown),
		cmocka_unit_test_setup_teardown(test_short_own_list_takes_another_first,
						setup_batch8, fx_teardown),
		cmocka_unit_test_setup_teardown(test_join_reuses_at_once, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_join_covers_fence_in_flight, fx_setup_unordered,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_join_settles_with_its_fence, fx_setup_unordered,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
