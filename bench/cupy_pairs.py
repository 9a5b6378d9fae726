"""cupy_pairs.py — one allocation + free pair through CuPy with its memory pool off
(cupy.cuda.set_allocator(None)): CuPy's own runtime (linked in, no libcudart.so) calls the
driver, which gpupool's door answers. Run plain and under LD_PRELOAD=libgpupool.so; prints
"BENCH contender=cupy-native|cupy-gpupool size=... median_ns=... p99_ns=... errors=0" lines
(bench/hitpath_table.awk reads them). The figure includes Python's cost of the two calls."""
import ctypes
import statistics
import sys
import time


def main():
    import cupy
    cupy.cuda.set_allocator(None)
    shim = hasattr(ctypes.CDLL(None), "gpupool_release")
    name = "cupy-gpupool" if shim else "cupy-native"
    malloc, free = cupy.cuda.runtime.malloc, cupy.cuda.runtime.free
    free(malloc(1 << 20))
    for size in (512, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20):
        pairs = 2000 if shim else 50
        samples = []
        for _ in range(30):
            t0 = time.perf_counter_ns()
            for _ in range(pairs):
                free(malloc(size))
            samples.append((time.perf_counter_ns() - t0) / pairs)
        samples.sort()
        print(f"BENCH contender={name} size={size} pairs={pairs} samples=30 "
              f"median_ns={statistics.median(samples):.1f} p99_ns={samples[-1]:.1f} errors=0",
              flush=True)


if __name__ == "__main__":
    try:
        import cupy  # noqa: F401
    except ImportError:
        print("# cupy_pairs: no CuPy; skipped")
        sys.exit(0)
    main()
