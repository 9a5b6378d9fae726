#!/usr/bin/env bash
# check_reliability.sh — docs/RELIABILITY.md names every test this build registers, so that a new
# test cannot go undocumented: each ctest name must appear in it in backquotes, after dropping the
# prefix valgrind_ and the suffix _static (families the file describes by rule). And no line of
# the given Markdown files is over 400 characters (wide tables and lab notes read badly).
# Usage: check_reliability.sh <ctest> <build dir> <docs/RELIABILITY.md> [more .md files...]
set -uo pipefail
ctest=${1:?usage: check_reliability.sh <ctest> <build dir> <RELIABILITY.md> [file.md...]}
build=${2:?usage} doc=${3:?usage}
shift 2
status=0

names=$("$ctest" --test-dir "$build" -N | sed -n 's/^ *Test *#[0-9]*: *//p')
[ -n "$names" ] || { echo "FAIL: no test listed by '$ctest --test-dir $build -N'"; exit 1; }
count=0
while IFS= read -r name; do
	base=${name#valgrind_}
	base=${base%_static}
	count=$((count + 1))
	grep -qF -- "\`$base\`" "$doc" || { echo "FAIL: $doc does not name \`$base\` (ctest: $name)"; status=1; }
done <<<"$names"

for f in "$@"; do
	long=$(awk 'length($0) > 400 { printf "%s:%d: %d characters\n", FILENAME, FNR, length($0) }' "$f")
	[ -z "$long" ] || { echo "FAIL: lines over 400 characters:"; echo "$long"; status=1; }
done

[ $status -eq 0 ] && echo "PASS docs_reliability: $count tests named; no line over 400 characters in $*"
exit $status
