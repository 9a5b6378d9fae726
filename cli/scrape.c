/* scrape.c — one scrape of the node for `gpupool exporter`: every live view in /dev/shm this user
 * may read (every one, as root) in Prometheus' text format (stats/prom.c), with each process's
 * NVML lines filled in, each device's memory (NVML, when it loads: nvml.c) and the exporter's own
 * figures. Read-only: a stale view is skipped and left in place (its owner's `gpupool stats`
 * removes it), and no process is signalled or asked for anything. */
#define _GNU_SOURCE
#include "cli.h"
#include "nvml.h"
#include "view.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* What reading a view gave (enum gp_stats_view_rc, in its order): gpupool_exporter_views' state. */
static const char *const view_states[] = {
	"read", "gone", "denied", "bad", "busy", "stale", "untrusted", "error",
};
#define NSTATES (sizeof(view_states) / sizeof(view_states[0]))
_Static_assert(GP_VIEW_OK == 0 && GP_VIEW_NONE == 1 && GP_VIEW_DENIED == 2 && GP_VIEW_BAD == 3 &&
		       GP_VIEW_BUSY == 4 && GP_VIEW_STALE == 5 && GP_VIEW_FORGED == 6 &&
		       GP_VIEW_ERROR == 7,
	       "view_states follows enum gp_stats_view_rc");

#define MAX_GPUS 64      /* NVML devices shown; a node has 8 or 16 */
#define MAX_LISTED 4096  /* processes NVML lists on one device, read at most */

struct gp_cli_scraper {
	pthread_mutex_t lock; /* held through a scrape: one at a time */
	uint64_t scrapes;     /* scrapes answered so far; under lock */
	uint64_t errors;      /* of those, scrapes that could not read everything; under lock */
	struct gp_nvml *nvml; /* loaded once, at the start; NULL: not here (nvml_why says why) */
	char nvml_why[256];
	struct gp_nvml_device gpu[MAX_GPUS]; /* this scrape's devices (ngpu of them); under lock */
	unsigned ngpu;
	struct gp_nvml_process listed[MAX_LISTED]; /* one device's processes, this scrape; under lock */
	/* Kept from scrape to scrape, grown as needed (under lock): allocated afresh, these large
	 * buffers would be mapped, faulted in and unmapped at every scrape. */
	struct gp_stats_snapshot *snaps; /* the views read */
	size_t snaps_cap;                /* entries */
	char *text;                      /* the processes' families */
	size_t text_cap;                 /* bytes */
};

struct gp_cli_scraper *gp_cli_scraper_new(void)
{
	struct gp_cli_scraper *sc = calloc(1, sizeof(*sc));

	if (sc == NULL)
		return NULL;
	pthread_mutex_init(&sc->lock, NULL);
	sc->nvml = gp_nvml_open(sc->nvml_why, sizeof(sc->nvml_why));
	return sc;
}

const char *gp_cli_scraper_nvml(const struct gp_cli_scraper *sc)
{
	return sc->nvml != NULL ? NULL : sc->nvml_why;
}

void gp_cli_scraper_free(struct gp_cli_scraper *sc)
{
	if (sc == NULL)
		return;
	gp_nvml_close(sc->nvml);
	pthread_mutex_destroy(&sc->lock);
	free(sc->snaps);
	free(sc->text);
	free(sc);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Room for n snapshots in sc->snaps; 0, or -1 when out of memory. */
static int snaps_room(struct gp_cli_scraper *sc, size_t n)
{
	struct gp_stats_snapshot *more;

	if (n <= sc->snaps_cap)
		return 0;
	if ((more = realloc(sc->snaps, n * sizeof(*more))) == NULL)
		return -1;
	sc->snaps = more;
	sc->snaps_cap = n;
	return 0;
}

/* The processes' own families (stats/prom.c) in sc->text: their length, -1 out of memory. */
static long processes(struct gp_cli_scraper *sc, const struct gp_stats_snapshot *s, size_t n)
{
	const char **containers = gp_cli_containers(s, n);
	size_t need = gp_stats_prometheus(s, n, containers, sc->text, sc->text_cap);

	if (need >= sc->text_cap) {
		char *bigger = realloc(sc->text, need + need / 4 + 1);

		if (bigger == NULL) {
			free(containers);
			return -1;
		}
		sc->text = bigger;
		sc->text_cap = need + need / 4 + 1;
		gp_stats_prometheus(s, n, containers, sc->text, sc->text_cap);
	}
	free(containers);
	return (long)need;
}

static void node(FILE *f, int up, size_t got, size_t suspended, const size_t *views)
{
	family(f, "gpupool_up", "gauge",
	       "Whether the exporter could list the live views in " GP_STATS_VIEW_DIR " (1) or not (0).");
	fprintf(f, "gpupool_up %d\n", up);
	family(f, "gpupool_processes", "gauge",
	       "Processes under gpupool whose live view the exporter read at this scrape.");
	fprintf(f, "gpupool_processes %zu\n", got);
	family(f, "gpupool_processes_suspended", "gauge",
	       "Of those, processes suspended by gpupool suspend.");
	fprintf(f, "gpupool_processes_suspended %zu\n", suspended);
	family(f, "gpupool_exporter_views", "gauge",
	       "Live views found at this scrape, by what reading them gave: read; gone (the process "
	       "exited meanwhile); stale (it exited without removing it: skipped, left in place); "
	       "denied (another user's: run as that user or root); bad (another gpupool version); "
	       "untrusted (its owner is not the process's); busy (never settled); error.");
	for (size_t i = 0; i < NSTATES; i++)
		fprintf(f, "gpupool_exporter_views{state=\"%s\"} %zu\n", view_states[i], views[i]);
}

/* The NVML lines of every device of the n processes (GP_STATS_NVML) that is NVML's device `g`
 * (by UUID), from its process list `p`; gp_stats_account then gives other_bytes. A process NVML
 * does not list there (in another pid namespace than the exporter) keeps its own figure unknown.
 * The rows `gpupool stats` fills (gp_cli_account), filled for many processes at once: NVML stays
 * open between scrapes (its initialisation is not something to pay at each one), and each
 * device's process list is read once per scrape, not once per process. */
static void fill(const struct gp_nvml_device *g, const struct gp_nvml_process *p, size_t np,
		 struct gp_stats_snapshot *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		for (uint64_t d = 0; d < s[i].ndev && d < GP_STATS_MAX_DEVICES; d++) {
			struct gp_stats_device *dev = &s[i].dev[d];

			if (dev->uuid[0] == '\0' || strcmp(dev->uuid, g->uuid) != 0)
				continue;
			dev->nvml_used_bytes = g->used_bytes;
			dev->nvml_total_bytes = g->total_bytes;
			for (size_t k = 0; k < np; k++)
				if (p[k].pid == s[i].pid && p[k].used_bytes != GP_NVML_UNKNOWN)
					dev->nvml_process_bytes = p[k].used_bytes;
			gp_stats_account(dev);
		}
	}
}

/* NVML's devices into sc->gpu, and their figures into the n processes' views (fill): one process
 * list per device. 1, or 0 when NVML is here and failed (a scrape error). */
static int query_nvml(struct gp_cli_scraper *sc, struct gp_stats_snapshot *s, size_t n)
{
	unsigned count = 0;

	sc->ngpu = 0;
	if (sc->nvml == NULL)
		return 1;
	if (gp_nvml_count(sc->nvml, &count) != GP_NVML_OK)
		return 0;
	for (unsigned i = 0; i < count && i < MAX_GPUS; i++) {
		struct gp_nvml_device *g = &sc->gpu[i];
		size_t listed = 0;

		if (gp_nvml_device(sc->nvml, i, g) != GP_NVML_OK ||
		    gp_nvml_processes(sc->nvml, i, sc->listed, MAX_LISTED, &listed) != GP_NVML_OK)
			return 0;
		for (char *p = g->uuid; *p; p++) /* a label value: no quote, backslash or newline */
			if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
			      (*p >= 'A' && *p <= 'Z') || *p == '-'))
				*p = '?';
		sc->ngpu++;
		fill(g, sc->listed, listed < MAX_LISTED ? listed : MAX_LISTED, s, n);
	}
	return 1;
}

/* Each device's memory as NVML saw it at this scrape (every process's, the driver's included). */
static void gpus(FILE *f, const struct gp_cli_scraper *sc, int ok)
{
	family(f, "gpupool_exporter_nvml_up", "gauge",
	       "Whether NVML (libnvidia-ml.so.1) loaded and answered at this scrape (1) or not (0: "
	       "no device memory figures; the exporter said why at start).");
	fprintf(f, "gpupool_exporter_nvml_up %d\n", ok && sc->nvml != NULL);
	family(f, "gpupool_gpu_memory_total_bytes", "gauge",
	       "A device's memory as NVML gives it; gpu is NVML's index (CUDA's may differ: join on "
	       "uuid).");
	for (unsigned i = 0; ok && i < sc->ngpu; i++)
		fprintf(f, "gpupool_gpu_memory_total_bytes{gpu=\"%u\",uuid=\"%s\"} %llu\n",
			sc->gpu[i].index, sc->gpu[i].uuid, (unsigned long long)sc->gpu[i].total_bytes);
	family(f, "gpupool_gpu_memory_used_bytes", "gauge",
	       "A device's memory in use as NVML gives it: every process's and the driver's.");
	for (unsigned i = 0; ok && i < sc->ngpu; i++)
		fprintf(f, "gpupool_gpu_memory_used_bytes{gpu=\"%u\",uuid=\"%s\"} %llu\n",
			sc->gpu[i].index, sc->gpu[i].uuid, (unsigned long long)sc->gpu[i].used_bytes);
}

static void self(FILE *f, const struct gp_cli_scraper *sc, uint64_t took_ns)
{
	family(f, "gpupool_exporter_scrapes_total", "counter", "Scrapes answered since start.");
	fprintf(f, "gpupool_exporter_scrapes_total %llu\n", (unsigned long long)sc->scrapes);
	family(f, "gpupool_exporter_scrape_errors_total", "counter",
	       "Scrapes that could not read everything: the live views could not be listed, a view "
	       "that was not stale or gone could not be read (gpupool_exporter_views says why), or "
	       "NVML, loaded, failed.");
	fprintf(f, "gpupool_exporter_scrape_errors_total %llu\n", (unsigned long long)sc->errors);
	family(f, "gpupool_exporter_scrape_duration_seconds", "gauge",
	       "How long this scrape took to read the views and render them.");
	fprintf(f, "gpupool_exporter_scrape_duration_seconds %.6f\n", (double)took_ns / 1e9);
	family(f, "gpupool_exporter_build_info", "gauge", "The exporter's version (always 1).");
	fprintf(f, "gpupool_exporter_build_info{version=\"%s\"} 1\n", GP_CLI_VERSION);
}

char *gp_cli_scrape(struct gp_cli_scraper *sc, size_t *len)
{
	uint64_t start = mono_ns();
	struct gp_stats_snapshot *s;
	size_t n = 0, got = 0, suspended = 0, views[NSTATES] = { 0 };
	char *body = NULL, path[64];
	long *pids = NULL, plen;
	FILE *f;
	int up, nvml_ok;

	*len = 0;
	pthread_mutex_lock(&sc->lock);
	pids = gp_cli_list(&n);
	up = access(GP_STATS_VIEW_DIR, R_OK | X_OK) == 0;
	if (snaps_room(sc, n) != 0)
		goto out;
	s = sc->snaps;
	for (size_t i = 0; i < n; i++) {
		int rc;

		gp_stats_view_path(pids[i], path, sizeof(path));
		rc = gp_stats_view_read(path, &s[got]);
		views[rc >= 0 && (size_t)rc < NSTATES ? (size_t)rc : GP_VIEW_ERROR]++;
		if (rc == GP_VIEW_OK)
			suspended += s[got++].suspended_since_ns != 0;
	}
	nvml_ok = query_nvml(sc, s, got);
	if ((plen = processes(sc, s, got)) < 0 || (f = open_memstream(&body, len)) == NULL)
		goto out;
	node(f, up, got, suspended, views);
	gpus(f, sc, nvml_ok);
	fwrite(sc->text, 1, (size_t)plen, f);
	sc->scrapes++;
	if (!up || !nvml_ok ||
	    views[GP_VIEW_DENIED] + views[GP_VIEW_BAD] + views[GP_VIEW_BUSY] + views[GP_VIEW_FORGED] +
			    views[GP_VIEW_ERROR] > 0)
		sc->errors++;
	self(f, sc, mono_ns() - start);
	if (fclose(f) != 0) {
		free(body);
		body = NULL;
		*len = 0;
	}
out:
	pthread_mutex_unlock(&sc->lock);
	free(pids);
	return body;
}
