/* test_container.c — the container a process runs in, as cli/container.c reads it from a cgroup
 * path: each runtime's way of naming the container (Docker with either cgroup driver, containerd
 * under Kubernetes, CRI-O, Podman), and the paths that name none (the host, a conmon monitor,
 * IDs of another length or case). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli.h"

#define ID "3f4b1c2d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809"

static const char *parse(const char *cgroup)
{
	static char out[GP_CLI_CONTAINER_ID_LEN + 1];

	memset(out, 'x', sizeof(out));
	if (gp_cli_container_parse(cgroup, out) != 0)
		assert_string_equal(out, "");
	return out;
}

/* Proves: every runtime's path gives the container's ID, whichever line and component holds it. */
static void test_runtimes(void **state)
{
	(void)state;
	/* Docker, cgroupfs driver, cgroup v1 (one line per hierarchy). */
	assert_string_equal(parse("12:pids:/docker/" ID "\n11:memory:/docker/" ID "\n0::/\n"), ID);
	/* Docker, systemd driver, cgroup v2. */
	assert_string_equal(parse("0::/system.slice/docker-" ID ".scope\n"), ID);
	/* containerd under Kubernetes, cgroupfs and systemd drivers. */
	assert_string_equal(parse("0::/kubepods/burstable/pod0f1e2d3c-aaaa-bbbb-cccc-000011112222/" ID),
			    ID);
	assert_string_equal(parse("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
				  "pod0f1e2d3c_aaaa_bbbb_cccc_000011112222.slice/cri-containerd-" ID
				  ".scope\n"),
			    ID);
	/* CRI-O. */
	assert_string_equal(parse("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
				  "pod1.slice/crio-" ID ".scope\n"),
			    ID);
	/* Podman, rootless, cgroup v2: the scope is not the innermost component. */
	assert_string_equal(parse("0::/user.slice/user-1000.slice/user@1000.service/user.slice/"
				  "libpod-" ID ".scope/container\n"),
			    ID);
	/* A v1 line without the ID before one with it. */
	assert_string_equal(parse("4:memory:/\n3:cpu:/docker/" ID "\n"), ID);
}

/* Proves: paths that name no container give "": the host's, a conmon monitor's (beside the
 * container, not in it), a 32-character name, 63 or 65 characters, upper case, no path at all. */
static void test_none(void **state)
{
	(void)state;
	assert_string_equal(parse("0::/\n"), "");
	assert_string_equal(parse("0::/user.slice/user-1000.slice/session-3.scope\n"), "");
	assert_string_equal(parse("0::/machine.slice/libpod-conmon-" ID ".scope\n"), "");
	assert_string_equal(parse("4:memory:/process_api/d49bf64b635b4257be0910e5cc3247ad\n"), "");
	assert_string_equal(parse("0::/docker/" ID "0\n"), "");
	assert_string_equal(parse("0::/docker-3f4b1c2d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d"
				  "6e7f80.scope\n"),
			    "");
	assert_string_equal(parse("0::/docker/3F4B1C2D5E6F708192A3B4C5D6E7F8091A2B3C4D5E6F708192A3B4C5"
				  "D6E7F809\n"),
			    "");
	assert_string_equal(parse(""), "");
	assert_string_equal(parse("garbage without colons " ID "\n"), "");
}

/* Proves: a live process's own file is read (this one's: an ID, or "" outside a container), and
 * a process that does not exist has none. */
static void test_proc(void **state)
{
	char got[GP_CLI_CONTAINER_ID_LEN + 1], want[GP_CLI_CONTAINER_ID_LEN + 1], text[8192];
	FILE *f = fopen("/proc/self/cgroup", "r");
	size_t n;

	(void)state;
	assert_non_null(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	gp_cli_container_parse(text, want);
	gp_cli_container((long)getpid(), got);
	assert_string_equal(got, want);
	gp_cli_container(999999999L, got);
	assert_string_equal(got, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runtimes),
		cmocka_unit_test(test_none),
		cmocka_unit_test(test_proc),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
