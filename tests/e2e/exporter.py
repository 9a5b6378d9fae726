#!/usr/bin/python3
"""exporter.py: `gpupool exporter` against live programs under the shim, on a loopback port.

Proves: curl's /metrics parses with prometheus_client's own text parser and with the project's
strict validator (formatcheck); each of two programs' series show its exact bytes in use and
idle (as `gpupool stats --json` gives them), its program name and container in
gpupool_process_info, its device's UUID in gpupool_device_info, its accounting lines (the view's
as stats --json gives them, NVML's filled in by the exporter and adding up); the node's figures
(processes, NVML's device memory through the stand-in NVML, up, scrapes, duration) are there;
scraping asks nothing of a program (no release ever runs); an exporter of another user sees none
of root's processes (their views counted denied; run as root with setpriv, else skipped); HEAD
is answered without a body, another method gets 405 with Allow, another path 404; a client that
sends half a request is closed after --timeout while others are answered; 200 connections at
once are all answered; behind --max-connections, idle connections wait their turn and a scrape
after them is answered; a program that exits drops out of the next scrape; a stale view is
skipped and left in place; without NVML, gpupool_exporter_nvml_up is 0, no NVML figure is made
up, and the start-up line says why; a port in use and a bad --listen are refused; SIGTERM and
SIGINT stop it (exit 0).

Usage: exporter.py <gpupool> <e2e_cli> <formatcheck> <stand-in lib dir> [sanitizer runtime]
Run by a python3 that has prometheus_client (Debian's python3-prometheus-client).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from prometheus_client.parser import text_string_to_metric_families

CLI, PROG, FORMATCHECK, STANDIN = sys.argv[1:5]
SANITIZER = sys.argv[5] if len(sys.argv) > 5 else ""
SCALE = int(os.environ.get("GPUPOOL_TEST_TIME_SCALE", "1") or "1")
STANDIN_UUID = "GPU-5354414e-4449-4e2d-4750-550000000000"
CURL = os.environ.get("E2E_CURL") or "curl"
CONTEXT_BYTES = 100 << 20  # what the stand-in NVML counts for each holder's context
# The accounting lines the shim fills in the view (stats.h, GP_STATS_ACCOUNT), and those the
# exporter fills from NVML (GP_STATS_NVML).
ACCOUNT = ("framework_cached_bytes", "passed_vmm_bytes", "passed_async_bytes",
           "passed_managed_bytes", "passed_pitched_bytes", "passed_unpooled_bytes")
children = []


def fail(msg):
    print("FAIL e2e_exporter: " + msg, file=sys.stderr)
    for p in children:
        if p.poll() is None:
            p.kill()
    sys.exit(1)


def ok(msg):
    print("ok   " + msg, flush=True)


def env(nvml=True, preload=True):
    e = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
    e.pop("STANDIN_CAPACITY", None)
    e.pop("STANDIN_DEVICES", None)
    e["LD_PRELOAD"] = SANITIZER if preload else ""
    e["LD_LIBRARY_PATH"] = STANDIN if nvml else ""
    return e


def cli(*args, check=True):
    r = subprocess.run([CLI, *args], env=env(nvml=False), capture_output=True, text=True,
                       timeout=30 * SCALE)
    if check and r.returncode != 0:
        fail(f"gpupool {' '.join(args)} exited {r.returncode}: {r.stderr}")
    return r


def stats(pid):
    return json.loads(cli("stats", str(pid), "--json").stdout)


def hold(path, mib):
    """A program under the shim holding 2 blocks of mib MiB and 2 cached; returns (process, pid)."""
    e = env(nvml=False)
    e["STANDIN_CONTEXT_BYTES"] = str(CONTEXT_BYTES)
    p = subprocess.Popen([CLI, "run", "--", path, "--hold", str(120 * SCALE), str(mib)],
                         env=e, stdout=subprocess.DEVNULL)
    children.append(p)
    for _ in range(1000):  # until its view shows the two frees
        r = cli("stats", str(p.pid), "--json", check=False)
        if r.returncode == 0 and [d["frees"] for d in json.loads(r.stdout)["devices"]] == [2]:
            return p, p.pid
        time.sleep(0.01 * SCALE)
    fail(f"{path}: no live view /dev/shm/gpupool.{p.pid} with its frees within {10 * SCALE} s")


def exporter(*args, nvml=True, prefix=()):
    """Start `gpupool exporter ARGS` (after `prefix`); returns (process, port, first line)."""
    p = subprocess.Popen([*prefix, CLI, "exporter", *args], env=env(nvml=nvml),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    children.append(p)
    line = p.stdout.readline()
    m = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", line)
    if not m:
        fail(f"gpupool exporter {' '.join(args)} did not say where it serves: {line!r} "
             f"(exit {p.poll()})")
    return p, int(m.group(1)), line


def curl(port, path="/metrics", *extra):
    """(status, headers, body) of curl against the exporter."""
    with tempfile.NamedTemporaryFile() as h, tempfile.NamedTemporaryFile() as b:
        r = subprocess.run([CURL, "-s", "--max-time", str(10 * SCALE), "-D", h.name,
                            "-o", b.name, "-w", "%{http_code}", *extra,
                            f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"curl {path} {' '.join(extra)} failed (exit {r.returncode}): {r.stderr}")
        return int(r.stdout), open(h.name).read(), open(b.name, "rb").read().decode()


def raw(port, request):
    """Everything the exporter sends back to `request` until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30 * SCALE) as s:
        s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                return data
            data += chunk


def scrape(port):
    """The samples of one scrape: {(name, frozenset(labels)): value}, and the raw text."""
    status, headers, text = curl(port)
    if status != 200 or "text/plain; version=0.0.4" not in headers:
        fail(f"/metrics answered {status} with headers {headers!r}")
    check = subprocess.run([FORMATCHECK, "prometheus"], input=text, capture_output=True,
                           text=True)
    if check.returncode != 0:
        fail(f"/metrics is not valid exposition format: {check.stdout}{check.stderr}\n{text}")
    samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, text


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def series_of(samples, pid):
    return [k for k in samples if ("pid", str(pid)) in k[1]]


def info(samples, name, pid):
    rows = [dict(k[1]) for k in samples if k[0] == name and ("pid", str(pid)) in k[1]]
    if len(rows) != 1:
        fail(f"{name} has {len(rows)} rows for pid {pid}")
    return rows[0]


def main():
    workdir = tempfile.mkdtemp(prefix="gpupool-exporter-")
    other = os.path.join(workdir, "holder-b")  # another program name for the same program
    os.symlink(os.path.abspath(PROG), other)

    a, pid_a = hold(PROG, 2)
    b, pid_b = hold(other, 6)
    timeout = 2 * SCALE
    exp, port, first = exporter("--listen", "127.0.0.1:0", "--timeout", str(timeout))
    ok(f"exporter on 127.0.0.1:{port}, {pid_a} (e2e_cli) and {pid_b} (holder-b) under the shim")

    # The figures, against gpupool stats --json.
    samples, text = scrape(port)
    for pid, prog, mib in ((pid_a, "e2e_cli", 2), (pid_b, "holder-b", 6)):
        j = stats(pid)
        dev = j["devices"][0]
        for fig in ("in_use_bytes", "idle_bytes", "pending_bytes", "allocs", "frees"):
            name = "gpupool_" + fig + ("_total" if fig in ("allocs", "frees") else "")
            got = value(samples, name, pid=str(pid), device="0")
            if got != dev[fig]:
                fail(f"{name}{{pid={pid}}} is {got}, gpupool stats --json says {dev[fig]}")
        if dev["in_use_bytes"] < 2 * mib << 20 or dev["idle_bytes"] < 2 * mib << 20:
            fail(f"pid {pid} holds {dev['in_use_bytes']} B in use, {dev['idle_bytes']} B idle: "
                 f"less than its two {mib} MiB blocks each")
        pinfo = info(samples, "gpupool_process_info", pid)
        if pinfo["program"] != prog or not re.fullmatch(r"([0-9a-f]{64})?", pinfo["container"]):
            fail(f"gpupool_process_info of {pid}: {pinfo}")
        dinfo = info(samples, "gpupool_device_info", pid)
        if dinfo != {"pid": str(pid), "device": "0", "uuid": STANDIN_UUID}:
            fail(f"gpupool_device_info of {pid}: {dinfo}")
        ok(f"pid {pid}: in use {dev['in_use_bytes']} B, idle {dev['idle_bytes']} B as stats "
           f"--json says; program {prog}, container {pinfo['container'] or '(none)'}, "
           f"device 0 {dinfo['uuid']}")
    if value(samples, "gpupool_in_use_bytes", pid=str(pid_a), device="0") == \
            value(samples, "gpupool_in_use_bytes", pid=str(pid_b), device="0"):
        fail("the two programs show the same bytes in use: their series cannot be told apart")

    pids = {dict(k[1])["pid"] for k in samples if k[0] == "gpupool_process_info"}
    if value(samples, "gpupool_processes") != len(pids) or len(pids) < 2:
        fail(f"gpupool_processes is {value(samples, 'gpupool_processes')}, "
             f"gpupool_process_info has {len(pids)} pids")
    if value(samples, "gpupool_up") != 1 or value(samples, "gpupool_exporter_nvml_up") != 1:
        fail("gpupool_up or gpupool_exporter_nvml_up is not 1")
    used = value(samples, "gpupool_gpu_memory_used_bytes", gpu="0", uuid=STANDIN_UUID)
    total = value(samples, "gpupool_gpu_memory_total_bytes", gpu="0", uuid=STANDIN_UUID)
    ours = sum(value(samples, f, pid=str(p), device="0") for p in (pid_a, pid_b)
               for f in ("gpupool_in_use_bytes", "gpupool_idle_bytes"))
    if used is None or total is None or used < ours or total <= 0:
        fail(f"NVML's device 0: used {used}, total {total}; the two programs hold {ours} B")
    if not value(samples, "gpupool_exporter_scrape_duration_seconds") > 0 or \
            value(samples, "gpupool_exporter_build_info", version=value_label(samples)) != 1:
        fail("no scrape duration or build info")
    scrapes = value(samples, "gpupool_exporter_scrapes_total")
    for state in ("read", "gone", "stale", "denied", "bad", "untrusted", "busy", "error"):
        if value(samples, "gpupool_exporter_views", state=state) is None:
            fail(f"gpupool_exporter_views has no state {state}")
    ok(f"node: {len(pids)} processes, up 1, NVML used {int(used)} of {int(total)} B on "
       f"{STANDIN_UUID}, scrape {value(samples, 'gpupool_exporter_scrape_duration_seconds')} s")
    check_accounting(samples, pid_a)

    # HTTP: HEAD, other methods, other paths; the scrape counter moves.
    head = raw(port, b"HEAD /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    headers, _, body = head.partition(b"\r\n\r\n")
    if not headers.startswith(b"HTTP/1.1 200") or body != b"" or b"version=0.0.4" not in headers:
        fail(f"HEAD /metrics: {head[:300]!r}")
    status, headers, _ = curl(port, "/metrics", "-X", "POST", "-d", "x=1")
    if status != 405 or not re.search(r"(?im)^Allow: GET, HEAD\r?$", headers):
        fail(f"POST /metrics: {status}, headers {headers!r}")
    for path in ("/nope", "/metrics/x", "/metricsx"):
        status, _, _ = curl(port, path)
        if status != 404:
            fail(f"GET {path}: {status}, not 404")
    samples, _ = scrape(port)
    if value(samples, "gpupool_exporter_scrapes_total") < scrapes + 2:
        fail("gpupool_exporter_scrapes_total did not count the scrapes")
    ok("HEAD 200 without a body; POST 405 with Allow: GET, HEAD; other paths 404")

    # A slow client: half a request, held open; others are answered meanwhile, and it is closed
    # after --timeout.
    slow = socket.create_connection(("127.0.0.1", port), timeout=timeout + 10 * SCALE)
    slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    start = time.monotonic()
    scrape(port)
    try:
        got = slow.recv(65536)
    except socket.timeout:
        got = None
    waited = time.monotonic() - start
    slow.close()
    if got != b"" or waited < timeout * 0.5 or waited > timeout + 10 * SCALE:
        fail(f"the half request got {got!r:.60} after {waited:.2f} s (--timeout {timeout}; None: "
             f"still open)")
    ok(f"a half request was closed after {waited:.2f} s (--timeout {timeout}); a scrape "
       f"meanwhile was answered")

    # 200 connections at once, every one answered.
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30 * SCALE)
             for _ in range(200)]
    for s in socks:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    answered = 0
    for s in socks:
        data = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        s.close()
        answered += data.startswith(b"HTTP/1.1 200") and b"\ngpupool_up 1\n" in data
    if answered != 200:
        fail(f"{answered} of 200 connections at once were answered")
    scrape(port)
    ok("200 connections at once: all 200 answered, and the next scrape too")

    # Scraping asked nothing of the programs: no release ran in either.
    for pid in (pid_a, pid_b):
        if stats(pid)["release_count"] != 0:
            fail(f"pid {pid} made a release while scraped")
    ok("the programs were asked for nothing (no release ran)")

    # Another user's exporter sees none of them: their views are denied to it (counted, and a
    # scrape error), as root it saw them all.
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv:
        other_exp, other_port, _ = exporter("--listen", "127.0.0.1:0", prefix=(
            setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"))
        samples, _ = scrape(other_port)
        if series_of(samples, pid_a) or series_of(samples, pid_b) or \
                value(samples, "gpupool_exporter_views", state="denied") < 2 or \
                value(samples, "gpupool_exporter_scrape_errors_total") < 1:
            fail(f"an exporter of uid 65534: series of {pid_a} {len(series_of(samples, pid_a))}, "
                 f"denied {value(samples, 'gpupool_exporter_views', state='denied')}, errors "
                 f"{value(samples, 'gpupool_exporter_scrape_errors_total')}")
        other_exp.send_signal(signal.SIGTERM)
        other_exp.communicate(timeout=10 * SCALE)
        ok("an exporter of another user (uid 65534) shows none of root's processes: their views "
           "are counted denied, a scrape error")
    else:
        print("skip another user's exporter: not root, or no setpriv", flush=True)

    # A program that exits drops out; a killed one leaves a stale view, skipped and kept.
    a.send_signal(signal.SIGTERM)
    a.wait(timeout=30 * SCALE)
    samples, _ = scrape(port)
    if series_of(samples, pid_a) or not series_of(samples, pid_b):
        fail(f"after {pid_a} exited: its series {len(series_of(samples, pid_a))}, "
             f"{pid_b}'s {len(series_of(samples, pid_b))}")
    ok(f"pid {pid_a} exited: none of its series in the next scrape; {pid_b}'s still there")
    b.kill()
    b.wait(timeout=30 * SCALE)
    view = f"/dev/shm/gpupool.{pid_b}"
    if not os.path.exists(view):
        fail("a killed program left no view to be stale")
    samples, _ = scrape(port)
    if series_of(samples, pid_b) or value(samples, "gpupool_exporter_views", state="stale") < 1:
        fail(f"the stale view of {pid_b}: series {len(series_of(samples, pid_b))}, stale "
             f"{value(samples, 'gpupool_exporter_views', state='stale')}")
    if not os.path.exists(view):
        fail("the exporter removed a stale view: it must only read")
    cli("stats", str(pid_b), check=False)  # its owner's command removes it
    ok(f"pid {pid_b} killed: its stale view skipped (state stale), left in place")

    # A port in use, a bad --listen.
    r = subprocess.run([CLI, "exporter", "--listen", f"127.0.0.1:{port}"], env=env(),
                       capture_output=True, text=True, timeout=30 * SCALE)
    if r.returncode != 1 or "Address already in use" not in r.stderr:
        fail(f"a second exporter on port {port}: exit {r.returncode}, {r.stderr!r}")
    for bad in ("10130", "host:", "[::1:5", "::1:5", "h:65536", "h:-1"):
        r = subprocess.run([CLI, "exporter", "--listen", bad], env=env(), capture_output=True,
                           text=True, timeout=30 * SCALE)
        if r.returncode != 1 or f"--listen {bad}: not HOST:PORT" not in r.stderr:
            fail(f"--listen {bad}: exit {r.returncode}, {r.stderr!r}")
    ok("a port in use and a bad --listen are refused (exit 1)")

    # SIGTERM stops it.
    exp.send_signal(signal.SIGTERM)
    rest = exp.communicate(timeout=10 * SCALE)[0]
    if exp.returncode != 0 or "stopped (SIGTERM)" not in rest:
        fail(f"after SIGTERM: exit {exp.returncode}, {rest!r}")
    ok("SIGTERM: stopped, exit 0")

    # Without NVML; a connection limit; SIGINT.
    limit_timeout = SCALE
    exp, port, first = exporter("--listen", "127.0.0.1:0", "--max-connections", "4", "--timeout",
                                str(limit_timeout), nvml=False)
    rest_line = exp.stdout.readline()
    samples, _ = scrape(port)
    if value(samples, "gpupool_exporter_nvml_up") != 0 or \
            any(k[0].startswith(("gpupool_gpu_memory", "gpupool_nvml_", "gpupool_other_bytes"))
                for k in samples) or \
            "no device memory figures" not in rest_line:
        fail(f"without NVML: nvml_up {value(samples, 'gpupool_exporter_nvml_up')}, "
             f"start-up: {rest_line!r}")
    ok(f"without NVML: nvml_up 0, no device figures, and said at start: {rest_line.strip()}")
    # 12 idle connections against a limit of 4: the rest wait unaccepted, each batch of 4 is
    # closed after --timeout, and a scrape behind them is answered once they are gone.
    held = [socket.create_connection(("127.0.0.1", port), timeout=30 * SCALE) for _ in range(12)]
    start = time.monotonic()
    status, _, body = curl(port, "/metrics", "--max-time", str(60 * SCALE))
    waited = time.monotonic() - start
    closed = 0
    for s in held:
        s.settimeout(0.01)
        try:
            closed += s.recv(1) == b""
        except (socket.timeout, BlockingIOError):
            pass
        except ConnectionResetError:
            closed += 1
        s.close()
    if status != 200 or "gpupool_up 1" not in body or waited < 0.5 * limit_timeout or closed < 8:
        fail(f"--max-connections 4 with 12 idle connections: the scrape got {status} after "
             f"{waited:.2f} s; {closed} of them were closed by the exporter")
    ok(f"--max-connections 4, 12 idle connections: a scrape behind them answered after "
       f"{waited:.2f} s, once the exporter had closed {closed} idle ones (--timeout "
       f"{limit_timeout})")
    exp.send_signal(signal.SIGINT)
    rest = exp.communicate(timeout=10 * SCALE)[0]
    if exp.returncode != 0 or "stopped (SIGINT)" not in rest:
        fail(f"after SIGINT: exit {exp.returncode}, {rest!r}")
    ok("SIGINT: stopped, exit 0")
    os.unlink(other)
    os.rmdir(workdir)
    print("PASS e2e_exporter")


def value_label(samples):
    for k in samples:
        if k[0] == "gpupool_exporter_build_info":
            return dict(k[1])["version"]
    fail("no gpupool_exporter_build_info")


def check_accounting(samples, pid):
    """Every accounting line of the view is in the scrape as gpupool stats --json gives it, and
    the NVML lines the exporter fills add up: NVML's figure for the process is its pool's bytes,
    the lines passed through and its context (the stand-in's STANDIN_CONTEXT_BYTES), the rest."""
    dev = stats(pid)["devices"][0]
    for line in ACCOUNT:
        got = value(samples, "gpupool_" + line, pid=str(pid), device="0")
        if line not in dev or got != dev[line]:
            fail(f"gpupool_{line}{{pid={pid}}} is {got}, gpupool stats --json says "
                 f"{dev.get(line, '(missing)')}")
    nvml = value(samples, "gpupool_nvml_process_bytes", pid=str(pid), device="0")
    other = value(samples, "gpupool_other_bytes", pid=str(pid), device="0")
    pooled = sum(dev[f] for f in ("in_use_bytes", "idle_bytes", "pending_bytes"))
    passed = sum(dev[f] for f in ACCOUNT if f.startswith("passed_"))
    if nvml != pooled + passed + CONTEXT_BYTES or other != CONTEXT_BYTES:
        fail(f"pid {pid}: NVML's figure {nvml} B, the rest {other} B; the pool holds {pooled} B, "
             f"{passed} B passed through, the context {CONTEXT_BYTES} B")
    for line in ("nvml_used_bytes", "nvml_total_bytes"):
        if value(samples, "gpupool_" + line, pid=str(pid), device="0") != \
                value(samples, "gpupool_gpu_memory_" + line[5:], gpu="0", uuid=STANDIN_UUID):
            fail(f"gpupool_{line} of {pid} is not the device's gpupool_gpu_memory_{line[5:]}")
    ok(f"pid {pid}: the accounting lines as stats --json gives them; NVML's {int(nvml)} B = "
       f"pool {pooled} + passed {passed} + the rest {int(other)} (its context)")


if __name__ == "__main__":
    try:
        main()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
