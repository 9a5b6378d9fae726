#!/usr/bin/env python3
"""check_torch_seeds.py — bench/torch_seeds.py's reading of the shim's debug log, without a GPU: the
real allocations named between the child's timed-sweep markers, counted by size (at most 1 MiB and
larger), none counted outside them, None where the log names none (not at debug); and that the
shim still writes the line it reads. The workloads themselves need PyTorch and a GPU:
scripts/gpu-takeover's machine.
Usage: check_torch_seeds.py BENCH_DIR"""
import os
import sys

from benchcheck import check, finish
import torch_seeds as ts  # noqa: E402 (benchcheck put the bench folder on the path)


log = "\n".join([
    "gpupool: info: a non-blocking stream was created by libcudnn_graph.so.9",
    "gpupool: debug: device 0: a real allocation of 2097152 bytes",   # the warm sweep: not counted
    ts.TIMED_BEGIN,
    "gpupool: debug: device 0: a real allocation of 524288 bytes",
    "gpupool: debug: device 0: a real allocation of 1048576 bytes",    # 1 MiB: small
    "gpupool: debug: device 0: a real allocation of 4194304 bytes (VMM-backed)",
    "some output of the program: a real allocation of 999 bytes",      # not the shim's
    "gpupool: debug: device 0: a real allocation of many bytes",       # unreadable: skipped
    ts.TIMED_END,
    "gpupool: debug: device 0: a real allocation of 8388608 bytes",   # after: not counted
])
got = ts.timed_real(log)
check(got == {"small": 2, "large": 1, "mib": 5.5},
      f"between the markers: two of at most 1 MiB, one larger, 5.5 MiB ({got})")
got = ts.timed_real("gpupool: info: statistics at exit:\n" + ts.TIMED_BEGIN + "\n" + ts.TIMED_END)
check(got is None, f"a log that names no real allocation (not at debug): None ({got})")
got = ts.timed_real("gpupool: debug: device 0: a real allocation of 2097152 bytes\n" + ts.TIMED_BEGIN +
                    "\n" + ts.TIMED_END)
check(got == {"small": 0, "large": 0, "mib": 0.0},
      f"at debug, none in the timed sweeps: zeros, not None ({got})")
with open(os.path.join(sys.argv[1], "..", "shim", "backend.c")) as f:
    src = f.read()
check('"device %d: ' + ts.REAL_LINE + '%zu bytes' in src,
      f"shim/backend.c still logs \"{ts.REAL_LINE}<bytes> bytes\"")
finish()
