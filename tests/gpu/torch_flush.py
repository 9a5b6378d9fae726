"""torch_flush.py — kill -USR1 works for a *default, unmodified* PyTorch program.

PyTorch's caching allocator keeps freed tensors' memory; gpupool's release on SIGUSR1 first
asks it to empty its cache (the control thread takes the GIL while the main thread sleeps),
then gives the freed segments back to the driver. Prints PASS/FAIL/INFO lines; exit 77 = skip.
Run under LD_PRELOAD=libgpupool.so with PyTorch's default allocator settings.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpucommon import Checks, runtime_meminfo, shim_loaded  # noqa: E402

GIB = 1 << 30
CHECKS = Checks("gpu_torch_flush")
line, check = CHECKS.line, CHECKS.check


def main():
    try:
        import torch
    except ImportError as e:
        print(f"SKIP gpu_torch_flush: no torch ({e})")
        return 77
    if not torch.cuda.is_available():
        print("SKIP gpu_torch_flush: no GPU")
        return 77
    if not check(shim_loaded(), "shim loaded", "libgpupool.so is in /proc/self/maps"):
        return 1
    if not check("PYTORCH_NO_CUDA_MEMORY_CACHING" not in os.environ, "default allocator",
                 "PYTORCH_NO_CUDA_MEMORY_CACHING is not set"):
        return 1
    real_free = runtime_meminfo()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    start = real_free()
    xs = [torch.empty(GIB // 4, dtype=torch.uint8, device="cuda") for _ in range(32)]  # 8 GiB
    keep = torch.ones(1 << 20, device="cuda")
    del xs
    torch.cuda.synchronize()
    held = start - real_free()
    check(torch.cuda.memory_reserved() >= 8 * GIB, "PyTorch caches the freed 8 GiB",
          f"reserved {torch.cuda.memory_reserved() / GIB:.2f} GiB, device holds {held / GIB:.2f} GiB more")
    t0 = time.monotonic()
    os.kill(os.getpid(), signal.SIGUSR1)
    back = 0
    while time.monotonic() - t0 < 10:
        time.sleep(0.02)  # the main thread sleeps (GIL released), like an idle server
        back = real_free() - (start - held)
        if back >= 7.5 * GIB:
            break
    took = time.monotonic() - t0
    check(back >= 7.5 * GIB, "SIGUSR1 gives PyTorch's cached memory back",
          f"{back / GIB:.2f} GiB back in {took * 1000:.0f} ms; reserved now "
          f"{torch.cuda.memory_reserved() / GIB:.3f} GiB")
    check(float(keep.sum().item()) == float(1 << 20), "live tensor intact", "sum matches")
    y = torch.ones(1 << 20, device="cuda") * 2
    check(float(y.sum().item()) == 2.0 * (1 << 20), "PyTorch keeps working", "new tensor ok")
    line("INFO", "flush timing", f"release by signal took {took * 1000:.0f} ms to reach the driver")
    return 1 if CHECKS.failures else 0


if __name__ == "__main__":
    sys.exit(main())
