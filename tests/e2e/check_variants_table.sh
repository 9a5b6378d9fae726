#!/usr/bin/env bash
# check_variants_table.sh — bench/variants_table.awk (scripts/bench-variants' table) on made-up
# lines in bench/threads' format: figures are ops_per_s in millions, repetitions joined in order,
# one column per variant in the order given, "-" where a variant has no line; a line without
# ops_per_s fails the run (exit 1, a message) instead of showing a made-up figure. Also checks
# that bench/threads.cu still prints ops_per_s, so the two cannot drift apart unnoticed (they
# did once: the table showed 0.0 for every figure after threads.cu's output changed).
# Usage: check_variants_table.sh <bench/variants_table.awk> <bench/threads.cu>
set -u
awk_file=${1:?usage: check_variants_table.sh <variants_table.awk> <threads.cu>}
src=${2:?usage: check_variants_table.sh <variants_table.awk> <threads.cu>}
fail=0
in=$(mktemp)
trap 'rm -f "$in"' EXIT

if ! grep -q 'ops_per_s=%' "$src"; then
	echo "FAIL: $src prints no ops_per_s= in its BENCH line"
	fail=1
fi

cat >"$in" <<'TXT'
variant=base rep=1 BENCH bench=threads contender=gpupool mode=same threads=1 reps=3 seconds=0.300 ops_per_s=11748932 ops_min=11488996 ops_max=12025212 errors=0
variant=base rep=1 BENCH bench=threads contender=gpupool-fenced mode=mixed threads=8 reps=3 seconds=0.300 ops_per_s=52167383 ops_min=49712770 ops_max=54471454 errors=0
variant=new rep=1 BENCH bench=threads contender=gpupool mode=same threads=1 reps=3 seconds=0.300 ops_per_s=12000000 ops_min=1 ops_max=2 errors=0
variant=base rep=2 BENCH bench=threads contender=gpupool mode=same threads=1 reps=3 seconds=0.300 ops_per_s=9950000 ops_min=1 ops_max=2 errors=0
TXT
got=$(awk -v order="base new" -f "$awk_file" "$in")
rc=$?
want='| contender | sizes | threads | base | new |
|---|---|---|---|---|
| gpupool | same | 1 | 11.7 / 9.9 | 12.0 |
| gpupool-fenced | mixed | 8 | 52.2 | - |'
if [ $rc -ne 0 ] || [ "$got" != "$want" ]; then
	echo "FAIL: the table (exit $rc)"
	diff <(echo "$want") <(echo "$got")
	fail=1
fi

# The format before medians (pairs=, no ops_per_s): refused, not shown as 0.0.
echo 'variant=base rep=1 BENCH bench=threads contender=gpupool mode=same threads=1 seconds=0.300 pairs=3000000 errors=0' >"$in"
err=$(awk -v order="base" -f "$awk_file" "$in" 2>&1 >/dev/null)
rc=$?
if [ $rc -eq 0 ] || [[ $err != *"no ops_per_s"* ]]; then
	echo "FAIL: a line without ops_per_s was accepted (exit $rc, stderr: $err)"
	fail=1
fi

[ $fail -eq 0 ] && echo "PASS variants_table.awk"
exit $fail
