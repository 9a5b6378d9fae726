/* test_patch.c — shim/door/patch.c: which prologues it reads and which it refuses, and on x86-64
 * a live patch of functions of this program (calls go to the target, the trampoline runs the
 * original, a refusal leaves every function as it was). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "patch.h"

/* The first bytes of CUDA 13's static runtime (libcudart_static.a, as nvcc links it). */
static const unsigned char cuda13_malloc[] = {
	0x55,                                     /* push %rbp */
	0x48, 0x89, 0xe5,                         /* mov %rsp,%rbp */
	0x41, 0x57, 0x41, 0x56, 0x41, 0x55,       /* push %r15; push %r14; push %r13 */
	0x49, 0x89, 0xf5,                         /* mov %rsi,%r13 */
	0x41, 0x54,                               /* push %r12 */
	0x49, 0x89, 0xfc, 0x53,                   /* mov %rdi,%r12; push %rbx */
	0x48, 0x81, 0xec, 0xd8, 0x00, 0x00, 0x00, /* sub $0xd8,%rsp */
};
static const unsigned char cuda13_free[] = {
	0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56, 0x41, 0x55, 0x41, 0x54,
	0x49, 0x89, 0xfc,                         /* mov %rdi,%r12 */
	0x53, 0x48, 0x81, 0xec, 0xc8, 0x00, 0x00, 0x00,
};

/* Proves: the real static runtime's cudaMalloc and cudaFree read as whole instructions covering
 * the jump (15 bytes each: the jump's 14 end inside an instruction), and a prologue compiled with
 * endbr64, an immediate stack adjustment, frame stores and an absolute (not relative) operand reads
 * too. */
static void test_reads_prologues(void **state)
{
	static const unsigned char cet[] = {
		0xf3, 0x0f, 0x1e, 0xfa,       /* endbr64 */
		0x55, 0x48, 0x89, 0xe5,       /* push %rbp; mov %rsp,%rbp */
		0x48, 0x83, 0xec, 0x20,       /* sub $0x20,%rsp */
		0x48, 0x89, 0x7d, 0xe8,       /* mov %rdi,-0x18(%rbp) */
		0x31, 0xc0,                   /* xor %eax,%eax */
	};
	static const unsigned char frame[] = {
		0x41, 0x54,                         /* push %r12 */
		0x48, 0x89, 0x74, 0x24, 0x08,       /* mov %rsi,0x8(%rsp) (SIB) */
		0x8b, 0x04, 0x25, 0x10, 0, 0, 0,    /* mov 0x10,%eax (absolute, SIB without base) */
		0x48, 0xc7, 0x45, 0xf0, 0, 0, 0, 0, /* movq $0,-0x10(%rbp) */
		0x0f, 0x1f, 0x44, 0x00, 0x00,       /* nopl 0x0(%rax,%rax,1) */
	};

	(void)state;
	assert_int_equal(gp_patch_prologue_len(cuda13_malloc, sizeof(cuda13_malloc), GP_PATCH_JUMP),
			 15);
	assert_int_equal(gp_patch_prologue_len(cuda13_free, sizeof(cuda13_free), GP_PATCH_JUMP), 15);
	assert_int_equal(gp_patch_prologue_len(cet, sizeof(cet), GP_PATCH_JUMP), 16);
	assert_int_equal(gp_patch_prologue_len(frame, sizeof(frame), GP_PATCH_JUMP), 14);
	assert_int_equal(gp_patch_prologue_len(frame, sizeof(frame), 15), 22);
}

/* Proves: an instruction whose meaning depends on where it runs, or that leaves the prologue, is
 * refused wherever it lies in the bytes to move; so is a prologue that ends too soon. */
static void test_refuses(void **state)
{
	static const unsigned char rip_load[] = { 0x55, 0x48, 0x8b, 0x05, 1, 2, 3, 4,
						  0x41, 0x57, 0x41, 0x56, 0x41, 0x55 };
	static const unsigned char rip_lea[] = { 0x55, 0x48, 0x89, 0xe5, 0x48, 0x8d, 0x3d, 1, 2, 3, 4,
						 0x41, 0x57, 0x53 };
	static const unsigned char call[] = { 0x55, 0x48, 0x89, 0xe5, 0xe8, 1, 2, 3, 4,
					      0x41, 0x57, 0x41, 0x56, 0x53 };
	static const unsigned char jmp[] = { 0x55, 0xeb, 0x10, 0x48, 0x89, 0xe5, 0x41, 0x57,
					     0x41, 0x56, 0x41, 0x55, 0x41, 0x54 };
	static const unsigned char ret[] = { 0x31, 0xc0, 0xc3, 0x90, 0x90, 0x90, 0x90, 0x90,
					     0x90, 0x90, 0x90, 0x90, 0x90, 0x90 };
	static const unsigned char rip_store[] = { 0x55, 0x48, 0x89, 0xe5, 0x89, 0x3d, 1, 2, 3, 4,
						   0x41, 0x57, 0x41, 0x56 };

	(void)state;
	assert_int_equal(gp_patch_prologue_len(rip_load, sizeof(rip_load), GP_PATCH_JUMP), 0);
	assert_int_equal(gp_patch_prologue_len(rip_lea, sizeof(rip_lea), GP_PATCH_JUMP), 0);
	assert_int_equal(gp_patch_prologue_len(call, sizeof(call), GP_PATCH_JUMP), 0);
	assert_int_equal(gp_patch_prologue_len(jmp, sizeof(jmp), GP_PATCH_JUMP), 0);
	assert_int_equal(gp_patch_prologue_len(ret, sizeof(ret), GP_PATCH_JUMP), 0);
	assert_int_equal(gp_patch_prologue_len(rip_store, sizeof(rip_store), GP_PATCH_JUMP), 0);
	/* Cut short: the sub's immediate is not all there. */
	assert_int_equal(gp_patch_prologue_len(cuda13_malloc, 12, GP_PATCH_JUMP), 0);
	assert_int_equal(gp_patch_prologue_len(cuda13_malloc, 22, GP_PATCH_JUMP), 15);
	assert_int_equal(gp_patch_prologue_len(cuda13_malloc, 21, 20), 0);
}

#if defined(__x86_64__)

/* victim_a(x) = x + 1 and victim_b(x) = x + 2, each behind cudaMalloc's prologue; victim_rip
 * begins with a load relative to the instruction pointer. */
int victim_a(int x);
int victim_b(int x);
int victim_rip(int x);
__asm__(".text\n"
	"	.globl victim_a\n"
	"	.type victim_a, @function\n"
	"victim_a:\n"
	"	.byte 0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56, 0x41, 0x55\n"
	"	.byte 0x49, 0x89, 0xf5, 0x41, 0x54, 0x49, 0x89, 0xfc, 0x53\n"
	"	lea 1(%rdi), %eax\n"
	"	pop %rbx\n pop %r12\n pop %r13\n pop %r14\n pop %r15\n pop %rbp\n"
	"	ret\n"
	"	.size victim_a, .-victim_a\n"
	"	.globl victim_b\n"
	"	.type victim_b, @function\n"
	"victim_b:\n"
	"	.byte 0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56, 0x41, 0x55\n"
	"	.byte 0x41, 0x54, 0x49, 0x89, 0xfc, 0x53\n"
	"	lea 2(%rdi), %eax\n"
	"	pop %rbx\n pop %r12\n pop %r13\n pop %r14\n pop %r15\n pop %rbp\n"
	"	ret\n"
	"	.size victim_b, .-victim_b\n"
	"	.globl victim_rip\n"
	"	.type victim_rip, @function\n"
	"victim_rip:\n"
	"	mov victim_rip(%rip), %rax\n"
	"	push %rbp\n mov %rsp, %rbp\n push %r15\n push %r14\n"
	"	lea 3(%rdi), %eax\n"
	"	pop %r14\n pop %r15\n pop %rbp\n"
	"	ret\n"
	"	.size victim_rip, .-victim_rip\n");

static int (*orig_a)(int);
static int (*orig_b)(int);

static int target_a(int x)
{
	return orig_a(x) * 10;
}

static int target_b(int x)
{
	return orig_b(x) * 100;
}

static void *fn_addr(int (*fn)(int))
{
	void *p;

	memcpy(&p, &fn, sizeof(p));
	return p;
}

/* Proves: a refusal anywhere in the set leaves every function's code as it was (victim_a among
 * them), and says why; then a patch of two functions sends their calls to the targets, whose
 * trampolines run the originals (through the moved prologue and back). */
static void test_live(void **state)
{
	unsigned char before_a[32], before_rip[32];
	struct gp_patch bad[2] = { { fn_addr(victim_a), 32, fn_addr(target_a), NULL },
				   { fn_addr(victim_rip), 32, fn_addr(target_a), NULL } };
	struct gp_patch good[2] = { { fn_addr(victim_a), 32, fn_addr(target_a), NULL },
				    { fn_addr(victim_b), 32, fn_addr(target_b), NULL } };
	int (*volatile call_a)(int) = victim_a;
	int (*volatile call_b)(int) = victim_b;
	int (*volatile call_rip)(int) = victim_rip;
	const char *why = NULL;

	(void)state;
	memcpy(before_a, fn_addr(victim_a), sizeof(before_a));
	memcpy(before_rip, fn_addr(victim_rip), sizeof(before_rip));
	assert_int_equal(gp_patch_apply(bad, 2, &why), -1);
	assert_non_null(why);
	assert_null(bad[0].orig);
	assert_memory_equal(before_a, fn_addr(victim_a), sizeof(before_a));
	assert_memory_equal(before_rip, fn_addr(victim_rip), sizeof(before_rip));
	assert_int_equal(call_a(5), 6);
	assert_int_equal(call_rip(5), 8);

	assert_int_equal(gp_patch_apply(good, 2, &why), 0);
	memcpy(&orig_a, &good[0].orig, sizeof(orig_a));
	memcpy(&orig_b, &good[1].orig, sizeof(orig_b));
	assert_int_equal(call_a(5), 60);
	assert_int_equal(call_b(5), 700);
	assert_int_equal(orig_a(1), 2);
}

#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reads_prologues),
		cmocka_unit_test(test_refuses),
#if defined(__x86_64__)
		cmocka_unit_test(test_live),
#endif
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
