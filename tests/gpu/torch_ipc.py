"""torch_ipc.py — a CUDA tensor shared with a spawned process through torch.multiprocessing
arrives intact under gpupool, and the producer exits.

PyTorch's default mode (its own cache on) shares a tensor through a legacy IPC handle of the
segment that holds it, which the driver refuses for VMM-backed memory. With GPUPOOL_VMM=auto the
pool must make that segment an ordinary allocation, or the consumer never receives the tensor and
the producer hangs at exit. Runs the producer as a child with a deadline (a hang is a failure,
not a stuck test). Prints PASS/FAIL/INFO lines; exit 77 = skip. Usage:
    torch_ipc.py [producer]        (under LD_PRELOAD=libgpupool.so; GPUPOOL_VMM as given)
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpucommon import Checks, shim_loaded  # noqa: E402

CHECKS = Checks("gpu_torch_ipc")
line, check = CHECKS.line, CHECKS.check
ELEMS = 3 << 20  # 12 MiB of float32: a segment above 1 MiB, VMM-backed under GPUPOOL_VMM=on


def consumer(q_in, q_out):
    import torch
    t = q_in.get(timeout=60)
    q_out.put((t.device.type, float(t.sum().item()), float(t[12345].item())))
    del t


def producer():
    import torch
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=consumer, args=(q_in, q_out))
    p.start()
    t = torch.arange(ELEMS, device="cuda", dtype=torch.float32) % 7
    want = float(t.sum().item())
    q_in.put(t)
    try:
        got = q_out.get(timeout=60)
    except Exception as e:  # queue.Empty: the consumer never received it
        print(f"RESULT none {type(e).__name__}", flush=True)
        p.kill()
        return 1
    p.join(30)
    ok = got[0] == "cuda" and got[1] == want and got[2] == float(12345 % 7)
    print(f"RESULT {'ok' if ok else 'wrong'} {got} want sum {want}", flush=True)
    return 0 if ok else 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "producer":
        return producer()
    try:
        import torch
    except ImportError as e:
        print(f"SKIP gpu_torch_ipc: no torch ({e})")
        return 77
    if not torch.cuda.is_available():
        print("SKIP gpu_torch_ipc: no GPU")
        return 77
    if not check(shim_loaded(), "shim loaded", "libgpupool.so is in /proc/self/maps"):
        return 1
    vmm = os.environ.get("GPUPOOL_VMM", "off")
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "producer"],
                           capture_output=True, text=True, timeout=150)
    except subprocess.TimeoutExpired as e:
        check(False, "producer exits", f"GPUPOOL_VMM={vmm}: still running after 150 s "
              f"(stdout: {e.stdout!r})")
        return 1
    result = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")]
    check(result and result[0].startswith("RESULT ok"), "tensor arrives intact",
          f"GPUPOOL_VMM={vmm}: {result[0] if result else 'no result'}")
    check(r.returncode == 0, "producer exits", f"exit status {r.returncode}")
    if r.returncode != 0:
        line("INFO", "producer stderr", r.stderr[-2000:].replace("\n", " | "))
    return 1 if CHECKS.failures else 0


if __name__ == "__main__":
    sys.exit(main())
