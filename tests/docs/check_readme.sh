#!/usr/bin/env bash
# Every option row printed from the table must appear verbatim in the README, and the README
# must list no GPUPOOL_ variable row that the table does not have; docs/USAGE.md's list of every
# setting must be the table's, between its markers.
# Usage: check_readme.sh <print_options> <README.md> <docs/USAGE.md>
set -euo pipefail
printer=$1 readme=$2 usage=$3
rows=$("$printer")
status=0
while IFS= read -r row; do
  grep -qxF -- "$row" "$readme" || { echo "README lacks or differs: $row"; status=1; }
done <<<"$rows"
while IFS= read -r row; do
  grep -qxF -- "$row" <<<"$rows" || { echo "README row not in the options table: $row"; status=1; }
done < <(grep -E '^\| `GPUPOOL_' "$readme")
want=$("$printer" --usage)
have=$(sed -n '/^<!-- options:/,/^<!-- options end -->/p' "$usage" | sed '1d;$d')
if [ "$want" != "$have" ]; then
  echo "docs/USAGE.md's list of every setting differs from the options table (scripts/update-readme-options):"
  diff <(echo "$want") <(echo "$have") | head -20
  status=1
fi
[ $status -eq 0 ] && echo "README table and USAGE list match shim/options.c ($(wc -l <<<"$rows") options)"
exit $status
