#!/usr/bin/env python3
"""gen_llama_trace.py — writes a synthetic allocation trace (RMM's CSV log format, what
bench/replay reads) that models bench/llama_generate.py's client tensor by tensor, for measuring
the pool on that workload without a GPU (the stand-in runtime) or without transformers.

What it models, in the order PyTorch would allocate and free (one thread, one stream):
  - the model built in float32 (LlamaForCausalLM from its config: 16 layers, d=2048,
    intermediate 5632, vocab 32000, untied head), then `.to(torch.bfloat16)`: each parameter's
    bf16 copy allocated before its float32 storage is freed;
  - a 32 MiB cuBLAS workspace at the first matmul, kept;
  - `generate` (greedy, 32 new tokens) for prompts of 128 to 4096 tokens, a first pass and three
    warm ones: a prefill over the prompt and 31 single-token steps; per layer the RMSNorm's float32
    temporaries, q/k/v projections, rotary embedding temporaries, the KV cache (kept from the
    prefill, grown by torch.cat at each step), attention output (flash: plus its logsumexp), the
    MLP's gate/up/act/product, residual adds; the head on the last position only; the sampler's
    float32 scores.
With --models N the process does all of that N times, freeing the model and its workspace before
it builds the next: a loop that swaps models (training, RL, an evaluation harness), where the
next float32 build lands in a cache the previous model's passes shaped.
It is a model, not a recording: sizes and lifetimes follow transformers' Llama code, but the
exact sequence of a real run (kernels' workspaces, tiny index tensors) differs. A recording on the
GPU (GPUPOOL_TRACE=... with the real client) supersedes it.

Usage: python3 bench/gen_llama_trace.py OUT.csv [--passes 4] [--prompts 128,256,...] [--models 1]
Prints the number of allocations and the peak bytes in use.
"""
import argparse
import sys

D, INTER, VOCAB, LAYERS, HEAD_DIM = 2048, 5632, 32000, 16, 128
NEW_TOKENS = 32


class Trace:
    def __init__(self, f):
        self.f = f
        self.next_ptr = 0x7f0000000000
        self.live = {}
        self.t = 0
        self.allocs = 0
        self.in_use = 0
        self.peak = 0
        f.write("Thread,Time,Action,Pointer,Size,Stream\n")

    def _row(self, action, ptr, size):
        self.t += 1
        s, us = divmod(self.t, 1000000)
        self.f.write(f"1,00:00:{s:02d}.{us:06d},{action},0x{ptr:x},{size},0x0\n")

    def alloc(self, size):
        ptr = self.next_ptr
        self.next_ptr += (size + 511) // 512 * 512
        self.live[ptr] = size
        self.allocs += 1
        self.in_use += size
        self.peak = max(self.peak, self.in_use)
        self._row("allocate", ptr, size)
        return ptr

    def free(self, ptr):
        size = self.live.pop(ptr)
        self.in_use -= size
        self._row("free", ptr, size)


def params():
    """(name, elements) in creation (and .to()) order."""
    out = [("embed", VOCAB * D)]
    for _ in range(LAYERS):
        out += [("q", D * D), ("k", D * D), ("v", D * D), ("o", D * D),
                ("gate", INTER * D), ("up", INTER * D), ("down", D * INTER),
                ("ln1", D), ("ln2", D)]
    out += [("norm", D), ("inv_freq", HEAD_DIM // 2), ("lm_head", VOCAB * D)]
    return out


def build_model(tr):
    """float32 construction, then .to(bfloat16): returns the bf16 parameters' pointers."""
    fp32 = [(n, tr.alloc(e * 4), e) for n, e in params()]
    bf16 = []
    for _, p, e in fp32:
        bf16.append(tr.alloc(e * 2))
        tr.free(p)
    return bf16


def rms_norm(tr, x_bytes_bf16, s):
    """RMSNorm of s tokens: float32 cast, pow, mean, add, rsqrt, mul, bf16 cast, weight mul."""
    x32 = tr.alloc(s * D * 4)
    sq = tr.alloc(s * D * 4)
    var = tr.alloc(s * 4)
    tr.free(sq)
    var2 = tr.alloc(s * 4)
    tr.free(var)
    rs = tr.alloc(s * 4)
    tr.free(var2)
    y32 = tr.alloc(s * D * 4)
    tr.free(x32)
    tr.free(rs)
    yb = tr.alloc(s * D * 2)
    tr.free(y32)
    out = tr.alloc(s * D * 2)
    tr.free(yb)
    return out


def rotary(tr, x, s):
    """x * cos + rotate_half(x) * sin: returns the new tensor (x is freed by the caller)."""
    a = tr.alloc(s * D * 2)
    neg = tr.alloc(s * D)
    rh = tr.alloc(s * D * 2)
    tr.free(neg)
    b = tr.alloc(s * D * 2)
    tr.free(rh)
    out = tr.alloc(s * D * 2)
    tr.free(a)
    tr.free(b)
    return out


def forward(tr, s, cache):
    """One forward over s new tokens; cache: per layer [K, V, tokens] (grown in place)."""
    small = [tr.alloc(s * 8), tr.alloc(s * 8)]  # position ids, cache position
    hidden = tr.alloc(s * D * 2)  # embeddings
    f = tr.alloc(s * 64 * 4)
    emb = tr.alloc(s * 128 * 4)
    tr.free(f)
    c32, s32 = tr.alloc(s * 128 * 4), tr.alloc(s * 128 * 4)
    tr.free(emb)
    cos, sin = tr.alloc(s * 128 * 2), tr.alloc(s * 128 * 2)
    tr.free(c32)
    tr.free(s32)
    for layer in cache:
        xn = rms_norm(tr, hidden, s)
        q, k, v = tr.alloc(s * D * 2), tr.alloc(s * D * 2), tr.alloc(s * D * 2)
        tr.free(xn)
        qe = rotary(tr, q, s)
        tr.free(q)
        ke = rotary(tr, k, s)
        tr.free(k)
        if layer[2] == 0:
            layer[0], layer[1], layer[2] = ke, v, s
        else:
            n = layer[2] + s
            nk = tr.alloc(n * D * 2)
            tr.free(layer[0])
            tr.free(ke)
            nv = tr.alloc(n * D * 2)
            tr.free(layer[1])
            tr.free(v)
            layer[0], layer[1], layer[2] = nk, nv, n
        att = tr.alloc(s * D * 2)
        lse = tr.alloc(16 * s * 4)
        tr.free(lse)
        tr.free(qe)
        cont = tr.alloc(s * D * 2)  # transpose(1, 2).contiguous()
        tr.free(att)
        o = tr.alloc(s * D * 2)
        tr.free(cont)
        h2 = tr.alloc(s * D * 2)
        tr.free(o)
        tr.free(hidden)
        hidden = h2
        xn = rms_norm(tr, hidden, s)
        gate = tr.alloc(s * INTER * 2)
        act = tr.alloc(s * INTER * 2)
        tr.free(gate)
        up = tr.alloc(s * INTER * 2)
        m = tr.alloc(s * INTER * 2)
        tr.free(act)
        tr.free(up)
        down = tr.alloc(s * D * 2)
        tr.free(m)
        tr.free(xn)
        h3 = tr.alloc(s * D * 2)
        tr.free(down)
        tr.free(hidden)
        hidden = h3
    hn = rms_norm(tr, hidden, s)
    tr.free(hidden)
    logits = tr.alloc(VOCAB * 2)  # the last position only
    tr.free(hn)
    tr.free(cos)
    tr.free(sin)
    for p in small:
        tr.free(p)
    return logits


def generate(tr, n):
    ids = tr.alloc(n * 8)
    mask = tr.alloc(n * 8)
    cache = [[None, None, 0] for _ in range(LAYERS)]
    for step in range(NEW_TOKENS):
        logits = forward(tr, n if step == 0 else 1, cache)
        scores = tr.alloc(VOCAB * 4)
        tr.free(logits)
        masked = tr.alloc(VOCAB * 4)  # min_new_tokens: the EOS score masked in a copy
        tr.free(scores)
        nxt = tr.alloc(8)
        tr.free(masked)
        ids2 = tr.alloc((n + step + 1) * 8)
        tr.free(ids)
        tr.free(nxt)
        ids = ids2
    for layer in cache:
        tr.free(layer[0])
        tr.free(layer[1])
    tr.free(mask)
    tr.free(ids)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--prompts", default="128,256,512,1024,2048,4096")
    ap.add_argument("--models", type=int, default=1)
    a = ap.parse_args()
    prompts = [int(x) for x in a.prompts.split(",") if x]
    if a.passes < 0 or a.models < 1 or not prompts:
        ap.error("--passes must be 0 or more, --models 1 or more, --prompts not empty")
    with open(a.out, "w") as f:
        tr = Trace(f)
        for _ in range(a.models):
            weights = build_model(tr)
            workspace = tr.alloc(32 << 20)
            for _ in range(a.passes):
                for n in prompts:
                    generate(tr, n)
            tr.free(workspace)
            for p in weights:
                tr.free(p)
    print(f"{tr.allocs} allocations, peak in use {tr.peak / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
