"""torch_graphs.py — CUDA graphs under the shim: torch.cuda.graph capture and replay give the
same results as eager execution, and releases (SIGUSR1) during and after the capture break
nothing. Run under LD_PRELOAD=libgpupool.so, in default mode and with GPUPOOL_TORCH=takeover.
Prints PASS/FAIL/INFO lines; exit 77 = skipped (no torch or no GPU)."""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpucommon import shim_loaded  # noqa: E402

failures = 0
MODE = "takeover" if os.environ.get("GPUPOOL_TORCH") == "takeover" else "default"


def check(cond, what, text):
    global failures
    print(f"{'PASS' if cond else 'FAIL'} gpu_torch_graphs[{MODE}] {what}: {text}", flush=True)
    failures += 0 if cond else 1
    return cond


def main():
    try:
        import torch
    except ImportError:
        print("SKIP gpu_torch_graphs: no torch")
        return 77
    if not torch.cuda.is_available():
        return 77
    if not check(shim_loaded(), "shim loaded", "libgpupool.so is in /proc/self/maps"):
        return 1
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).cuda().eval()
    static_x = torch.randn(64, 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)

    # Signals keep arriving while the graph is captured: the release must wait for the capture.
    stop = threading.Event()

    def storm():
        while not stop.is_set():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.001)
    t = threading.Thread(target=storm)
    t.start()
    g = torch.cuda.CUDAGraph()
    try:
        with torch.no_grad(), torch.cuda.graph(g):
            static_y = model(static_x)
        captured = True
    except Exception as e:  # report, don't hide: a capture broken by the shim is a failure
        captured = False
        err = repr(e)
    stop.set()
    t.join()
    if not check(captured, "capture with releases requested during it",
                 "captured" if captured else f"capture failed: {err}"):
        return 1
    worst = 0.0
    for i in range(5):
        static_x.copy_(torch.randn(64, 1024, device="cuda"))
        g.replay()
        with torch.no_grad():
            ref = model(static_x)
        worst = max(worst, (static_y - ref).abs().max().item())
        if i == 2:
            os.kill(os.getpid(), signal.SIGUSR1)  # a release between replays
            time.sleep(0.05)
    torch.cuda.synchronize()
    check(worst < 1e-4, "replay equals eager", f"5 replays with new inputs, max |diff| {worst:.2e}, "
          "a release between replays")
    del g, static_y
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.1)
    y = model(torch.ones(2, 1024, device="cuda"))
    check(bool(torch.isfinite(y).all()), "usable after the graph is gone", "eager forward ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
