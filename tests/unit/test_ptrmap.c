/* test_ptrmap.c — the pointer map on its own: find/insert/remove/filter against a reference
 * (growth, collisions, backward-shift deletion), and lock-free readers (the seqlock protocol a
 * free uses) racing a writer that inserts, removes and grows the same shard: a read that the
 * protocol accepts must be right. UNIT_STRESS_OPS scales the race (sanitizer builds). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ptrmap.h"

#define NKEYS 3000

static uintptr_t key_of(unsigned i)
{
	return ((uintptr_t)i + 1) << 8; /* device addresses are 256-byte aligned */
}

static void *val_of(uintptr_t k)
{
	return (void *)(k ^ 0x5a5a00);
}

static int keep_odd_hundreds(void *val, void *arg)
{
	(void)arg;
	uintptr_t k = (uintptr_t)val ^ 0x5a5a00;
	return (k >> 8) % 100 != 0;
}

/* Proves: every key inserted is found with its value until removed, and not after; removal in
 * any order (backward shifts) and a filter keep the rest findable; counts add up. */
static void test_reference(void **state)
{
	(void)state;
	static struct gp_ptrmap m;
	static char present[NKEYS];

	gp_ptrmap_init(&m);
	for (unsigned i = 0; i < NKEYS; i++) {
		struct gp_ptrmap_shard *s = gp_ptrmap_shard(&m, key_of(i));
		assert_int_equal(gp_ptrmap_insert(s, key_of(i), val_of(key_of(i)), NULL), 0);
		present[i] = 1;
	}
	for (unsigned i = 0; i < NKEYS; i += 3) { /* every third, scattered over the runs */
		struct gp_ptrmap_shard *s = gp_ptrmap_shard(&m, key_of(i));
		assert_ptr_equal(gp_ptrmap_remove(s, key_of(i)), val_of(key_of(i)));
		assert_null(gp_ptrmap_remove(s, key_of(i)));
		present[i] = 0;
	}
	for (int i = 0; i < GP_PTRMAP_SHARDS; i++) {
		size_t before = m.shard[i].count, removed;
		removed = gp_ptrmap_filter(&m.shard[i], keep_odd_hundreds, NULL);
		assert_int_equal(m.shard[i].count, before - removed);
	}
	for (unsigned i = 0; i < NKEYS; i++) {
		struct gp_ptrmap_shard *s = gp_ptrmap_shard(&m, key_of(i));
		int want = present[i] && (i + 1) % 100 != 0;
		void *v = gp_ptrmap_find(s, key_of(i));
		if (want)
			assert_ptr_equal(v, val_of(key_of(i)));
		else
			assert_null(v);
		/* A lock-free read with nothing racing is accepted at once and says the same. */
		unsigned seq = gp_ptrmap_read_begin(s);
		assert_ptr_equal(gp_ptrmap_find_racy(s, key_of(i)), v);
		assert_false(gp_ptrmap_read_retry(s, seq));
	}
	gp_ptrmap_fini(&m);
}

/* Proves: a key inserted again holds one entry: its new value, the old one handed back (were
 * both kept, the second behind the first, a lookup would find the stale value and a removal
 * leave the other behind); a removal by entry takes it only while it holds that value. Many
 * keys share the probe runs, so the key may sit behind others. */
static void test_insert_again_replaces(void **state)
{
	(void)state;
	static struct gp_ptrmap m;
	void *old = (void *)1;
	int vals[2];

	gp_ptrmap_init(&m);
	for (unsigned i = 0; i < NKEYS; i++)
		assert_int_equal(gp_ptrmap_insert(gp_ptrmap_shard(&m, key_of(i)), key_of(i),
						  val_of(key_of(i)), &old), 0);
	assert_null(old);
	for (unsigned i = 0; i < NKEYS; i += 7) {
		struct gp_ptrmap_shard *s = gp_ptrmap_shard(&m, key_of(i));
		size_t count = s->count;

		assert_int_equal(gp_ptrmap_insert(s, key_of(i), &vals[0], &old), 0);
		assert_ptr_equal(old, val_of(key_of(i)));
		assert_int_equal(s->count, count);
		assert_ptr_equal(gp_ptrmap_find(s, key_of(i)), &vals[0]);
		assert_int_equal(gp_ptrmap_remove_entry(s, key_of(i), &vals[1]), 0);
		assert_int_equal(gp_ptrmap_insert(s, key_of(i), &vals[1], NULL), 0);
		assert_int_equal(gp_ptrmap_remove_entry(s, key_of(i), &vals[0]), 0);
		assert_ptr_equal(gp_ptrmap_find(s, key_of(i)), &vals[1]);
		assert_int_equal(gp_ptrmap_remove_entry(s, key_of(i), &vals[1]), 1);
		assert_null(gp_ptrmap_find(s, key_of(i)));
		assert_null(gp_ptrmap_remove(s, key_of(i)));
		assert_int_equal(s->count, count - 1);
	}
	gp_ptrmap_fini(&m);
}

/* Inside a filter's write section: a read begun there must be refused. */
static int read_inside_write(void *val, void *arg)
{
	struct gp_ptrmap_shard *s = arg;
	unsigned seq = gp_ptrmap_read_begin(s);

	(void)val;
	assert_true(seq & 1);
	assert_true(gp_ptrmap_read_retry(s, seq));
	return 1;
}

/* Proves: the sequence check refuses a lock-free read that a writer overlapped (an insert, a
 * growth, a removal, a filter), or that began while a writer was busy, and accepts one that
 * nothing overlapped. */
static void test_sequence(void **state)
{
	(void)state;
	static struct gp_ptrmap m;
	struct gp_ptrmap_shard *s;
	unsigned seq;

	gp_ptrmap_init(&m);
	s = gp_ptrmap_shard(&m, key_of(1));
	seq = gp_ptrmap_read_begin(s);
	assert_int_equal(gp_ptrmap_insert(s, key_of(1), val_of(key_of(1)), NULL), 0); /* the first table */
	assert_true(gp_ptrmap_read_retry(s, seq));
	seq = gp_ptrmap_read_begin(s);
	assert_false(gp_ptrmap_read_retry(s, seq));
	for (unsigned i = 2; i < 200; i++) { /* inserts, some of them growing the table */
		struct gp_ptrmap_shard *t = gp_ptrmap_shard(&m, key_of(i));
		seq = gp_ptrmap_read_begin(t);
		assert_int_equal(gp_ptrmap_insert(t, key_of(i), val_of(key_of(i)), NULL), 0);
		assert_true(gp_ptrmap_read_retry(t, seq));
	}
	seq = gp_ptrmap_read_begin(s);
	assert_ptr_equal(gp_ptrmap_remove(s, key_of(1)), val_of(key_of(1)));
	assert_true(gp_ptrmap_read_retry(s, seq));
	seq = gp_ptrmap_read_begin(s);
	assert_null(gp_ptrmap_remove(s, key_of(1))); /* nothing removed: nothing written */
	assert_false(gp_ptrmap_read_retry(s, seq));
	for (int i = 0; i < GP_PTRMAP_SHARDS; i++)
		if (m.shard[i].count > 0)
			gp_ptrmap_filter(&m.shard[i], read_inside_write, &m.shard[i]);
	gp_ptrmap_fini(&m);
}

/* ---- readers racing a writer ---------------------------------------------------------------- */

#define STABLE 48   /* keys the readers look up, never removed */
#define CHURN 16 * 64 /* keys the writer inserts and removes around them */
#define NREADERS 2

struct race {
	struct gp_ptrmap m;
	struct gp_ptrmap_shard *s; /* every key below lives in this shard */
	uintptr_t stable[STABLE], churn[CHURN];
	atomic_int stop;
	atomic_ulong accepted, retried, wrong;
};

/* Keys that hash to shard 0, so that the writer's growth and shifts move the readers' keys. */
static void pick_keys(struct race *r)
{
	unsigned n = 0;
	r->s = &r->m.shard[0];
	for (uintptr_t i = 1; n < STABLE + CHURN; i++) {
		uintptr_t k = i << 8;
		if (gp_ptrmap_shard(&r->m, k) != r->s)
			continue;
		if (n < STABLE)
			r->stable[n] = k;
		else
			r->churn[n - STABLE] = k;
		n++;
	}
}

static void *reader(void *arg)
{
	struct race *r = arg;
	unsigned long accepted = 0, retried = 0, wrong = 0;

	for (unsigned i = 0; !atomic_load_explicit(&r->stop, memory_order_relaxed); i++) {
		/* Every other lookup a stable key (always there), else one the writer moves about
		 * (there or not, but never with another key's value). */
		int stable = i % 2 == 0;
		uintptr_t k = stable ? r->stable[(i / 2) % STABLE] : r->churn[(i / 2) % CHURN];
		for (;;) {
			unsigned seq = gp_ptrmap_read_begin(r->s);
			void *v = gp_ptrmap_find_racy(r->s, k);
			if (gp_ptrmap_read_retry(r->s, seq)) {
				retried++;
				continue;
			}
			accepted++;
			wrong += stable ? v != val_of(k) : v != NULL && v != val_of(k);
			break;
		}
	}
	atomic_fetch_add(&r->accepted, accepted);
	atomic_fetch_add(&r->retried, retried);
	atomic_fetch_add(&r->wrong, wrong);
	return NULL;
}

/* Proves: a lock-free lookup that the sequence check accepts is always right, while a writer
 * grows the shard's table (every stable key moves to a new table) and inserts and removes keys
 * in the stable keys' probe runs (backward shifts move them within a table). It fails without
 * the check: readers then see keys mid-move with another key's value, or missing (not in every
 * run: the windows are a few instructions wide; test_sequence checks the protocol itself
 * deterministically). */
static void test_readers_race_writer(void **state)
{
	(void)state;
	struct race *r = calloc(1, sizeof(*r));
	pthread_t t[NREADERS];
	const char *env = getenv("UNIT_STRESS_OPS");
#ifdef __SANITIZE_THREAD__
	unsigned rounds = env ? (unsigned)atoi(env) * 2 : 60000; /* TSan slows every round */
#else
	unsigned rounds = env ? (unsigned)atoi(env) * 2 : 300000;
#endif

	assert_non_null(r);
	if (rounds < 1000)
		rounds = 1000;
	gp_ptrmap_init(&r->m);
	pick_keys(r);
	for (unsigned i = 0; i < STABLE; i++) {
		gp_lock(&r->s->lock);
		assert_int_equal(gp_ptrmap_insert(r->s, r->stable[i], val_of(r->stable[i]), NULL), 0);
		gp_unlock(&r->s->lock);
	}
	for (int i = 0; i < NREADERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, reader, r), 0);
	/* Half load (48 + 16 keys in 128 slots): long probe runs, so that every removal shifts
	 * stable keys back. One growth first, while the readers run (the stable keys move to a
	 * new table), then the table keeps its size. */
	for (unsigned i = 0; i < CHURN; i++) {
		gp_lock(&r->s->lock);
		gp_ptrmap_insert(r->s, r->churn[i], val_of(r->churn[i]), NULL);
		gp_unlock(&r->s->lock);
	}
	for (unsigned i = 0; i < CHURN; i++) {
		gp_lock(&r->s->lock);
		gp_ptrmap_remove(r->s, r->churn[i]);
		gp_unlock(&r->s->lock);
	}
	for (unsigned round = 0; round < rounds; round++) {
		unsigned base = (round * 16) % (CHURN - 16);
		for (unsigned i = 0; i < 16; i++) {
			gp_lock(&r->s->lock);
			gp_ptrmap_insert(r->s, r->churn[base + i], val_of(r->churn[base + i]), NULL);
			gp_unlock(&r->s->lock);
		}
		for (unsigned i = 0; i < 16; i++) {
			gp_lock(&r->s->lock);
			gp_ptrmap_remove(r->s, r->churn[base + (i * 7) % 16]);
			gp_unlock(&r->s->lock);
		}
	}
	atomic_store(&r->stop, 1);
	for (int i = 0; i < NREADERS; i++)
		pthread_join(t[i], NULL);
	print_message("lookups accepted %lu, retried %lu, wrong %lu\n", atomic_load(&r->accepted),
		      atomic_load(&r->retried), atomic_load(&r->wrong));
	assert_int_equal(atomic_load(&r->wrong), 0);
	assert_true(atomic_load(&r->accepted) > 0);
	for (unsigned i = 0; i < STABLE; i++)
		assert_ptr_equal(gp_ptrmap_find(r->s, r->stable[i]), val_of(r->stable[i]));
	assert_int_equal(r->s->count, STABLE);
	gp_ptrmap_fini(&r->m);
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference),
		cmocka_unit_test(test_sequence),
		cmocka_unit_test(test_insert_again_replaces),
		cmocka_unit_test(test_readers_race_writer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
