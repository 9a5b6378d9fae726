#!/usr/bin/env bash
# check_trace_models.sh — the two trace tools of the VMM benchmarks against figures worked out by
# hand: bench/torch_alloc_model.py (what PyTorch's caching allocator would reserve: segments of
# 2 MiB for requests of at most 1 MiB, 20 MiB under 10 MiB, else the request rounded to 2 MiB;
# best fit, split when more than 1 MiB is left in the large pool, neighbours merged on free) on a
# small trace, and bench/gen_llama_trace.py (its trace is replayable: every free has its
# allocation, and the model's peak in use is the generator's own; with --models 2 the second model
# is built after the first is freed: twice the allocations, the same peak in use).
# Usage: check_trace_models.sh <bench dir>
set -u
bench=${1:?usage: check_trace_models.sh <bench dir>}
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
MiB=1048576

# 12 MiB (a segment of its own), freed; 6 and 6 MiB come from it (split, then the rest); both
# freed (merged again); 3 MiB takes part of the 12 (best fit: no 20 MiB segment); 1 KiB opens a
# 2 MiB small segment. Reserved: 14 MiB at most.
{
	echo "Thread,Time,Action,Pointer,Size,Stream"
	echo "1,00:00:00.000001,allocate,0xa,$((12 * MiB)),0x0"
	echo "1,00:00:00.000002,free,0xa,$((12 * MiB)),0x0"
	echo "1,00:00:00.000003,allocate,0xb,$((6 * MiB)),0x0"
	echo "1,00:00:00.000004,allocate,0xc,$((6 * MiB)),0x0"
	echo "1,00:00:00.000005,free,0xb,$((6 * MiB)),0x0"
	echo "1,00:00:00.000006,free,0xc,$((6 * MiB)),0x0"
	echo "1,00:00:00.000007,allocate,0xd,$((3 * MiB)),0x0"
	echo "1,00:00:00.000008,allocate,0xe,1024,0x0"
} >"$dir/small.csv"
got=$(python3 "$bench/torch_alloc_model.py" "$dir/small.csv")
case $got in
*"reserves 14 MiB at peak, 12 MiB in use at peak"*) echo "ok   the model reserves 14 MiB for the hand-made trace" ;;
*) echo "FAIL the model on the hand-made trace: $got (want 14 MiB reserved, 12 in use)"; fail=1 ;;
esac

gen=$(python3 "$bench/gen_llama_trace.py" "$dir/llama.csv" --passes 1 --prompts 128,256)
peak=$(echo "$gen" | sed -n 's/.*peak in use \([0-9]*\) MiB.*/\1/p')
model=$(python3 "$bench/torch_alloc_model.py" "$dir/llama.csv")
in_use=$(echo "$model" | sed -n 's/.*, \([0-9]*\) MiB in use at peak.*/\1/p')
unmatched=$(awk -F, 'NR > 1 { if ($3 == "allocate") live[$4] = 1; else if ($3 == "free") { if (!($4 in live)) bad++; delete live[$4] } } END { print bad + 0 }' "$dir/llama.csv")
# The model rounds sizes up to 512 bytes: its peak in use may read 1 MiB more.
if [ -n "$peak" ] && [ -n "$in_use" ] && [ "$unmatched" = 0 ] &&
	[ "$in_use" -ge "$peak" ] && [ "$in_use" -le $((peak + 1)) ]; then
	echo "ok   the modelled Llama trace replays: every free has its allocation; peak in use $peak MiB ($in_use in the model)"
else
	echo "FAIL the modelled Llama trace: generator '$gen', model '$model', frees without an allocation: $unmatched"
	fail=1
fi
gen2=$(python3 "$bench/gen_llama_trace.py" "$dir/llama2.csv" --passes 1 --prompts 128,256 --models 2)
allocs1=$(echo "$gen" | sed -n 's/^\([0-9]*\) allocations.*/\1/p')
allocs2=$(echo "$gen2" | sed -n 's/^\([0-9]*\) allocations.*/\1/p')
peak2=$(echo "$gen2" | sed -n 's/.*peak in use \([0-9]*\) MiB.*/\1/p')
left=$(awk -F, 'NR > 1 { if ($3 == "allocate") { if ($4 in live) bad++; live[$4] = 1 } else if ($3 == "free") { if (!($4 in live)) bad++; delete live[$4] } } END { n = 0; for (p in live) n++; print bad + 0, n }' "$dir/llama2.csv")
if [ -n "$allocs1" ] && [ "$allocs2" = $((2 * allocs1)) ] && [ "$peak2" = "$peak" ] && [ "$left" = "0 0" ]; then
	echo "ok   two models one after the other: $allocs2 allocations, every free matched and nothing left, peak in use $peak2 MiB"
else
	echo "FAIL --models 2: generator '$gen2' (one model: '$gen'), unmatched and left over: $left"
	fail=1
fi
exit $fail
