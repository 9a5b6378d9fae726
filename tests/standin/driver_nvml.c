/* driver_nvml.c — what the stand-in NVML (nvml.c) needs of this process: after every call that
 * took the driver's lock (leave), each device's charged bytes plus a fixed amount for the
 * context (STANDIN_CONTEXT_BYTES, default 300 MiB, on each device where the process has a
 * context: its primary context retained, or one of its own) go into /dev/shm/standin-nvml.<pid>
 * (nvml_file.h), made at the first context and removed at exit. A checkpointed process holds
 * nothing there (its context neither), as with the real driver. A forked child never writes its
 * parent's file. Test-only. */
#define _GNU_SOURCE
#include "driver.h"
#include "nvml_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Under st.lock. */
static struct {
	struct standin_nvml_file *file;
	pid_t owner; /* the process that made it */
	char path[64];
	uint64_t context_bytes;
	int failed; /* could not be made: not tried again */
} nv;

static void remove_file(void)
{
	if (nv.file != NULL && getpid() == nv.owner)
		unlink(nv.path);
}

static uint64_t context_bytes(void)
{
	const char *s = getenv("STANDIN_CONTEXT_BYTES");
	char *end = NULL;
	unsigned long long v;

	if (s == NULL || *s == '\0')
		return 300 * MIB;
	v = strtoull(s, &end, 10);
	if (end == s)
		return 300 * MIB;
	if (*end == 'M' || *end == 'm')
		v *= MIB;
	else if (*end == 'K' || *end == 'k')
		v *= 1024u;
	return v;
}

static int make_file(void)
{
	int fd;
	void *p;

	nv.context_bytes = context_bytes();
	snprintf(nv.path, sizeof(nv.path), STANDIN_NVML_DIR "/" STANDIN_NVML_PREFIX "%ld",
		 (long)getpid());
	unlink(nv.path); /* an earlier process of the same pid (exec) */
	fd = open(nv.path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, sizeof(*nv.file)) != 0) {
		close(fd);
		unlink(nv.path);
		return -1;
	}
	p = mmap(NULL, sizeof(*nv.file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		unlink(nv.path);
		return -1;
	}
	nv.file = p;
	nv.owner = getpid();
	nv.file->pid = (int64_t)nv.owner;
	nv.file->ndevices = (uint64_t)st.ndevices;
	atexit(remove_file);
	atomic_store(&nv.file->magic, STANDIN_NVML_MAGIC); /* last: a reader skips it until then */
	return 0;
}

void nvml_publish(void)
{
	int d, any = 0;

	for (d = 0; d < st.ndevices; d++)
		any |= st.dev[d].ctx.retained > 0 || st.dev[d].user_contexts > 0;
	if (nv.file == NULL && (!any || nv.failed || make_file() != 0)) {
		nv.failed |= any;
		return;
	}
	if (getpid() != nv.owner)
		return;
	for (d = 0; d < st.ndevices; d++) {
		const struct device *v = &st.dev[d];
		int ctx = !st.checkpointed && (v->ctx.retained > 0 || v->user_contexts > 0);

		atomic_store_explicit(&nv.file->capacity[d], v->capacity, memory_order_relaxed);
		atomic_store_explicit(&nv.file->used[d], v->used + (ctx ? nv.context_bytes : 0),
				      memory_order_relaxed);
		atomic_store_explicit(&nv.file->contexts[d], (uint64_t)ctx, memory_order_relaxed);
	}
}
