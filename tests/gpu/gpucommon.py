"""gpucommon.py — helpers shared by the PyTorch GPU tests: is the shim loaded, the device's free
memory as it really is (NVML), its memory in use from outside (nvidia-smi), a child's answer on its
stdout, and the PASS/FAIL lines. Sets no environment."""
import ctypes
import os
import subprocess
import time


def shim_loaded():
    with open("/proc/self/maps") as f:
        return any("libgpupool" in ln for ln in f)


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def nvml_memory():
    """A function returning device 0's (free, total) memory in bytes, from NVML, or None. Every
    CUDA call's figure (cudaMemGetInfo, cuMemGetInfo, torch.cuda.mem_get_info) passes the shim,
    which may count this process's cached blocks as free (GPUPOOL_REPORT_CACHED_AS_FREE); NVML
    does not go through the driver's entry points."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1", mode=os.RTLD_LAZY)
    except OSError:
        return None
    dev = ctypes.c_void_p()
    if nvml.nvmlInit_v2() != 0 or nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) != 0:
        return None

    def call():
        m = _NvmlMemory()
        m.version = ctypes.sizeof(m) | (2 << 24)  # nvmlMemory_v2
        if nvml.nvmlDeviceGetMemoryInfo_v2(dev, ctypes.byref(m)) != 0:
            return 0, 0
        return m.free, m.total
    return call


def runtime_meminfo():
    """A function returning device 0's free memory in bytes, from NVML (nvml_memory), or None."""
    mem = nvml_memory()
    return None if mem is None else (lambda: mem()[0])


def smi_used_mib():
    """Device 0's memory in use, all processes, in MiB, as nvidia-smi sees it from outside."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def smi_process_mib(pid, absent=None):
    """What nvidia-smi shows process `pid` holding on the device, in MiB, or `absent` when it does
    not list the pid (a process that holds nothing there, or one suspended, is not listed)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    for ln in out.splitlines():
        f = [x.strip() for x in ln.split(",")]
        if len(f) == 2 and f[0] == str(pid) and f[1].isdigit():
            return int(f[1])
    return absent


def expect(p, prefix, timeout=300):
    """The words of the first line of p's stdout that starts with `prefix`, or None (p's output
    ended, or `timeout` seconds passed between lines)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ln = p.stdout.readline()
        if not ln:
            return None
        if ln.startswith(prefix):
            return ln.split()
    return None


class Checks:
    """The PASS/FAIL/INFO lines of one test (`PASS <test> <what>: <text>`) and its failures."""

    def __init__(self, test):
        self.test, self.failures = test, 0

    def line(self, tag, what, text):
        print(f"{tag} {self.test} {what}: {text}", flush=True)

    def check(self, cond, what, text):
        self.line("PASS" if cond else "FAIL", what, text)
        self.failures += 0 if cond else 1
        return cond


def server_model():
    """The growing-inputs server's model (as bench/torch_seeds.py): 12 bf16 encoder layers,
    d=2048, weights from seed 0, and a fixed 512-token probe; eval mode."""
    import torch
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(2048, 16, 8192, batch_first=True, dropout=0.0,
                                             device="cuda", dtype=torch.bfloat16)
    model = torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False).eval()
    gen = torch.Generator(device="cuda").manual_seed(1)
    probe = torch.randn(1, 512, 2048, device="cuda", dtype=torch.bfloat16, generator=gen)
    return model, probe
