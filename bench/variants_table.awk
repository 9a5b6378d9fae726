# variants_table.awk — scripts/bench-variants' table: one row per contender, size pattern and
# thread count, one column per variant, every repetition's figure (M pairs/s, the median that
# bench/threads prints as ops_per_s) joined with " / ".
# Input: "variant=NAME rep=N BENCH bench=threads ... ops_per_s=X ..." lines.
# Usage: awk -v order="NAME1 NAME2 ..." -f variants_table.awk variants.txt
# Exit status 1, with a line on stderr, when a line has no ops_per_s (bench/threads' output
# changed): a figure is never made up.
{
	delete kv
	for (i = 1; i <= NF; i++) {
		eq = index($i, "=")
		if (eq)
			kv[substr($i, 1, eq - 1)] = substr($i, eq + 1)
	}
	if (!("ops_per_s" in kv) || kv["ops_per_s"] !~ /^[0-9.]+$/) {
		printf "variants_table.awk: line %d has no ops_per_s: %s\n", NR, $0 >"/dev/stderr"
		bad = 1
		next
	}
	k = kv["contender"] " | " kv["mode"] " | " kv["threads"]
	if (!(k in seen)) {
		seen[k] = 1
		keys[++nk] = k
	}
	f = sprintf("%.1f", kv["ops_per_s"] / 1e6)
	if ((k, kv["variant"]) in cell)
		f = cell[k, kv["variant"]] " / " f
	cell[k, kv["variant"]] = f
}
END {
	nv = split(order, v, " ")
	printf "| contender | sizes | threads |"
	for (j = 1; j <= nv; j++)
		printf " %s |", v[j]
	printf "\n|---|---|---|"
	for (j = 1; j <= nv; j++)
		printf "---|"
	printf "\n"
	for (i = 1; i <= nk; i++) {
		printf "| %s |", keys[i]
		for (j = 1; j <= nv; j++)
			printf " %s |", ((keys[i], v[j]) in cell) ? cell[keys[i], v[j]] : "-"
		printf "\n"
	}
	exit bad
}
