/* http_none.c — the exporter's HTTP server in a build without GNU libmicrohttpd: there is none,
 * and `gpupool exporter` says so (the configure step said so too; GPUPOOL_EXPORTER in
 * cli/CMakeLists.txt). */
#include "cli.h"

#include <stdio.h>

const char *gp_cli_http_missing(void)
{
	return "this gpupool was built without GNU libmicrohttpd (libmicrohttpd-dev missing at build "
	       "time, or -DGPUPOOL_EXPORTER=OFF): rebuild with it to serve /metrics";
}

struct gp_cli_http *gp_cli_http_start(const struct gp_cli_http_conf *c)
{
	(void)c;
	fprintf(stderr, "gpupool exporter: %s\n", gp_cli_http_missing());
	return NULL;
}

void gp_cli_http_stop(struct gp_cli_http *h)
{
	(void)h;
}
