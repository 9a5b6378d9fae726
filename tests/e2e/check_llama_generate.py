#!/usr/bin/env python3
"""check_llama_generate.py — bench/llama_generate.py's own parts, without a GPU: what it reads of
the shim's log (whether GPU work left one stream order) and exit statistics (summed over devices),
and its table from runs given to it (a configuration's range over rounds; "?" where the log could
not be read). The client itself needs PyTorch and a GPU: scripts/gpu-check's machine.
Usage: check_llama_generate.py BENCH_DIR"""
import contextlib
import io
import json
import os
import sys
import tempfile

from benchcheck import check, finish
import llama_generate as lg  # noqa: E402 (benchcheck put the bench folder on the path)


with tempfile.TemporaryDirectory() as d:
    log = os.path.join(d, "log")
    with open(log, "w") as f:
        f.write("gpupool: something else\ngpupool: GPU work is no longer in one stream order (a "
                "stream was created, ...)\n")
    got = lg.shim_log(log)
    check(got.get("ordered") is False and not os.path.exists(log),
          f"a log with the shim's note: not in one stream order, file removed ({got})")
    with open(log, "w") as f:
        f.write("gpupool: statistics at exit:\n")
    check(lg.shim_log(log).get("ordered") is True, "a log without it: one stream order")
    check(lg.shim_log(os.path.join(d, "none")) == {}, "no log: nothing said")

    stats = os.path.join(d, "stats.json")
    with open(stats, "w") as f:
        json.dump({"devices": [{"real_mallocs": 3, "splits": 5, "merges": 1, "remaps": 2,
                                "remapped_bytes": 7, "trimmed_bytes": 9, "peak_reserved_bytes": 3 << 20},
                               {"real_mallocs": 1, "splits": 0, "peak_reserved_bytes": 2 << 20}]}, f)
    got = lg.shim_stats(stats)
    check(got == {"real_mallocs": 4, "splits": 5, "merges": 1, "remaps": 2, "remapped_bytes": 7,
                  "fence_joins": 0, "fence_waits": 0, "fence_wait_timeouts": 0, "trims": 0,
                  "trimmed_bytes": 9, "allocs": 0, "hits": 0, "peak_reserved_mib": 5},
          f"exit statistics summed over devices ({got})")

with open(os.path.join(sys.argv[1], "..", "shim", "shim.c")) as f:
    src = " ".join(line.strip().strip('"') for line in f)
check(lg.UNORDERED in src.replace('" "', ""), f"shim.c still logs \"{lg.UNORDERED}\"")

got = lg.pass_rates([20.0, 90.0, 70.0, 88.0], [60.0, 85.0])
check(got == {"tok_s_first": 20.0, "tok_s_warm": 90.0, "tok_s_warm_median": 88.0,
              "tok_s_again": 60.0, "tok_s_again_next": 85.0,
              "tok_s_passes": [20.0, 90.0, 70.0, 88.0]},
      f"a client's passes: the first, the warm ones' best and median, the two after the spell ({got})")
check(lg.pass_rates([20.0, 90.0], [None, None])["tok_s_again"] is None,
      "no idle spell: no pass after it")

runs = [
    {"config": "pytorch", "held_mib": 4517, "floor_mib": None, "tok_s_first": 20.0,
     "tok_s_warm": 90.0, "tok_s_warm_median": 88.0, "tokens": [1, 2], "torch_allocated_mib": 1851,
     "torch_reserved_mib": 3804},
    {"config": "takeover-vmm", "held_mib": 4400, "floor_mib": 4000, "tok_s_first": 21.0,
     "tok_s_warm": 91.0, "tok_s_warm_median": 89.5, "tokens": [1, 2], "real_mallocs": 9,
     "splits": 40, "merges": 3, "remaps": 2, "trims": 5, "peak_reserved_mib": 3900,
     "in_use_mib": 2000, "idle_mib": 1900, "pending_mib": 0, "ordered": True},
]
second = [dict(runs[0]),
          dict(runs[1], held_mib=4450, splits=44, ordered=None, tok_s_warm_median=90.5)]
queue = iter(runs + second)
lg.run = lambda name, lib, shape, warm, late, gap: dict(next(queue), shape=shape)
sys.argv = ["llama_generate.py", "--lib", "/x/libgpupool.so", "--rounds", "2",
            "--configs", "pytorch,takeover-vmm"]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = lg.main()
text = out.getvalue()
row = next((line for line in text.splitlines() if line.startswith("| takeover-vmm |")), "")
check(rc == 0 and "| pytorch | 4517 | - | PyTorch's cache: 1851 / 3804 reserved | - | - | 20.0 | "
                  "88.0 (90.0) | - | - | - |" in text,
      "the PyTorch row: its own cache in the pool's column, warm passes' median (best)")
check(row == "| takeover-vmm | 4400–4450 | -1.5% (worst) | 2000 / 1900 + 0 | 3900 | 4000 | 21.0 | "
             "89.5–90.5 (91.0) | 9 | 40–44 / 3 / 2 / 5 | ?/yes |",
      f"the VMM row: ranges over the rounds ({row})")
check("#### shape base" in text, "a table per shape")
check("generated tokens identical across runs and configs, per shape: True" in text,
      "the tokens compared")

# --extra adds a takeover configuration with its settings; --late adds the later reading and the
# pass after it to every row; --gap reaches every run.
seen = []
late_runs = iter([dict(runs[0], held_late_mib=4517, tok_s_again=85.0, tok_s_again_next=90.0),
                  dict(runs[1], config="idle", held_late_mib=2700, tok_s_again=80.5,
                       tok_s_again_next=84.0)])


def fake_run(name, lib, shape, warm, late, gap):
    seen.append((name, dict(lg.EXTRA.get(name, {})), late, gap))
    return dict(next(late_runs), shape=shape)


lg.run = fake_run
sys.argv = ["llama_generate.py", "--lib", "/x/libgpupool.so", "--rounds", "1", "--configs",
            "pytorch", "--extra", "idle=GPUPOOL_IDLE_TIMEOUT=2s,GPUPOOL_VMM=on", "--late", "3",
            "--gap", "0.3"]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = lg.main()
text = out.getvalue()
check(rc == 0 and seen == [("pytorch", {}, 3.0, 0.3),
                           ("idle", {"GPUPOOL_IDLE_TIMEOUT": "2s", "GPUPOOL_VMM": "on"}, 3.0, 0.3)],
      f"--extra runs its label with its settings, --late and --gap reach every run ({seen})")
check("| config | idle held MiB | vs PyTorch | 3 s later MiB | tokens/s after it: first / next pass |"
      in text,
      "--late: the later columns in the header")
row = next((line for line in text.splitlines() if line.startswith("| idle |")), "")
check(row.startswith("| idle | 4400 | -2.6% (worst) | 2700 | 80.5 / 84.0 | 2000 / 1900 + 0 |"),
      f"--late: the extra configuration's later reading and its two passes ({row})")
# --extra may name another build's library (an A/B in one run).
seen.clear()
lg.EXTRA.clear()
late_runs = iter([dict(runs[1], config="prev")])
sys.argv = ["llama_generate.py", "--lib", "/x/libgpupool.so", "--rounds", "1", "--configs", "",
            "--extra", "prev=LD_PRELOAD=/y/libgpupool.so,GPUPOOL_VMM=on"]
with contextlib.redirect_stdout(io.StringIO()):
    rc = lg.main()
check(rc == 0 and seen == [("prev", {"LD_PRELOAD": "/y/libgpupool.so", "GPUPOOL_VMM": "on"}, 0.0,
                            0.0)], f"--extra with LD_PRELOAD: that library for its runs ({seen})")
with contextlib.redirect_stderr(io.StringIO()):
    try:
        sys.argv = ["llama_generate.py", "--lib", "/x", "--extra", "bad=X=1"]
        lg.main()
        check(False, "--extra with a setting not GPUPOOL_*: refused")
    except SystemExit as e:
        check(e.code == 2, "--extra with a setting not GPUPOOL_*: refused")
finish()
