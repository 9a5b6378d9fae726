/* http.c — the exporter's HTTP server, on GNU libmicrohttpd: GET and HEAD of /metrics (and of /,
 * which points there), 404 for any other path, 405 with Allow for any other method. One thread
 * polls every connection (epoll): a slow or silent client holds a socket, never a thread, until
 * the idle timeout closes it; past the connection limit new ones wait, unaccepted, their turn.
 * Linked by the gpupool command only, never by libgpupool.so. */
#define _GNU_SOURCE
#include "cli.h"

#include <microhttpd.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8" /* the exposition format */
#define TEXT_TYPE "text/plain; charset=utf-8"
#define ALLOWED "GET, HEAD"

struct gp_cli_http {
	struct MHD_Daemon *daemon;
	struct gp_cli_http_conf conf;
};

static const char index_page[] = "gpupool exporter: the metrics are at /metrics\n";
static const char not_found[] = "not found: the metrics are at /metrics\n";
static const char not_allowed[] = "method not allowed: GET or HEAD\n";
static const char no_memory[] = "out of memory: the scrape could not be rendered\n";

const char *gp_cli_http_missing(void)
{
	return NULL;
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, struct MHD_Response *r,
				const char *type)
{
	enum MHD_Result rc;

	if (r == NULL)
		return MHD_NO; /* out of memory: MHD closes the connection */
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, ALLOWED);
	rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static struct MHD_Response *constant(const char *text)
{
	return MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
}

/* MHD calls this once when a request's headers are in, then again for each part of its body and
 * once at its end. A request of another method is refused at once (MHD then closes the
 * connection, whose body it did not read); GET and HEAD are answered at their second call, once
 * the request is whole, so that the connection stays open for the next scrape. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **req_cls)
{
	static int headers_seen;
	const struct gp_cli_http *h = cls;
	struct MHD_Response *r;
	char *body;
	size_t len;

	(void)version;
	(void)upload;
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return answer(c, MHD_HTTP_METHOD_NOT_ALLOWED, constant(not_allowed), TEXT_TYPE);
	if (*req_cls == NULL) {
		*req_cls = &headers_seen;
		return MHD_YES;
	}
	if (*upload_size != 0) {
		*upload_size = 0; /* a body sent with GET is read and ignored */
		return MHD_YES;
	}
	if (strcmp(url, "/") == 0)
		return answer(c, MHD_HTTP_OK, constant(index_page), TEXT_TYPE);
	if (strcmp(url, "/metrics") != 0)
		return answer(c, MHD_HTTP_NOT_FOUND, constant(not_found), TEXT_TYPE);
	if ((body = h->conf.metrics(h->conf.arg, &len)) == NULL)
		return answer(c, MHD_HTTP_INTERNAL_SERVER_ERROR, constant(no_memory), TEXT_TYPE);
	if ((r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE)) == NULL)
		free(body);
	return answer(c, MHD_HTTP_OK, r, METRICS_TYPE);
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	fputs("gpupool exporter: ", stderr);
	vfprintf(stderr, fmt, ap);
	if (*fmt == '\0' || fmt[strlen(fmt) - 1] != '\n')
		fputc('\n', stderr);
}

struct gp_cli_http *gp_cli_http_start(const struct gp_cli_http_conf *conf)
{
	struct gp_cli_http *h = calloc(1, sizeof(*h));

	if (h == NULL) {
		fprintf(stderr, "gpupool exporter: out of memory\n");
		return NULL;
	}
	h->conf = *conf;
	/* MHD_USE_AUTO picks epoll on Linux; the one internal thread serves every connection. */
	h->daemon = MHD_start_daemon(
		MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, h,
		MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL, /* first: it applies from here on */
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)conf->fd, MHD_OPTION_CONNECTION_TIMEOUT,
		conf->timeout_s, MHD_OPTION_CONNECTION_LIMIT, conf->max_connections, MHD_OPTION_END);
	if (h->daemon == NULL) {
		fprintf(stderr, "gpupool exporter: the HTTP server (libmicrohttpd) did not start\n");
		free(h);
		return NULL;
	}
	return h;
}

void gp_cli_http_stop(struct gp_cli_http *h)
{
	if (h == NULL)
		return;
	MHD_stop_daemon(h->daemon); /* closes the listening socket too */
	free(h);
}
