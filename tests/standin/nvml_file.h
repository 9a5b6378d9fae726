/* nvml_file.h — what the stand-in driver (driver_nvml.c) publishes of its process for the
 * stand-in NVML (nvml.c, libnvidia-ml.so.1, loaded by another process): one small shared file per
 * process, /dev/shm/standin-nvml.<pid>, whose words the driver stores and NVML loads one by one
 * (each figure is one 64-bit word: no lock, no torn value). Test-only. */
#ifndef STANDIN_NVML_FILE_H
#define STANDIN_NVML_FILE_H

#include <stdatomic.h>
#include <stdint.h>

#define STANDIN_NVML_DIR "/dev/shm"
#define STANDIN_NVML_PREFIX "standin-nvml."
#define STANDIN_NVML_MAGIC 0x4c4d564e4e545350ULL /* "PSTNNVML" read as a little-endian word */
#define STANDIN_NVML_DEVICES 8                    /* STANDIN_MAX_DEVICES */

struct standin_nvml_file {
	_Atomic uint64_t magic; /* stored last, once the rest is set */
	int64_t pid;
	uint64_t ndevices;
	_Atomic uint64_t capacity[STANDIN_NVML_DEVICES]; /* bytes, each device's */
	/* Bytes the process holds on each device, as NVML's per-process figure: what the driver
	 * charges its allocations (cuMemAlloc*, VMM handles, managed, pitched, async) plus
	 * STANDIN_CONTEXT_BYTES while it has a context there. */
	_Atomic uint64_t used[STANDIN_NVML_DEVICES];
	/* 1 while the process has a context on the device (NVML lists it there), else 0. */
	_Atomic uint64_t contexts[STANDIN_NVML_DEVICES];
};

#endif
