/* nvml.c — the stand-in NVML, libnvidia-ml.so.1, for the gpupool command's tests: the few calls
 * the command makes (cli/nvml.c), answered from what each live process's stand-in driver
 * publishes in /dev/shm/standin-nvml.<pid> (driver_nvml.c, nvml_file.h). Devices: STANDIN_DEVICES
 * (default 1), named by the stand-in driver's UUIDs ("STANDIN-GPU" and the ordinal in the UUID's
 * bytes, written as NVML writes them); total = the capacity (the largest a live process has,
 * else STANDIN_CAPACITY, default 1 GiB), used = the sum over live processes, each process listed on a
 * device where it has a context, with its figure. No graphics processes. A file whose process is
 * gone is skipped and removed. Test-only; never loaded by the preloaded library. */
#define _GNU_SOURCE
#include "nvml_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB (1024ull * 1024ull)
#define SUCCESS 0
#define ERROR_UNINITIALIZED 1
#define ERROR_INVALID_ARGUMENT 2
#define ERROR_NOT_FOUND 6
#define ERROR_INSUFFICIENT_SIZE 7

/* The ABI's nvmlMemory_t and nvmlProcessInfo_v2_t (cli/nvml.c says why they are declared). */
struct memory {
	unsigned long long total, free, used;
};
struct process {
	unsigned pid;
	unsigned long long used;
	unsigned gpu_instance, compute_instance;
};

struct device {
	int index;
};

static struct device devices[STANDIN_NVML_DEVICES];
static int ndevices = -1; /* -1: not initialised */
static unsigned long long capacity_env;

static unsigned long long parse_bytes(const char *s, unsigned long long dflt)
{
	char *end = NULL;
	unsigned long long v;

	if (s == NULL || *s == '\0')
		return dflt;
	v = strtoull(s, &end, 10);
	if (end == s)
		return dflt;
	if (*end == 'K' || *end == 'k')
		v *= 1024ull;
	else if (*end == 'M' || *end == 'm')
		v *= MIB;
	else if (*end == 'G' || *end == 'g')
		v *= 1024ull * MIB;
	return v;
}

int nvmlInit_v2(void)
{
	const char *s = getenv("STANDIN_DEVICES");

	ndevices = s != NULL && *s != '\0' ? atoi(s) : 1;
	if (ndevices < 0)
		ndevices = 0;
	if (ndevices > STANDIN_NVML_DEVICES)
		ndevices = STANDIN_NVML_DEVICES;
	for (int i = 0; i < STANDIN_NVML_DEVICES; i++)
		devices[i].index = i;
	capacity_env = parse_bytes(getenv("STANDIN_CAPACITY"), 1024ull * MIB);
	return SUCCESS;
}

int nvmlShutdown(void)
{
	ndevices = -1;
	return SUCCESS;
}

const char *nvmlErrorString(int rc)
{
	switch (rc) {
	case SUCCESS: return "Success";
	case ERROR_UNINITIALIZED: return "Uninitialized";
	case ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case ERROR_NOT_FOUND: return "Not Found";
	case ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	default: return "Unknown Error";
	}
}

int nvmlDeviceGetCount_v2(unsigned *count)
{
	if (ndevices < 0)
		return ERROR_UNINITIALIZED;
	if (count == NULL)
		return ERROR_INVALID_ARGUMENT;
	*count = (unsigned)ndevices;
	return SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, struct device **dev)
{
	if (ndevices < 0)
		return ERROR_UNINITIALIZED;
	if (dev == NULL || index >= (unsigned)ndevices)
		return ERROR_INVALID_ARGUMENT;
	*dev = &devices[index];
	return SUCCESS;
}

/* The UUID the stand-in driver gives device i (cuDeviceGetUuid_v2), as NVML writes one. */
static void uuid_of(int i, char *buf, size_t len)
{
	unsigned char b[16] = "STANDIN-GPU";

	memset(b + 11, 0, 5);
	b[15] = (unsigned char)i;
	snprintf(buf, len,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
		 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
		 b[14], b[15]);
}

int nvmlDeviceGetUUID(struct device *dev, char *buf, unsigned len)
{
	char u[96];

	if (ndevices < 0)
		return ERROR_UNINITIALIZED;
	if (dev == NULL || buf == NULL)
		return ERROR_INVALID_ARGUMENT;
	uuid_of(dev->index, u, sizeof(u));
	if (len < strlen(u) + 1)
		return ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, u, strlen(u) + 1);
	return SUCCESS;
}

int nvmlDeviceGetHandleByUUID(const char *uuid, struct device **dev)
{
	char u[96];

	if (ndevices < 0)
		return ERROR_UNINITIALIZED;
	if (uuid == NULL || dev == NULL)
		return ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < ndevices; i++) {
		uuid_of(i, u, sizeof(u));
		if (strcmp(u, uuid) == 0) {
			*dev = &devices[i];
			return SUCCESS;
		}
	}
	return ERROR_NOT_FOUND;
}

/* Calls fn(file, arg) for every live process's file; a file of a process that is gone is
 * removed. */
static void each_process(void (*fn)(const struct standin_nvml_file *f, void *arg), void *arg)
{
	DIR *dir = opendir(STANDIN_NVML_DIR);
	struct dirent *e;
	size_t plen = strlen(STANDIN_NVML_PREFIX);

	if (dir == NULL)
		return;
	while ((e = readdir(dir)) != NULL) {
		char path[300];
		long pid;
		struct stat sb;
		void *p;
		int fd;

		if (strncmp(e->d_name, STANDIN_NVML_PREFIX, plen) != 0)
			continue;
		pid = strtol(e->d_name + plen, NULL, 10);
		snprintf(path, sizeof(path), "%s/%s", STANDIN_NVML_DIR, e->d_name);
		if (pid <= 0)
			continue;
		if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
			unlink(path);
			continue;
		}
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < sizeof(struct standin_nvml_file)) {
			close(fd);
			continue;
		}
		p = mmap(NULL, sizeof(struct standin_nvml_file), PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (p == MAP_FAILED)
			continue;
		if (atomic_load(&((struct standin_nvml_file *)p)->magic) == STANDIN_NVML_MAGIC &&
		    ((struct standin_nvml_file *)p)->pid == pid)
			fn(p, arg);
		munmap(p, sizeof(struct standin_nvml_file));
	}
	closedir(dir);
}

struct sum {
	int index;
	unsigned long long used, capacity;
};

static void add_used(const struct standin_nvml_file *f, void *arg)
{
	struct sum *s = arg;
	unsigned long long c;

	if ((uint64_t)s->index >= f->ndevices)
		return;
	s->used += atomic_load_explicit(&f->used[s->index], memory_order_relaxed);
	c = atomic_load_explicit(&f->capacity[s->index], memory_order_relaxed);
	if (c > s->capacity) /* processes may differ (STANDIN_CAPACITY): the largest */
		s->capacity = c;
}

int nvmlDeviceGetMemoryInfo(struct device *dev, struct memory *m)
{
	struct sum s = { 0, 0, 0 };

	if (ndevices < 0)
		return ERROR_UNINITIALIZED;
	if (dev == NULL || m == NULL)
		return ERROR_INVALID_ARGUMENT;
	s.index = dev->index;
	each_process(add_used, &s);
	m->total = s.capacity != 0 ? s.capacity : capacity_env;
	m->used = s.used;
	m->free = m->total > m->used ? m->total - m->used : 0;
	return SUCCESS;
}

struct listing {
	int index;
	unsigned room, count;
	struct process *out;
};

static void add_process(const struct standin_nvml_file *f, void *arg)
{
	struct listing *l = arg;

	if ((uint64_t)l->index >= f->ndevices ||
	    atomic_load_explicit(&f->contexts[l->index], memory_order_relaxed) == 0)
		return;
	if (l->count < l->room) {
		l->out[l->count].pid = (unsigned)f->pid;
		l->out[l->count].used = atomic_load_explicit(&f->used[l->index],
							     memory_order_relaxed);
		l->out[l->count].gpu_instance = 0xffffffffu; /* no MIG */
		l->out[l->count].compute_instance = 0xffffffffu;
	}
	l->count++;
}

/* As NVML: *count in, the room; out, how many there are (INSUFFICIENT_SIZE when more than the
 * room, infos then unspecified). */
int nvmlDeviceGetComputeRunningProcesses_v3(struct device *dev, unsigned *count,
					     struct process *infos)
{
	struct listing l;

	if (ndevices < 0)
		return ERROR_UNINITIALIZED;
	if (dev == NULL || count == NULL || (*count != 0 && infos == NULL))
		return ERROR_INVALID_ARGUMENT;
	l.index = dev->index;
	l.room = *count;
	l.count = 0;
	l.out = infos;
	each_process(add_process, &l);
	*count = l.count;
	return l.count > l.room ? ERROR_INSUFFICIENT_SIZE : SUCCESS;
}

int nvmlDeviceGetGraphicsRunningProcesses_v3(struct device *dev, unsigned *count,
					      struct process *infos)
{
	(void)infos;
	if (ndevices < 0)
		return ERROR_UNINITIALIZED;
	if (dev == NULL || count == NULL)
		return ERROR_INVALID_ARGUMENT;
	*count = 0;
	return SUCCESS;
}
