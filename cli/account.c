/* account.c — NVML's figures into the snapshots the command read (stats.h's GP_STATS_NVML rows):
 * each device of a view is found in NVML by its UUID (the view carries it as NVML writes it),
 * and the process's own figure there closes the accounting (gp_stats_account: the rest is the
 * CUDA context and the libraries). The preloaded library never loads NVML; this command does,
 * once per call. What cannot be known stays GP_STATS_UNKNOWN and is said on stderr when asked. */
#include "cli.h"
#include "nvml.h"

#include <stdio.h>
#include <string.h>

static void fill_device(struct gp_nvml *nv, long pid, struct gp_stats_device *d, int say)
{
	struct gp_nvml_device nd;
	uint64_t used = 0;
	int rc;

	if (d->uuid[0] == '\0') {
		if (say)
			fprintf(stderr, "gpupool stats: process %ld, device %llu: no UUID in its view; "
					"NVML's figures unknown\n",
				pid, (unsigned long long)d->device);
		goto out;
	}
	rc = gp_nvml_device_by_uuid(nv, d->uuid, &nd);
	if (rc != GP_NVML_OK) {
		if (say)
			fprintf(stderr, "gpupool stats: process %ld, device %llu: NVML does not know "
					"%s (%s)\n",
				pid, (unsigned long long)d->device, d->uuid, gp_nvml_error(nv, rc));
		goto out;
	}
	d->nvml_used_bytes = nd.used_bytes;
	d->nvml_total_bytes = nd.total_bytes;
	rc = gp_nvml_process_used(nv, nd.index, pid, &used);
	if (rc == GP_NVML_OK && used != GP_NVML_UNKNOWN)
		d->nvml_process_bytes = used;
	else if (say)
		fprintf(stderr, "gpupool stats: process %ld, device %llu: %s\n", pid,
			(unsigned long long)d->device,
			rc == GP_NVML_NOT_FOUND ? "NVML does not list the process there (another pid "
						  "namespace?): its figure is unknown"
			: rc == GP_NVML_OK      ? "NVML lists the process without a figure"
						: gp_nvml_error(nv, rc));
out:
	gp_stats_account(d);
}

void gp_cli_account(struct gp_stats_snapshot *s, size_t n, int say)
{
	char why[256];
	struct gp_nvml *nv = NULL;

	for (size_t i = 0; i < n && nv == NULL; i++)
		if (s[i].ndev > 0)
			nv = gp_nvml_open(why, sizeof(why));
	if (nv == NULL) {
		for (size_t i = 0; i < n; i++)
			if (s[i].ndev > 0 && say) {
				fprintf(stderr, "gpupool stats: %s; the accounting's rest (CUDA context, "
						"libraries) is unknown\n", why);
				break;
			}
		return; /* the NVML rows stay unknown, as the view has them */
	}
	for (size_t i = 0; i < n; i++)
		for (uint64_t d = 0; d < s[i].ndev && d < GP_STATS_MAX_DEVICES; d++)
			fill_device(nv, (long)s[i].pid, &s[i].dev[d], say);
	gp_nvml_close(nv);
}
