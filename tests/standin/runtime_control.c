/* runtime_control.c — the control API of standin.h, exported by the stand-in runtime too so that
 * programs and Python tests that load only libcudart.so.13 can use it: each function forwards to
 * its twin in the libcuda.so.1 the runtime loaded (found with dlsym in that handle: these are no
 * driver entry points). Without the driver they do nothing and read zeros. */
#define _GNU_SOURCE
#include "runtime.h"

#include <dlfcn.h>
#include <string.h>

#include "standin.h"

static struct {
	void (*get)(int, struct standin_counters *);
	void (*set_capacity)(int, uint64_t);
	void (*set_manual_events)(int);
	void (*complete_events)(void);
	void (*set_launch_delay_us)(unsigned);
	uint64_t (*device_busy)(int);
	void (*hold_event_records)(int);
	int (*held_event_records)(void);
	int (*owns)(const void *);
	uint64_t (*size)(const void *);
	uint64_t (*charge)(uint64_t);
	void (*set_fault)(enum standin_fault, unsigned, int);
	uint64_t (*faults)(enum standin_fault);
	void (*set_free_keeps)(int);
	void (*set_unloading)(int);
	void (*set_free_delay_us)(unsigned);
	int (*unloading)(void);
	int (*inject)(enum standin_fault);
	int (*vmm_mapped)(const void *, uint64_t *, uint64_t *, uint64_t *);
	uint64_t (*vmm_handles)(int);
} ctl;

static void find(void *h, const char *name, void *slot)
{
	void *sym = dlsym(h, name);

	memcpy(slot, &sym, sizeof(sym)); /* dlsym's object pointer to a function pointer */
}

void ctl_resolve(void *h)
{
	find(h, "standin_get", &ctl.get);
	find(h, "standin_set_capacity", &ctl.set_capacity);
	find(h, "standin_set_manual_events", &ctl.set_manual_events);
	find(h, "standin_complete_events", &ctl.complete_events);
	find(h, "standin_set_launch_delay_us", &ctl.set_launch_delay_us);
	find(h, "standin_device_busy", &ctl.device_busy);
	find(h, "standin_hold_event_records", &ctl.hold_event_records);
	find(h, "standin_held_event_records", &ctl.held_event_records);
	find(h, "standin_owns", &ctl.owns);
	find(h, "standin_size", &ctl.size);
	find(h, "standin_charge", &ctl.charge);
	find(h, "standin_set_fault", &ctl.set_fault);
	find(h, "standin_faults", &ctl.faults);
	find(h, "standin_set_free_keeps", &ctl.set_free_keeps);
	find(h, "standin_set_unloading", &ctl.set_unloading);
	find(h, "standin_set_free_delay_us", &ctl.set_free_delay_us);
	find(h, "standin_unloading", &ctl.unloading);
	find(h, "standin_inject", &ctl.inject);
	find(h, "standin_vmm_mapped", &ctl.vmm_mapped);
	find(h, "standin_vmm_handles", &ctl.vmm_handles);
}

int ctl_unloading(void)
{
	return ctl.unloading != NULL && ctl.unloading();
}

int ctl_inject(int kind)
{
	return ctl.inject != NULL ? ctl.inject((enum standin_fault)kind) : 0;
}

/* ---- the forwarders: the runtime is loaded (and so the driver) by the first of them ---- */

void standin_get(int device, struct standin_counters *out)
{
	(void)ready();
	if (ctl.get != NULL)
		ctl.get(device, out);
	else
		memset(out, 0, sizeof(*out));
}

void standin_set_capacity(int device, uint64_t bytes)
{
	(void)ready();
	if (ctl.set_capacity != NULL)
		ctl.set_capacity(device, bytes);
}

void standin_set_manual_events(int on)
{
	(void)ready();
	if (ctl.set_manual_events != NULL)
		ctl.set_manual_events(on);
}

void standin_complete_events(void)
{
	(void)ready();
	if (ctl.complete_events != NULL)
		ctl.complete_events();
}

void standin_set_launch_delay_us(unsigned us)
{
	(void)ready();
	if (ctl.set_launch_delay_us != NULL)
		ctl.set_launch_delay_us(us);
}

uint64_t standin_device_busy(int device)
{
	(void)ready();
	return ctl.device_busy != NULL ? ctl.device_busy(device) : 0;
}

void standin_hold_event_records(int on)
{
	(void)ready();
	if (ctl.hold_event_records != NULL)
		ctl.hold_event_records(on);
}

int standin_held_event_records(void)
{
	(void)ready();
	return ctl.held_event_records != NULL ? ctl.held_event_records() : 0;
}

int standin_owns(const void *p)
{
	(void)ready();
	return ctl.owns != NULL ? ctl.owns(p) : 0;
}

uint64_t standin_size(const void *p)
{
	(void)ready();
	return ctl.size != NULL ? ctl.size(p) : 0;
}

uint64_t standin_charge(uint64_t bytes)
{
	(void)ready();
	return ctl.charge != NULL ? ctl.charge(bytes) : 0;
}

void standin_set_fault(enum standin_fault kind, unsigned every, int error)
{
	(void)ready();
	if (ctl.set_fault != NULL)
		ctl.set_fault(kind, every, error);
}

uint64_t standin_faults(enum standin_fault kind)
{
	(void)ready();
	return ctl.faults != NULL ? ctl.faults(kind) : 0;
}

void standin_set_free_keeps(int on)
{
	(void)ready();
	if (ctl.set_free_keeps != NULL)
		ctl.set_free_keeps(on);
}

void standin_set_unloading(int on)
{
	(void)ready();
	if (ctl.set_unloading != NULL)
		ctl.set_unloading(on);
}

void standin_set_free_delay_us(unsigned us)
{
	(void)ready();
	if (ctl.set_free_delay_us != NULL)
		ctl.set_free_delay_us(us);
}

int standin_vmm_mapped(const void *p, uint64_t *range_start, uint64_t *range_size,
		       uint64_t *handle_bytes)
{
	(void)ready();
	return ctl.vmm_mapped != NULL ? ctl.vmm_mapped(p, range_start, range_size, handle_bytes) : 0;
}

uint64_t standin_vmm_handles(int device)
{
	(void)ready();
	return ctl.vmm_handles != NULL ? ctl.vmm_handles(device) : 0;
}
