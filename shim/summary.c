/* summary.c — at exit: the statistics as text, one log line per line of the rendering (so each
 * keeps the `gpupool: ` prefix), and as JSON into the file the user named. Called once, from the
 * exit handler; allocates its buffers then (the program is ending; nothing else is in the way).
 * Never calls CUDA: it reads a snapshot already taken. */
#define _GNU_SOURCE
#include "summary.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef size_t (*render_fn)(const struct gp_stats_snapshot *s, char *buf, size_t len);

/* The rendering in a malloc'd buffer, or NULL. */
static char *render(render_fn fn, const struct gp_stats_snapshot *s, size_t *len)
{
	size_t cap = 16384, n;
	char *buf = malloc(cap);

	if (buf == NULL)
		return NULL;
	n = fn(s, buf, cap);
	if (n >= cap) {
		char *bigger = realloc(buf, n + 1);
		if (bigger == NULL) {
			free(buf);
			return NULL;
		}
		buf = bigger;
		fn(s, buf, n + 1);
	}
	*len = n;
	return buf;
}

static void log_text(const struct gp_stats_snapshot *s)
{
	size_t len;
	char *text = render(gp_stats_text, s, &len), *line, *save = NULL;

	if (text == NULL)
		return;
	gp_log(GP_LOG_INFO, "statistics at exit:");
	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
		gp_log(GP_LOG_INFO, "  %s", line);
	free(text);
}

static void write_json(const struct gp_stats_snapshot *s, const char *path)
{
	size_t len, done = 0;
	char *json = render(gp_stats_json, s, &len);
	int fd = -1, err = ENOMEM;

	if (json == NULL)
		goto out;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		err = errno;
		goto out;
	}
	while (done < len) {
		ssize_t w = write(fd, json + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			err = w < 0 ? errno : EIO;
			goto out;
		}
		done += (size_t)w;
	}
	err = 0;
out:
	if (fd >= 0 && close(fd) != 0 && err == 0)
		err = errno;
	if (err != 0)
		gp_log(GP_LOG_ERROR, "GPUPOOL_STATS_FILE: cannot write %s: %s", path, strerror(err));
	free(json);
}

void gp_summary_write(const struct gp_stats_snapshot *s, const char *json_path)
{
	if (gp_log_enabled(GP_LOG_INFO))
		log_text(s);
	if (json_path != NULL)
		write_json(s, json_path);
}
