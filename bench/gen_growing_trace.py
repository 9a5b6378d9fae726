#!/usr/bin/env python3
"""gen_growing_trace.py — writes, in RMM's CSV format, the allocations PyTorch would make with
its cache off (takeover mode) in the first seed's loop, as a synthetic model: 12 bf16 layers of
d=2048 kept live, then forwards over inputs growing from 256 to 8192 tokens (step 256, twice),
each layer allocating and freeing its activations (qkv, attention output, projection, MLP up,
activation, down, residual) in order. Not a recording: no kernels, no library workspaces, no
framework-internal tensors. For `bench/replay`, to compare pool policies on this pattern
without a GPU (docs/BENCHMARKS.md).
    bench/gen_growing_trace.py OUT.csv"""
import sys

D, BYTES, LAYERS = 2048, 2, 12


def events():
    n = 0
    def alloc(size):
        nonlocal n
        n += 1
        return n, size
    weights = [alloc(k * D * D * BYTES) for _ in range(LAYERS) for k in (3, 1, 4, 4)]
    for p in weights:
        yield "allocate", p
    for _ in range(2):
        for tokens in range(256, 8192 + 1, 256):
            act = lambda k: alloc(tokens * k * D * BYTES)
            x = act(1)
            yield "allocate", x
            for _ in range(LAYERS):
                qkv = act(3); yield "allocate", qkv
                att = act(1); yield "allocate", att; yield "free", qkv
                out = act(1); yield "allocate", out; yield "free", att
                x2 = act(1); yield "allocate", x2; yield "free", out
                up = act(4); yield "allocate", up
                a = act(4); yield "allocate", a; yield "free", up
                dn = act(1); yield "allocate", dn; yield "free", a
                x3 = act(1); yield "allocate", x3
                yield "free", dn; yield "free", x2; yield "free", x
                x = x3
            yield "free", x


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], "w") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for i, (action, (ptr, size)) in enumerate(events()):
            f.write("1,12:00:%09.6f,%s,0x%x,%d,0x0\n" % (i * 1e-6, action, ptr * 4096, size))


if __name__ == "__main__":
    main()
