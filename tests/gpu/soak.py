#!/usr/bin/env python3
"""soak.py -- a long PyTorch run on the pool, for the lead to run on the GPU machine by hand.

    LD_PRELOAD=build/shim/libgpupool.so GPUPOOL_TORCH=takeover python3 tests/gpu/soak.py \
        --duration 1800 [--signal-every 1] [--report-every 10]

Takeover mode (PYTORCH_NO_CUDA_MEMORY_CACHING=1, set by the shim at load): every tensor is a
cudaMalloc/cudaFree through the pool. The loop trains a small transformer on inputs of random
length (so sizes vary all the time), on two streams, with tensors kept alive across iterations,
while a thread sends SIGUSR1 to the process every --signal-every seconds (a release each time).
Checked all along, and counted as errors:
  - a reference computation (fixed weights and input, deterministic kernels) gives bit-identical
    results every time: a block reused while the GPU still used it would corrupt it sooner or
    later;
  - tensors parked with known contents keep them (a live block handed to someone else);
  - no CUDA error and no exception out of an iteration (each is printed, with the iteration).
Every --report-every seconds one line: elapsed time, iterations, signals sent, errors, PyTorch's
live bytes, device memory used as the runtime reports it (the shim's cudaMemGetInfo counts
cached blocks as free; this reads the runtime's own), the peak of that, and the window's floor:
the least device memory used seen at the end of an iteration in the window (a release a second
brings the cache down, so this tracks what the process holds besides its cache), and a settled
reading: with the signals paused, the GPU idle (torch.cuda.synchronize) and a release done
(`gpupool release PID --wait`), device memory used, split into the pool's blocks in use, its
cached blocks (none are left after such a release) and what lies outside the pool (the context,
kernels loaded on first use, the runtime's own allocations). Flat memory is judged at the end on
the settled readings (the floors where the gpupool CLI is missing): the median of the last third
of the windows may exceed that of the first third (after the first window: warm-up) by at most
--flat-slack-mib.
Exit: 0 when no error, 1 otherwise: also when torch, a GPU or the shim is missing, or the shim is
not in takeover mode (a soak that could not run is a failed soak, never a skipped one). --self-check tests the flat-memory judgment on made-up readings, without torch (CI).
"""
import argparse
import os
import signal
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MIB = 1 << 20


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)),
                   help="seconds to run (default 600, or SOAK_SECONDS)")
    p.add_argument("--signal-every", type=float, default=1.0, help="seconds between SIGUSR1")
    p.add_argument("--report-every", type=float, default=10.0, help="seconds between reports")
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--flat-slack-mib", type=float, default=1024.0,
                   help="flat memory: the floor may rise this much from the first to the last "
                   "third of the run (kernels loaded on first use of a shape cost some)")
    p.add_argument("--self-check", action="store_true", help="check the flat-memory judgment on made-up readings (no torch)")
    return p.parse_args(argv)


def say(tag, text):
    print("%s gpu_soak %s" % (tag, text), flush=True)


def gpupool_cli():
    """build/cli/gpupool beside the preloaded build/shim/libgpupool.so, or None."""
    for lib in os.environ.get("LD_PRELOAD", "").split():
        if "libgpupool" in lib:
            cli = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(lib))), "cli",
                               "gpupool")
            return cli if os.access(cli, os.X_OK) else None
    return None


def pool_figures():
    """The pool's bytes in use and cached on device 0, from `gpupool stats --json`; None if
    unavailable. Tells memory the pool holds from memory outside it."""
    import json
    import subprocess
    cli = gpupool_cli()
    if cli is None:
        return None
    try:
        out = subprocess.run([cli, "stats", str(os.getpid()), "--json"], capture_output=True,
                             text=True, timeout=10)
        d = json.loads(out.stdout)["devices"][0]
        return d["in_use_bytes"], d["idle_bytes"] + d["pending_bytes"]
    except Exception:
        return None


def settled_reading(torch, sig, used_now):
    """(device used, pool in use, pool cached) with the signals paused, the GPU idle and a
    release done and reported; None without the CLI or when the release is not reported."""
    import subprocess
    cli = gpupool_cli()
    if cli is None or used_now is None:
        return None
    with sig.paused:
        time.sleep(0.1)  # a release the signaller started just before ends first
        torch.cuda.synchronize()
        try:
            r = subprocess.run([cli, "release", str(os.getpid()), "--wait", "--timeout", "10"],
                               capture_output=True, text=True, timeout=20)
        except Exception:
            return None
        if r.returncode != 0:
            return None
        pool = pool_figures()
        if pool is None:
            return None
        return used_now(), pool[0], pool[1]


class Signaller(threading.Thread):
    def __init__(self, every):
        super().__init__(daemon=True)
        self.every = every
        self.sent = 0
        self.stop = threading.Event()
        self.paused = threading.Lock()  # held while a settled reading is taken

    def run(self):
        while not self.stop.wait(self.every):
            with self.paused:
                os.kill(os.getpid(), signal.SIGUSR1)
                self.sent += 1


def judge_flat(floors, settled, slack_mib, say=say):
    """Says whether memory stayed flat (see the module's doc) and prints why (through `say`);
    True when there are too few windows to judge."""
    def median(xs):
        return sorted(xs)[len(xs) // 2] / MIB
    use_settled = len(settled) >= 4 and len(settled) >= len(floors) - 1
    w = [s[0] for s in settled[1:]] if use_settled else floors[1:]  # the first window: warm-up
    if len(w) < 3:
        say("INFO", "flat memory: not judged (fewer than 4 report windows)")
        return True
    third = len(w) // 3
    first, final = median(w[:third]), median(w[-third:])
    flat = final <= first + slack_mib
    say("PASS" if flat else "FAIL", "flat memory: median %s %.0f MiB in the first third of the "
        "windows, %.0f MiB in the last (%+.0f MiB; allowed %+.0f MiB)"
        % ("settled device memory used" if use_settled else "floor", first, final, final - first,
           slack_mib))
    if use_settled:
        parts = [("pool in use", lambda s: s[1]), ("pool cached", lambda s: s[2]),
                 ("outside the pool", lambda s: s[0] - s[1] - s[2])]
        say("INFO", "flat memory, by part (first third -> last third, medians): " + ", ".join(
            "%s %.0f -> %.0f MiB" % (name, median([f(s) for s in settled[1:][:third]]),
                                     median([f(s) for s in settled[1:][-third:]]))
            for name, f in parts))
    return flat


def self_check():
    """What runs without torch (CI): the flat-memory judgment on made-up readings."""
    g = 1024 * MIB
    steady = [(5 * g + i % 3 * MIB, 2 * g, 0) for i in range(20)]
    rising = [(5 * g + i * 200 * MIB, 2 * g, 0) for i in range(20)]
    runs = [([], steady, True), ([], rising, False), ([1 * g] * 10, [], True),
            ([1 * g] * 5 + [3 * g] * 5, [], False), ([1 * g, 9 * g], [], True)]
    cases = []
    for i, (floors, settled, want) in enumerate(runs):
        # Each made-up run's judgment is printed as INFO: a FAIL wanted here is no test failure.
        def noted(tag, text, i=i, want=want):
            say("INFO", "self-check, made-up run %d (wants %s): %s %s"
                % (i, "PASS" if want else "FAIL", tag, text))
        cases.append((judge_flat(floors, settled, 1024.0, noted), want))
    bad = [i for i, (got, want) in enumerate(cases) if got != want]
    say("FAIL" if bad else "PASS", "self-check: flat-memory judgment %s" %
        ("wrong in cases %s" % bad if bad else "right in %d made-up runs" % len(cases)))
    return 1 if bad else 0


def main(argv):
    args = parse_args(argv)
    if args.self_check:
        return self_check()
    try:
        import torch
    except ImportError:
        say("FAIL", "torch is not installed: the soak cannot run")
        return 1
    from gpucommon import runtime_meminfo, shim_loaded
    if not torch.cuda.is_available():
        say("FAIL", "no GPU: the soak cannot run")
        return 1
    if not shim_loaded():
        say("FAIL", "libgpupool.so is not preloaded: run with LD_PRELOAD=.../libgpupool.so")
        return 1
    if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") != "1":
        say("FAIL", "not in takeover mode: run with GPUPOOL_TORCH=takeover")
        return 1
    runtime_free = runtime_meminfo()
    total = torch.cuda.get_device_properties(0).total_memory

    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    dev = torch.device("cuda", 0)
    layer = torch.nn.TransformerEncoderLayer(args.d_model, 16, 4 * args.d_model, dropout=0.0,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, args.layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ref_w = torch.randn(1024, 1024, device=dev)
    ref_x = torch.randn(256, 1024, device=dev)
    reference = (ref_x @ ref_w).relu().sum(dim=1).cpu()
    parked = [torch.full((int(n),), float(i + 1), device=dev) for i, n in
              enumerate([1, 1000, 1 << 16, 1 << 20, 3 << 20])]
    side = torch.cuda.Stream()
    keep = []
    errors = 0
    iters = 0
    peak_used = 0
    floor = None   # least device memory used seen in this report window
    floors = []    # one per window
    settled = []   # (used, pool in use, pool cached), one per window where it could be read
    sig = Signaller(args.signal_every)
    sig.start()
    t0 = last = time.monotonic()
    say("INFO", "running %.0f s: d_model %d, %d layers, inputs up to %d tokens, SIGUSR1 every %.1f s"
        % (args.duration, args.d_model, args.layers, args.max_len, args.signal_every))
    while time.monotonic() - t0 < args.duration:
        iters += 1
        try:
            n = int(torch.randint(16, args.max_len + 1, (1,)).item())
            x = torch.randn(2, n, args.d_model, device=dev)
            loss = model(x).float().pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.cuda.stream(side):
                y = torch.randn(n, 512, device=dev) @ torch.randn(512, int(n % 700) + 1, device=dev)
                keep.append(y)
            if iters % 7 == 0:
                side.synchronize()
            if len(keep) > 8:
                keep.pop(0)
            if iters % 5 == 0:
                torch.cuda.current_stream().wait_stream(side)
                got = (ref_x @ ref_w).relu().sum(dim=1).cpu()
                if not torch.equal(got, reference):
                    errors += 1
                    say("ERROR", "iteration %d: the reference computation changed (max diff %g)"
                        % (iters, (got - reference).abs().max().item()))
                for i, t in enumerate(parked):
                    if not bool((t == float(i + 1)).all().item()):
                        errors += 1
                        say("ERROR", "iteration %d: parked tensor %d (%d elements) changed"
                            % (iters, i, t.numel()))
            if not torch.isfinite(loss).item():
                errors += 1
                say("ERROR", "iteration %d: the loss is not finite" % iters)
        except Exception:
            errors += 1
            say("ERROR", "iteration %d: %s" % (iters, traceback.format_exc().strip().splitlines()[-1]))
        now = time.monotonic()
        if runtime_free is not None:
            used = total - runtime_free()
            peak_used = max(peak_used, used)
            floor = used if floor is None else min(floor, used)
        if now - last >= args.report_every:
            last = now
            used = total - runtime_free() if runtime_free is not None else -1
            if floor is not None:
                floors.append(floor)
            pool = pool_figures()
            st = settled_reading(torch, sig, (lambda: total - runtime_free())
                                 if runtime_free is not None else None)
            if st is not None:
                settled.append(st)
            say("INFO", "%6.0f s  %7d iterations  %5d signals  %d errors  live %7.0f MiB  "
                "device used %7.0f MiB (peak %.0f MiB, floor %.0f MiB)  pool in use %s, cached %s  "
                "settled %s"
                % (now - t0, iters, sig.sent, errors, torch.cuda.memory_allocated() / MIB,
                   used / MIB, peak_used / MIB, (floor if floor is not None else -MIB) / MIB,
                   "%.0f MiB" % (pool[0] / MIB) if pool else "?",
                   "%.0f MiB" % (pool[1] / MIB) if pool else "?",
                   "%.0f MiB (pool in use %.0f, cached %.0f, outside the pool %.0f)"
                   % (st[0] / MIB, st[1] / MIB, st[2] / MIB, (st[0] - st[1] - st[2]) / MIB)
                   if st else "?"))
            floor = None
            last = time.monotonic()  # the settled reading's pause is not part of the window
    sig.stop.set()
    sig.join()
    torch.cuda.synchronize()
    say("PASS" if errors == 0 else "FAIL", "%d iterations in %.0f s with %d SIGUSR1: %d errors"
        % (iters, time.monotonic() - t0, sig.sent, errors))
    flat = judge_flat(floors, settled, args.flat_slack_mib)
    return 0 if errors == 0 and flat else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
