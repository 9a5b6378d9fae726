"""mp.py — Python multiprocessing under the shim, end to end on the stand-in runtime.

Run under LD_PRELOAD=libgpupool.so as: python3 mp.py <path of the stand-in libcudart.so.13>
Proves: a parent that uses the pool (live and cached blocks, control thread running) starts
workers with the 'fork' start method — each passes its cudaMalloc/cudaFree straight through to
the runtime (its copy of the counters moves by exactly one per call) and exits 0 — and with
'spawn' — each is a new process in which the shim is active on its own (a freed block is reused
without a second real allocation, and SIGUSR1 gives it back); the parent keeps being served from
its cache throughout and a release afterwards leaves exactly its live blocks. Every join is
bounded: a worker that hangs fails the test.
"""
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import time

MIB = 1 << 20
NAME = "e2e_mp"


class Counters(ctypes.Structure):
    """struct standin_counters (tests/standin/standin.h), with room to spare: standin_get writes
    the whole C struct, which may have grown since."""
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "mallocs", "frees", "failed_mallocs", "bad_frees", "async_mallocs", "async_frees",
        "live_allocs", "live_bytes", "event_records", "event_queries", "syncs",
        "stream_creates", "stream_destroys", "mem_get_info", "pool_trims", "frees_off_device",
        "stream_queries", "launches")]
    _fields_ += [("spare", ctypes.c_uint64 * 32)]


class Runtime:
    """The stand-in loaded RTLD_LOCAL (as a framework would load libcudart), the CUDA entry
    points taken from the global scope, where the preloaded shim comes first."""

    def __init__(self, path):
        self.standin = ctypes.CDLL(path)
        self.glob = ctypes.CDLL(None)

    def counters(self):
        c = Counters()
        self.standin.standin_get(0, ctypes.byref(c))
        return c

    def malloc(self, n):
        p = ctypes.c_void_p()
        rc = self.glob.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))
        return rc, p

    def free(self, p):
        return self.glob.cudaFree(p)


def check(ok, what):
    print(("ok   " if ok else "FAIL %s: " % NAME) + what, flush=True)
    if not ok:
        sys.exit(1)


def shim_loaded():
    with open("/proc/self/maps") as f:
        return "libgpupool" in f.read()


def forked_worker(path, out):
    """In a forked child: every call goes straight to the runtime."""
    rt = Runtime(path)
    result = []
    for i in range(3):
        c0 = rt.counters()
        rc, p = rt.malloc(MIB)
        c1 = rt.counters()
        result.append(rc == 0 and c1.mallocs == c0.mallocs + 1)
        rc = rt.free(p)
        c2 = rt.counters()
        result.append(rc == 0 and c2.frees == c1.frees + 1)
    out.send(("fork", os.getpid(), all(result)))
    out.close()


def spawned_worker(path, out):
    """In a spawned child: a new process, the shim active in it."""
    rt = Runtime(path)
    ok = shim_loaded()
    rc, p = rt.malloc(2 * MIB)
    ok = ok and rc == 0 and rt.free(p) == 0
    c0 = rt.counters()
    rc, q = rt.malloc(2 * MIB)
    c1 = rt.counters()
    ok = ok and rc == 0 and q.value == p.value and c1.mallocs == c0.mallocs  # served from the pool
    ok = ok and rt.free(q) == 0 and rt.counters().live_bytes > 0              # cached, still held
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while rt.counters().live_bytes != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    ok = ok and rt.counters().live_bytes == 0                                 # released
    out.send(("spawn", os.getpid(), ok))
    out.close()


def run(method, target, path, n):
    """Pipes, not a Queue: a Queue starts a feeder thread in the child, which ThreadSanitizer
    refuses after a fork of a process with threads."""
    ctx = mp.get_context(method)
    pipes = [ctx.Pipe(duplex=False) for _ in range(n)]
    procs = [ctx.Process(target=target, args=(path, w)) for _, w in pipes]
    for p in procs:
        p.start()
    for _, w in pipes:
        w.close()
    results = []
    deadline = time.monotonic() + 30
    for r, _ in pipes:
        if r.poll(max(0.1, deadline - time.monotonic())):
            try:
                results.append(r.recv())
            except EOFError:
                pass
    for p in procs:
        p.join(timeout=max(0.1, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
            check(False, "%s: a worker hung (killed after 30 s)" % method)
    check(len(results) == n and all(r[2] for r in results),
          "%s: %d workers did what they must (%s)" % (method, n, results))
    check(all(p.exitcode == 0 for p in procs),
          "%s: every worker exited 0 (%s)" % (method, [p.exitcode for p in procs]))


def main():
    path = sys.argv[1]
    rt = Runtime(path)
    check(shim_loaded(), "libgpupool.so is loaded in the parent")
    live = []
    for _ in range(3):
        rc, p = rt.malloc(MIB)
        check(rc == 0, "parent: cudaMalloc(1 MiB)")
        live.append(p)
    rc, cached = rt.malloc(4 * MIB)
    check(rc == 0 and rt.free(cached) == 0, "parent: a 4 MiB block cached")
    held = rt.counters().live_bytes

    run("fork", forked_worker, path, 3)
    run("spawn", spawned_worker, path, 2)

    c0 = rt.counters()
    rc, p = rt.malloc(4 * MIB)
    check(rc == 0 and p.value == cached.value and rt.counters().mallocs == c0.mallocs,
          "parent: still served from its cache after the workers")
    check(rt.free(p) == 0 and rt.counters().live_bytes == held, "parent: holds what it held")
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while rt.counters().live_bytes != 3 * MIB and time.monotonic() < deadline:
        time.sleep(0.01)
    check(rt.counters().live_bytes == 3 * MIB, "parent: after SIGUSR1 only its 3 live MiB are held")
    for p in live:
        rt.free(p)
    print("PASS %s" % NAME)


if __name__ == "__main__":
    main()
