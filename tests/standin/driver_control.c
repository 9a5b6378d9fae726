/* driver_control.c — the control and inspection API of standin.h, in the stand-in driver where
 * the state is: counters, capacity, manual events, ownership, faults, unloading, the free and
 * launch delays, the work outstanding.
 * The stand-in runtime forwards its own copies here. Test-only. */
#include "driver.h"

#include <string.h>

void standin_get(int device, struct standin_counters *out)
{
	lock_state();
	if (device >= st.ndevices || device < -1)
		memset(out, 0, sizeof(*out));
	else
		sum_counters(device, out);
	leave();
}

void standin_set_capacity(int device, uint64_t bytes)
{
	lock_state();
	if (device >= 0 && device < STANDIN_MAX_DEVICES)
		st.dev[device].capacity = bytes;
	leave();
}

void standin_set_manual_events(int on)
{
	lock_state();
	st.manual_events = on != 0;
	leave();
}

void standin_complete_events(void)
{
	lock_state();
	complete_all(-1);
	leave();
}

void standin_set_launch_delay_us(unsigned us)
{
	st_setup();
	atomic_store(&st_launch_delay_us, us);
}

uint64_t standin_device_busy(int device)
{
	uint64_t n = 0;

	lock_state();
	if (device >= -1 && device < STANDIN_MAX_DEVICES)
		n = work_outstanding(device);
	leave();
	return n;
}

int standin_owns(const void *p)
{
	int owned;

	lock_state();
	owned = map_find(p) != NULL;
	leave();
	return owned;
}

uint64_t standin_size(const void *p)
{
	struct alloc *a;
	uint64_t size;

	lock_state();
	a = map_find(p);
	size = a != NULL ? a->size : 0;
	leave();
	return size;
}

uint64_t standin_charge(uint64_t bytes)
{
	return charge(bytes);
}

void standin_set_fault(enum standin_fault kind, unsigned every, int error)
{
	if ((unsigned)kind >= STANDIN_FAULT_COUNT)
		return;
	st_setup();
	set_fault(kind, every, error);
}

uint64_t standin_faults(enum standin_fault kind)
{
	if ((unsigned)kind >= STANDIN_FAULT_COUNT)
		return 0;
	return faults_injected(kind);
}

void standin_set_free_keeps(int on)
{
	st_setup();
	atomic_store(&st_free_keeps, on != 0);
}

void standin_set_unloading(int on)
{
	st_setup();
	atomic_store(&st_unloading, on != 0);
}

void standin_set_free_delay_us(unsigned us)
{
	st_setup();
	atomic_store(&st_free_delay_us, us);
}

int standin_unloading(void)
{
	st_setup();
	return atomic_load_explicit(&st_unloading, memory_order_relaxed);
}

int standin_inject(enum standin_fault kind)
{
	if ((unsigned)kind >= STANDIN_FAULT_COUNT)
		return 0;
	st_setup();
	return (int)inject(kind);
}
