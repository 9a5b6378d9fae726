#!/usr/bin/env bash
# check_hitpath.sh — bench/hitpath.cu's own logic on the stand-in runtime (e2e_bench_hitpath):
# plain, every native and async pair succeeds at every size asked; preloaded, every pooled
# contender (the runtime door, the runtime's own cudaMalloc through the driver door, cuMemAlloc_v2
# found with cudaGetDriverEntryPointByVersion, after a stream exists) and glibc's pair succeed,
# and the pool saw exactly the pooled contenders' pairs (so the driver contender did go through
# gpupool, not around it); bench/hitpath_table.awk merges both runs into one table with every
# column. The figures themselves mean nothing here.
# Usage: check_hitpath.sh <e2e_bench_hitpath> <LD_PRELOAD list ending in libgpupool.so> <hitpath_table.awk>
set -u
prog=${1:?usage: check_hitpath.sh PROG LIB AWK}
lib=${2:?usage: check_hitpath.sh PROG LIB AWK}
awk_file=${3:?usage: check_hitpath.sh PROG LIB AWK}
samples=2
largest=1048576 # 512 B to 1 MiB: 4 sizes (under a sanitizer a pair of 16 MiB costs milliseconds)
nsizes=4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

for v in $(compgen -e | grep -E '^(GPUPOOL_|STANDIN_)'); do unset "$v"; done
"$prog" "$samples" "$largest" >"$dir/native.txt" 2>&1 || bad "plain run exited $?"
GPUPOOL_STATS_FILE=$dir/stats.json LD_PRELOAD=$lib "$prog" "$samples" "$largest" \
	>"$dir/pool.txt" 2>&1 || bad "preloaded run exited $?"

# count FILE CONTENDER: its BENCH lines with errors=0
count() { grep -c "^BENCH contender=$2 .* errors=0\$" "$1"; }
for c in native async; do
	n=$(count "$dir/native.txt" "$c")
	[ "$n" -eq "$nsizes" ] || bad "plain: $n sizes of $c without errors, want $nsizes"
done
for c in gpupool gpupool-via-runtime gpupool-driver gpupool-fenced glibc; do
	n=$(count "$dir/pool.txt" "$c")
	[ "$n" -eq "$nsizes" ] || bad "preloaded: $n sizes of $c without errors, want $nsizes"
done
grep -q '^# hitpath: libgpupool.so preloaded' "$dir/pool.txt" || bad "the preloaded run did not see gpupool"

# Each pooled contender: a warm batch of 10 pairs and `samples` batches of 1000, per size.
want=$((4 * nsizes * (10 + samples * 1000)))
allocs=$(sed -n 's/.*"allocs": *\([0-9]*\).*/\1/p' "$dir/stats.json" | head -n 1)
[ "${allocs:-0}" -eq "$want" ] || bad "the pool saw ${allocs:-no} allocations, want $want (4 pooled contenders)"

awk -f "$awk_file" "$dir/native.txt" "$dir/pool.txt" >"$dir/table.md" || bad "the table awk failed"
hdr=$(head -n 1 "$dir/table.md")
for c in native async gpupool gpupool-via-runtime gpupool-driver gpupool-fenced glibc; do
	case "$hdr" in *"| $c |"*) ;; *) bad "the table has no $c column: $hdr" ;; esac
done
rows=$(grep -c '^| [0-9]' "$dir/table.md")
[ "$rows" -eq "$nsizes" ] || bad "the table has $rows size rows, want $nsizes"

if [ "$fail" -ne 0 ]; then
	echo "--- plain"; cat "$dir/native.txt"; echo "--- preloaded"; cat "$dir/pool.txt"
	echo "--- table"; cat "$dir/table.md"
	exit 1
fi
echo "PASS: hitpath on the stand-in: $nsizes sizes, 7 contenders, $allocs pooled allocations, the table whole"
