"""flush.py — the framework flush, end to end on the stand-in runtime, in a real Python process.

Run under LD_PRELOAD=libgpupool.so as: python3 flush.py <path of the stand-in libcudart.so.13>
[--off]; with --off (GPUPOOL_FRAMEWORK_FLUSH=off) the frameworks must not be called and their
caches stay, while the pool's own cache still goes.
Fake `torch` and `cupy` modules keep blocks in their own "caches" (allocated through the shim,
never freed), like PyTorch's caching allocator does. On SIGUSR1, with the main thread blocked
in select(), the shim's control thread must take the GIL, call torch.cuda.empty_cache() and
CuPy's free_all_blocks(), and give those blocks back with its own cached ones; live blocks stay.
The stand-in runtime is loaded RTLD_LOCAL, so the shim also has to find it by soname.
"""
import ctypes
import os
import select
import signal
import sys
import time
import types

MIB = 1 << 20


class Counters(ctypes.Structure):
    """struct standin_counters (tests/standin/standin.h), with room to spare: standin_get writes
    the whole C struct, which may have grown since."""
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "mallocs", "frees", "failed_mallocs", "bad_frees", "async_mallocs", "async_frees",
        "live_allocs", "live_bytes", "event_records", "event_queries", "syncs",
        "stream_creates", "stream_destroys", "mem_get_info", "pool_trims", "frees_off_device",
        "stream_queries", "launches")]
    _fields_ += [("spare", ctypes.c_uint64 * 32)]


def check(ok, what):
    print(("ok   " if ok else "FAIL e2e_flush: ") + what, flush=True)
    if not ok:
        sys.exit(1)


standin = ctypes.CDLL(sys.argv[1])          # RTLD_LOCAL: not visible to RTLD_NEXT
glob = ctypes.CDLL(None)                     # the global scope: the preloaded shim comes first
check("libgpupool" in open("/proc/self/maps").read(), "libgpupool.so is loaded in this process")


def live():
    c = Counters()
    standin.standin_get(0, ctypes.byref(c))
    return c.live_bytes


def malloc(n):
    p = ctypes.c_void_p()
    rc = glob.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))
    check(rc == 0, "cudaMalloc(%d MiB) through the shim" % (n // MIB))
    return p


def free(p):
    check(glob.cudaFree(p) == 0, "cudaFree through the shim")


calls = {"torch": 0, "cupy": 0, "pinned": 0}
torch_cache = [malloc(4 * MIB) for _ in range(4)]
cupy_cache = [malloc(2 * MIB) for _ in range(2)]


def torch_empty_cache():
    calls["torch"] += 1
    while torch_cache:
        free(torch_cache.pop())


def cupy_free_all():
    calls["cupy"] += 1
    while cupy_cache:
        free(cupy_cache.pop())


def pinned_free_all():
    calls["pinned"] += 1


sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(
    is_initialized=lambda: True, empty_cache=torch_empty_cache))
sys.modules["cupy"] = types.SimpleNamespace(
    get_default_memory_pool=lambda: types.SimpleNamespace(free_all_blocks=cupy_free_all),
    get_default_pinned_memory_pool=lambda: types.SimpleNamespace(free_all_blocks=pinned_free_all))

live_blocks = [malloc(1 * MIB) for _ in range(3)]
own = [malloc(8 * MIB) for _ in range(2)]
for p in own:
    free(p)
before = live()
check(before == 16 * MIB + 4 * MIB + 3 * MIB + 16 * MIB,
      "held before the signal: torch 16 MiB + cupy 4 MiB + live 3 MiB + pool cache 16 MiB (%d B)" % before)

off = "--off" in sys.argv
expect = (3 + 16 + 4) * MIB if off else 3 * MIB
os.kill(os.getpid(), signal.SIGUSR1)
deadline = time.monotonic() + 5
while live() > expect and time.monotonic() < deadline:
    select.select([], [], [], 0.05)         # the main thread blocks, holding no GIL
after = live()
if off:
    time.sleep(0.2)
    check(sum(calls.values()) == 0, "GPUPOOL_FRAMEWORK_FLUSH=off: no framework was called (%s)" % calls)
    check(live() == expect, "only the pool's own 16 MiB went (%d B held)" % live())
    print("PASS e2e_flush --off")
    sys.exit(0)
check(calls["torch"] == 1 and calls["cupy"] == 1 and calls["pinned"] == 1,
      "torch.cuda.empty_cache and both CuPy pools' free_all_blocks ran once each (%s)" % calls)
check(after == 3 * MIB, "after SIGUSR1 only the 3 live MiB are held (%d B)" % after)
leaked = [n for n in ("t", "c", "sys") if n in vars(sys.modules["__main__"]) and n != "sys"]
check(not leaked, "the flush left no names in __main__ (%s)" % leaked)
for p in live_blocks:
    free(p)
print("PASS e2e_flush")
