"""torch_suspend.py — `gpupool suspend` / `gpupool resume` on a real PyTorch server (two processes).

A: an idle server with growing inputs (as bench/torch_seeds.py) under gpupool, PyTorch in its default mode (12 bf16 layers,
d=2048, a forward at each length from 256 to 8192 tokens, then waiting on stdin). Device memory
is read from outside with nvidia-smi. Four cycles, alternating: a bare checkpoint
(`suspend --no-release`) and one with the release first (`suspend`); before each, A runs the
sweep again so its caches are full. Checks (PASS/FAIL/INFO/BENCH lines, exit 77 = skip):
  suspend   exits 0; the device memory A held is gone (nvidia-smi, within its context's floor)
  second    meanwhile another process allocates the freed memory in 1 GiB tensors, and frees it
  resume    exits 0; A holds device memory again
  outputs   after resume, A's next forward is bitwise equal to the one before the suspend
  errors    a process that is not a CUDA process: exit 3 (and what the driver said, INFO)
BENCH lines: suspend and resume times and the bytes parked, with and without the release (the
target, reported not asserted: the release-first suspend at least 2x faster and parking at least
2x fewer bytes).
Usage: python3 torch_suspend.py GPUPOOL LIBGPUPOOL [--role server|taker]
"""
import json
import os
import shutil
import subprocess
import sys
import time

from gpucommon import Checks, expect, server_model, smi_used_mib

GIB = 1 << 30
MIB = 1 << 20
CHECKS = Checks("gpu_torch_suspend")
line, check = CHECKS.line, CHECKS.check


def role_server():
    import torch
    model, probe = server_model()

    def sweep():
        for n in range(256, 8193, 256):
            y = model(torch.randn(1, n, 2048, device="cuda", dtype=torch.bfloat16))
            del y
        torch.cuda.synchronize()

    with torch.no_grad():
        ref = model(probe).clone()
        sweep()
        print("READY", flush=True)
        for cmd in sys.stdin:
            cmd = cmd.strip()
            if cmd == "warm":
                sweep()
                print("WARM", flush=True)
            elif cmd == "forward":
                same = torch.equal(model(probe), ref)
                print(f"FORWARD {'equal' if same else 'DIFFERENT'}", flush=True)
            elif cmd == "quit":
                break


def role_taker():
    import torch
    tensors = []
    while True:
        try:
            tensors.append(torch.empty(GIB, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            break
    print(f"TAKEN {len(tensors)}", flush=True)
    del tensors
    torch.cuda.empty_cache()


def cli_json(cli, *args):
    t0 = time.perf_counter()
    r = subprocess.run([cli, *args, "--json"], capture_output=True, text=True, timeout=300)
    wall = (time.perf_counter() - t0) * 1e3
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
    except ValueError:
        out = {}
    return r.returncode, out, wall, r.stdout + r.stderr


def main():
    cli, lib = sys.argv[1], sys.argv[2]
    if shutil.which("nvidia-smi") is None or \
            subprocess.run(["nvidia-smi"], capture_output=True).returncode != 0:
        print("SKIP gpu_torch_suspend: no nvidia-smi")
        return 77
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP gpu_torch_suspend: no torch")
        return 77
    base = smi_used_mib()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUPOOL_") and k not in ("LD_PRELOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING")}
    env["LD_PRELOAD"] = lib
    a = subprocess.Popen([sys.executable, __file__, cli, lib, "--role", "server"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    if expect(a, "READY") is None:
        check(False, "server", "A did not start")
        return 1
    pid = str(a.pid)
    figures = {"bare": [], "release": []}
    for cycle, mode in enumerate(["bare", "release", "bare", "release"]):
        a.stdin.write("warm\n")
        a.stdin.flush()
        expect(a, "WARM")
        held = smi_used_mib() - base
        args = ["suspend", pid] + (["--no-release"] if mode == "bare" else [])
        rc, s, wall, text = cli_json(cli, *args)
        suspended = smi_used_mib() - base
        check(rc == 0 and s.get("released_first") == (mode == "release"), f"suspend {mode} #{cycle}",
              f"exit {rc}; A held {held} MiB, {suspended} MiB while suspended; "
              f"{wall:.0f} ms; {text.strip()[:300]}")
        check(suspended <= 64, f"suspend {mode} #{cycle} frees",
              f"A's device memory while suspended: {suspended} MiB (nvidia-smi, beyond the rest)")
        b = subprocess.Popen([sys.executable, __file__, cli, lib, "--role", "taker"],
                             stdout=subprocess.PIPE, text=True)
        got = expect(b, "TAKEN")
        b.wait(timeout=120)
        taken = int(got[1]) if got else 0
        check(taken * GIB >= (held - 1024) * MIB, f"second #{cycle}",
              f"another process took {taken} GiB while A was suspended (A had held {held} MiB)")
        rc2, r, wall2, text2 = cli_json(cli, "resume", pid)
        back = smi_used_mib() - base
        check(rc2 == 0 and back > 0, f"resume {mode} #{cycle}",
              f"exit {rc2}; A holds {back} MiB again; {wall2:.0f} ms; {text2.strip()[:300]}")
        a.stdin.write("forward\n")
        a.stdin.flush()
        fw = expect(a, "FORWARD", 120)
        check(fw is not None and fw[1] == "equal", f"outputs {mode} #{cycle}",
              f"A's next forward after resume: {fw[1] if fw else 'no answer'}")
        figures[mode].append({
            "held_mib": held, "suspend_ms": wall, "resume_ms": wall2,
            "release_ms": s.get("release_ms"), "lock_ms": s.get("lock_ms"),
            "checkpoint_ms": s.get("checkpoint_ms"), "restore_ms": r.get("restore_ms"),
            "unlock_ms": r.get("unlock_ms"), "parked": s.get("parked_bytes"),
            "rss_growth": (s.get("resident_bytes_after") or 0) - (s.get("resident_bytes_before") or 0),
        })
    a.stdin.write("quit\n")
    a.stdin.flush()
    a.wait(timeout=60)
    sleeper = subprocess.Popen(["sleep", "30"])
    r = subprocess.run([cli, "suspend", str(sleeper.pid)], capture_output=True, text=True)
    sleeper.kill()
    check(r.returncode == 3, "errors", f"suspend of sleep: exit {r.returncode}: {r.stderr.strip()}")
    for mode, runs in figures.items():
        for f in runs:
            print(f"BENCH suspend {mode} " + json.dumps(f), flush=True)

    def mean(mode, key):
        vals = [f[key] for f in figures[mode] if f.get(key) is not None]
        return sum(vals) / len(vals) if vals else float("nan")
    ts = mean("bare", "suspend_ms") / mean("release", "suspend_ms")
    pk = mean("bare", "parked") / max(1, mean("release", "parked"))
    line("INFO", "target", f"release first: suspend {ts:.2f}x faster, {pk:.2f}x fewer bytes parked "
         f"(target: 2x and 2x)")
    return 1 if CHECKS.failures else 0


if __name__ == "__main__":
    if "--role" in sys.argv:
        role = sys.argv[sys.argv.index("--role") + 1]
        sys.exit(role_server() if role == "server" else role_taker())
    sys.exit(main())
