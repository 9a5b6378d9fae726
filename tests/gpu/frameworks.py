"""frameworks.py — runtimes that never call the shared libcudart, reached through the driver door.

Usage: python3 frameworks.py LIBGPUPOOL cupy|numba|jax   (exit 77 = skip: package or GPU missing)
Each check runs a child process under LD_PRELOAD=libgpupool.so, GPUPOOL_LOG=info and
GPUPOOL_STATS_FILE, then reads the exit statistics (JSON) and what the child printed:
  cupy   cupy.cuda.set_allocator(None): every array is a real allocation inside CuPy (its runtime
         is linked in, no libcudart.so is mapped). 400 arrays of 4 MiB, made and dropped, are
         served by the pool (hits); the cache held after them goes back on SIGUSR1.
  numba  device arrays (numba calls the driver itself): made and dropped, later ones are hits.
  jax    a computation runs untouched and gives the right answer; GPUPOOL_LOG=info says that the
         memory JAX maps with cuMemCreate is not pooled.
Prints PASS/FAIL/INFO lines.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from gpucommon import Checks

MIB = 1 << 20
CHECKS = Checks("gpu_frameworks")
line, check = CHECKS.line, CHECKS.check


# ---- children --------------------------------------------------------------------------------

def child_cupy():
    import cupy
    cupy.cuda.set_allocator(None)
    maps = open("/proc/self/maps").read()
    print(f"LIBCUDART {'yes' if 'libcudart.so' in maps else 'no'}", flush=True)
    free0 = cupy.cuda.runtime.memGetInfo()[0]
    for i in range(400):
        a = cupy.full(MIB, i, dtype=cupy.float32)
        assert int(a[-1]) == i
        del a
    cupy.cuda.Device().synchronize()
    held = free0 - cupy.cuda.runtime.memGetInfo()[0]
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and free0 - cupy.cuda.runtime.memGetInfo()[0] > MIB:
        time.sleep(0.02)
    after = free0 - cupy.cuda.runtime.memGetInfo()[0]
    print(f"HELD {held} {after}", flush=True)


def child_numba():
    from numba import cuda
    import numpy as np
    for i in range(200):
        a = cuda.device_array(MIB, dtype=np.float32)
        a.copy_to_device(np.full(MIB, i, dtype=np.float32))
        assert a.copy_to_host()[-1] == i
        del a
        cuda.current_context().deallocations.clear()
    print("DONE", flush=True)


def child_jax():
    import jax.numpy as jnp
    x = jnp.arange(1 << 20, dtype=jnp.float32)
    s = float((x * 2).sum())
    print(f"SUM {s}", flush=True)


# ---- parent ----------------------------------------------------------------------------------

def run_child(lib):
    with tempfile.TemporaryDirectory() as d:
        stats = os.path.join(d, "stats.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
        env.update({"LD_PRELOAD": lib, "GPUPOOL_LOG": "info", "GPUPOOL_STATS_FILE": stats,
                    "GPUPOOL_REPORT_CACHED_AS_FREE": "0"})
        r = subprocess.run([sys.executable, __file__, lib, MODE, "--child"], env=env,
                           capture_output=True, text=True, timeout=240)
        data = None
        if os.path.exists(stats):
            with open(stats) as f:
                data = json.load(f)
        return r, data


def device_totals(data):
    out = {"allocs": 0, "hits": 0, "real_mallocs": 0}
    for dev in (data or {}).get("devices", []):
        for k in out:
            out[k] += dev.get(k, 0)
    return out


def main(lib):
    r, data = run_child(lib)
    sys.stdout.write("".join(f"  child: {ln}\n" for ln in r.stdout.splitlines()[-5:]))
    if not check(r.returncode == 0, "child ran", f"exit {r.returncode}; stderr tail: "
                 f"{r.stderr.strip().splitlines()[-3:] if r.stderr.strip() else '-'}"):
        return 1
    t = device_totals(data)
    if MODE == "cupy":
        check("LIBCUDART no" in r.stdout, "no shared runtime", "CuPy mapped no libcudart.so")
        check(t["allocs"] >= 400 and t["hits"] >= 390,
              "pooled", f"{t['allocs']} allocations, {t['hits']} hits, {t['real_mallocs']} real")
        held = [int(x) for x in r.stdout.split("HELD ")[1].split()[:2]] if "HELD " in r.stdout else [0, 1 << 40]
        check(held[0] >= 4 * MIB and held[0] - held[1] >= 4 * MIB, "released on SIGUSR1",
              f"{held[0] // MIB} MiB held after the arrays were dropped, {held[1] // MIB} MiB "
              "after the signal")
    elif MODE == "numba":
        check(t["allocs"] >= 200 and t["hits"] >= 150,
              "pooled", f"{t['allocs']} allocations, {t['hits']} hits, {t['real_mallocs']} real")
    else:
        got = float(r.stdout.split("SUM ")[1].split()[0]) if "SUM " in r.stdout else 0.0
        want = float((1 << 20) * ((1 << 20) - 1))
        check(abs(got - want) <= want * 1e-3, "result", f"sum {got:.6g}, expected {want:.6g}")
        said = "is not pooled" in r.stderr
        check(said, "not pooled, said", "GPUPOOL_LOG=info names JAX's memory as not pooled "
              f"({'said' if said else 'not said'}); pool: {t['allocs']} allocations")
    return 1 if CHECKS.failures else 0


if __name__ == "__main__":
    MODE = sys.argv[2]
    CHECKS.test = f"gpu_frameworks_{MODE}"
    if "--child" in sys.argv:
        {"cupy": child_cupy, "numba": child_numba, "jax": child_jax}[MODE]()
        sys.exit(0)
    try:
        __import__({"cupy": "cupy", "numba": "numba.cuda", "jax": "jax"}[MODE])
    except Exception as e:  # noqa: BLE001 - any import failure means: not here
        print(f"SKIP gpu_frameworks_{MODE}: {e}")
        sys.exit(77)
    sys.exit(main(os.path.abspath(sys.argv[1])))
