#!/usr/bin/env bash
# check_lines.sh — no README line over 200 characters and no line of docs/*.md over 400: a doc that
# renders only wide is hard to read in a terminal or a diff (put the detail in a list).
# Usage: check_lines.sh <repository root>
set -uo pipefail
root=${1:?usage: check_lines.sh <repository root>}
status=0
long=$(awk 'length($0) > 200 { printf "%s:%d: %d characters\n", FILENAME, FNR, length($0) }' "$root/README.md")
[ -z "$long" ] || { echo "FAIL: README lines over 200 characters:"; echo "$long"; status=1; }
long=$(awk 'length($0) > 400 { printf "%s:%d: %d characters\n", FILENAME, FNR, length($0) }' "$root"/docs/*.md)
[ -z "$long" ] || { echo "FAIL: docs lines over 400 characters:"; echo "$long"; status=1; }
[ $status -eq 0 ] && echo "PASS docs_line_length: README within 200 characters a line, docs/*.md within 400"
exit $status
