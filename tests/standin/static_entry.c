/* static_entry.c — the static flavour's cudaMalloc and cudaFree (standin.h): linked into the
 * program as nvcc links the real runtime, each begins with the bytes the real static runtime's
 * begins with (CUDA 13's libcudart_static.a: the frame and the registers it saves), then calls
 * the stand-in's own, counting the calls. gpupool's static runtime door (shim/door/static.c)
 * meets here the code it meets there. The real library names its internal functions
 * libcudart_static_<hash>; the wrappers here are named so too. x86-64 only. */
#include "runtime.h"

#include <stdatomic.h>

cudaError_t standin_static_malloc(void **devPtr, size_t size); /* runtime_mem.c's cudaMalloc */
cudaError_t standin_static_free(void *devPtr);                 /* and its cudaFree */

static _Atomic unsigned long mallocs, frees;

cudaError_t libcudart_static_malloc(void **devPtr, size_t size);
cudaError_t libcudart_static_free(void *devPtr);

cudaError_t libcudart_static_malloc(void **devPtr, size_t size)
{
	atomic_fetch_add(&mallocs, 1);
	return standin_static_malloc(devPtr, size);
}

cudaError_t libcudart_static_free(void *devPtr)
{
	atomic_fetch_add(&frees, 1);
	return standin_static_free(devPtr);
}

void standin_static_calls(unsigned long *n_malloc, unsigned long *n_free)
{
	*n_malloc = atomic_load(&mallocs);
	*n_free = atomic_load(&frees);
}

/* cudaMalloc: push %rbp; mov %rsp,%rbp; push %r15; push %r14; push %r13; mov %rsi,%r13;
 * push %r12; mov %rdi,%r12; push %rbx; sub $0xd8,%rsp. cudaFree: the same frame, its pointer in
 * %r12, sub $0xc8. Each keeps the stack aligned for its call. */
/* Both frames' end: the saved registers back, and return. */
#define RESTORE "	pop %rbx\n	pop %r12\n	pop %r13\n	pop %r14\n	pop %r15\n	pop %rbp\n	ret\n"

__asm__(".text\n"
	"	.globl cudaMalloc\n"
	"	.hidden cudaMalloc\n"
	"	.type cudaMalloc, @function\n"
	"cudaMalloc:\n"
	"	.byte 0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56, 0x41, 0x55\n"
	"	.byte 0x49, 0x89, 0xf5, 0x41, 0x54, 0x49, 0x89, 0xfc, 0x53\n"
	"	.byte 0x48, 0x81, 0xec, 0xd8, 0x00, 0x00, 0x00\n"
	"	mov %r12, %rdi\n"
	"	mov %r13, %rsi\n"
	"	call libcudart_static_malloc\n"
	"	add $0xd8, %rsp\n"
	RESTORE
	"	.size cudaMalloc, .-cudaMalloc\n"
	"	.globl cudaFree\n"
	"	.hidden cudaFree\n"
	"	.type cudaFree, @function\n"
	"cudaFree:\n"
	"	.byte 0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56, 0x41, 0x55\n"
	"	.byte 0x41, 0x54, 0x49, 0x89, 0xfc, 0x53\n"
	"	.byte 0x48, 0x81, 0xec, 0xc8, 0x00, 0x00, 0x00\n"
	"	mov %r12, %rdi\n"
	"	call libcudart_static_free\n"
	"	add $0xc8, %rsp\n"
	RESTORE
	"	.size cudaFree, .-cudaFree\n");
