/* gate.c — the gate itself: the flag every stub and entry point of ours loads, and the C side of
 * a stub's slow path. Open, a call costs that load and a branch; the slow path is then taken only
 * by an exported stub's first call (its driver function found, exports.c). Closed, every call
 * passes gp_gate_pass, whose answer it runs. Never a lock, never a driver call here. */
#include "gate.h"
#include "stub_asm.h"

/* Hidden like everything of ours: the stubs load it PC-relative, never through the GOT. At the
 * start of a cache line: every call loads it. */
_Alignas(64) _Atomic unsigned char gp_gate_closed;

void *gp_gate_enter(const struct gp_gate_fn *f)
{
	if (atomic_load_explicit(&gp_gate_closed, memory_order_acquire) == 0)
		return f->real;
	return gp_gate_pass(f);
}
