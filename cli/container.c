/* container.c — the container a process runs in, as its cgroup path names it (/proc/PID/cgroup):
 * the 64-hex ID that Docker, containerd (Kubernetes' CRI), CRI-O and Podman put there. Reads /proc
 * only. A process outside any container, or one whose path this reader's cgroup namespace hides
 * (a reader in a container of its own without the host's cgroup namespace), has none: "". */
#define _GNU_SOURCE
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hex64(const char *p, size_t n)
{
	if (n != GP_CLI_CONTAINER_ID_LEN)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return 0;
	return 1;
}

/* One component of a cgroup path: the ID itself (cgroupfs driver: /docker/ID,
 * /kubepods/burstable/podUID/ID), or a systemd scope named after it (docker-ID.scope,
 * cri-containerd-ID.scope, crio-ID.scope, libpod-ID.scope). A conmon scope is Podman's and CRI-O's
 * monitor beside the container, not the container. */
static const char *component_id(const char *c, size_t n)
{
	const char *dash;

	if (hex64(c, n))
		return c;
	if (n < 6 || memcmp(c + n - 6, ".scope", 6) != 0 || memmem(c, n, "conmon-", 7) != NULL)
		return NULL;
	n -= 6;
	dash = memrchr(c, '-', n);
	return dash != NULL && hex64(dash + 1, (size_t)(c + n - (dash + 1))) ? dash + 1 : NULL;
}

int gp_cli_container_parse(const char *cgroup, char out[GP_CLI_CONTAINER_ID_LEN + 1])
{
	const char *line = cgroup;

	out[0] = '\0';
	while (line != NULL && *line != '\0') {
		const char *end = strchr(line, '\n'), *path, *found = NULL;

		if (end == NULL)
			end = line + strlen(line);
		/* hierarchy-ID:controllers:path; the innermost component that names an ID wins. */
		path = memchr(line, ':', (size_t)(end - line));
		path = path ? memchr(path + 1, ':', (size_t)(end - path - 1)) : NULL;
		for (const char *c = path ? path + 1 : end; c < end;) {
			const char *slash = memchr(c, '/', (size_t)(end - c)), *id;
			size_t n = (size_t)((slash ? slash : end) - c);

			if ((id = component_id(c, n)) != NULL)
				found = id;
			c += n + 1;
		}
		if (found != NULL) {
			memcpy(out, found, GP_CLI_CONTAINER_ID_LEN);
			out[GP_CLI_CONTAINER_ID_LEN] = '\0';
			return 0;
		}
		line = *end ? end + 1 : end;
	}
	return -1;
}

void gp_cli_container(long pid, char out[GP_CLI_CONTAINER_ID_LEN + 1])
{
	char path[64], text[8192];
	size_t got = 0;
	FILE *f;

	out[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%ld/cgroup", pid);
	if ((f = fopen(path, "re")) == NULL)
		return;
	got = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[got] = '\0';
	gp_cli_container_parse(text, out);
}

const char **gp_cli_containers(const struct gp_stats_snapshot *s, size_t n)
{
	/* One block: the n pointers, then the n IDs they point to. */
	const char **ids = malloc(n * (sizeof(char *) + GP_CLI_CONTAINER_ID_LEN + 1) + 1);
	char *text = (char *)(ids + n);

	if (ids == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++, text += GP_CLI_CONTAINER_ID_LEN + 1) {
		gp_cli_container((long)s[i].pid, text);
		ids[i] = text;
	}
	return ids;
}
