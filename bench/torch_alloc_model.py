#!/usr/bin/env python3
"""torch_alloc_model.py — what PyTorch's own caching allocator would reserve for an allocation
trace (RMM's CSV format, as bench/replay reads it), computed on the CPU: the comparison the Llama
target asks for (idle memory held no more than PyTorch's allocator), without a GPU.

A model of CUDACachingAllocator's default configuration (c10/cuda/CUDACachingAllocator.cpp), for
one device and one stream, not the code:
  - sizes round up to 512 bytes; requests of at most 1 MiB come from the small pool, larger ones
    from the large pool;
  - a miss reserves a segment: 2 MiB for a small request, 20 MiB for a large one under 10 MiB,
    else the request rounded up to 2 MiB;
  - a request takes the smallest free block of its pool that holds it (best fit) and splits off
    the rest when what remains is at least 512 bytes (small pool) or more than 1 MiB (large);
  - a free merges the block with free neighbours of its segment;
  - segments are never given back (no empty_cache, no out-of-memory).
Not modelled: streams and events, expandable segments, garbage collection thresholds, the
allocator's own rounding options (all defaults in PyTorch 2.x).

Usage: python3 bench/torch_alloc_model.py TRACE.csv [TRACE.csv ...]
Prints one line per trace: peak reserved, peak in use, both in MiB.
"""
import bisect
import sys

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


class Pool:
    """Free blocks of one pool, ordered by (size, address) for best fit."""

    def __init__(self):
        self.free = []  # sorted list of (size, addr)

    def take(self, size):
        i = bisect.bisect_left(self.free, (size, -1))
        if i == len(self.free):
            return None
        return self.free.pop(i)

    def add(self, size, addr):
        bisect.insort(self.free, (size, addr))

    def remove(self, size, addr):
        i = bisect.bisect_left(self.free, (size, addr))
        assert self.free[i] == (size, addr)
        self.free.pop(i)


class Allocator:
    def __init__(self):
        self.pools = {True: Pool(), False: Pool()}  # small?
        self.blocks = {}  # addr -> [size, free, small, segment start, segment end]
        self.ends = {}    # end address -> addr of the block that ends there
        self.next_addr = 1 << 40
        self.reserved = self.peak_reserved = 0
        self.in_use = self.peak_in_use = 0

    @staticmethod
    def round_size(n):
        return max(MIN_BLOCK, (n + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK)

    @staticmethod
    def segment_size(n):
        if n <= SMALL_SIZE:
            return SMALL_BUFFER
        if n < MIN_LARGE_ALLOC:
            return LARGE_BUFFER
        return (n + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE

    def _set(self, addr, size, free, small, s0, s1):
        self.blocks[addr] = [size, free, small, s0, s1]
        self.ends[addr + size] = addr

    def alloc(self, n):
        size = self.round_size(n)
        small = size <= SMALL_SIZE
        pool = self.pools[small]
        got = pool.take(size)
        if got is None:
            seg = self.segment_size(size)
            addr = self.next_addr
            self.next_addr += seg + ROUND_LARGE  # segments never touch
            self._set(addr, seg, True, small, addr, addr + seg)
            self.reserved += seg
            self.peak_reserved = max(self.peak_reserved, self.reserved)
            got = (seg, addr)
        bsize, addr = got
        _, _, _, s0, s1 = self.blocks[addr]
        rest = bsize - size
        if (small and rest >= MIN_BLOCK) or (not small and rest > SMALL_SIZE):
            self._set(addr, size, False, small, s0, s1)
            self._set(addr + size, rest, True, small, s0, s1)
            pool.add(rest, addr + size)
        else:
            self.blocks[addr][1] = False
        self.in_use += self.blocks[addr][0]
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        return addr

    def free(self, addr):
        size, _, small, s0, s1 = self.blocks[addr]
        pool = self.pools[small]
        self.in_use -= size
        nxt = addr + size
        if nxt < s1 and self.blocks[nxt][1]:
            nsize = self.blocks.pop(nxt)[0]
            pool.remove(nsize, nxt)
            del self.ends[nxt]
            size += nsize
        prev = self.ends.get(addr) if addr > s0 else None
        if prev is not None and self.blocks[prev][1]:
            pool.remove(self.blocks[prev][0], prev)
            del self.blocks[addr]
            del self.ends[addr]
            size += self.blocks[prev][0]
            addr = prev
        self._set(addr, size, True, small, s0, s1)
        pool.add(size, addr)


def replay(path):
    a = Allocator()
    live = {}
    with open(path) as f:
        next(f)
        for line in f:
            parts = line.rstrip("\n").split(",")
            action, ptr, size = parts[2].strip(), parts[3].strip(), int(parts[4])
            if action == "allocate":
                live[ptr] = a.alloc(size)
            elif action == "free" and ptr in live:
                a.free(live.pop(ptr))
    return a


def main():
    if len(sys.argv) < 2:
        print(__doc__.split("Usage: ")[1].splitlines()[0], file=sys.stderr)
        return 2
    for path in sys.argv[1:]:
        a = replay(path)
        print(f"{path}: PyTorch's allocator (model) reserves {a.peak_reserved / 2**20:.0f} MiB "
              f"at peak, {a.peak_in_use / 2**20:.0f} MiB in use at peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
