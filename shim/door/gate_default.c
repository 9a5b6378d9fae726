/* gate_default.c — the gate's owner as the door alone has it: weak definitions of what the owner
 * (auto-suspend, shim/suspend.c) defines strong, so that the door builds, links and is tested
 * without it. They behave as an owner that never suspends: every call goes on to the driver.
 * Apart from gate.c so that a test build can wrap them (-Wl,--wrap applies to calls between
 * objects). */
#include "gate.h"

__attribute__((weak)) void *gp_gate_pass(const struct gp_gate_fn *f)
{
	return f->real;
}

__attribute__((weak)) int gp_gate_hook(enum gp_gate_kind kind)
{
	(void)kind;
	return 0;
}

__attribute__((weak)) int gp_suspend_meminfo(size_t *free_b, size_t *total_b)
{
	(void)free_b;
	(void)total_b;
	return 0;
}

__attribute__((weak)) int gp_gate_recall(unsigned long *epoch)
{
	*epoch = 0;
	return 0;
}

__attribute__((weak)) void gp_gate_wake(const char *why)
{
	(void)why;
}
