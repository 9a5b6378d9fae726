#!/usr/bin/env bash
# check_hitpath_instructions.sh — scripts/hitpath-instructions runs end to end on this build:
# every loop of the table (both doors) gets a figure, a number of instructions a pair between 100 and 5000
# (loose bounds around what a pair costs on the stand-in: a figure outside means a broken run or
# parse, not a slow pool). One of the valgrind tests (registered with GPUPOOL_VALGRIND, never in
# a sanitizer build, whose programs valgrind cannot run): without valgrind it fails.
# Usage: check_hitpath_instructions.sh <build dir> <library>
set -u
build=${1:?usage: check_hitpath_instructions.sh <build dir> <library>}
lib=${2:?usage: check_hitpath_instructions.sh <build dir> <library>}
command -v valgrind >/dev/null 2>&1 || { echo "FAIL: valgrind not found (apt-get install valgrind)"; exit 1; }
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(GPUPOOL_BUILD_DIR=$build "$root/scripts/hitpath-instructions" --pairs 2000 "$lib" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: exit $rc"; exit 1; }
echo "$out" | awk -v lib="$lib" '
	$0 ~ "^\\| " lib " \\|" {
		rows++
		n = split($0, f, "|")
		for (i = 3; i < n; i++) {
			v = f[i]; gsub(/ /, "", v)
			if (v !~ /^[0-9]+\.[0-9][0-9]$/ || v + 0 < 100 || v + 0 > 5000) { print "FAIL: figure " v; bad = 1 }
			figs++
		}
	}
	END {
		if (rows != 1 || figs != 6) { print "FAIL: " rows " rows, " figs " figures (want 1, 6)"; bad = 1 }
		if (!bad) print "PASS hitpath-instructions: 6 figures"
		exit bad
	}'
