"""torch_pressure.py — thresholds reach a default PyTorch process's own cache (two processes).

A: an idle server with growing inputs (as bench/torch_seeds.py: 12 bf16 layers, d=2048, one forward at each length from 256 to 8192
tokens, then waiting on stdin), PyTorch in its default mode. B: another process that takes as
much device memory as it can in 1 GiB tensors, retrying for 5 s after its first failure.
Device memory is read from outside with nvidia-smi. Checks (PASS/FAIL/INFO lines, exit 77 =
skip):
  pressure  A under gpupool with GPUPOOL_MIN_FREE=8GiB: B gets, beyond what it gets next to A
            alone (plain PyTorch), every whole GiB that A holds above its live floor, its last
            tensor within 2 s of its first failure
  idle      A under gpupool with GPUPOOL_IDLE_TIMEOUT=2s: within 5 s of going idle A holds no
            more than 2% above its live floor (what a SIGUSR1 release leaves)
  outputs   after each, A's next forward is bitwise equal to the one before
  busy      what sustained pressure costs a busy A (forwards in a loop while B holds all but a
            few GiB): ms per forward with GPUPOOL_MIN_FREE against without (INFO only)
Usage: python3 torch_pressure.py LIBGPUPOOL [--role ...]
"""
import os
import signal
import subprocess
import sys
import time

from gpucommon import Checks, expect, server_model, smi_used_mib

GIB = 1 << 30
MIB = 1 << 20
CHECKS = Checks("gpu_torch_pressure")
line, check = CHECKS.line, CHECKS.check


# ---- the server (A) ------------------------------------------------------------------------

def role_server(busy_s):
    import torch
    model, probe = server_model()
    with torch.no_grad():
        ref = model(probe).clone()
        for _ in range(3 if busy_s == 0 else 0):  # as the seed's warm and timed sweeps
            for n in range(256, 8193, 256):
                y = model(torch.randn(1, n, 2048, device="cuda", dtype=torch.bfloat16))
                del y
        torch.cuda.synchronize()
        if busy_s > 0:
            x = torch.randn(1, 2048, 2048, device="cuda", dtype=torch.bfloat16)
            count, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < busy_s:
                y = model(x)
                del y
                torch.cuda.synchronize()
                count += 1
            print(f"BUSY {1000 * (time.perf_counter() - t0) / count:.3f}", flush=True)
            return
        print("READY", flush=True)
        for cmd in sys.stdin:
            if cmd.strip() == "forward":
                same = torch.equal(model(probe), ref)
                print(f"FORWARD {'equal' if same else 'DIFFERENT'}", flush=True)
            elif cmd.strip() == "quit":
                break


# ---- the taker (B) -------------------------------------------------------------------------

def role_taker(hold_s, leave_gib):
    import torch
    tensors, first_fail, last_ok = [], None, None
    t0 = time.monotonic()
    while True:
        try:
            tensors.append(torch.empty(GIB, dtype=torch.uint8, device="cuda"))
            last_ok = time.monotonic()
        except torch.OutOfMemoryError:
            now = time.monotonic()
            if first_fail is None:
                first_fail = now
            if now - first_fail >= 5.0:
                break
            time.sleep(0.05)
    taken = len(tensors)
    del tensors[:min(leave_gib, taken)]
    torch.cuda.empty_cache()
    late = (last_ok - first_fail) if last_ok and last_ok > first_fail else 0.0
    print(f"TAKEN {taken} {late:.3f} {first_fail - t0:.3f}", flush=True)
    if hold_s > 0:
        print("HOLDING", flush=True)
        time.sleep(hold_s)


# ---- the orchestration -------------------------------------------------------------------

def env_for(lib, extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUPOOL_") and k not in ("LD_PRELOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING")}
    if lib:
        env["LD_PRELOAD"] = lib
        env["GPUPOOL_LOG"] = "info"
    env.update(extra)
    return env


def start(role, lib, extra, *args):
    return subprocess.Popen([sys.executable, __file__, lib or "-", "--role", role, *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env_for(lib, extra))


def take(hold_s=0, leave_gib=0):
    b = start("taker", None, {}, hold_s, leave_gib)
    r = expect(b, "TAKEN")
    return b, (int(r[1]), float(r[2])) if r else (0, 99.0)


def stop(p):
    if p.poll() is None:
        try:
            p.stdin.write("quit\n")
            p.stdin.flush()
        except BrokenPipeError:
            pass
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def forward_equal(a):
    a.stdin.write("forward\n")
    a.stdin.flush()
    r = expect(a, "FORWARD", 60)
    return r is not None and r[1] == "equal"


def main(lib):
    base = smi_used_mib()
    # A alone (plain PyTorch), then B beside it.
    a = start("server", None, {})
    expect(a, "READY")
    plain_idle = smi_used_mib() - base
    b, (alone, _) = take()
    b.wait()
    stop(a)
    line("INFO", "plain", f"A idle holds {plain_idle} MiB; B took {alone} GiB beside it")

    # A under gpupool with an idle timeout.
    a = start("server", lib, {"GPUPOOL_IDLE_TIMEOUT": "2s"})
    expect(a, "READY")
    t_ready = time.monotonic()
    held = smi_used_mib() - base
    while time.monotonic() - t_ready < 5.0:
        time.sleep(0.1)
    idle = smi_used_mib() - base
    a.send_signal(signal.SIGUSR1)
    time.sleep(1.5)
    floor = smi_used_mib() - base
    check(idle <= floor * 1.02, "idle",
          f"5 s after going idle A holds {idle} MiB (at READY {held}); its live floor after "
          f"SIGUSR1 is {floor} MiB")
    check(forward_equal(a), "idle outputs", "A's next forward is bitwise equal")
    stop(a)

    # A under gpupool with a pressure threshold.
    a = start("server", lib, {"GPUPOOL_MIN_FREE": "8GiB"})
    expect(a, "READY")
    pool_idle = smi_used_mib() - base
    b, (taken, late) = take()
    b.wait()
    # What A can give: its idle cache above its live floor, in B's whole GiB tensors.
    can_give = (plain_idle - floor) // 1024
    check(taken >= alone + max(can_give, 1), "pressure",
          f"B took {taken} GiB beside A under GPUPOOL_MIN_FREE=8GiB, {alone} beside plain A: "
          f"{taken - alone} GiB more, of the {plain_idle - floor} MiB A holds above its live floor "
          f"(want >= {max(can_give, 1)} GiB; A idle held {pool_idle} MiB)")
    check(late <= 2.0, "pressure in time", f"B's last tensor {late:.2f} s after its first failure")
    check(forward_equal(a), "pressure outputs", "A's next forward is bitwise equal")
    stop(a)

    # What sustained pressure costs a busy process: B holds all but 8 GiB meanwhile.
    for label, extra in (("without GPUPOOL_MIN_FREE", {}), ("GPUPOOL_MIN_FREE=8GiB", {"GPUPOOL_MIN_FREE": "8GiB"})):
        b = start("taker", None, {}, 60, 8)
        expect(b, "HOLDING")
        a = start("server", lib, extra, 10)
        r = expect(a, "BUSY")
        a.wait()
        b.kill()
        b.wait()
        line("INFO", "busy", f"{label}, another process holding all but 8 GiB: "
             f"{r[1] if r else '?'} ms per forward (2048 tokens)")
    return 1 if CHECKS.failures else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[2] == "--role":
        role = sys.argv[3]
        rest = [float(x) for x in sys.argv[4:]]
        if role == "server":
            role_server(rest[0] if rest else 0)
        else:
            role_taker(rest[0], int(rest[1]))
        sys.exit(0)
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("no GPU")
    except ImportError as e:
        print(f"SKIP gpu_torch_pressure: {e}")
        sys.exit(77)
    sys.exit(main(os.path.abspath(sys.argv[1])))
