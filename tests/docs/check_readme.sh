#!/usr/bin/env bash
# Every option row printed from the table must appear verbatim in the README, and the README
# must list no GPUPOOL_ variable row that the table does not have.
set -euo pipefail
printer=$1 readme=$2
rows=$("$printer")
status=0
while IFS= read -r row; do
  grep -qxF -- "$row" "$readme" || { echo "README lacks or differs: $row"; status=1; }
done <<<"$rows"
while IFS= read -r row; do
  grep -qxF -- "$row" <<<"$rows" || { echo "README row not in the options table: $row"; status=1; }
done < <(grep -E '^\| `GPUPOOL_' "$readme")
[ $status -eq 0 ] && echo "README options table matches shim/options.c ($(wc -l <<<"$rows") options)"
exit $status
