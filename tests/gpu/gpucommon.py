"""gpucommon.py — helpers shared by the PyTorch GPU tests: is the shim loaded, and the CUDA
runtime's own cudaMemGetInfo (the shim's counts cached blocks as free). Sets no environment."""
import os


def shim_loaded():
    with open("/proc/self/maps") as f:
        return any("libgpupool" in ln for ln in f)


def runtime_meminfo():
    """The CUDA runtime's own cudaMemGetInfo, or None. The shim's (which torch.cuda.mem_get_info
    calls) may count this process's cached blocks as free; a lookup through libcudart's own
    handle finds the runtime's definition, never the preloaded one."""
    import ctypes
    names = ["libcudart.so.13"]
    with open("/proc/self/maps") as f:
        names += sorted({ln.split()[-1] for ln in f if "/libcudart.so" in ln})
    for name in names:
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            fn = lib.cudaMemGetInfo
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.POINTER(ctypes.c_size_t)] * 2
        fn.restype = ctypes.c_int

        def call(fn=fn):
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            return free.value if fn(ctypes.byref(free), ctypes.byref(total)) == 0 else 0
        return call
    return None
