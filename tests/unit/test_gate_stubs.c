/* test_gate_stubs.c — the gate's stubs (shim/door/stubs.c) linked directly, in front of fake
 * driver functions: what a caller passes and gets back crosses a stub unchanged, gate open or
 * closed (integer, pointer, float and double arguments, arguments on the stack, a structure
 * passed by pointer and one returned by value, a varargs call); open, the slow path is never
 * entered; closed, gp_gate_pass (this file's, standing in for the gate's owner) is called once a
 * call with the stub's function, on an aligned stack that unwinds to the caller, and the function
 * it returns is the one that runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <execinfo.h>

#include "gate.h"
#include "lookup.h"
#include "stub_asm.h"

/* The driver table the gate's remembered answers call (gate_table.c): empty, never called here. */
struct gp_cu gp_cu;

/* ---- the owner's side, as this test plays it ---- */

static int passes;                      /* gp_gate_pass calls */
static const struct gp_gate_fn *last_f; /* what the last one was given */
static void *replace_with;              /* when set: what gp_gate_pass returns */
static int aligned = 1;                 /* every gp_gate_pass ran on a 16-byte aligned frame */
static void *want_in_trace;             /* a return address the unwinder must reach, or NULL */
static int found_in_trace;

/* Uses the vector and general registers the stub saved, so that a stub that failed to restore
 * them hands the target garbage. */
static __attribute__((noipa)) double clobber(void)
{
	volatile double d[16];
	double sum = 0;

	for (int i = 0; i < 16; i++)
		d[i] = i * 1.75 + 0.5;
	for (int i = 0; i < 16; i++)
		sum += d[i] * d[15 - i];
	return sum;
}

/* Loads every integer argument register with junk. */
static __attribute__((noipa)) long clobber_ints(long a, long b, long c, long d, long e, long f,
						   long g, long h)
{
	return a ^ b ^ c ^ d ^ e ^ f ^ g ^ h;
}

void *gp_gate_pass(const struct gp_gate_fn *f)
{
	uintptr_t frame = (uintptr_t)__builtin_frame_address(0);

#if defined(__x86_64__)
	/* rsp was 16-byte aligned at the call, so the pushed frame pointer sits on an aligned slot */
	if ((frame & 15) != 0)
		aligned = 0;
#else
	(void)frame;
#endif
	if (want_in_trace != NULL) {
		void *trace[32];
		int n = backtrace(trace, 32);
		for (int i = 0; i < n; i++)
			found_in_trace |= trace[i] == want_in_trace;
	}
	passes++;
	last_f = f;
	(void)clobber();
	(void)clobber_ints(-1, -2, -3, -4, -5, -6, -7, -8);
	return replace_with != NULL ? replace_with : f->real;
}

/* ---- fake driver functions ---- */

struct big {
	long a, b, c, d;
};

static int calls_many, calls_other;
static long seen[12];

static __attribute__((noinline)) long many(long a, int b, double c, float d, void *e, long f,
					   long g, double h, const struct big *s, long i, int j,
					   double k)
{
	calls_many++;
	return a + b * 3 + (long)(c * 100) + (long)(d * 10) + (long)(uintptr_t)e + f * 5 + g * 7 +
	       (long)(h * 1000) + s->a + s->d * 11 + i * 13 + j * 17 + (long)(k * 10000);
}

/* The same signature: what a replacement records. */
static __attribute__((noinline)) long many_other(long a, int b, double c, float d, void *e,
						 long f, long g, double h, const struct big *s,
						 long i, int j, double k)
{
	calls_other++;
	seen[0] = a, seen[1] = b, seen[2] = (long)(c * 100), seen[3] = (long)(d * 10);
	seen[4] = (long)(uintptr_t)e, seen[5] = f, seen[6] = g, seen[7] = (long)(h * 1000);
	seen[8] = s->a + s->d, seen[9] = i, seen[10] = j, seen[11] = (long)(k * 10000);
	return -1;
}

/* Ten doubles (two on the stack on x86-64, whose eight vector registers are taken) and an int. */
static __attribute__((noinline)) double doubles(double a, double b, double c, double d, double e,
						double f, double g, double h, double i, double j,
						int n)
{
	return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h + 9 * i + 10 * j + n;
}

static __attribute__((noinline)) float floats(float a, float b)
{
	return a * 2 - b;
}

static __attribute__((noinline)) void *pointer(void *p)
{
	return (char *)p + 1;
}

/* A varargs call: al carries the count of vector registers on x86-64, and a callee that finds
 * it 0 saves none of them. Aligned so that its address ends in a zero byte, the al a slow path
 * that failed to restore rax would leave (its C call's result). */
static __attribute__((noinline, aligned(256))) double sum_varargs(int n, ...)
{
	va_list ap;
	double s = 0;

	va_start(ap, n);
	for (int i = 0; i < n; i++)
		s += va_arg(ap, double);
	va_end(ap);
	return s;
}

/* A query's stand-in: made a stub under a query's name only. */
static __attribute__((noinline)) int query_fake(void *handle)
{
	return handle != NULL ? 600 : 0;
}

/* Returned by value: through a hidden pointer (rdi on x86-64, x8 on aarch64). */
static __attribute__((noinline)) struct big make_big(long x, double y)
{
	struct big b = { x, x + 1, (long)y, x * 2 };
	return b;
}

typedef long (*many_fn)(long, int, double, float, void *, long, long, double, const struct big *,
			long, int, double);
typedef double (*doubles_fn)(double, double, double, double, double, double, double, double,
			     double, double, int);
typedef float (*floats_fn)(float, float);
typedef void *(*pointer_fn)(void *);
typedef double (*varargs_fn)(int, ...);
typedef struct big (*big_fn)(long, double);
typedef int (*query_fn)(void *);

static void *ptr_of(void (*fn)(void))
{
	void *p;

	memcpy(&p, &fn, sizeof(p));
	return p;
}
#define PTR(fn) ptr_of((void (*)(void))(fn))

#define AS(type, p) ((type)(uintptr_t)(p))

/* ---- calls through stubs ---- */

static const struct big s_in = { 1000, 2, 3, 40 };

static long call_many(void *stub)
{
	return AS(many_fn, stub)(1, 2, 0.25, 1.5f, (void *)(uintptr_t)64, 6, 7, 0.125, &s_in, 10,
				 11, 0.0625);
}

static long expected_many(void)
{
	return many(1, 2, 0.25, 1.5f, (void *)(uintptr_t)64, 6, 7, 0.125, &s_in, 10, 11, 0.0625);
}

/* Every kind of call through its stub gives what the direct call gives. */
static void check_all(void)
{
	void *s_many = gp_gate_stub("cuFakeMany", PTR(many));
	void *s_doubles = gp_gate_stub("cuFakeDoubles", PTR(doubles));
	void *s_floats = gp_gate_stub("cuFakeFloats", PTR(floats));
	void *s_pointer = gp_gate_stub("cuFakePointer", PTR(pointer));
	void *s_varargs = gp_gate_stub("cuFakeVarargs", PTR(sum_varargs));
	void *s_big = gp_gate_stub("cuFakeBig", PTR(make_big));
	char buf[4];
	struct big b;

	assert_int_equal(call_many(s_many), expected_many());
	assert_true(AS(doubles_fn, s_doubles)(1, 2, 3, 4, 5, 6, 7, 8, 9, 10.5, 3) ==
		    doubles(1, 2, 3, 4, 5, 6, 7, 8, 9, 10.5, 3));
	assert_true(AS(floats_fn, s_floats)(2.5f, 0.5f) == 4.5f);
	assert_ptr_equal(AS(pointer_fn, s_pointer)(buf), buf + 1);
	assert_true(AS(varargs_fn, s_varargs)(4, 1.0, 2.0, 3.5, 0.25) == 6.75);
	b = AS(big_fn, s_big)(21, 7.9);
	assert_int_equal(b.a, 21);
	assert_int_equal(b.b, 22);
	assert_int_equal(b.c, 7);
	assert_int_equal(b.d, 42);
}

static int reset(void **state)
{
	(void)state;
	atomic_store(&gp_gate_closed, 0);
	passes = 0;
	last_f = NULL;
	replace_with = NULL;
	want_in_trace = NULL;
	found_in_trace = 0;
	calls_many = calls_other = 0;
	return 0;
}

/* Open, every call goes straight to the real function: gp_gate_pass is never called. */
static void test_open_never_passes(void **state)
{
	(void)state;
	check_all();
	assert_int_equal(passes, 0);
}

/* Closed, each call passes gp_gate_pass exactly once, with the stub's own function, on a stack
 * aligned for a call, and the results are those of the direct calls. */
static void test_closed_passes_once(void **state)
{
	void *stub = gp_gate_stub("cuFakeMany", PTR(many));

	(void)state;
	atomic_store(&gp_gate_closed, 1);
	assert_int_equal(call_many(stub), expected_many());
	assert_int_equal(passes, 1);
	assert_non_null(last_f);
	assert_ptr_equal(last_f->real, PTR(many));
	assert_string_equal(last_f->name, "cuFakeMany");
	check_all();
	assert_int_equal(passes, 7); /* one, then six in check_all */
	assert_true(aligned);
	atomic_store(&gp_gate_closed, 0);
	assert_int_equal(call_many(stub), expected_many());
	assert_int_equal(passes, 7);
}

/* The function gp_gate_pass returns is the one that runs, with the caller's very arguments, and
 * its result is the caller's. */
static void test_replacement_runs(void **state)
{
	void *stub = gp_gate_stub("cuFakeMany", PTR(many));

	(void)state;
	replace_with = PTR(many_other);
	atomic_store(&gp_gate_closed, 1);
	assert_int_equal(call_many(stub), -1);
	assert_int_equal(calls_other, 1);
	assert_int_equal(calls_many, 0);
	assert_int_equal(seen[0], 1);
	assert_int_equal(seen[1], 2);
	assert_int_equal(seen[2], 25);
	assert_int_equal(seen[3], 15);
	assert_int_equal(seen[4], 64);
	assert_int_equal(seen[5], 6);
	assert_int_equal(seen[6], 7);
	assert_int_equal(seen[7], 125);
	assert_int_equal(seen[8], 1040);
	assert_int_equal(seen[9], 10); /* on the stack on x86-64 */
	assert_int_equal(seen[10], 11);
	assert_int_equal(seen[11], 625);
}

/* From inside gp_gate_pass the unwinder reaches the caller of the stub: the slow path's CFI
 * describes its frame (gdb and profilers see through it). */
static __attribute__((noinline)) long unwind_probe(void *stub)
{
	want_in_trace = __builtin_return_address(0);
	return call_many(stub) + 1; /* not a tail call: this frame stays */
}

static void test_unwinds_through_slow_path(void **state)
{
	void *stub = gp_gate_stub("cuFakeMany", PTR(many));
	volatile long r;

	(void)state;
	atomic_store(&gp_gate_closed, 1);
	r = unwind_probe(stub);
	assert_int_equal(r, expected_many() + 1);
	assert_int_equal(passes, 1);
	assert_true(found_in_trace);
}

/* The same function always gets the same stub, another function another one; no function, no
 * stub. */
static void test_same_function_same_stub(void **state)
{
	void *a = gp_gate_stub("cuFakeMany", PTR(many));
	void *b = gp_gate_stub("cuFakeManyAgain", PTR(many));
	void *c = gp_gate_stub("cuFakeOther", PTR(many_other));

	(void)state;
	assert_ptr_equal(a, b);
	assert_ptr_not_equal(a, c);
	assert_ptr_not_equal(a, PTR(many));
	assert_null(gp_gate_stub("cuFakeNothing", NULL));
}

/* A stub carries its function's kind and answer from the gate's table, by base name. */
static void test_kinds_and_answers(void **state)
{
	static const char *const queries[] = { "cuEventQuery", "cuStreamQuery_ptsz",
					       "cuDeviceGetName", "cuCtxGetDevice_v2",
					       "cuMemGetInfo_v2", "cuStreamGetCaptureInfo_v3_ptsz",
					       "cuPointerGetAttributes", "cuDriverGetVersion" };
	static const char *const work[] = { "cuStreamSynchronize", "cuEventSynchronize",
					    "cuMemcpyAsync_ptsz", "cuKernelGetFunction",
					    "cuLaunchKernel", "cuMemGetHandleForAddressRange" };
	struct gp_gate_entry *e;
	void *stub;

	(void)state;
	for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++)
		assert_int_equal(gp_gate_kind_of(queries[i]), GP_GATE_QUERY);
	for (size_t i = 0; i < sizeof(work) / sizeof(work[0]); i++)
		assert_int_equal(gp_gate_kind_of(work[i]), GP_GATE_WORK);
	assert_non_null(gp_gate_answer_of("cuEventQuery"));
	assert_non_null(gp_gate_answer_of("cuStreamQuery"));
	assert_ptr_equal(gp_gate_answer_of("cuStreamQuery"), gp_gate_answer_of("cuStreamQuery_ptsz"));
	assert_null(gp_gate_answer_of("cuDeviceGetName"));
	assert_null(gp_gate_answer_of("cuMemGetInfo"));
	assert_null(gp_gate_answer_of("cuLaunchKernel"));

	/* the stub handed out for a query is made with its kind and answer */
	stub = gp_gate_stub("cuEventQuery", PTR(query_fake));
	atomic_store(&gp_gate_closed, 1);
	assert_int_equal(AS(query_fn, stub)(&passes), 600);
	atomic_store(&gp_gate_closed, 0);
	assert_int_equal(passes, 1);
	assert_int_equal(last_f->kind, GP_GATE_QUERY);
	assert_ptr_equal(last_f->answer, gp_gate_answer_of("cuEventQuery"));
	e = (struct gp_gate_entry *)((char *)last_f - offsetof(struct gp_gate_entry, fn));
	assert_ptr_equal(e->slot, PTR(query_fake));
}

/* When the pool is used up, the real function is handed out (ungated, said once), and every stub
 * handed out before still works. Last: it uses the pool up. */
static void test_exhausted_hands_out_real(void **state)
{
	void *s_many = gp_gate_stub("cuFakeMany", PTR(many));
	int given = 0, real_at = -1;

	(void)state;
	for (int i = 0; i < 10000; i++) {
		void *fake = (void *)(uintptr_t)(0x100000 + 16 * (uintptr_t)i);
		void *s = gp_gate_stub("cuFakeFill", fake);
		if (s == fake) {
			if (real_at < 0)
				real_at = i;
		} else {
			assert_int_equal(real_at, -1); /* never a stub again after the first miss */
			given++;
		}
	}
	assert_true(real_at > 0);
	assert_true(given >= 2048);
	assert_ptr_equal(gp_gate_stub("cuFakeMany", PTR(many)), s_many);
	atomic_store(&gp_gate_closed, 1);
	assert_int_equal(call_many(s_many), expected_many());
	assert_int_equal(passes, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_open_never_passes, reset),
		cmocka_unit_test_setup(test_closed_passes_once, reset),
		cmocka_unit_test_setup(test_replacement_runs, reset),
		cmocka_unit_test_setup(test_unwinds_through_slow_path, reset),
		cmocka_unit_test_setup(test_same_function_same_stub, reset),
		cmocka_unit_test_setup(test_kinds_and_answers, reset),
		cmocka_unit_test_setup(test_exhausted_hands_out_real, reset),
	};

#if !GP_GATE_STUBS
	/* no stubs on this architecture: the real function is handed out */
	return gp_gate_stub("cuFakeMany", PTR(many)) == PTR(many) ? 0 : 1;
#endif
	return cmocka_run_group_tests(tests, NULL, reset);
}
