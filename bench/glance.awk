# glance.awk — the targets at a glance, from the suite's own tables (scripts/bench: bench.md):
# every "Target ..." line, and for each table with a target column, how many rows of each
# default contender (gpupool, gpupool-fenced) met it and why the others did not.
# Usage: awk -f bench/glance.awk bench.md
/^### / { section = substr($0, 5); next }
/^Target/ { targets[++nt] = $0; next }
/^Beyond what preloading any library costs/ { targets[++nt] = "  " $0; next } # /bin/true's own share
/^\|/ && ($0 ~ /\| met \|$/ || $0 ~ /\| NOT met \([^|]*\) \|$/) {
	n = split($0, cell, "|")
	who = ""
	for (i = 2; i < n; i++) {
		c = cell[i]
		gsub(/^ +| +$/, "", c)
		if (c ~ /^gpupool(-fenced)?$/) { who = c; break }
	}
	if (who == "")
		next # variants (-exact, -poll) are settings, not the defaults the targets are about
	key = section SUBSEP who
	if (!(key in rows)) order[++nk] = key
	rows[key]++
	verdict = cell[n - 1]
	gsub(/^ +| +$/, "", verdict)
	if (verdict == "met") {
		met[key]++
	} else {
		sub(/^NOT met \(/, "", verdict)
		sub(/\)$/, "", verdict)
		why[key, verdict]++
		if (!((key, verdict) in seen)) { seen[key, verdict] = 1; reasons[key] = reasons[key] (reasons[key] == "" ? "" : "; ") verdict }
	}
}
END {
	print "### Targets at a glance"
	print ""
	for (i = 1; i <= nt; i++)
		print (targets[i] ~ /^  / ? "  - " substr(targets[i], 3) : "- " targets[i])
	for (i = 1; i <= nk; i++) {
		split(order[i], k, SUBSEP)
		line = sprintf("- %s, %s: %d of %d rows met", k[1], k[2], met[order[i]] + 0, rows[order[i]])
		if (reasons[order[i]] != "") {
			m = split(reasons[order[i]], r, "; ")
			line = line " (NOT met:"
			for (j = 1; j <= m; j++)
				line = line sprintf("%s %s x%d", j > 1 ? "," : "", r[j], why[order[i], r[j]])
			line = line ")"
		}
		print line
	}
	if (nt + nk == 0)
		print "(no target was measured)"
	print ""
}
