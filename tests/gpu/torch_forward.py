#!/usr/bin/env python3
"""torch_forward.py -- PyTorch with its cache off (PYTORCH_NO_CUDA_MEMORY_CACHING=1) on top of
gpupool: every tensor is a cudaMalloc/cudaFree through the pool.

Asserted: the shim is really loaded; a transformer forward loop over growing input lengths gives
the same outputs as a reference run in a subprocess without the shim; after `del` the pool still
holds the freed memory, and SIGUSR1 gives it back (device free memory returns to within
GPUPOOL_TORCH_TOL_MIB, default 768 MiB, of the start). Exit 77 (ctest: skipped) when torch or a
GPU is missing. Lines: PASS/FAIL/INFO gpu_torch <what>: <figures>.
"""
import gc
import os
import signal
import subprocess
import sys
import tempfile
import time

# Before torch reads them: uncached allocator, deterministic cuBLAS.
os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpucommon import runtime_meminfo, shim_loaded  # noqa: E402

SKIP = 77
MIB = 1 << 20
GIB = 1 << 30
D_MODEL = 1024
LAYERS = 4
BATCH = 4
LENGTHS = [64, 128, 256, 512, 1024, 2048]
REPEATS = 2
PARKED = 2 * GIB  # a block freed just before the release: the rise must include it

failures = 0


def line(tag, what, text):
    print(f"{tag} gpu_torch {what}: {text}", flush=True)


def check(cond, what, text):
    global failures
    line("PASS" if cond else "FAIL", what, text)
    if not cond:
        failures += 1
    return cond


def deterministic(torch):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True, warn_only=True)


def forward_loop(torch):
    """Build the model from a fixed seed, run it over growing lengths; outputs on the host."""
    torch.manual_seed(1234)
    layer = torch.nn.TransformerEncoderLayer(d_model=D_MODEL, nhead=16, dim_feedforward=4 * D_MODEL,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=LAYERS, enable_nested_tensor=False)
    model = model.cuda().eval()
    gen = torch.Generator(device="cpu").manual_seed(99)
    outs, times = [], []
    with torch.inference_mode():
        for rep in range(REPEATS):
            for n in LENGTHS:
                x = torch.randn(BATCH, n, D_MODEL, generator=gen).cuda()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                y = model(x)
                torch.cuda.synchronize()
                if rep > 0:
                    times.append(time.perf_counter() - t0)
                outs.append(y.cpu())
                del x, y
    del model, layer
    return outs, sum(times) * 1e3


def reference(path):
    import torch
    if shim_loaded():
        print("reference run has libgpupool.so loaded", file=sys.stderr)
        return 2
    deterministic(torch)
    outs, ms = forward_loop(torch)
    torch.save(outs, path)
    print(f"{ms:.3f}", flush=True)
    return 0


def run_reference(path):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--reference", path], env=env,
                       stdout=subprocess.PIPE, timeout=180)
    if p.returncode != 0:
        return None
    return float(p.stdout.decode().strip().splitlines()[-1])


real_free = None


def free_bytes(torch):
    """Device free memory as the driver reports it (bytes)."""
    torch.cuda.synchronize()
    return real_free()


def main():
    try:
        import torch
    except ImportError as e:
        print(f"SKIP gpu_torch: torch not importable ({e})")
        return SKIP
    if not torch.cuda.is_available():
        print("SKIP gpu_torch: no CUDA device for torch")
        return SKIP
    if not check(shim_loaded(), "shim loaded",
                 f"libgpupool in /proc/self/maps (LD_PRELOAD={os.environ.get('LD_PRELOAD')})"):
        return 1
    check(os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1", "torch cache off",
          "PYTORCH_NO_CUDA_MEMORY_CACHING=1")

    # The reference runs first, alone on the GPU, before this process makes its context.
    with tempfile.TemporaryDirectory() as tmp:
        ref_path = os.path.join(tmp, "ref.pt")
        ref_ms = run_reference(ref_path)
        if not check(ref_ms is not None, "reference run", "subprocess without LD_PRELOAD"):
            return 1
        ref = torch.load(ref_path)

    deterministic(torch)
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the runtime is loaded and the context made
    global real_free
    real_free = runtime_meminfo()
    if not check(real_free is not None, "runtime cudaMemGetInfo",
                 "found through libcudart's own handle"):
        return 1
    # Context, cuBLAS/cuBLASLt handles and workspaces: in place before the start figure.
    a = torch.randn(256, 256, device="cuda")
    bias = torch.randn(256, device="cuda")
    ((a @ a).sum() + torch.nn.functional.linear(a, a, bias).sum()).item()
    del a, bias
    start = free_bytes(torch)

    outs, ms = forward_loop(torch)
    line("INFO", "timing", f"{len(LENGTHS)} forwards (lengths {LENGTHS[0]}..{LENGTHS[-1]}, batch "
         f"{BATCH}, {LAYERS} layers, d={D_MODEL}, fp32): {ms:.1f} ms pooled, {ref_ms:.1f} ms "
         f"native uncached")
    exact = len(outs) == len(ref) and all(torch.equal(o, r) for o, r in zip(outs, ref))
    maxdiff = max(((o - r).abs().max().item() for o, r in zip(outs, ref)), default=-1.0)
    close = len(outs) == len(ref) and all(torch.allclose(o, r, rtol=1e-5, atol=1e-5)
                                          for o, r in zip(outs, ref))
    check(close, "outputs match reference",
          f"{len(outs)} outputs, bitwise equal: {'yes' if exact else 'no'}, max |diff| {maxdiff:.3g}")
    del outs, ref

    parked = torch.empty(PARKED, dtype=torch.uint8, device="cuda")
    parked.fill_(7)
    del parked
    gc.collect()
    before = free_bytes(torch)
    line("INFO", "memory", f"free at start {start / GIB:.2f} GiB, after the loop and del "
         f"{before / GIB:.2f} GiB (pool holds {(start - before) / GIB:.2f} GiB); "
         f"torch.cuda.mem_get_info (through the shim) says {torch.cuda.mem_get_info()[0] / GIB:.2f} GiB")

    tol = int(os.environ.get("GPUPOOL_TORCH_TOL_MIB", "768")) * MIB
    t0 = time.monotonic()
    os.kill(os.getpid(), signal.SIGUSR1)
    after = free_bytes(torch)
    while ((after < start - tol or after - before < PARKED - 64 * MIB)
           and time.monotonic() - t0 < 5.0):
        time.sleep(0.02)
        after = free_bytes(torch)
    waited = (time.monotonic() - t0) * 1e3
    check(after - before >= PARKED - 64 * MIB, "SIGUSR1 releases the cache",
          f"free rose by {(after - before) / GIB:.2f} GiB in {waited:.0f} ms "
          f"(want >= {PARKED / GIB:.0f} GiB: the parked block)")
    check(after >= start - tol, "back to the start",
          f"free {after / GIB:.2f} GiB vs {start / GIB:.2f} GiB at start "
          f"(gap {(start - after) / MIB:.0f} MiB, limit {tol / MIB:.0f} MiB)")

    # Still usable after the release.
    x = torch.full((1024, 1024), 3.0, device="cuda")
    check(x.sum().item() == 3.0 * 1024 * 1024, "usable after release", "a new tensor computes")
    del x

    line("PASS" if failures == 0 else "FAIL", "summary", f"{failures} failed check(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--reference":
        sys.exit(reference(sys.argv[2]))
    sys.exit(main())
