/* patch.c — patch.h's jump over a function's first instructions and the trampoline that keeps
 * the original callable. The reader knows only the instructions compilers put in a prologue
 * (pushes, register moves, stack adjustments, stores to the frame, endbr64, nops), each of which
 * means the same wherever it runs; a branch, a call or an operand relative to the instruction
 * pointer ends the reading with a refusal. Never leaves a function half written: every page is
 * made writable, and every trampoline made, before the first byte of code changes. */
#define _GNU_SOURCE
#include "patch.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PATCH_MAX 4     /* functions patched together */
#define TRAMP_SLOT 64   /* bytes of a trampoline: the moved instructions and the jump back */
#define PROLOGUE_MAX 32 /* bytes read of a prologue: 14 and one more instruction */

/* ModRM, SIB and displacement: their bytes, or 0 when the operand is relative to the
 * instruction pointer (mod 00, r/m 101) or the bytes run out. */
static size_t modrm_len(const unsigned char *c, size_t avail)
{
	unsigned mod, rm;
	size_t n = 1;

	if (avail < 1)
		return 0;
	mod = c[0] >> 6;
	rm = c[0] & 7;
	if (mod == 3)
		return 1;
	if (rm == 4) {
		if (avail < 2)
			return 0;
		n = 2;
		if (mod == 0 && (c[1] & 7) == 5)
			n += 4; /* no base: a 32-bit displacement, absolute, not relative */
	} else if (mod == 0 && rm == 5) {
		return 0;
	}
	if (mod == 1)
		n += 1;
	else if (mod == 2)
		n += 4;
	return n <= avail ? n : 0;
}

/* One instruction of the accepted set: its length, else 0. */
static size_t insn_len(const unsigned char *c, size_t avail)
{
	static const unsigned char endbr64[] = { 0xf3, 0x0f, 0x1e, 0xfa };
	size_t p = 0, m, imm;
	int rexw = 0;
	unsigned op;

	if (avail >= sizeof(endbr64) && memcmp(c, endbr64, sizeof(endbr64)) == 0)
		return sizeof(endbr64);
	if (avail >= 1 && (c[0] & 0xf0) == 0x40) {
		rexw = (c[0] & 8) != 0;
		p = 1;
	}
	if (p >= avail)
		return 0;
	op = c[p++];
	if (op >= 0x50 && op <= 0x57) /* push r64 */
		return p;
	if (op == 0x90 && p == 1) /* nop */
		return 1;
	if (op >= 0xb8 && op <= 0xbf) { /* mov r, imm32 (imm64 with REX.W) */
		imm = rexw ? 8 : 4;
		return p + imm <= avail ? p + imm : 0;
	}
	imm = 0;
	switch (op) {
	case 0x01: case 0x03: case 0x09: case 0x0b: case 0x21: case 0x23: /* add, or, and */
	case 0x29: case 0x2b: case 0x31: case 0x33: case 0x39: case 0x3b: /* sub, xor, cmp */
	case 0x85: case 0x89: case 0x8b:                                  /* test, mov */
		break;
	case 0x8d: /* lea: only with a memory operand */
		if (p >= avail || (c[p] >> 6) == 3)
			return 0;
		break;
	case 0x83: /* add/or/and/sub/xor/cmp r/m, imm8 */
		imm = 1;
		break;
	case 0x81: /* the same, imm32 */
		imm = 4;
		break;
	case 0xc7: /* mov r/m, imm32: only /0 */
		if (p >= avail || ((c[p] >> 3) & 7) != 0)
			return 0;
		imm = 4;
		break;
	case 0x0f: /* nop r/m (0f 1f /0) */
		if (p + 1 >= avail || c[p] != 0x1f || ((c[p + 1] >> 3) & 7) != 0)
			return 0;
		p++;
		break;
	default:
		return 0;
	}
	m = modrm_len(c + p, avail - p);
	if (m == 0 || p + m + imm > avail)
		return 0;
	return p + m + imm;
}

size_t gp_patch_prologue_len(const unsigned char *code, size_t max, size_t need)
{
	size_t n = 0, len;

	while (n < need) {
		len = insn_len(code + n, max - n);
		if (len == 0)
			return 0;
		n += len;
	}
	return n;
}

#if defined(__x86_64__)

/* jmp *0(%rip) followed by the address: an absolute jump that changes no register. */
static void write_jump(unsigned char *at, const void *to)
{
	static const unsigned char op[] = { 0xff, 0x25, 0, 0, 0, 0 };
	uintptr_t a = (uintptr_t)to;

	memcpy(at, op, sizeof(op));
	memcpy(at + sizeof(op), &a, sizeof(a));
}

/* The pages holding the first GP_PATCH_JUMP bytes of fn. */
static void jump_pages(void *fn, uintptr_t page, uintptr_t *start, size_t *len)
{
	uintptr_t a = (uintptr_t)fn;

	*start = a & ~(page - 1);
	*len = ((a + GP_PATCH_JUMP + page - 1) & ~(page - 1)) - *start;
}

/* Writable while the jump is written: with execute kept where the system allows it, else
 * without (nothing runs this code now: patch.h). */
static int unprotect(void *fn, uintptr_t page)
{
	uintptr_t start;
	size_t len;

	jump_pages(fn, page, &start, &len);
	if (mprotect((void *)start, len, PROT_READ | PROT_WRITE | PROT_EXEC) == 0)
		return 0;
	return mprotect((void *)start, len, PROT_READ | PROT_WRITE);
}

static void reprotect(void *fn, uintptr_t page)
{
	uintptr_t start;
	size_t len;

	jump_pages(fn, page, &start, &len);
	mprotect((void *)start, len, PROT_READ | PROT_EXEC);
}

int gp_patch_apply(struct gp_patch *p, size_t n, const char **why)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	size_t len[PATCH_MAX], open = 0;
	unsigned char *tramp;

	if (n == 0 || n > PATCH_MAX || n * TRAMP_SLOT > page) {
		*why = "too many functions";
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		size_t max = p[i].size < PROLOGUE_MAX ? p[i].size : PROLOGUE_MAX;

		len[i] = p[i].size < GP_PATCH_JUMP ? 0 :
			 gp_patch_prologue_len(p[i].fn, max, GP_PATCH_JUMP);
		if (len[i] == 0 || len[i] + GP_PATCH_JUMP > TRAMP_SLOT) {
			*why = "a function's first instructions cannot be moved";
			return -1;
		}
	}
	tramp = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tramp == MAP_FAILED) {
		*why = "no memory for the trampolines";
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char *t = tramp + i * TRAMP_SLOT;

		memcpy(t, p[i].fn, len[i]);
		write_jump(t + len[i], (unsigned char *)p[i].fn + len[i]);
	}
	if (mprotect(tramp, page, PROT_READ | PROT_EXEC) != 0) {
		*why = "the system refuses executable memory for the trampolines";
		goto fail;
	}
	for (; open < n; open++) {
		if (unprotect(p[open].fn, page) != 0) {
			*why = "the system refuses to make the program's code writable";
			goto fail;
		}
	}
	for (size_t i = 0; i < n; i++) {
		write_jump(p[i].fn, p[i].target);
		memset((unsigned char *)p[i].fn + GP_PATCH_JUMP, 0xcc, len[i] - GP_PATCH_JUMP);
		p[i].orig = tramp + i * TRAMP_SLOT;
	}
	for (size_t i = 0; i < n; i++)
		reprotect(p[i].fn, page);
	return 0;
fail:
	while (open > 0)
		reprotect(p[--open].fn, page);
	munmap(tramp, page);
	return -1;
}

#else

int gp_patch_apply(struct gp_patch *p, size_t n, const char **why)
{
	(void)p;
	(void)n;
	*why = "only on x86-64";
	return -1;
}

#endif
