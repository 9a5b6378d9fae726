"""torch_autosuspend.py — GPUPOOL_AUTO_SUSPEND on a real PyTorch server (two processes).

A: the growing-inputs server (as bench/torch_seeds.py: 12 bf16 layers, d=2048, a forward at each
length from 256 to 8192 tokens), under gpupool with GPUPOOL_AUTO_SUSPEND=2s, optionally holding
extra live weights (--weights-gib N) and with GPUPOOL_VMM=on (--vmm). A watchdog thread polls a
CUDA event every 5 ms, as PyTorch's NCCL watchdog does. Checks (PASS/FAIL/INFO/BENCH lines, exit
77 = skip), for each of two cycles (AUTOSUSPEND_CYCLES):
  suspends    A suspends itself (gpupool stats: suspended by itself) while its watchdog polls
  floor       A's device memory read with nvidia-smi falls to the suspended floor (<= 16 MiB:
              the target; a figure above it is reported, failing only above 64 MiB)
  second      meanwhile another process allocates that memory in 1 GiB tensors, and frees it
  outputs     the next request's output is bitwise equal to the one before the suspend
  resumes     gpupool stats counts one more resume, and the watchdog's queries woke nothing
BENCH lines: live bytes, time to suspend (the process's own figure), the first request's extra
latency over a warm one (target: at most 1 s for the server alone; 32 GiB: suspend and resume in
at most 2 s each), and the resume's own time.
With --no-copy, GPUPOOL_AUTO_SUSPEND_COPY=0: the checkpoint API parks the VMM-backed blocks too.
Usage: python3 torch_autosuspend.py GPUPOOL LIBGPUPOOL [--weights-gib N] [--vmm] [--no-copy]
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

from gpucommon import Checks, expect, server_model, smi_process_mib

GIB = 1 << 30
MIB = 1 << 20


def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


WEIGHTS_GIB = int(arg("--weights-gib", "0"))
VMM = "--vmm" in sys.argv
NO_COPY = "--no-copy" in sys.argv  # GPUPOOL_AUTO_SUSPEND_COPY=0: the checkpoint API takes all
LABEL = f"{'vmm' if VMM else 'default'}{'-nocopy' if NO_COPY else ''}-{WEIGHTS_GIB}gib"
CHECKS = Checks(f"gpu_torch_autosuspend {LABEL}")
line, check = CHECKS.line, CHECKS.check


def role_server():
    import torch
    model, probe = server_model()
    weights = []
    for _ in range(WEIGHTS_GIB):
        w = torch.empty(GIB // 2, dtype=torch.bfloat16, device="cuda")
        w.normal_()
        weights.append(w)
    wsum = [float(w.float().sum()) for w in weights]
    stop = threading.Event()

    def watchdog():
        ev = torch.cuda.Event()
        ev.record()
        while not stop.is_set():
            ev.query()
            time.sleep(0.005)

    with torch.no_grad():
        ref = model(probe).clone()
        for n in range(256, 8193, 256):
            y = model(torch.randn(1, n, 2048, device="cuda", dtype=torch.bfloat16))
            del y
        torch.cuda.synchronize()
        threading.Thread(target=watchdog, daemon=True).start()
        print("READY", flush=True)
        for cmd in sys.stdin:
            cmd = cmd.strip()
            if cmd == "forward":
                t0 = time.perf_counter()
                out = model(probe)
                torch.cuda.synchronize()
                ms = (time.perf_counter() - t0) * 1e3
                same = torch.equal(out, ref)
                wok = all(float(w.float().sum()) == s for w, s in zip(weights, wsum))
                print(f"FORWARD {'equal' if same and wok else 'DIFFERENT'} {ms:.3f}", flush=True)
            elif cmd == "quit":
                stop.set()
                break


def role_taker():
    import torch
    want = int(arg("--take-mib", "0"))
    tensors = []
    while len(tensors) * 1024 < want:
        try:
            tensors.append(torch.empty(GIB, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            break
    print(f"TAKEN {len(tensors)}", flush=True)
    del tensors
    torch.cuda.empty_cache()


def stats(cli, pid):
    r = subprocess.run([cli, "stats", str(pid), "--json"], capture_output=True, text=True,
                       timeout=60)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}


def forward(a):
    a.stdin.write("forward\n")
    a.stdin.flush()
    fw = expect(a, "FORWARD", 300)
    return (fw[1], float(fw[2])) if fw else ("no answer", float("nan"))


def wait_view(cli, pid, done, timeout):
    """The process's view once done(view) holds (the view is published at the control thread's
    ticks, so it trails what the process did by up to one), or the last one read."""
    deadline = time.monotonic() + timeout
    s = stats(cli, pid)
    while not done(s) and time.monotonic() < deadline:
        time.sleep(0.1)
        s = stats(cli, pid)
    return s


def cycle(cli, a, n, warm_ms):
    pid = a.pid
    held = smi_process_mib(pid, 0)
    s0 = wait_view(cli, pid, lambda v: v.get("self_suspended") == 0, 10)
    t0 = time.monotonic()
    s = wait_view(cli, pid, lambda v: (v.get("suspends") or 0) > (s0.get("suspends") or 0) and
                  v.get("self_suspended"), 60 + 2 * WEIGHTS_GIB)
    waited = time.monotonic() - t0
    if not check(bool(s.get("self_suspended")), f"suspends #{n}",
                 f"suspended by itself after {waited:.1f} s of polling (held {held} MiB); "
                 f"suspends {s.get('suspends')}, resumes {s.get('resumes')}"):
        return None
    time.sleep(1.0)  # the watchdog polls meanwhile: its queries must not wake A
    floor = smi_process_mib(pid, 0)
    if floor > 16:
        line("INFO", f"floor #{n}", f"above the 16 MiB target: {floor} MiB")
    check(floor <= 64, f"floor #{n}", f"A's device memory while suspended: {floor} MiB "
          f"(nvidia-smi; {held} MiB before)")
    b = subprocess.Popen([sys.executable, __file__, cli, "x", "--role", "taker",
                          "--take-mib", str(max(held, 1024))], stdout=subprocess.PIPE, text=True)
    got = expect(b, "TAKEN", 300)
    b.wait(timeout=120)
    taken = int(got[1]) if got else 0
    check(taken * 1024 >= held - 1024, f"second #{n}",
          f"another process took {taken} GiB while A was suspended (A had held {held} MiB)")
    mid = stats(cli, pid)
    check(mid.get("self_suspended") == 1 and mid.get("resumes") == s.get("resumes"),
          f"quiet #{n}", f"still suspended after the watchdog's queries and the other process "
          f"(resumes {mid.get('resumes')})")
    same, first_ms = forward(a)
    check(same == "equal", f"outputs #{n}", f"the next request's output: {same}")
    after = wait_view(cli, pid, lambda v: (v.get("resumes") or 0) > (s.get("resumes") or 0) and
                      not v.get("self_suspended"), 10)
    check(after.get("resumes") == (s.get("resumes") or 0) + 1 and not after.get("self_suspended"),
          f"resumes #{n}", f"resumes {s.get('resumes')} -> {after.get('resumes')}, last resume "
          f"{(after.get('last_resume_duration_ns') or 0) / 1e6:.1f} ms")
    return {"label": LABEL, "cycle": n, "held_mib": held, "floor_mib": floor,
            "parked_mib": round((s.get("parked_bytes") or 0) / MIB, 1),
            "suspend_ms": round((s.get("last_suspend_duration_ns") or 0) / 1e6, 1),
            "resume_ms": round((after.get("last_resume_duration_ns") or 0) / 1e6, 1),
            "first_request_ms": round(first_ms, 1), "warm_request_ms": round(warm_ms, 1),
            "extra_ms": round(first_ms - warm_ms, 1)}


def main():
    cli, lib = sys.argv[1], sys.argv[2]
    if shutil.which("nvidia-smi") is None or \
            subprocess.run(["nvidia-smi"], capture_output=True).returncode != 0:
        print(f"SKIP gpu_torch_autosuspend {LABEL}: no nvidia-smi")
        return 77
    try:
        import torch
    except ImportError:
        print(f"SKIP gpu_torch_autosuspend {LABEL}: no torch")
        return 77
    free = torch.cuda.mem_get_info()[0] if WEIGHTS_GIB else 0
    if WEIGHTS_GIB and free < (WEIGHTS_GIB + 12) * GIB:
        print(f"SKIP gpu_torch_autosuspend {LABEL}: {free / GIB:.0f} GiB free, "
              f"{WEIGHTS_GIB + 12} GiB needed")
        return 77
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUPOOL_") and k not in ("LD_PRELOAD",
                                                         "PYTORCH_NO_CUDA_MEMORY_CACHING")}
    env.update(LD_PRELOAD=lib, GPUPOOL_AUTO_SUSPEND="2s", GPUPOOL_LOG="info")
    if VMM:
        env["GPUPOOL_VMM"] = "on"
    if NO_COPY:
        env["GPUPOOL_AUTO_SUSPEND_COPY"] = "0"
    a = subprocess.Popen([sys.executable, __file__, cli, lib, "--role", "server"] +
                         sys.argv[3:], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=env)
    try:
        if expect(a, "READY", 300) is None:
            check(False, "server", "A did not start")
            return 1
        warm = [forward(a)[1] for _ in range(5)]
        warm_ms = statistics.median(warm)
        line("INFO", "warm", f"warm requests {', '.join(f'{w:.1f}' for w in warm)} ms")
        for n in range(int(os.environ.get("AUTOSUSPEND_CYCLES", "2"))):
            fig = cycle(cli, a, n, warm_ms)
            if fig is None:
                break
            print("BENCH autosuspend " + json.dumps(fig), flush=True)
    finally:
        if a.poll() is None:
            a.stdin.write("quit\n")
            a.stdin.flush()
            try:
                a.wait(timeout=120)
            except subprocess.TimeoutExpired:
                a.kill()
    return 1 if CHECKS.failures else 0


if __name__ == "__main__":
    if "--role" in sys.argv:
        role = arg("--role")
        sys.exit(role_server() if role == "server" else role_taker())
    sys.exit(main())
