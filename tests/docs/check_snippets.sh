#!/usr/bin/env bash
# Every `gpupool SUBCOMMAND ...` line in the code blocks of the given Markdown files must name a
# subcommand that `gpupool --help` lists and only options that `gpupool SUBCOMMAND --help`
# lists, so the README cannot teach a command line the program would refuse. The subcommands
# come from --help, not from this script: a new one is checked as soon as it exists.
# Usage: check_snippets.sh <path of the gpupool binary> <file.md>...
set -uo pipefail
gp=${1:?usage: check_snippets.sh <gpupool> <file.md>...}
shift
[ $# -gt 0 ] || { echo "usage: check_snippets.sh <gpupool> <file.md>..." >&2; exit 1; }

subs=$("$gp" --help | sed -nE 's/^  gpupool ([a-z][a-z0-9-]*)( .*)?$/\1/p' | sort -u)
[ -n "$subs" ] || { echo "FAIL: no subcommand found in '$gp --help'"; exit 1; }

# Code lines: inside ``` fences, or indented by 4+ spaces after a blank or another code line.
code_lines() {
	awk '
	/^[ \t]*```/ { fence = !fence; prev_code = 0; next }
	fence { print FILENAME ":" FNR ": " $0; next }
	/^(    |\t)/ && (prev_blank || prev_code) { print FILENAME ":" FNR ": " $0; prev_code = 1; prev_blank = 0; next }
	{ prev_code = 0; prev_blank = ($0 ~ /^[ \t]*$/) }
	' "$@"
}

status=0 checked=0
starts='(^|[[:space:]/;|&(])gpupool[[:space:]]+([^[:space:]].*)$'
while IFS= read -r line; do
	where=${line%%: *}
	text=${line#*: }
	text=${text%%#*}                       # a shell comment is not part of the command
	# Each `gpupool` (bare or a path ending in /gpupool) starting a command on the line.
	while [[ $text =~ $starts ]]; do
		rest=${BASH_REMATCH[2]}
		text=$rest
		read -r -a words <<<"$rest"
		sub=${words[0]}
		checked=$((checked + 1))
		if [[ $sub == -* ]]; then
			"$gp" --help | grep -qE -- "(^|[[:space:]])${sub}([[:space:]]|$)" ||
				{ echo "FAIL $where: 'gpupool $sub': not an option of 'gpupool --help'"; status=1; }
			continue
		fi
		if ! grep -qxF -- "$sub" <<<"$subs"; then
			echo "FAIL $where: 'gpupool $sub': no such subcommand (gpupool --help lists: $(echo $subs))"
			status=1
			continue
		fi
		help=$("$gp" "$sub" --help 2>&1)
		for w in "${words[@]:1}"; do
			case $w in
			--) break ;;                   # what follows is the command gpupool runs
			';' | '&&' | '||' | '|' | '&') break ;;
			-*) ;;
			*) continue ;;
			esac
			opt=${w%%=*}
			if ! grep -qE -- "(^|[^[:alnum:]-])${opt}([^[:alnum:]-]|$)" <<<"$help"; then
				echo "FAIL $where: 'gpupool $sub $opt': not an option of 'gpupool $sub --help'"
				status=1
			fi
		done
	done
done < <(code_lines "$@")

if [ $checked -eq 0 ]; then
	echo "FAIL: no gpupool command line found in the code blocks of $*"
	exit 1
fi
[ $status -eq 0 ] && echo "PASS: $checked gpupool command lines in $* match gpupool --help"
exit $status
