/* test_sizeclass.c — size classes: every request fits its class, the class wastes at most 12.5%
 * over what the driver would occupy natively, and classes are ordered and round-trip.
 * Pure functions: no pool or backend is created. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>

#include "pool_fixture.h"

/* What one native cudaMalloc of `s` occupies: 512 B granules up to 1 MiB, 2 MiB pages above. */
static uint64_t native(uint64_t s)
{
	uint64_t g = s <= MiB ? 512 : 2 * MiB;

	return (s + g - 1) / g * g;
}

static int check_size(size_t s)
{
	unsigned c = gp_pool_class_of(s);
	uint64_t b;

	if (c >= gp_pool_class_count()) {
		print_error("class_of(%zu) = %u, but there are %u classes\n", s, c,
			    gp_pool_class_count());
		return 1;
	}
	b = gp_pool_class_bytes(c);
	if (b < s) {
		print_error("class_bytes(class_of(%zu)) = %llu is smaller than the request\n", s,
			    (unsigned long long)b);
		return 1;
	}
	if (b * 8 > native(s) * 9) {
		print_error("class_bytes(class_of(%zu)) = %llu wastes more than 12.5%% over native %llu\n",
			    s, (unsigned long long)b, (unsigned long long)native(s));
		return 1;
	}
	if (c > 0 && gp_pool_class_bytes(c - 1) >= s) {
		print_error("class_of(%zu) = %u, but the smaller class %u (%zu B) already fits\n", s, c,
			    c - 1, gp_pool_class_bytes(c - 1));
		return 1;
	}
	return 0;
}

/* Proves: for every request from 1 B to 1 GiB (each size up to 64 KiB, every power of two and its
 * neighbours, 512 B and 2 MiB granule edges, and log-spread samples) the class fits the request,
 * is the smallest class that does, and wastes at most 12.5% over the native footprint. */
static void test_class_fits_and_bounds_waste(void **state)
{
	size_t s, k;
	int bad = 0;
	uint64_t x = 88172645463325252ull;
	(void)state;

	for (s = 1; s <= 64 * KiB && bad < 10; s++)
		bad += check_size(s);
	for (k = 0; k <= 30 && bad < 10; k++) {
		size_t p = (size_t)1 << k;

		bad += check_size(p);
		bad += check_size(p + 1);
		if (p > 1)
			bad += check_size(p - 1);
		bad += check_size(p + p / 2);
		bad += check_size(p + p / 4 + 1);
	}
	for (s = 512; s <= 4 * MiB && bad < 10; s += 512) {
		bad += check_size(s - 1);
		bad += check_size(s);
		bad += check_size(s + 1);
	}
	for (s = 2 * MiB; s <= GiB && bad < 10; s += 2 * MiB) {
		bad += check_size(s - 1);
		bad += check_size(s);
		if (s < GiB)
			bad += check_size(s + 1);
	}
	for (k = 0; k < 200000 && bad < 10; k++) {
		/* xorshift: a log-uniform spread of sizes in [1, 1 GiB] */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		s = (size_t)(x % ((uint64_t)1 << (x >> 59) % 31)) + 1;
		bad += check_size(s);
	}
	assert_int_equal(bad, 0);
}

/* Proves: class sizes strictly increase with the class index, class_of never decreases as the
 * request grows, and class_of(class_bytes(c)) == c for every class. */
static void test_classes_monotonic_and_round_trip(void **state)
{
	unsigned n = gp_pool_class_count(), c, prev = 0;
	size_t s;
	(void)state;

	assert_true(n > 1);
	for (c = 0; c < n; c++) {
		size_t b = gp_pool_class_bytes(c);

		assert_true(b > 0);
		if (c > 0 && b <= gp_pool_class_bytes(c - 1))
			fail_msg("class_bytes(%u) = %zu does not exceed class_bytes(%u) = %zu", c, b,
				 c - 1, gp_pool_class_bytes(c - 1));
		if (gp_pool_class_of(b) != c)
			fail_msg("class_of(class_bytes(%u) = %zu) = %u", c, b, gp_pool_class_of(b));
		if (c + 1 < n && gp_pool_class_of(b + 1) != c + 1)
			fail_msg("class_of(class_bytes(%u) + 1) = %u, expected %u", c,
				 gp_pool_class_of(b + 1), c + 1);
	}
	for (s = 1; s <= 8 * MiB; s += s < 64 * KiB ? 1 : 4093) {
		c = gp_pool_class_of(s);
		if (c < prev)
			fail_msg("class_of(%zu) = %u is below class_of of a smaller size (%u)", s, c,
				 prev);
		prev = c;
	}
}

/* Proves: the classes reach at least 1 GiB, so every request the waste test makes has a class. */
static void test_classes_cover_one_gib(void **state)
{
	unsigned n = gp_pool_class_count();
	(void)state;

	assert_true(gp_pool_class_bytes(n - 1) >= GiB);
	assert_true(gp_pool_class_bytes(gp_pool_class_of(GiB)) >= GiB);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_class_fits_and_bounds_waste),
		cmocka_unit_test(test_classes_monotonic_and_round_trip),
		cmocka_unit_test(test_classes_cover_one_gib),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
