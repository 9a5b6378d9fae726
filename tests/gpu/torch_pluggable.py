"""torch_pluggable.py — the one-line integration: PyTorch's CUDAPluggableAllocator with
gpupool_torch_alloc/gpupool_torch_free (no LD_PRELOAD). Tensors work, results match the CPU,
freed memory is cached by the pool and SIGUSR1 gives it back to the driver.
Usage: python3 torch_pluggable.py /path/to/libgpupool.so ; exit 77 = skipped."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpucommon import runtime_meminfo  # noqa: E402

failures = 0
GIB = 1 << 30


def check(cond, what, text):
    global failures
    print(f"{'PASS' if cond else 'FAIL'} gpu_torch_pluggable {what}: {text}", flush=True)
    failures += 0 if cond else 1
    return cond


def main():
    try:
        import torch
    except ImportError:
        return 77
    if not torch.cuda.is_available():
        return 77
    lib = sys.argv[1]
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "gpupool_torch_alloc", "gpupool_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    c = (a.cuda() @ b.cuda()).cpu()
    check(torch.allclose(c, a @ b, rtol=1e-3, atol=1e-3), "matmul on pool memory equals the CPU",
          f"max |diff| {(c - a @ b).abs().max().item():.2e}")
    real_free = runtime_meminfo()
    torch.cuda.synchronize()
    start = real_free()
    xs = [torch.empty(GIB // 4, dtype=torch.uint8, device="cuda") for _ in range(16)]
    del xs
    torch.cuda.synchronize()
    held = start - real_free()
    check(held >= 3.9 * GIB, "freed tensors stay cached in the pool", f"{held / GIB:.2f} GiB held")
    os.kill(os.getpid(), signal.SIGUSR1)
    t0 = time.monotonic()
    while real_free() < start - 64 * (1 << 20) and time.monotonic() - t0 < 5:
        time.sleep(0.01)
    back = real_free() - (start - held)
    check(back >= 3.9 * GIB, "SIGUSR1 gives them back", f"{back / GIB:.2f} GiB in "
          f"{(time.monotonic() - t0) * 1000:.0f} ms")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
