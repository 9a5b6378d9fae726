"""fwaccount.py — PyTorch's and CuPy's unused cache bytes reach the accounting table, per device.

Run under LD_PRELOAD=libgpupool.so with STANDIN_DEVICES=2 as:
    python3 fwaccount.py <stand-in libcudart.so.13> <gpupool command> on|off
A fake `torch` keeps segments of 8 MiB taken with cudaMalloc (through the shim, so they are the
pool's live blocks) on two devices, some handed out and some cached; a fake `cupy` reports a pool
with free bytes on its current device. `on` (GPUPOOL_FRAMEWORK_FLUSH=auto): the control thread
reads them under the GIL and `gpupool stats PID` shows, per device, what their caches hold unused
inside the pool's in-use bytes (PyTorch: reserved minus allocated; CuPy: its pool's free bytes, on
its current device, 0 for gpupool's thread). `off` (GPUPOOL_FRAMEWORK_FLUSH=off): never read, the
figure is null (not 0) and the text leaves the row out.
Waits stretch by GPUPOOL_TEST_TIME_SCALE.
"""
import ctypes
import json
import os
import subprocess
import sys
import time
import types

MIB = 1 << 20
SCALE = max(1.0, float(os.environ.get("GPUPOOL_TEST_TIME_SCALE", "1")))
runtime = ctypes.CDLL(sys.argv[1])           # the stand-in runtime: cudaSetDevice
glob = ctypes.CDLL(None)                     # the global scope: the preloaded shim comes first
cli, mode = sys.argv[2], sys.argv[3]


def check(ok, what):
    """Say what was proven, or fail with it."""
    print(("ok   " if ok else "FAIL e2e_fwaccount_%s: " % mode) + what, flush=True)
    if not ok:
        sys.exit(1)


class FakeTorch:
    """Per device: segments handed out (used) and cached, all from cudaMalloc."""

    def __init__(self):
        self.used = {0: [], 1: []}
        self.cached = {0: [], 1: []}

    def fill(self, dev, n_used, n_cached):
        check(runtime.cudaSetDevice(dev) == 0, "cudaSetDevice(%d)" % dev)
        for i in range(n_used + n_cached):
            p = ctypes.c_void_p()
            check(glob.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(8 * MIB)) == 0,
                  "cudaMalloc through the shim on device %d" % dev)
            (self.used if i < n_used else self.cached)[dev].append(p)

    def memory_stats(self, dev):
        return {"allocation.all.allocated": len(self.used[dev]) + len(self.cached[dev]),
                "reserved_bytes.all.current": 8 * MIB * (len(self.used[dev]) + len(self.cached[dev])),
                "allocated_bytes.all.current": 8 * MIB * len(self.used[dev])}


class FakeCupyPool:
    def total_bytes(self):
        return 48 * MIB

    def used_bytes(self):
        return 32 * MIB


torch = FakeTorch()
torch.fill(0, 2, 3)                          # 24 MiB cached on device 0
torch.fill(1, 1, 1)                          # 8 MiB cached on device 1
sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(
    is_initialized=lambda: True, device_count=lambda: 2, empty_cache=lambda: None,
    memory_stats=torch.memory_stats))
pool = FakeCupyPool()                        # 16 MiB free, on its current device (0 here)
sys.modules["cupy"] = types.SimpleNamespace(
    get_default_memory_pool=lambda: pool, get_default_pinned_memory_pool=lambda: pool,
    cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0)))


def stats(*args):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([cli, "stats", str(os.getpid())] + list(args), env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        check(False, "gpupool stats %s: %s" % (" ".join(args), r.stderr.strip()))
    return r.stdout


def devices():
    s = json.loads(stats("--json"))
    return s, {d["device"]: d for d in s["devices"]}


deadline = time.monotonic() + 5 * SCALE
while True:                                  # the probe runs at most once a second
    s, dev = devices()
    ready = len(dev) == 2 and (s["framework_read_ns"] is not None or mode == "off")
    if ready and (mode == "off" or dev[0]["framework_cached_bytes"] == 40 * MIB) \
            or time.monotonic() > deadline:
        break
    time.sleep(0.05)                         # sleeps holding no GIL, as a waiting server does
check(len(dev) == 2, "both devices are in the view (%s)" % sorted(dev))
check(dev[0]["in_use_bytes"] == 40 * MIB and dev[1]["in_use_bytes"] == 16 * MIB,
      "the frameworks' segments are the pool's live blocks (%d, %d MiB)"
      % (dev[0]["in_use_bytes"] // MIB, dev[1]["in_use_bytes"] // MIB))
text = stats()
if mode == "on":
    check(s["framework_read_ns"] is not None and s["framework_read_ns"] > 0,
          "the caches were read (framework_read_ns %s)" % s["framework_read_ns"])
    check(dev[0]["framework_cached_bytes"] == 40 * MIB,
          "device 0: PyTorch's 24 MiB reserved and not allocated, and CuPy's 16 MiB free (%d MiB)"
          % (dev[0]["framework_cached_bytes"] // MIB))
    check(dev[1]["framework_cached_bytes"] == 8 * MIB,
          "device 1: PyTorch's 8 MiB, none of CuPy's (%d MiB)"
          % (dev[1]["framework_cached_bytes"] // MIB))
    row = [l for l in text.splitlines() if l.startswith("  of which PyTorch/CuPy cache, unused")]
    check(len(row) == 1 and "40.0 MiB" in row[0] and "8.00 MiB" in row[0],
          "the text's row under in use shows both devices' figures: %s" % row)
else:
    check(s["framework_read_ns"] is None, "with the framework flush off nothing reads the caches")
    check(dev[0]["framework_cached_bytes"] == 0, "so their figure is 0, and unread")
    check("of which PyTorch/CuPy cache" not in text, "and the text leaves the row out")
print("PASS e2e_fwaccount " + mode)
