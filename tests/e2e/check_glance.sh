#!/usr/bin/env bash
# check_glance.sh — bench/glance.awk (the suite's "Targets at a glance") on a made-up bench.md:
# Target lines are listed; rows of the default contenders are counted per table, met or not and
# why; rows of setting variants (-exact, -poll) and contenders without a target are left out.
# Usage: check_glance.sh <path of bench/glance.awk>
set -u
awk_file=${1:?usage: check_glance.sh <glance.awk>}
md=$(mktemp)
trap 'rm -f "$md"' EXIT
cat >"$md" <<'MD'
## gpupool benchmark suite

### Hit path
Target (gpupool <= 100 ns median, single thread): met (worst size 52 ns)
Beyond what preloading any library costs (floor = a tiny library): +12.6 [-2.4, 22.4] us

### random_allocations (RMM's workload), legacy stream

| allocs | max | contender | ms | target |
|---|---|---|---|---|
| 10000 | 1 MiB | native | 399 | |
| | | async | 74.0 | |
| | | gpupool | 136 | NOT met (slower cold) |
| | | gpupool-fenced | 113 | NOT met (slower cold, memory) |
| | | gpupool-exact | 85 | NOT met (slower cold) |
| 10000 | 64 MiB | native | 1428 | |
| | | gpupool | 34.6 | met |
| | | gpupool-fenced | 36.3 | NOT met (slower cold, memory) |

### Replay
| trace | contender | ms | target |
|---|---|---|---|
| t.csv | gpupool | 2.5 | NOT met (memory) |
| | gpupool-fenced-poll | 8.1 | NOT met (memory) |
MD
got=$(awk -f "$awk_file" "$md")
want='### Targets at a glance

- Target (gpupool <= 100 ns median, single thread): met (worst size 52 ns)
  - Beyond what preloading any library costs (floor = a tiny library): +12.6 [-2.4, 22.4] us
- random_allocations (RMM'"'"'s workload), legacy stream, gpupool: 1 of 2 rows met (NOT met: slower cold x1)
- random_allocations (RMM'"'"'s workload), legacy stream, gpupool-fenced: 0 of 2 rows met (NOT met: slower cold, memory x2)
- Replay, gpupool: 0 of 1 rows met (NOT met: memory x1)'
if [[ $got != "$want" ]]; then
	echo "FAIL e2e_bench_glance: the summary differs" >&2
	diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") >&2
	exit 1
fi
echo "PASS e2e_bench_glance"
