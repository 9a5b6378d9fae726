"""fwpolicy.py — device pressure and idle age reach a framework's own cache (default mode).

Run under LD_PRELOAD=libgpupool.so as: python3 fwpolicy.py <stand-in libcudart.so.13> MODE
A fake `torch` module keeps a cache of its own, like PyTorch's caching allocator: blocks taken
from the shim with cudaMalloc and never given back until torch.cuda.empty_cache(). It reports
torch.cuda.memory_stats() as PyTorch does (an allocation count, reserved and allocated bytes).
The pool itself caches nothing, as in a default PyTorch process, so only a flush of the
framework's cache can give memory back. MODE:
  pressure   the device is short of GPUPOOL_MIN_FREE: the control thread flushes the cache and
             gives back what landed in the pool, down to what the deficit needs
  sustained  the device stays short (the capacity shrinks, as if another process took memory)
             while this process keeps refilling its cache, and each flush is slow (its
             empty_cache takes longer than two polls, as a real one that waits for the GPU or a
             late tick on a busy machine would): flushes are spaced out, each gap twice the one
             before, not one per poll
  idle       GPUPOOL_IDLE_TIMEOUT: while the process allocates nothing flushes; while it keeps
             allocating, none happens
Waits for what must happen stretch by GPUPOOL_TEST_TIME_SCALE (ctest sets it: a sanitizer build, a
slow machine); ctest scales GPUPOOL_IDLE_TIMEOUT by it too.
"""
import ctypes
import os
import sys
import time
import types

MIB = 1 << 20
SCALE = max(1.0, float(os.environ.get("GPUPOOL_TEST_TIME_SCALE", "1")))


def duration_env(name):
    """A duration setting given in ms (as CMakeLists.txt writes them), in seconds."""
    value = os.environ[name]
    check(value.endswith("ms"), "%s is given in ms (%s)" % (name, value))
    return int(value[:-2]) / 1000.0


def check(ok, what):
    print(("ok   " if ok else "FAIL e2e_fwpolicy: ") + what, flush=True)
    if not ok:
        sys.exit(1)


standin = ctypes.CDLL(sys.argv[1])
glob = ctypes.CDLL(None)                     # the global scope: the preloaded shim comes first
mode = sys.argv[2]
check("libgpupool" in open("/proc/self/maps").read(), "libgpupool.so is loaded in this process")


def live():
    c = (ctypes.c_uint64 * 64)()             # struct standin_counters, room to spare
    standin.standin_get(0, c)
    return c[7]                              # live_bytes


def malloc(n, must=True):
    p = ctypes.c_void_p()
    rc = glob.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))
    if must:
        check(rc == 0, "cudaMalloc through the shim")
    return p if rc == 0 else None


class FakeTorchCache:
    """Segments of 8 MiB, handed out whole; freed tensors stay cached."""

    def __init__(self):
        self.cached, self.used, self.allocations, self.flushes = [], [], 0, 0
        self.flush_times, self.flush_seconds = [], 0.0

    def alloc(self, must=True):
        """A segment, or None when the device is out of memory and must is False."""
        seg = self.cached.pop() if self.cached else malloc(8 * MIB, must)
        if seg is not None:
            self.allocations += 1
            self.used.append(seg)
        return seg

    def free(self, seg):
        self.used.remove(seg)
        self.cached.append(seg)

    def empty_cache(self):
        self.flushes += 1
        self.flush_times.append(time.monotonic())
        if self.flush_seconds:
            time.sleep(self.flush_seconds)   # a slow flush (the GIL let go meanwhile)
        while self.cached:
            check(glob.cudaFree(self.cached.pop()) == 0, "cudaFree through the shim")

    def memory_stats(self, dev):
        return {"allocation.all.allocated": self.allocations,
                "reserved_bytes.all.current": 8 * MIB * (len(self.cached) + len(self.used)),
                "allocated_bytes.all.current": 8 * MIB * len(self.used)}


cache = FakeTorchCache()
sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(
    is_initialized=lambda: True, device_count=lambda: 1, empty_cache=cache.empty_cache,
    memory_stats=cache.memory_stats))


def wait_for(cond, seconds):
    deadline = time.monotonic() + seconds * SCALE
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)                     # blocks holding no GIL, as a waiting server does
    return cond()


def fill(n_used, n_cached):
    segs = [cache.alloc() for _ in range(n_used + n_cached)]
    for s in segs[n_used:]:
        cache.free(s)


if mode == "pressure":
    # Capacity 256 MiB (STANDIN_CAPACITY), GPUPOOL_MIN_FREE=160MiB: 2 segments live and 12
    # cached leave 144 MiB free, 16 short. The flush lands 96 MiB in the pool; 16 must go back.
    fill(2, 12)
    check(wait_for(lambda: cache.flushes >= 1, 5), "pressure flushed the framework's cache")
    check(wait_for(lambda: live() <= 96 * MIB, 5),
          "what the deficit needs went back to the driver (%d MiB held)" % (live() // MIB))
    check(live() >= 16 * MIB, "the live segments stay (%d MiB held)" % (live() // MIB))
elif mode == "sustained":
    # Another process takes memory: the device stays short whatever this one gives back. Each
    # flush takes longer than two polls: a policy that judged "in a row" by how soon the next
    # flush came would see a quiet spell every time and flush at every poll.
    poll = duration_env("GPUPOOL_POLL_INTERVAL")
    cache.flush_seconds = 2.5 * poll
    fill(2, 4)
    standin.standin_set_capacity(0, ctypes.c_uint64(64 * MIB))
    t0 = time.monotonic()
    # 3 s, and on until a second flush came (at most 3 s times the scale).
    while time.monotonic() < t0 + 3.0 or \
            (len(cache.flush_times) < 2 and time.monotonic() < t0 + 3.0 * SCALE):
        segs = [cache.alloc(must=False) for _ in range(4)]   # the device is short: some fail
        for s in segs:                       # a busy process that keeps refilling its cache
            if s is not None:
                cache.free(s)
        time.sleep(0.01)
    t_end = time.monotonic()
    window = t_end - t0
    times = [t for t in cache.flush_times if t <= t_end]
    # The n-th gap is at least poll * 2^(n-1): n flushes take poll * (2^(n-1) - 1) at least.
    most = 1
    while poll * (2 ** most - 1) <= window:
        most += 1
    check(len(times) >= 2, "sustained pressure flushed more than once (%d)" % len(times))
    check(len(times) <= most,
          "flushes were spaced out: %d in %.0f s, at most %d with each gap twice the one before, "
          "not one per poll (%.0f polls; each flush took %.0f ms)"
          % (len(times), window, most, window / poll, 1000 * cache.flush_seconds))
    gaps = ["%.0f" % (1000 * (b - a)) for a, b in zip(times, times[1:])]
    print("     gaps between flushes (ms): " + " ".join(gaps), flush=True)
elif mode == "idle":
    # GPUPOOL_IDLE_TIMEOUT (400 ms, scaled). First keep allocating for 3 timeouts, one
    # allocation every eighth of it: no flush. Then go quiet.
    idle = duration_env("GPUPOOL_IDLE_TIMEOUT")
    fill(1, 6)
    t_end = time.monotonic() + 3 * idle
    while time.monotonic() < t_end:
        s = cache.alloc()
        cache.free(s)
        time.sleep(idle / 8)
    check(cache.flushes == 0, "no idle flush while the process keeps allocating")
    t0 = time.monotonic()
    check(wait_for(lambda: cache.flushes >= 1, 3), "idle age flushed the framework's cache")
    waited = time.monotonic() - t0
    check(waited >= 0.75 * idle, "not before the timeout (%.2f s)" % waited)
    check(wait_for(lambda: live() == 8 * MIB, 3),
          "everything cached went back: only the live segment stays (%d MiB)" % (live() // MIB))
    time.sleep(2.5 * idle)
    check(cache.flushes == 1, "an idle process is flushed once, not at every check (%d)" % cache.flushes)
else:
    check(False, "unknown mode " + mode)
print("PASS e2e_fwpolicy " + mode)
