#!/usr/bin/env python3
"""torch_seeds.py — two PyTorch workloads (growing inputs; a model rebuilt per item),
side by side in one run.

Configurations (each a fresh process; the same workload, weights from a fixed seed, no download):
  default      PyTorch's caching allocator, no shim
  uncached     PYTORCH_NO_CUDA_MEMORY_CACHING=1, no shim
  shim         PyTorch default + LD_PRELOAD=libgpupool.so (release flushes PyTorch's cache)
  takeover     LD_PRELOAD=libgpupool.so GPUPOOL_TORCH=takeover (the pool is the only cache)

Workloads:
  growing      seed 1: 12 bf16 transformer layers, d=2048, torch.no_grad(), input lengths
               growing 256 -> 8192 tokens; the sweep runs WARM+TIMED times. Then the model stays
               (live tensors), everything else is dropped, the process idles, and (shim configs)
               SIGUSR1 is sent; memory after it and the time until it came back are measured.
  reload       seed 2: a loop that builds a model, runs inference and `del`s it without
               empty_cache(); device memory per iteration.

Device memory is the device-wide figure in use (NVML, as any other process sees it: every CUDA
call's figure passes the shim, which counts its cache as free), sampled every ~2 ms by a thread of
the child, so peaks inside a forward are seen. Output: a markdown table on stdout and JSON (with the time
series) for scripts/plot-torch-seeds.

--vmm adds, after each gpupool configuration, the same with GPUPOOL_VMM=on (the seeds must be no
worse with it). --growing-takeover LABEL=K=V,K=V ... runs only seed 1 in takeover mode, once per
setting given (in that order; LABEL= alone: no setting), and prints each run's ms per forward
and peak. --rounds N runs only seed 1 in PyTorch's default mode, takeover mode and takeover with
the recommended settings (and --extra LABEL=K=V,...), interleaved, N rounds, and prints each
round's ms per forward, its ratio to PyTorch's in the same round, the peak and what the idle
process holds (before the signal), with the pool's real allocations and fence waits, in the
whole run and in the timed sweeps alone (read with `gpupool stats` from the process's live view).
With GPUPOOL_LOG=debug in a configuration (--extra dbg=GPUPOOL_LOG=debug), the timed sweeps'
real allocations are also counted by size from the shim's log: those of at most 1 MiB (classes
that grow to a fence batch) and the larger ones.

Usage: python3 bench/torch_seeds.py --lib build/shim/libgpupool.so --out DIR [--quick] [--vmm]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

MIB = 1 << 20
CONFIGS = ["default", "uncached", "shim", "takeover"]


def config_env(name, lib, extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUPOOL_") and k not in ("LD_PRELOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING")}
    if name == "uncached":
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    if name in ("shim", "takeover"):
        env["LD_PRELOAD"] = os.path.abspath(lib)
    if name == "takeover":
        env["GPUPOOL_TORCH"] = "takeover"
    env.update(extra or {})
    return env


# ---- child side -----------------------------------------------------------------------------

def runtime_meminfo():
    """Device 0's memory in use (bytes), from NVML through tests/gpu/gpucommon.py: every CUDA
    call's figure passes the shim (the runtime's cudaMemGetInfo too: it reaches the driver's
    cuMemGetInfo through cuGetProcAddress), which by default counts this process's cached blocks
    as free (GPUPOOL_REPORT_CACHED_AS_FREE): the pool's idle cache would read as not held."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
    import gpucommon
    mem = gpucommon.nvml_memory()
    if mem is None:
        raise RuntimeError("NVML (libnvidia-ml.so.1) not found: no exact device memory figure")

    def used():
        free, total = mem()
        return total - free
    return used


class Sampler:
    """Device-wide used memory every ~2 ms, with a phase label."""

    def __init__(self, used):
        self.used, self.t0, self.samples, self.phase = used, time.monotonic(), [], "start"
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            self.samples.append((time.monotonic() - self.t0, self.used(), self.phase))
            time.sleep(0.002)

    def peak(self, phases):
        return max((u for _, u, p in self.samples if p in phases), default=0)

    def finish(self):
        self.stop = True
        self.thread.join()
        # Thin out the series for the JSON: keep every sample that changes, at most ~4000.
        out, last = [], None
        for t, u, p in self.samples:
            if u != last:
                out.append((round(t, 4), u, p))
                last = u
        step = max(1, len(out) // 4000)
        out = out[::step]
        if self.samples:  # the end of the run, so flat tails show
            t, u, p = self.samples[-1]
            out.append((round(t, 4), u, p))
        return out


POOL_COUNTS = ("real_mallocs", "real_frees", "hits", "allocs", "fence_waits", "fence_joins", "trims", "remaps")


def pool_counts():
    """The pool's counters now (summed over devices), read with `gpupool stats` from this
    process's live view; None without gpupool (GPUPOOL_BENCH_CLI names the command)."""
    cli = os.environ.get("GPUPOOL_BENCH_CLI")
    if not cli:
        return None
    try:
        p = subprocess.run([cli, "stats", str(os.getpid()), "--json"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=10)
        devs = json.loads(p.stdout.decode()).get("devices", [])
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return {k: sum(d.get(k, 0) or 0 for d in devs) for k in POOL_COUNTS}


def build_model(torch, d, layers, heads, ff):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d, heads, ff, batch_first=True, dropout=0.0,
                                             device="cuda", dtype=torch.bfloat16)
    return torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()


def child_growing(args):
    import torch
    used = runtime_meminfo()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    ctx = used()  # the CUDA context and what torch set up: the floor
    s = Sampler(used)
    lengths = list(range(256, 8193, 256 if not args.quick else 1024))
    model = build_model(torch, 2048, 12, 16, 8192)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    torch.manual_seed(1)
    steps, fwd_ms = [], []
    timed_from = None
    with torch.no_grad():
        for rep in range(args.warm + args.timed):
            s.phase = "warm" if rep < args.warm else "timed"
            torch.cuda.synchronize()
            if rep == args.warm:  # outside the timed sweeps: what the pool did during them
                timed_from = pool_counts()
                sys.stderr.write(TIMED_BEGIN + "\n")  # the shim's log lines after it are theirs
                sys.stderr.flush()
            t0 = time.perf_counter()
            for n in lengths:
                x = torch.randn(1, n, 2048, device="cuda", dtype=torch.bfloat16)
                y = model(x)
                del x, y
                if rep == 0:
                    torch.cuda.synchronize()
                    steps.append({"len": n, "used": used(),
                                  "allocated": torch.cuda.memory_allocated(),
                                  "reserved": torch.cuda.memory_reserved()})
            torch.cuda.synchronize()
            if rep >= args.warm:
                fwd_ms.append((time.perf_counter() - t0) * 1000 / len(lengths))
    s.phase = "idle"
    torch.cuda.synchronize()
    sys.stderr.write(TIMED_END + "\n")
    sys.stderr.flush()
    timed_to = pool_counts()
    timed_pool = ({k: timed_to[k] - timed_from[k] for k in POOL_COUNTS}
                  if timed_from and timed_to else None)
    live = max(torch.cuda.memory_allocated(), params)
    time.sleep(0.5)
    before = used()
    after, back_ms = before, None
    if args.signal:
        s.phase = "release"
        t0 = time.monotonic()
        os.kill(os.getpid(), signal.SIGUSR1)
        # Until it stops falling: 100 ms without change after a drop, or 10 s.
        last, last_change = before, time.monotonic()
        while time.monotonic() - t0 < 10:
            time.sleep(0.002)
            u = used()
            if u != last:
                last, last_change = u, time.monotonic()
                back_ms = (last_change - t0) * 1000
            elif u < before and time.monotonic() - last_change > 0.1:
                break
        after = last
        s.phase = "after"
        time.sleep(0.2)
    series = s.finish()
    return {"ctx": ctx, "params": params, "live": live, "fwd_ms": fwd_ms,
            "peak": s.peak({"timed"}), "peak_all": s.peak({"warm", "timed"}),
            "before_signal": before, "after_signal": after, "back_ms": back_ms,
            "steps": steps, "series": series, "timed_pool": timed_pool}


def child_reload(args):
    import torch
    used = runtime_meminfo()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    ctx = used()
    s = Sampler(used)
    per_iter = []
    with torch.no_grad():
        for i in range(args.iters):
            s.phase = f"iter{i}"
            model = build_model(torch, 1024, 8, 16, 4096)
            x = torch.randn(8, 512, 1024, device="cuda", dtype=torch.bfloat16)
            y = model(x)
            torch.cuda.synchronize()
            live = sum(p.numel() * p.element_size() for p in model.parameters())
            del model, x, y
            torch.cuda.synchronize()
            time.sleep(args.pause)
            per_iter.append({"iter": i, "used_after_del": used(), "model_bytes": live,
                             "reserved": torch.cuda.memory_reserved()})
    series = s.finish()
    return {"ctx": ctx, "iters": per_iter, "series": series}


# ---- parent side ----------------------------------------------------------------------------

TIMED_BEGIN, TIMED_END = "gpupool-bench: timed sweeps begin", "gpupool-bench: timed sweeps end"
REAL_LINE = "a real allocation of "  # shim/backend.c's line at GPUPOOL_LOG=debug


def timed_real(text):
    """The real allocations the shim's debug log names between the child's timed-sweep markers:
    {"small": of at most 1 MiB, "large": larger, "mib": their MiB}; None when the log names none
    at all (not at debug)."""
    inside, seen, res = False, False, {"small": 0, "large": 0, "mib": 0.0}
    for ln in text.splitlines():
        if ln == TIMED_BEGIN or ln == TIMED_END:
            inside = ln == TIMED_BEGIN
            continue
        at = ln.find(REAL_LINE)
        if at < 0 or not ln.startswith("gpupool:"):
            continue
        seen = True
        try:
            n = int(ln[at + len(REAL_LINE):].split()[0])
        except (ValueError, IndexError):
            continue
        if inside:
            res["small" if n <= 1 << 20 else "large"] += 1
            res["mib"] += n / 1048576.0
    return res if seen else None


def run_child(workload, config, lib, args, extra_env=None, label=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", workload,
           "--warm", str(args.warm), "--timed", str(args.timed), "--iters", str(args.iters),
           "--pause", str(args.pause)]
    if config in ("shim", "takeover") and workload == "growing":
        cmd.append("--signal")
    if args.quick:
        cmd.append("--quick")
    env = config_env(config, lib, extra_env)
    stats = f"/tmp/torch-seeds-stats.{os.getpid()}.json"
    if config in ("shim", "takeover"):
        env["GPUPOOL_STATS_FILE"] = stats
        cli = os.path.join(os.path.dirname(os.path.abspath(lib)), "..", "cli", "gpupool")
        if os.access(cli, os.X_OK):
            env["GPUPOOL_BENCH_CLI"] = os.path.normpath(cli)
        env.setdefault("GPUPOOL_LOG", "info")
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if p.returncode != 0:
        sys.stderr.write(p.stderr.decode()[-3000:])
        return {"config": label or config, "error": p.returncode}
    res = json.loads(p.stdout.decode().strip().splitlines()[-1])
    res["config"] = label or config
    res["wall_s"] = round(time.monotonic() - t0, 1)
    log = [ln for ln in p.stderr.decode().splitlines() if ln.startswith("gpupool:")]
    res["gpupool_log"] = log[-5:]
    res["streams"] = [ln for ln in log if "stream was created by" in ln]
    res["ordered"] = not any("no longer in one stream order" in ln for ln in log)
    real = timed_real(p.stderr.decode())
    if real is not None:
        res["timed_real"] = real
    try:
        with open(stats) as f:
            devs = json.load(f).get("devices", [])
        os.unlink(stats)
        res["pool"] = {k: sum(d.get(k, 0) or 0 for d in devs)
                       for k in ("real_mallocs", "real_frees", "hits", "allocs", "fence_waits", "fence_joins",
                                 "fence_wait_timeouts", "remaps", "trims", "peak_reserved_bytes")}
    except (OSError, ValueError):
        pass
    return res


# docs/USAGE.md's recommendation for a server of many sizes in takeover mode.
RECOMMENDED = "GPUPOOL_VMM=on,GPUPOOL_VMM_AGE=100ms,GPUPOOL_VMM_TRIM=1,GPUPOOL_IDLE_TIMEOUT=10s"


def timed_cell(t):
    if not t:
        return "-"
    return f"{t['real_mallocs']} / {t['fence_waits']} / {t['allocs'] - t['hits']}"


def growing_rounds(args):
    """Seed 1 in PyTorch's default mode, in takeover mode and with the recommended settings (and
    any LABEL=K=V,... given), interleaved: round after round, each configuration a fresh process."""
    specs = [("pytorch", "default", ""), ("takeover", "takeover", ""),
             ("recommended", "takeover", RECOMMENDED)]
    for spec in args.extra or []:
        label, _, kvs = spec.partition("=")
        specs.append((label, "takeover", kvs))
    runs = []
    for rnd in range(args.rounds):
        for label, config, kvs in specs:
            env = dict(kv.split("=", 1) for kv in kvs.split(",") if kv)
            r = run_child("growing", config, args.lib, args, env, label=label)
            r["round"] = rnd
            runs.append(r)
            r2 = {k: v for k, v in r.items() if k not in ("series", "steps")}
            print("BENCH growing " + json.dumps(r2), flush=True)
    ok = [r for r in runs if "error" not in r]

    def med(v):
        v = sorted(v)
        return v[len(v) // 2]
    base = {r["round"]: med(r["fwd_ms"]) for r in ok if r["config"] == "pytorch"}
    base_held = max((r["before_signal"] for r in ok if r["config"] == "pytorch"), default=None)
    print("\n| configuration | settings | ms per forward, each round | vs PyTorch, each round "
          "| peak MiB | idle, held MiB | vs PyTorch (worst) | real allocations | fence waits (timed out) "
          "| fences joined | timed sweeps: real allocations / fence waits / misses |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, config, kvs in specs:
        rs = [r for r in ok if r["config"] == label]
        if not rs:
            print(f"| {label} | {kvs or '-'} | failed | | | | | | | | |")
            continue
        ms = [med(r["fwd_ms"]) for r in rs]
        ratios = [med(r["fwd_ms"]) / base[r["round"]] for r in rs if r["round"] in base]
        held = [r["before_signal"] for r in rs]
        pool = [r.get("pool", {}) for r in rs]
        vs = f"{(max(held) / base_held - 1) * 100:+.1f}%" if base_held else "-"
        print(f"| {label} | {kvs.replace(',', ' ') or '-'} | {', '.join(f'{v:.2f}' for v in ms)} | "
              f"{', '.join(f'{v:.3f}' for v in ratios)} | "
              f"{', '.join(mib(r['peak']) for r in rs)} | {', '.join(mib(h) for h in held)} | {vs} | "
              f"{', '.join(str(p.get('real_mallocs', '-')) for p in pool)} | "
              f"{', '.join(str(p.get('fence_waits', '-')) + ' (' + str(p.get('fence_wait_timeouts', '-')) + ')' for p in pool)} | "
              f"{', '.join(str(p.get('fence_joins', '-')) for p in pool)} | "
              f"{', '.join(timed_cell(r.get('timed_pool')) for r in rs)} |")
    sized = [r for r in ok if r.get("timed_real")]
    if sized:
        print("\ntimed sweeps' real allocations by size (GPUPOOL_LOG=debug): " + "; ".join(
            f"{r['config']} round {r['round']}: {r['timed_real']['small']} of at most 1 MiB, "
            f"{r['timed_real']['large']} larger ({r['timed_real']['mib']:.0f} MiB)" for r in sized))
    seen = sorted({ln for r in ok for ln in r.get("streams", [])})
    print("\nstreams created (shim log): " + ("; ".join(seen) if seen else "none") +
          "; one stream order: " + ", ".join(f"{r['config']}={r.get('ordered')}" for r in ok
                                             if r["config"] != "pytorch" and r["round"] == 0))
    with open(os.path.join(args.out, "torch_growing_rounds.json"), "w") as f:
        json.dump(runs, f)
    return 0


def growing_takeover(args):
    """Seed 1 in takeover mode under each of args.growing_takeover's settings, in that order."""
    print("| run | settings | ms per forward (median) | each timed sweep | peak device MiB |")
    print("|---|---|---|---|---|")
    for spec in args.growing_takeover:
        label, _, kvs = spec.partition("=")
        env = dict(kv.split("=", 1) for kv in kvs.split(",") if kv)
        r = run_child("growing", "takeover", args.lib, args, env, label=label)
        if "error" in r:
            print(f"| {label} | {kvs} | failed (exit {r['error']}) | | |", flush=True)
            continue
        ms = sorted(r["fwd_ms"])[len(r["fwd_ms"]) // 2]
        print(f"| {label} | {kvs or '-'} | {ms:.2f} | {', '.join(f'{v:.2f}' for v in r['fwd_ms'])} "
              f"| {mib(r['peak'])} |", flush=True)
    return 0


def mib(b):
    return "-" if b is None else f"{b / MIB:.0f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--lib", default="build/shim/libgpupool.so")
    ap.add_argument("--out", default=".")
    ap.add_argument("--warm", type=int, default=1)
    ap.add_argument("--timed", type=int, default=3)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--signal", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--vmm", action="store_true")
    ap.add_argument("--growing-takeover", nargs="+", metavar="LABEL=K=V,K=V")
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--extra", nargs="+", metavar="LABEL=K=V,K=V")
    args = ap.parse_args()
    if args.child:
        res = child_growing(args) if args.child == "growing" else child_reload(args)
        print(json.dumps(res))
        return 0

    os.makedirs(args.out, exist_ok=True)
    if args.growing_takeover:
        return growing_takeover(args)
    if args.rounds:
        return growing_rounds(args)
    vmm = {"GPUPOOL_VMM": "on"}

    def runs(workload, config, extra=None, label=None):
        """The run, and with --vmm (a gpupool configuration) the same with GPUPOOL_VMM=on."""
        out = [run_child(workload, config, args.lib, args, extra, label=label)]
        if args.vmm and config in ("shim", "takeover"):
            out.append(run_child(workload, config, args.lib, args, {**(extra or {}), **vmm},
                                 label=(label or config) + "+VMM=on"))
        return out

    growing = [r for c in CONFIGS for r in runs("growing", c)]
    growing += runs("growing", "takeover", {"GPUPOOL_MAX_CACHED": "1GiB"}, "takeover+MAX_CACHED=1GiB")
    # Only blocks of the request's own class (GPUPOOL_OVERSIZE=2, the default, lets larger idle
    # blocks serve smaller requests, which lowers takeover's peak; docs/BENCHMARKS.md has the
    # figures).
    growing.append(run_child("growing", "takeover", args.lib, args, {"GPUPOOL_OVERSIZE": "1"},
                             label="takeover+OVERSIZE=1"))
    reload_runs = (runs("reload", "default") + runs("reload", "shim") +
                   runs("reload", "takeover", {"GPUPOOL_MAX_CACHED": "256MiB"},
                        "takeover+MAX_CACHED=256MiB"))
    with open(os.path.join(args.out, "torch_seeds.json"), "w") as f:
        json.dump({"growing": growing, "reload": reload_runs}, f)

    base = next((r for r in growing if r["config"] == "default" and "error" not in r), None)
    # The floor: what the uncached run (no cache anywhere) holds at its end: context, loaded
    # kernels, library workspaces and the live model.
    unc = next((r for r in growing if r["config"] == "uncached" and "error" not in r), None)
    floor = unc["before_signal"] if unc else None
    print("### Seed 1: growing inputs (12 bf16 layers, d=2048, 256 -> 8192 tokens)\n")
    print("| configuration | ms per forward | vs default | peak device MiB | vs default | before release MiB "
          "| after SIGUSR1 MiB | over the floor | SIGUSR1 -> memory back |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in growing:
        if "error" in r:
            print(f"| {r['config']} | failed (exit {r['error']}) |||||||")
            continue
        ms = sorted(r["fwd_ms"])[len(r["fwd_ms"]) // 2]
        rel = "" if base is None else f"{(ms / (sorted(base['fwd_ms'])[len(base['fwd_ms']) // 2]) - 1) * 100:+.1f}%"
        signalled = r["back_ms"] is not None
        after = mib(r["after_signal"]) if signalled else "(no signal)"
        over = (f"{(r['after_signal'] - floor) / MIB:+.0f} MiB ({(r['after_signal'] / floor - 1) * 100:+.1f}%)"
                if signalled and floor else "-")
        back = f"{r['back_ms']:.0f} ms" if signalled else "-"
        prel = "" if base is None else f"{(r['peak'] / base['peak'] - 1) * 100:+.1f}%"
        print(f"| {r['config']} | {ms:.2f} | {rel} | {mib(r['peak'])} | {prel} | {mib(r['before_signal'])} "
              f"| {after} | {over} | {back} |")
    print("\nms per forward: median over the timed sweeps (each the mean over all lengths); peak: "
          "device-wide used memory during the timed sweeps; floor: device memory the uncached run "
          f"holds at its end ({mib(floor)} MiB: CUDA context, kernels loaded on first use, library "
          "workspaces, the live model of "
          f"{mib(growing[0].get('params'))} MiB); no signal is sent to runs without the shim.\n")
    print("### Seed 2: rebuild a model per item, `del` it, no empty_cache()\n")
    print("| configuration | " + " | ".join(f"iter {i}" for i in range(args.iters)) + " |")
    print("|---|" + "---|" * args.iters)
    for r in reload_runs:
        if "error" in r:
            print(f"| {r['config']} | failed (exit {r['error']}) |")
            continue
        print(f"| {r['config']} | " + " | ".join(mib(it["used_after_del"]) for it in r["iters"]) + " |")
    print("\ndevice MiB in use after each iteration's `del` (model "
          f"{mib(reload_runs[0]['iters'][0]['model_bytes']) if 'iters' in reload_runs[0] else '?'} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
