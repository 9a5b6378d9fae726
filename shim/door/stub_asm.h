/* stub_asm.h — the machine code of a gate stub, as assembler text for top-level __asm__ (stubs.c:
 * the pool that gp_gate_stub hands out; exports.c: the cu* symbols a program linked to
 * libcuda.so.1 binds). A stub is four instructions while the gate is open: load gp_gate_closed,
 * branch if it is set, jump to its entry's slot. Closed, it goes to the slow path with its entry
 * in a scratch register (x86-64 r11, aarch64 x16), which saves every argument register, calls a C
 * function with the entry (it returns the function to run), restores them and jumps there: the
 * caller's return address, stack arguments and result pass untouched. Never a call of our own on
 * the fast path, never a change to the caller's stack but the slow path's frame, which is gone
 * before the jump. Other architectures: GP_GATE_STUBS is 0 and nothing here is used. */
#ifndef GPUPOOL_DOOR_STUB_ASM_H
#define GPUPOOL_DOOR_STUB_ASM_H

#include "gate.h"

/* A stub's data: the slot its fast path jumps to (fn.real once known), then the function. The
 * slot comes first: the stub jumps through its entry's address. */
struct gp_gate_entry {
	void *slot;
	struct gp_gate_fn fn;
};

/* The C side of a slow path: what to run, f->real or what gp_gate_pass says (gate.c). */
void *gp_gate_enter(const struct gp_gate_fn *f);

#define GP_GATE_STR_(x) #x
#define GP_GATE_STR(x) GP_GATE_STR_(x)

#if defined(__x86_64__)
#define GP_GATE_STUBS 1
/* Bytes between two stubs of the pool (stubs.c): each fits in them. */
#define GP_GATE_STUB_STRIDE 32
#if defined(__CET__)
#define GP_GATE_ASM_LANDING "	endbr64\n"
#else
#define GP_GATE_ASM_LANDING ""
#endif

/* The stub's body, for the entry at `entry` (an assembler expression), going to `slow`. */
#define GP_GATE_ASM_STUB(entry, slow)                                                              \
	GP_GATE_ASM_LANDING                                                                        \
	"	lea " entry "(%rip), %r11\n"                                                       \
	"	cmpb $0, gp_gate_closed(%rip)\n"                                                   \
	"	jne " slow "\n"                                                                    \
	"	jmp *(%r11)\n"

/* The slow path `label`, calling `cfunc(entry)`. At its entry the stack is the caller's, as at a
 * function's first instruction (rsp + 8 is 16-byte aligned): one frame of 8 general registers
 * (rdi rsi rdx rcx r8 r9, rax for a varargs call's count of vector registers, padding) and the
 * 8 vector argument registers keeps the call aligned. */
#define GP_GATE_ASM_SLOW(label, cfunc)                                                             \
	"	.p2align 4\n"                                                                      \
	"	.type " label ", %function\n"                                                      \
	label ":\n"                                                                                \
	"	.cfi_startproc\n"                                                                  \
	"	push %rbp\n"                                                                       \
	"	.cfi_def_cfa_offset 16\n"                                                          \
	"	.cfi_offset %rbp, -16\n"                                                           \
	"	mov %rsp, %rbp\n"                                                                  \
	"	.cfi_def_cfa_register %rbp\n"                                                      \
	"	sub $192, %rsp\n"                                                                  \
	"	mov %rdi, 0(%rsp)\n"                                                               \
	"	mov %rsi, 8(%rsp)\n"                                                               \
	"	mov %rdx, 16(%rsp)\n"                                                              \
	"	mov %rcx, 24(%rsp)\n"                                                              \
	"	mov %r8, 32(%rsp)\n"                                                               \
	"	mov %r9, 40(%rsp)\n"                                                               \
	"	mov %rax, 48(%rsp)\n"                                                              \
	"	movaps %xmm0, 64(%rsp)\n"                                                          \
	"	movaps %xmm1, 80(%rsp)\n"                                                          \
	"	movaps %xmm2, 96(%rsp)\n"                                                          \
	"	movaps %xmm3, 112(%rsp)\n"                                                         \
	"	movaps %xmm4, 128(%rsp)\n"                                                         \
	"	movaps %xmm5, 144(%rsp)\n"                                                         \
	"	movaps %xmm6, 160(%rsp)\n"                                                         \
	"	movaps %xmm7, 176(%rsp)\n"                                                         \
	"	mov %r11, %rdi\n"                                                                  \
	"	call " cfunc "\n"                                                                  \
	"	mov %rax, %r11\n"                                                                  \
	"	mov 0(%rsp), %rdi\n"                                                               \
	"	mov 8(%rsp), %rsi\n"                                                               \
	"	mov 16(%rsp), %rdx\n"                                                              \
	"	mov 24(%rsp), %rcx\n"                                                              \
	"	mov 32(%rsp), %r8\n"                                                               \
	"	mov 40(%rsp), %r9\n"                                                               \
	"	mov 48(%rsp), %rax\n"                                                              \
	"	movaps 64(%rsp), %xmm0\n"                                                          \
	"	movaps 80(%rsp), %xmm1\n"                                                          \
	"	movaps 96(%rsp), %xmm2\n"                                                          \
	"	movaps 112(%rsp), %xmm3\n"                                                         \
	"	movaps 128(%rsp), %xmm4\n"                                                         \
	"	movaps 144(%rsp), %xmm5\n"                                                         \
	"	movaps 160(%rsp), %xmm6\n"                                                         \
	"	movaps 176(%rsp), %xmm7\n"                                                         \
	"	leave\n"                                                                           \
	"	.cfi_def_cfa %rsp, 8\n"                                                            \
	"	jmp *%r11\n"                                                                       \
	"	.cfi_endproc\n"                                                                    \
	"	.size " label ", .-" label "\n"

#elif defined(__aarch64__)
#define GP_GATE_STUBS 1
#define GP_GATE_STUB_STRIDE 32
#define GP_GATE_ASM_LANDING ""

#define GP_GATE_ASM_STUB(entry, slow)                                                              \
	"	adrp x16, " entry "\n"                                                             \
	"	add x16, x16, #:lo12:" entry "\n"                                                  \
	"	adrp x17, gp_gate_closed\n"                                                        \
	"	ldrb w17, [x17, #:lo12:gp_gate_closed]\n"                                          \
	"	cbnz w17, " slow "\n"                                                              \
	"	ldr x17, [x16]\n"                                                                  \
	"	br x17\n"

/* The frame: x29 and x30, the 8 argument registers and x8 (a returned structure's address), the
 * 8 vector argument registers whole (q0-q7): 224 bytes, sp stays 16-byte aligned. The final
 * branch goes through x16, which a BTI landing pad accepts like a call's. */
#define GP_GATE_ASM_SLOW(label, cfunc)                                                             \
	"	.p2align 4\n"                                                                      \
	"	.type " label ", %function\n"                                                      \
	label ":\n"                                                                                \
	"	.cfi_startproc\n"                                                                  \
	"	stp x29, x30, [sp, #-224]!\n"                                                      \
	"	.cfi_def_cfa_offset 224\n"                                                         \
	"	.cfi_offset x29, -224\n"                                                           \
	"	.cfi_offset x30, -216\n"                                                           \
	"	mov x29, sp\n"                                                                     \
	"	stp x0, x1, [sp, #16]\n"                                                           \
	"	stp x2, x3, [sp, #32]\n"                                                           \
	"	stp x4, x5, [sp, #48]\n"                                                           \
	"	stp x6, x7, [sp, #64]\n"                                                           \
	"	str x8, [sp, #80]\n"                                                               \
	"	stp q0, q1, [sp, #96]\n"                                                           \
	"	stp q2, q3, [sp, #128]\n"                                                          \
	"	stp q4, q5, [sp, #160]\n"                                                          \
	"	stp q6, q7, [sp, #192]\n"                                                          \
	"	mov x0, x16\n"                                                                     \
	"	bl " cfunc "\n"                                                                    \
	"	mov x16, x0\n"                                                                     \
	"	ldp x0, x1, [sp, #16]\n"                                                           \
	"	ldp x2, x3, [sp, #32]\n"                                                           \
	"	ldp x4, x5, [sp, #48]\n"                                                           \
	"	ldp x6, x7, [sp, #64]\n"                                                           \
	"	ldr x8, [sp, #80]\n"                                                               \
	"	ldp q0, q1, [sp, #96]\n"                                                           \
	"	ldp q2, q3, [sp, #128]\n"                                                          \
	"	ldp q4, q5, [sp, #160]\n"                                                          \
	"	ldp q6, q7, [sp, #192]\n"                                                          \
	"	ldp x29, x30, [sp], #224\n"                                                        \
	"	.cfi_def_cfa_offset 0\n"                                                           \
	"	.cfi_restore x29\n"                                                                \
	"	.cfi_restore x30\n"                                                                \
	"	br x16\n"                                                                          \
	"	.cfi_endproc\n"                                                                    \
	"	.size " label ", .-" label "\n"

#else
#define GP_GATE_STUBS 0
#endif

#endif
