#!/usr/bin/env bash
# plot_trace.sh — proves scripts/plot-trace reads what GPUPOOL_TRACE writes: a workload run with
# `gpupool run --trace` (ten rounds of allocations and frees, a release by signal in the middle)
# gives a summary with its allocations, frees, one device and the signal release; and, where a
# python3 with matplotlib exists, a PNG. Skipped (exit 77) without python3.
# Usage: plot_trace.sh <gpupool> <e2e_cli> <scripts/plot-trace> [sanitizer runtime to preload]
set -u
cli=$1 prog=$2 plot=$3
unset "${!GPUPOOL_@}"
if [[ -n ${4:-} ]]; then export LD_PRELOAD=$4; else unset LD_PRELOAD; fi

fail() { echo "FAIL e2e_plot_trace: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
command -v python3 >/dev/null || { echo "SKIP e2e_plot_trace: no python3"; exit 77; }
tmp=$(mktemp -d /tmp/gpupool-e2e-plot-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

"$cli" run --trace "$tmp/t.csv" -- "$prog" --workload || fail "the traced workload failed"
[[ -s $tmp/t.csv && -s $tmp/t.pool.csv ]] || fail "no trace or pool samples in $tmp"
ok "gpupool run --trace wrote $(($(wc -l <"$tmp/t.csv") - 1)) rows and $(($(wc -l <"$tmp/t.pool.csv") - 1)) samples"
out=$(LD_PRELOAD= python3 "$plot" "$tmp/t.csv" --summary) || fail "plot-trace --summary failed: $out"
echo "$out" | sed 's/^/     /'
# 10 rounds of 8, 12, ..., 44 allocations: 260, all freed.
grep -q "^trace: 260 allocations, 260 frees, 0 failures, 1 threads" <<<"$out" &&
	grep -q "^device 0: " <<<"$out" && grep -q "^release (signal) at " <<<"$out" ||
	fail "the summary lacks the workload's figures"
ok "plot-trace --summary: 260 allocations and frees, device 0, the signal release"

py=
for candidate in python3 /usr/bin/python3; do
	if LD_PRELOAD= "$candidate" -c 'import matplotlib' 2>/dev/null; then
		py=$candidate
		break
	fi
done
if [[ -z $py ]]; then
	echo "     (no python3 with matplotlib: the PNG is not drawn; apt-get install python3-matplotlib)"
else
	LD_PRELOAD= "$py" "$plot" "$tmp/t.csv" -o "$tmp/t.png" || fail "plot-trace failed"
	[[ $(head -c 8 "$tmp/t.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
		fail "$tmp/t.png is not a PNG"
	ok "plot-trace drew $tmp/t.png ($(stat -c %s "$tmp/t.png") bytes) with $py"
fi
echo "PASS e2e_plot_trace"
