"""torch_account.py — `gpupool stats PID`'s accounting table on a real PyTorch server.

The growing-inputs server (as bench/torch_seeds.py: 12 bf16 layers, d=2048, a forward at each
length from 256 to 8192 tokens) runs under gpupool in PyTorch's default mode and waits on stdin.
Its own figures (torch.cuda.memory_reserved(), memory_allocated()) are compared with what
`gpupool stats PID --json` says of it, and the table with NVML and nvidia-smi. Checks (PASS/FAIL/
INFO lines, exit 77 = skip):
  reserved    PyTorch's segments are among the pool's live blocks: in use >= memory_reserved()
              (the rest, INFO: libraries that call cudaMalloc themselves)
  framework   the framework-cache line = memory_reserved() - memory_allocated(), within 2 MiB
  lines       the lines and the rest add up to NVML's figure for the process, within 2 MiB
  smi         NVML's figure for the process is what nvidia-smi shows for the pid (MiB rounding)
  rest        the rest (context, libraries) is between 0 and 2 GiB, and moves by at most 2 MiB
              when the pool releases its cache and when the program takes 1 GiB more: what
              changes is counted on the lines that should change
  prometheus  `gpupool stats PID --prometheus` carries the same NVML figure
Usage: python3 torch_account.py GPUPOOL LIBGPUPOOL [--role server]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

from gpucommon import Checks, expect, server_model, smi_process_mib

MIB = 1 << 20
GIB = 1 << 30
CHECKS = Checks("gpu_torch_account")
line, check = CHECKS.line, CHECKS.check


def role_server():
    import torch
    model, _ = server_model()
    keep = []
    with torch.no_grad():
        for n in range(256, 8193, 256):
            y = model(torch.randn(1, n, 2048, device="cuda", dtype=torch.bfloat16))
            del y
        torch.cuda.synchronize()
        print("READY", flush=True)
        for cmd in sys.stdin:
            cmd = cmd.strip()
            if cmd == "torch":
                torch.cuda.synchronize()
                print(f"TORCH {torch.cuda.memory_reserved()} {torch.cuda.memory_allocated()}",
                      flush=True)
            elif cmd == "big":
                keep.append(torch.ones(GIB, dtype=torch.uint8, device="cuda"))
                torch.cuda.synchronize()
                print("BIG", flush=True)
            elif cmd == "quit":
                break


def stats(cli, pid, *args):
    r = subprocess.run([cli, "stats", str(pid), *args], capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def device0(cli, pid):
    rc, out, err = stats(cli, pid, "--json")
    if rc != 0:
        return None, f"exit {rc}: {err.strip()[:200]}"
    s = json.loads(out.strip().splitlines()[-1])
    devs = [d for d in s.get("devices", []) if d.get("device") == 0]
    return (s, devs[0]) if devs else (s, None), ""


def fresh(cli, pid, timeout=15):
    """Device 0's figures once the framework's cache was read after this call (the control
    thread reads it at most once a second, under the GIL, while the server waits on stdin)."""
    (s0, _), _ = device0(cli, pid)
    first = s0.get("framework_read_ns") if s0 else None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.25)
        got, why = device0(cli, pid)
        if got[0] is not None and got[0].get("framework_read_ns") not in (None, first):
            return got[1]
    return device0(cli, pid)[0][1]


def lines_sum(d):
    keys = ["in_use_bytes", "idle_bytes", "pending_bytes", "passed_vmm_bytes",
            "passed_async_bytes", "passed_managed_bytes", "passed_pitched_bytes",
            "passed_unpooled_bytes", "other_bytes"]
    return sum(d.get(k) or 0 for k in keys)


def mib(b):
    return f"{b / MIB:.1f} MiB" if isinstance(b, (int, float)) else str(b)


def main():
    cli, lib = sys.argv[1], sys.argv[2]
    if shutil.which("nvidia-smi") is None or \
            subprocess.run(["nvidia-smi"], capture_output=True).returncode != 0:
        print("SKIP gpu_torch_account: no nvidia-smi")
        return 77
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP gpu_torch_account: no torch")
        return 77
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUPOOL_") and k not in ("LD_PRELOAD",
                                                         "PYTORCH_NO_CUDA_MEMORY_CACHING")}
    env["LD_PRELOAD"] = lib
    a = subprocess.Popen([sys.executable, __file__, cli, lib, "--role", "server"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        return run(cli, a)
    finally:
        if a.poll() is None:
            a.stdin.write("quit\n")
            a.stdin.flush()
            try:
                a.wait(timeout=60)
            except subprocess.TimeoutExpired:
                a.kill()


def ask_torch(a):
    a.stdin.write("torch\n")
    a.stdin.flush()
    t = expect(a, "TORCH", 60)
    return (int(t[1]), int(t[2])) if t else (None, None)


def run(cli, a):
    if expect(a, "READY", 300) is None:
        check(False, "server", "the server did not start")
        return 1
    pid = a.pid
    reserved, allocated = ask_torch(a)
    d = fresh(cli, pid)
    if d is None:
        check(False, "stats", "gpupool stats --json has no device 0")
        return 1
    line("INFO", "table", json.dumps({k: v for k, v in d.items() if k.endswith("_bytes")}))
    check(reserved is not None and reserved <= d["in_use_bytes"] + 2 * MIB, "reserved",
          f"PyTorch's segments are among the pool's live blocks: pool in use "
          f"{mib(d['in_use_bytes'])}, PyTorch reserved {mib(reserved)}")
    if reserved is not None:
        line("INFO", "others", f"live blocks that are not PyTorch's segments (libraries that call "
             f"cudaMalloc themselves): {mib(d['in_use_bytes'] - reserved)}")
    fw = d.get("framework_cached_bytes")
    check(fw is not None and reserved is not None and abs(fw - (reserved - allocated)) <= 2 * MIB,
          "framework", f"framework cache line {mib(fw)}, reserved - allocated "
          f"{mib(None if reserved is None else reserved - allocated)}")
    nv = d.get("nvml_process_bytes")
    check(nv is not None and abs(lines_sum(d) - nv) <= 2 * MIB, "lines",
          f"lines and the rest {mib(lines_sum(d))}, NVML for the process {mib(nv)}")
    smi = smi_process_mib(pid)
    check(smi is not None and nv is not None and abs(smi - nv / MIB) <= 1, "smi",
          f"nvidia-smi {smi} MiB for pid {pid}, NVML {mib(nv)}")
    rest0 = d.get("other_bytes")
    check(rest0 is not None and 0 <= rest0 <= 2 * GIB, "rest",
          f"CUDA context and libraries: {mib(rest0)}")

    rc = subprocess.run([cli, "release", str(pid)], capture_output=True, text=True,
                        timeout=60).returncode
    time.sleep(0.5)
    d1 = fresh(cli, pid)
    rest1 = d1.get("other_bytes") if d1 else None
    check(rc == 0 and rest1 is not None and abs(rest1 - rest0) <= 2 * MIB, "rest after release",
          f"release exit {rc}; NVML {mib(nv)} -> {mib(d1.get('nvml_process_bytes'))}, idle "
          f"{mib(d['idle_bytes'])} -> {mib(d1.get('idle_bytes'))}, rest {mib(rest0)} -> "
          f"{mib(rest1)}")

    a.stdin.write("big\n")
    a.stdin.flush()
    expect(a, "BIG", 60)
    d2 = fresh(cli, pid)
    rest2 = d2.get("other_bytes") if d2 else None
    check(rest2 is not None and abs(rest2 - rest0) <= 2 * MIB and
          d2["in_use_bytes"] - d1["in_use_bytes"] >= GIB, "rest after 1 GiB more",
          f"in use {mib(d1['in_use_bytes'])} -> {mib(d2['in_use_bytes'])}, NVML "
          f"{mib(d1.get('nvml_process_bytes'))} -> {mib(d2.get('nvml_process_bytes'))}, rest "
          f"{mib(rest1)} -> {mib(rest2)}")

    rc, out, err = stats(cli, pid, "--prometheus")
    m = re.search(r'^gpupool_nvml_process_bytes\{[^}]*pid="%d"[^}]*device="0"[^}]*\} (\S+)' % pid,
                  out, re.M) or re.search(r'^gpupool_nvml_process_bytes\{[^}]*\} (\S+)', out, re.M)
    _, again = device0(cli, pid)[0]
    check(rc == 0 and m is not None and again is not None and
          abs(float(m.group(1)) - again["nvml_process_bytes"]) <= 2 * MIB, "prometheus",
          f"exit {rc}; gpupool_nvml_process_bytes {m.group(1) if m else 'missing'}, JSON "
          f"{mib(again['nvml_process_bytes'] if again else None)}")
    rc, text, _ = stats(cli, pid)
    for ln in text.splitlines():
        if ln.strip():
            line("INFO", "text", ln)
    return 1 if CHECKS.failures else 0


if __name__ == "__main__":
    if "--role" in sys.argv:
        sys.exit(role_server())
    sys.exit(main())
