#!/usr/bin/env python3
"""llama_generate.py — a real model client: transformers' Llama built from a config (16 layers,
d=2048, bf16, weights from a fixed seed, no download) answering prompts of 128 to 4096 tokens
with `generate` (greedy, 32 new tokens each), then idle.

Configurations, each a fresh process, run in interleaved order (ROUNDS times each):
  pytorch       PyTorch's own caching allocator, no shim
  takeover      LD_PRELOAD=libgpupool.so GPUPOOL_TORCH=takeover (the pool is PyTorch's only cache)
  takeover-vmm  the same with GPUPOOL_VMM=on (idle blocks of other sizes move into a miss's block)
  takeover-vmm-trim  and GPUPOOL_VMM_TRIM=1 (idle blocks of other sizes that cannot serve a miss are
                given back before the pool grows; those of 64 KiB to 1 MiB while the GPU is idle)
  takeover-vmm-age   GPUPOOL_VMM=on GPUPOOL_VMM_AGE=100ms (only blocks idle that long move)
  takeover-vmm-age-trim  both
--configs picks some (comma-separated, in that order); default: all. `recommended` is the
docs' recommendation for takeover mode (docs/USAGE.md), whatever it is at the time.
--shapes picks client shapes (comma-separated; default: base), each run with every configuration:
  base   16 layers, d=2048, 16 heads, ff 5632, batch 1, prompts 128..4096, 32 new tokens
  wide   8 layers, d=4096, 32 heads of which 8 for keys/values, ff 11008, batch 4, prompts 64..1500
  deep   32 layers, d=1024, 8 heads, ff 2816, batch 2, prompts 300..2500, 48 new tokens
  small  4 layers, d=768, 12 heads, ff 2048, batch 8, prompts 16..512, 64 new tokens
--warm sets the warm passes (default 3).
--extra LABEL=K=V,K=V adds takeover configurations with more settings (e.g. an idle timeout;
K is a GPUPOOL_* setting, or LD_PRELOAD: another build's library, for an A/B in one run);
--late S reads what the idle client holds again S seconds later (after an idle timeout's release),
then has it answer the prompts twice more (tokens/s after the idle spell: the first pass pays for
what was given back, the next is warm again, in the same process).
--gap S has the client wait S seconds between requests (a client whose requests come apart,
e.g. longer than GPUPOOL_VMM_AGE): tokens/s count the requests' own time only.
Measured from outside with nvidia-smi (device memory in use above what it was before the client
started): what the idle client holds, and (the shim) what it holds after SIGUSR1 (its floor);
from inside: tokens per second over all prompts, the first pass and the median and best of the
warm ones, and (--late) the two passes after the idle spell; from the shim's statistics at exit
(GPUPOOL_STATS_FILE): the pool's peak (live and cached), real allocations, splits, merges, remaps
and trims; from its log (GPUPOOL_LOG=info, in a file): whether GPU
work stayed in one stream order (no stream created: a freed block is reused at once; else it waits
for a fence, and sizes of 1 MiB and less grow by a fence batch first).
Prints `BENCH llama {json}` per run and a markdown table.

Usage: python3 bench/llama_generate.py --lib build/shim/libgpupool.so [--rounds 3] [--configs a,b]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

SHAPES = {  # layers, hidden, heads, kv heads, ff, batch, prompt lengths, new tokens
    "base": (16, 2048, 16, 16, 5632, 1, [128, 256, 512, 1024, 2048, 4096], 32),
    "wide": (8, 4096, 32, 8, 11008, 4, [64, 200, 700, 1500], 32),
    "deep": (32, 1024, 8, 8, 2816, 2, [300, 900, 2500], 48),
    "small": (4, 768, 12, 12, 2048, 8, [16, 100, 512], 64),
}
CONFIGS = ("pytorch", "takeover", "takeover-vmm", "takeover-vmm-trim", "takeover-vmm-age",
           "takeover-vmm-age-trim", "recommended")
# docs/USAGE.md's recommendation for a server of many sizes in takeover mode.
RECOMMENDED = {"GPUPOOL_VMM": "on", "GPUPOOL_VMM_AGE": "100ms", "GPUPOOL_VMM_TRIM": "1",
               "GPUPOOL_IDLE_TIMEOUT": "10s"}


def smi_used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def client(shape, warm, gap=0.0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    layers, d, heads, kv, ff, batch, lengths, new_tokens = SHAPES[shape]
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=d, intermediate_size=ff, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, vocab_size=32000,
                      max_position_embeddings=8192)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, cfg.vocab_size, (batch, n), generator=gen) for n in lengths]
    outputs = []

    def one_pass():
        torch.cuda.synchronize()
        busy, tokens = 0.0, 0
        for p in prompts:
            if gap > 0 and outputs:  # between requests, not after the last one
                time.sleep(gap)
            t0 = time.perf_counter()
            out = model.generate(p.cuda(), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 do_sample=False, pad_token_id=0)
            tokens += (out.shape[1] - p.shape[1]) * out.shape[0]
            outputs.append(out[0, -new_tokens:].tolist())
            torch.cuda.synchronize()
            busy += time.perf_counter() - t0
        return tokens / busy

    with torch.no_grad():
        rates = [one_pass() for _ in range(1 + warm)]  # the first fills the caches, the rest warm
        # PyTorch's own cache at idle (0 in takeover mode, where the pool is the cache).
        print("IDLE " + json.dumps({"tok_s": rates, "tokens": outputs[-1][:8],
                                    "torch_reserved_mib": torch.cuda.memory_reserved() >> 20,
                                    "torch_allocated_mib": torch.cuda.memory_allocated() >> 20}),
              flush=True)
        # "again": two more passes after the idle spell: the first pays for what an idle timeout
        # gave back (and for a GPU that slowed its clocks while idle, as PyTorch's own client
        # does), the second is warm again: their ratio is measured within one process.
        # Anything else ends the client.
        while sys.stdin.readline().strip() == "again":
            print("AGAIN " + json.dumps({"tok_s": [one_pass(), one_pass()]}), flush=True)


def shim_stats(path):
    """Real allocations, remaps and bytes moved, summed over devices, from the exit statistics."""
    try:
        with open(path) as f:
            st = json.load(f)
        os.unlink(path)
    except (OSError, ValueError):
        return {}
    devs = st.get("devices", [])
    res = {k: sum(d.get(k, 0) or 0 for d in devs)
           for k in ("real_mallocs", "splits", "merges", "remaps", "remapped_bytes", "fence_joins",
                     "fence_waits", "fence_wait_timeouts", "trims", "trimmed_bytes", "allocs", "hits")}
    res["peak_reserved_mib"] = sum(d.get("peak_reserved_bytes", 0) or 0 for d in devs) >> 20
    return res


UNORDERED = "no longer in one stream order"  # shim.c's note when the first stream appears


def shim_log(path):
    """Whether the shim's log says GPU work left one stream order; its last lines."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
        os.unlink(path)
    except OSError:
        return {}
    return {"ordered": not any(UNORDERED in line for line in lines), "log_tail": lines[-5:],
            "streams": [line for line in lines if "stream was created by" in line]}


def pool_view(lib, pid):
    """What the idle pool holds, from its live view (`gpupool stats --json`), in MiB."""
    cli = os.path.join(os.path.dirname(lib), "..", "cli", "gpupool")
    try:
        out = subprocess.run([cli, "stats", "--json", str(pid)], capture_output=True, text=True,
                             timeout=10).stdout
        doc = json.loads(out)
        devs = (doc[0] if isinstance(doc, list) else doc).get("devices", [])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return {}
    keys = ("in_use_bytes", "requested_bytes", "idle_bytes", "pending_bytes", "vmm_bytes")
    return {k.replace("_bytes", "_mib"): sum(d.get(k, 0) or 0 for d in devs) >> 20 for k in keys}


EXTRA = {}  # --extra: label -> more GPUPOOL_* settings on top of takeover mode


def pass_rates(passes, again):
    """Tokens/s of a client's passes (the first, then the warm ones) and of the two after its idle
    spell ([None, None] without one): what a BENCH line says of them."""
    return {"tok_s_first": passes[0], "tok_s_warm": max(passes[1:]),
            "tok_s_warm_median": statistics.median(passes[1:]), "tok_s_again": again[0],
            "tok_s_again_next": again[1], "tok_s_passes": [round(v, 1) for v in passes]}


def run(name, lib, shape, warm, late=0.0, gap=0.0):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUPOOL_") and k not in ("LD_PRELOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING")}
    stats = f"/tmp/llama-generate-stats.{os.getpid()}.json"
    logf = f"/tmp/llama-generate-log.{os.getpid()}.txt"
    if name != "pytorch":
        env["LD_PRELOAD"] = lib
        env["GPUPOOL_TORCH"] = "takeover"
        env["GPUPOOL_STATS_FILE"] = stats
        env["GPUPOOL_LOG"] = "info"
    if name.startswith("takeover-vmm"):
        env["GPUPOOL_VMM"] = "on"
    if name.endswith("-trim"):
        env["GPUPOOL_VMM_TRIM"] = "1"
    if name.startswith("takeover-vmm-age"):
        env["GPUPOOL_VMM_AGE"] = "100ms"
    if name == "recommended":
        env.update(RECOMMENDED)
    env.update(EXTRA.get(name, {}))
    base = smi_used_mib()
    with open(logf, "w") as err:  # the shim logs to stderr; the client's own errors land there too
        p = subprocess.Popen([sys.executable, __file__, "--client", "--shapes", shape, "--warm",
                              str(warm), "--gap", str(gap)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    line = p.stdout.readline()
    if not line.startswith("IDLE"):
        p.kill()
        p.wait()
        return {"config": name, "error": line.strip() or "no answer", **shim_log(logf)}
    got = json.loads(line[5:])
    time.sleep(1.0)
    held = smi_used_mib() - base
    view = pool_view(lib, p.pid) if name != "pytorch" else {}  # at the same moment
    held_late, again = None, [None, None]
    if late > 0:
        time.sleep(late)
        held_late = smi_used_mib() - base
        try:
            p.stdin.write("again\n")
            p.stdin.flush()
            line = p.stdout.readline()
        except OSError:  # the client is gone: its log says why
            line = ""
        again = json.loads(line[6:])["tok_s"] if line.startswith("AGAIN") else [None, None]
    floor = None
    if name != "pytorch":
        p.send_signal(signal.SIGUSR1)
        time.sleep(2.0)
        floor = smi_used_mib() - base
    p.stdin.write("\n")
    p.stdin.flush()
    p.wait(timeout=60)
    res = {"config": name, "shape": shape, "held_mib": held, "held_late_mib": held_late,
           "floor_mib": floor, **pass_rates(got["tok_s"], again),
           "tokens": got["tokens"], "torch_reserved_mib": got.get("torch_reserved_mib"),
           "torch_allocated_mib": got.get("torch_allocated_mib")}
    log = shim_log(logf)
    if name != "pytorch":
        res.update(shim_stats(stats))
        res.update(view)
        res["ordered"] = log.get("ordered")
        res["streams"] = log.get("streams")
    elif p.returncode != 0:
        res["log_tail"] = log.get("log_tail")
    return res


def table(results, shape, configs, late):
    print(f"\n#### shape {shape}\n")
    later = f" | {late:g} s later MiB | tokens/s after it: first / next pass" if late > 0 else ""
    print(f"| config | idle held MiB | vs PyTorch{later} | pool: in use / idle + pending MiB | "
          "pool's peak MiB | after SIGUSR1 MiB | tokens/s, first pass | tokens/s, warm: median (best) | "
          "real allocations | splits / merges / remaps / trims | one stream order |")
    print("|---|---|---|" + ("---|---|" if late > 0 else "") + "---|---|---|---|---|---|---|---|")
    base = [r["held_mib"] for r in results
            if r["shape"] == shape and r["config"] == "pytorch" and "error" not in r]
    for name in configs:
        rs = [r for r in results if r["shape"] == shape and r["config"] == name and "error" not in r]
        if not rs:
            print(f"| {name} | failed | | | | | | | | | |" + (" | |" if late > 0 else ""))
            continue

        def span(key, fmt):
            vals = [r[key] for r in rs if r.get(key) is not None]
            if not vals:
                return "-"
            lo, hi = min(vals), max(vals)
            return fmt.format(lo) if lo == hi else (fmt + "–" + fmt).format(lo, hi)
        shim = name != "pytorch"
        worst = max(r["held_mib"] for r in rs)
        vs = f"{(worst / max(base) - 1) * 100:+.1f}% (worst)" if base and shim else "-"
        pool = (f"{span('in_use_mib', '{}')} / {span('idle_mib', '{}')} + {span('pending_mib', '{}')}" if shim
                else f"PyTorch's cache: {span('torch_allocated_mib', '{}')} / "
                     f"{span('torch_reserved_mib', '{}')} reserved")
        moves = (f"{span('splits', '{}')} / {span('merges', '{}')} / {span('remaps', '{}')} / "
                 f"{span('trims', '{}')}" if shim else "-")
        said = {True: "yes", False: "no", None: "?"}
        order = "/".join(sorted({said[r.get("ordered")] for r in rs})) if shim else "-"
        lat = (f" | {span('held_late_mib', '{}')} | {span('tok_s_again', '{:.1f}')} / "
               f"{span('tok_s_again_next', '{:.1f}')}" if late > 0 else "")
        warm = f"{span('tok_s_warm_median', '{:.1f}')} ({span('tok_s_warm', '{:.1f}')})"
        print(f"| {name} | {span('held_mib', '{}')} | {vs}{lat} | {pool} | {span('peak_reserved_mib', '{}')} | "
              f"{span('floor_mib', '{}')} | {span('tok_s_first', '{:.1f}')} | "
              f"{warm} | {span('real_mallocs', '{}')} | {moves} | {order} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--client", action="store_true")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--shapes", default="base")
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--extra", nargs="+", default=[], metavar="LABEL=K=V,K=V")
    ap.add_argument("--late", type=float, default=0.0)
    ap.add_argument("--gap", type=float, default=0.0)
    a = ap.parse_args()
    for spec in a.extra:
        label, _, kvs = spec.partition("=")
        pairs = [kv.split("=", 1) for kv in kvs.split(",") if kv]
        if not label or not pairs or any(len(kv) != 2 or not (kv[0].startswith("GPUPOOL_") or kv[0] == "LD_PRELOAD")
                                      for kv in pairs):
            ap.error(f"--extra {spec}: LABEL=GPUPOOL_X=V[,GPUPOOL_Y=W...] expected (or LD_PRELOAD=LIB)")
        EXTRA[label] = dict(pairs)
    configs = [c for c in a.configs.split(",") if c] + list(EXTRA)
    shapes = [c for c in a.shapes.split(",") if c]
    bad = [c for c in configs if c not in CONFIGS and c not in EXTRA] + [c for c in shapes if c not in SHAPES]
    if bad:
        ap.error(f"unknown configuration(s) or shape(s) {', '.join(bad)}: configurations "
                 f"{', '.join(CONFIGS)}; shapes {', '.join(SHAPES)}")
    if a.client:
        return client(shapes[0], a.warm, a.gap)
    if not a.lib:
        ap.error("--lib LIBGPUPOOL is needed")
    results = []
    for r in range(a.rounds):
        for shape in shapes:
            for name in configs:
                res = run(name, os.path.abspath(a.lib), shape, a.warm, a.late, a.gap)
                res["round"] = r
                print("BENCH llama " + json.dumps(res), flush=True)
                results.append(res)
    for shape in shapes:
        table(results, shape, configs, a.late)
    same = all(len({json.dumps(r.get("tokens")) for r in results
                    if r["shape"] == s and "error" not in r}) == 1 for s in shapes)
    print(f"\ngenerated tokens identical across runs and configs, per shape: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main() or 0)
