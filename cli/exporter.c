/* exporter.c — `gpupool exporter [--listen HOST:PORT]`: one /metrics endpoint for every gpupool
 * process of the node, in Prometheus' text format (scrape.c), over HTTP (http.c). Binds the socket
 * itself, so that it can say which port it got (port 0: any free one), then waits for SIGTERM or
 * SIGINT and stops. Reads views only: never signals a process or writes to its view. */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Above the 9100-9999 range Prometheus' default port allocations have filled (docs/USAGE.md says
 * how it was chosen). */
#define DEFAULT_PORT "10130"
#define DEFAULT_TIMEOUT_S 10u        /* a scraper sends its request at once; 10 s is lenient */
#define DEFAULT_MAX_CONNECTIONS 512u /* well under the default 1024 open files */

static int usage(void)
{
	fprintf(stderr, "usage: gpupool exporter [--listen HOST:PORT] [--timeout SECONDS] "
			"[--max-connections N]\n");
	return GP_CLI_ERROR;
}

static void help(void)
{
	printf("usage: gpupool exporter [--listen HOST:PORT] [--timeout SECONDS]\n"
	       "                        [--max-connections N]\n\n");
	gp_cli_wrap("", "Serve /metrics over HTTP in Prometheus' text format for every gpupool process "
			"this user may read (every one, as root), from their live views: read only, "
			"nothing is asked of a process. Stops on SIGTERM or SIGINT.");
	printf("  --listen HOST:PORT     where to listen (default :" DEFAULT_PORT ": every address);\n"
	       "                         [::1]:PORT: IPv6; port 0: any free one, said at start\n"
	       "  --timeout SECONDS      close a connection idle this long (default %u)\n"
	       "  --max-connections N    connections served at once; more wait (default %u)\n",
	       DEFAULT_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS);
	if (gp_cli_http_missing() != NULL)
		gp_cli_wrap("", gp_cli_http_missing());
}

/* HOST:PORT, [HOST]:PORT or :PORT into host ("" for every address) and port. 0 or -1. */
static int split_listen(const char *arg, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon, *h = arg;
	size_t n;
	long p;
	char *end;

	if (*arg == '[') {
		const char *close = strchr(arg, ']');
		if (close == NULL || close[1] != ':')
			return -1;
		h = arg + 1;
		n = (size_t)(close - h);
		colon = close + 1;
	} else {
		if ((colon = strrchr(arg, ':')) == NULL || memchr(arg, ':', (size_t)(colon - arg)))
			return -1; /* no port, or an IPv6 address without brackets */
		n = (size_t)(colon - arg);
	}
	errno = 0;
	p = strtol(colon + 1, &end, 10);
	if (colon[1] < '0' || colon[1] > '9' || *end != '\0' || errno != 0 || p > 65535 ||
	    n >= hlen || (size_t)snprintf(port, plen, "%ld", p) >= plen)
		return -1;
	memcpy(host, h, n);
	host[n] = '\0';
	return 0;
}

/* The first of host:port's addresses (of `family`) that a socket binds to and listens on: the
 * socket, or -1 with *err set. Every address (host ""): the IPv6 one accepts IPv4 too. */
static int bind_first(const char *host, const char *port, int family, int *err)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_family = family,
				  .ai_socktype = SOCK_STREAM },
			*res = NULL;
	int fd = -1, rc, one = 1, zero = 0;

	if ((rc = getaddrinfo(*host ? host : NULL, port, &hints, &res)) != 0) {
		*err = -rc; /* negative: a getaddrinfo error */
		return -1;
	}
	for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
		if ((fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol)) < 0) {
			*err = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6 && !*host)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
			*err = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	return fd;
}

/* A socket listening on host:port, or -1 after saying why. Every address: IPv6 and IPv4 at once
 * where the machine has IPv6, else IPv4 alone. */
static int listen_on(const char *arg, const char *host, const char *port)
{
	int err = 0, fd = bind_first(host, port, *host ? AF_UNSPEC : AF_INET6, &err);

	if (fd < 0 && !*host)
		fd = bind_first(host, port, AF_INET, &err);
	if (fd < 0)
		fprintf(stderr, "gpupool exporter: cannot listen on %s: %s\n", arg,
			err < 0 ? gai_strerror(-err) : strerror(err));
	return fd;
}

/* "http://ADDRESS:PORT/metrics" of the bound socket, for the start-up line. */
static void say_where(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char addr[NI_MAXHOST], port[NI_MAXSERV];
	int v6;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
	    getnameinfo((struct sockaddr *)&ss, len, addr, sizeof(addr), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
		printf("gpupool exporter: serving /metrics\n");
		return;
	}
	v6 = ss.ss_family == AF_INET6;
	printf("gpupool exporter: serving http://%s%s%s:%s/metrics (pid %ld)\n", v6 ? "[" : "", addr,
	       v6 ? "]" : "", port, (long)getpid());
}

static char *metrics(void *arg, size_t *len)
{
	return gp_cli_scrape(arg, len);
}

/* Serve until SIGTERM or SIGINT. Both are blocked before the server's thread starts (it inherits
 * the mask), so that this thread alone takes them, in sigwait: no handler runs anywhere. */
static int serve(int fd, unsigned timeout_s, unsigned max_connections)
{
	struct gp_cli_http_conf conf = { .fd = fd, .timeout_s = timeout_s,
					 .max_connections = max_connections, .metrics = metrics };
	struct gp_cli_http *http;
	sigset_t stop;
	int sig = 0;

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN); /* a client that left mid-answer is the server's to handle */
	if ((conf.arg = gp_cli_scraper_new()) == NULL) {
		close(fd);
		return GP_CLI_ERROR;
	}
	if ((http = gp_cli_http_start(&conf)) == NULL) {
		close(fd);
		gp_cli_scraper_free(conf.arg);
		return GP_CLI_ERROR;
	}
	say_where(fd);
	if (gp_cli_scraper_nvml(conf.arg) != NULL)
		printf("gpupool exporter: no device memory figures (gpupool_exporter_nvml_up 0): %s\n",
		       gp_cli_scraper_nvml(conf.arg));
	fflush(stdout);
	while (sigwait(&stop, &sig) != 0)
		;
	gp_cli_http_stop(http);
	gp_cli_scraper_free(conf.arg);
	printf("gpupool exporter: stopped (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
	return GP_CLI_OK;
}

int gp_cli_exporter(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "timeout", required_argument, NULL, 't' },
		{ "max-connections", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *listen_arg = ":" DEFAULT_PORT;
	char host[256], port[8];
	long timeout = DEFAULT_TIMEOUT_S, max_connections = DEFAULT_MAX_CONNECTIONS;
	int c, fd;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'l') {
			listen_arg = optarg;
		} else if (c == 't' || c == 'm') {
			long *v = c == 't' ? &timeout : &max_connections;
			if (gp_cli_count("gpupool exporter", c == 't' ? "--timeout" : "--max-connections",
					 optarg, v) != 0)
				return usage();
			if (*v > 100000) {
				fprintf(stderr, "gpupool exporter: %s %s: at most 100000\n",
					c == 't' ? "--timeout" : "--max-connections", optarg);
				return usage();
			}
		} else if (c == 'h') {
			help();
			return GP_CLI_OK;
		} else {
			gp_cli_bad_option("gpupool exporter", argv, c);
			return usage();
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gpupool exporter: unexpected argument: %s\n", argv[optind]);
		return usage();
	}
	if (split_listen(listen_arg, host, sizeof(host), port, sizeof(port)) != 0) {
		fprintf(stderr, "gpupool exporter: --listen %s: not HOST:PORT (a port from 0 to 65535; "
				":PORT for every address, [ADDRESS]:PORT for IPv6)\n", listen_arg);
		return usage();
	}
	if (gp_cli_http_missing() != NULL) {
		fprintf(stderr, "gpupool exporter: %s\n", gp_cli_http_missing());
		return GP_CLI_ERROR;
	}
	if ((fd = listen_on(listen_arg, host, port)) < 0)
		return GP_CLI_ERROR;
	return serve(fd, (unsigned)timeout, (unsigned)max_connections);
}
