# hitpath_table.awk — merge the BENCH lines of hitpath runs (native and preloaded) into one
# markdown table: median ns per cudaMalloc+cudaFree pair (p99 in brackets) per contender.
# Usage: awk -f bench/hitpath_table.awk native.txt pooled.txt
function human(s) {
	if (s >= 1073741824 && s % 1073741824 == 0) return (s / 1073741824) " GiB"
	if (s >= 1048576) return (s / 1048576) " MiB"
	if (s >= 1024) return (s / 1024) " KiB"
	return s " B"
}
function cell(c, s) {
	if (!((c, s) in med)) return "-"
	return sprintf("%.0f (%.0f)%s", med[c, s], p99[c, s], err[c, s] > 0 ? " ERR" : "")
}
/^BENCH / {
	delete kv
	for (i = 2; i <= NF; i++) { split($i, a, "="); kv[a[1]] = a[2] }
	c = kv["contender"]; s = kv["size"] + 0
	med[c, s] = kv["median_ns"]; p99[c, s] = kv["p99_ns"]; err[c, s] = kv["errors"] + 0
	if (!(s in seen)) { seen[s] = 1; sizes[++nsizes] = s }
}
END {
	if (nsizes == 0) { print "(no BENCH lines)"; exit 1 }
	n = 0
	split("native async gpupool gpupool-via-runtime gpupool-driver gpupool-fenced glibc static-native static-async static-gpupool static-gpupool-driver static-gpupool-fenced static-glibc cupy-native cupy-gpupool", all, " ")
	for (i = 1; i in all; i++) if ((all[i], sizes[1]) in med || (all[i], sizes[2]) in med) order[++n] = all[i]
	hdr = "| size |"; sep = "|---|"
	for (i = 1; i <= n; i++) { hdr = hdr " " order[i] " |"; sep = sep "---|" }
	print hdr " native / gpupool |"; print sep "---|"
	# sizes in ascending order (few: insertion sort)
	for (i = 2; i <= nsizes; i++)
		for (j = i; j > 1 && sizes[j] < sizes[j - 1]; j--) { t = sizes[j]; sizes[j] = sizes[j - 1]; sizes[j - 1] = t }
	for (k = 1; k <= nsizes; k++) {
		s = sizes[k]; row = "| " human(s) " |"
		for (i = 1; i <= n; i++) row = row " " cell(order[i], s) " |"
		ratio = (("native", s) in med) && (("gpupool", s) in med) && med["gpupool", s] > 0 ? \
			sprintf("x%.0f", med["native", s] / med["gpupool", s]) : "-"
		print row " " ratio " |"
	}
	print ""
	print "median ns per cudaMalloc+cudaFree pair on a warm cache, p99 in brackets (of 50 batches:"
	print "the slowest); async = cudaMallocAsync+cudaFreeAsync on a warm pool; gpupool-fenced ="
	print "gpupool after a stream exists (reuse waits for an event fence)"
}
