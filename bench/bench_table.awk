# bench_table.awk — merge the "BENCH bench=..." lines of the threads, random_alloc, replay and
# nocuda_startup runs (plain and preloaded; any number of files, any order) into markdown tables,
# one section per benchmark present, each with its issue-6 target checked.
# Usage: awk -f bench/bench_table.awk FILE...      (hitpath has its own: hitpath_table.awk)
function rate(r) {
	if (r >= 1e6) return sprintf("%.1f M/s", r / 1e6)
	if (r >= 1e3) return sprintf("%.0f k/s", r / 1e3)
	return sprintf("%.0f /s", r)
}
function ms(v) { return v < 0 ? "-" : v >= 100 ? sprintf("%.0f", v) : sprintf("%.1f", v) }
function add(list, key, arr) { if (!(key in arr)) { arr[key] = 1; list[++list[0]] = key } }
# numeric ascending sort of list[1..list[0]] (short lists)
function nsort(list,   i, j, t) {
	for (i = 2; i <= list[0]; i++)
		for (j = i; j > 1 && list[j] + 0 < list[j - 1] + 0; j--) { t = list[j]; list[j] = list[j - 1]; list[j - 1] = t }
}
/^BENCH bench=/ {
	delete kv
	for (i = 2; i <= NF; i++) { eq = index($i, "="); kv[substr($i, 1, eq - 1)] = substr($i, eq + 1) }
	b = kv["bench"]
	if (b == "threads") {
		k = kv["mode"] SUBSEP kv["threads"] SUBSEP kv["contender"]
		th_rate[k] = kv["ops_per_s"] + 0; th_err[k] = kv["errors"] + 0
		if (kv["reps"] != "") th_reps = kv["reps"]
		th_secs = kv["seconds"]
		add(th_modes, kv["mode"], th_mode_seen); add(th_counts, kv["threads"], th_count_seen)
	} else if (b == "random_alloc" || b == "replay") {
		cfg = b == "replay" ? kv["trace"] " (" kv["threads"] " threads, " kv["allocs"] " allocs)" \
			: kv["streams"] SUBSEP kv["allocs"] SUBSEP kv["max_mib"]
		k = b SUBSEP cfg SUBSEP kv["contender"]
		cold[k] = kv["cold_ms"] + 0; warm[k] = kv["warm_ms"] + 0; peak[k] = kv["peak_mib"] + 0
		real[k] = kv["real_mallocs"] + 0; realw[k] = kv["real_mallocs_warm"] + 0
		bad[k] = (kv["failed"] + 0 ? " (" kv["failed"] " failed)" : "") (kv["errors"] + 0 ? " ERR" : "")
		cut[k] = kv["cut"] + 0; done[k] = kv["done"]
		if (b == "replay") { add(rp_cfgs, cfg, rp_seen); tpeak[cfg] = kv["trace_peak_mib"] }
		else if (kv["streams"] + 0 == 0) add(ra_cfgs, cfg, ra_seen)
		else add(ms_cfgs, cfg, ms_seen)
	} else if (b == "nocuda") {
		nc_med[kv["variant"]] = kv["median_us"]; nc_p10[kv["variant"]] = kv["p10_us"]
		nc_p90[kv["variant"]] = kv["p90_us"]; nc_reps = kv["reps"]; nc_prog = kv["program"]
	} else if (b == "nocuda_diff") {
		k = kv["variant"] "-" kv["minus"]
		nd_med[k] = kv["median_diff_us"] + 0; nd_lo[k] = kv["ci95_lo_us"] + 0; nd_hi[k] = kv["ci95_hi_us"] + 0
		if (kv["variant"] == "floor") nc_floor = 1
	} else if (b == "nocuda_check") {
		nc_check = "exit " kv["exit"] ", " kv["output_bytes"] " bytes of output"
	}
}
function threads_section(   m, i, c, n, k, row, hdr, sep, one, eight, cs) {
	n = split("native async gpupool gpupool-fenced gpupool-exact gpupool-fenced-exact", cs, " ")
	print "### Threads: cudaMalloc+cudaFree pairs per second, all threads together\n"
	nsort(th_counts)
	for (m = 1; m <= th_modes[0]; m++) {
		hdr = "| " th_modes[m] " sizes: threads |"; sep = "|---|"
		for (c = 1; c <= n; c++) { hdr = hdr " " cs[c] " |"; sep = sep "---|" }
		print hdr; print sep
		for (i = 1; i <= th_counts[0]; i++) {
			row = "| " th_counts[i] " |"
			for (c = 1; c <= n; c++) {
				k = th_modes[m] SUBSEP th_counts[i] SUBSEP cs[c]
				one = th_modes[m] SUBSEP 1 SUBSEP cs[c]
				if (!(k in th_rate)) { row = row " - |"; continue }
				row = row " " rate(th_rate[k])
				if ((one in th_rate) && th_rate[one] > 0 && th_counts[i] != 1)
					row = row sprintf(" (x%.1f)", th_rate[k] / th_rate[one])
				row = row (th_err[k] ? " ERR" : "") " |"
			}
			print row
		}
		split("gpupool gpupool-fenced", tc, " ")
		sep = "\n"
		for (t = 1; t <= 2; t++) {
			one = th_modes[m] SUBSEP 1 SUBSEP tc[t]; eight = th_modes[m] SUBSEP 8 SUBSEP tc[t]
			if (!((one in th_rate) && (eight in th_rate) && th_rate[one] > 0))
				continue
			printf "%sTarget (8 threads >= 4x one thread), %s, %s sizes: x%.1f, %s\n", sep, tc[t],
				th_modes[m], th_rate[eight] / th_rate[one],
				(th_rate[eight] >= 4 * th_rate[one] ? "met" : "NOT met")
			sep = ""
		}
		print ""
	}
	print "(xN) = throughput relative to one thread of the same contender. same = every thread"
	print "64 KiB; mixed = each thread cycles 512 B, 4 KiB, 64 KiB, 1 MiB. async: one non-blocking"
	print "stream per thread, warm pool; gpupool-fenced: after the program created a stream. Each"
	print "figure: the median of " (th_reps ? th_reps : 1) " runs of " (th_secs ? th_secs : "?") " s (bench/threads --reps).\n"
}
function tcell(k,   s) {
	s = (cut[k] ? ">" : "") ms(cold[k])
	if (warm[k] >= 0) s = s " / " (cut[k] ? ">" : "") ms(warm[k])
	if (cut[k] && done[k] != "") s = s " (cut after " done[k] " allocs)"
	return s bad[k]
}
function realcell(k) {
	if (real[k] < 0) return "n/a"
	return real[k] (realw[k] >= 0 ? " / " realw[k] : "")
}
# Against async: time (warm passes where both have one) and peak; the target for gpupool.
function verdict(b, cfg, c,   a, g, tg, ta, mem, s, why) {
	a = b SUBSEP cfg SUBSEP "async"; g = b SUBSEP cfg SUBSEP c
	if (c == "async" || !(a in cold)) return "|"
	if (cut[a] || cut[g]) return "- |"
	tg = warm[g] >= 0 ? warm[g] : cold[g]; ta = warm[a] >= 0 ? warm[a] : cold[a]
	s = sprintf("time x%.2f", ta / (tg > 0 ? tg : 0.001))
	if (peak[a] <= 0) return s ", async peak unknown |"
	mem = (peak[g] / peak[a] - 1) * 100
	s = s sprintf(", peak %+.0f%%", mem)
	if (c !~ /^gpupool/) return s " |"
	why = (cold[g] < cold[a] ? "" : ", slower cold") (tg < ta ? "" : ", slower warm") (mem <= 10 ? "" : ", memory")
	return s " | " (why == "" ? "met" : "NOT met (" substr(why, 3) ")")
}
function alloc_section(b, list, title, withstreams,   i, j, n, cs, cfg, p, row, k, first) {
	if (list[0] == 0) return
	n = split("native async gpupool gpupool-fenced gpupool-exact gpupool-fenced-exact gpupool-poll gpupool-fenced-poll", cs, " ")
	print title "\n"
	if (b == "replay") { print "| trace | contender |" hdr_rest(); print "|---|---|" sep_rest() }
	else if (withstreams) { print "| streams | allocs | max | contender |" hdr_rest(); print "|---|---|---|---|" sep_rest() }
	else { print "| allocs | max | contender |" hdr_rest(); print "|---|---|---|" sep_rest() }
	for (i = 1; i <= list[0]; i++) {
		cfg = list[i]; first = 1
		for (j = 1; j <= n; j++) {
			k = b SUBSEP cfg SUBSEP cs[j]
			if (!(k in cold)) continue
			if (!first) row = b == "replay" ? "| |" : withstreams ? "| | | |" : "| | |"
			else if (b == "replay") row = "| " cfg (tpeak[cfg] != "" ? ", trace peak " tpeak[cfg] " MiB" : "") " |"
			else { split(cfg, p, SUBSEP); row = (withstreams ? "| " p[1] " " : "") "| " p[2] " | " p[3] " MiB |" }
			first = 0
			print row " " cs[j] " | " tcell(k) " | " sprintf("%.0f", peak[k]) " | " realcell(k) " | " verdict(b, cfg, cs[j]) " |"
		}
	}
	print ""
}
function hdr_rest() { return " ms cold / warm | peak MiB | real cudaMalloc cold / warm | vs async: time (warm), peak | target: faster, peak within +10% |" }
function sep_rest() { return "---|---|---|---|---|" }
function ci(k) { return sprintf("%+.1f [%.1f, %.1f]", nd_med[k], nd_lo[k], nd_hi[k]) }
function nocuda_section(   v, n, vs, k) {
	print "### A process that never touches CUDA: " nc_prog ", plain and with LD_PRELOAD=libgpupool.so\n"
	print "| variant | median us | p10 us | p90 us | paired difference vs plain, us: median [95% CI] |"
	print "|---|---|---|---|---|"
	n = split("plain preloaded plain-again floor", vs, " ")
	for (v = 1; v <= n; v++) {
		if (!(vs[v] in nc_med)) continue
		k = vs[v] "-plain"
		printf "| %s | %s | %s | %s | %s |\n", vs[v], nc_med[vs[v]], nc_p10[vs[v]], nc_p90[vs[v]], \
			(k in nd_med) ? ci(k) : "-"
	}
	if ("preloaded-plain" in nd_med)
		printf "\nTarget (no start-up cost beyond noise, under 100 us): under 100 us %s, beyond noise %s; preloaded %s us, %s the noise (plain twice: %s us)\n", \
			(nd_med["preloaded-plain"] < 100 ? "met" : "NOT met"), \
			(nd_lo["preloaded-plain"] > nd_hi["plain-again-plain"] ? "NOT met" : "met"), ci("preloaded-plain"), \
			(nd_lo["preloaded-plain"] > nd_hi["plain-again-plain"] ? "above" : "within"), ci("plain-again-plain")
	if ("preloaded-floor" in nd_med)
		printf "Beyond what preloading any library costs (floor = a tiny library with no constructor, libbench_count.so): %s us\n", \
			ci("preloaded-floor")
	print "(" nc_reps " rounds, each variant once per round in a shuffled order; the preloaded run: " nc_check ")\n"
}
END {
	if (th_counts[0]) threads_section()
	alloc_section("random_alloc", ra_cfgs, "### random_allocations (RMM's workload), legacy stream", 0)
	alloc_section("random_alloc", ms_cfgs, "### random_allocations, multi-stream with kernels running", 1)
	alloc_section("replay", rp_cfgs, "### Replay of allocation traces (RMM's CSV format)", 0)
	if (ra_cfgs[0] || ms_cfgs[0] || rp_cfgs[0]) {
		print "ms: one pass, cold (caches released first) / warm (the same again; native has no cache),"
		print "including a final device synchronize; >: stopped at the time limit. Peak: device memory above"
		print "the start over both passes (device-wide; async: the pool's reserved high-water mark). Real"
		print "cudaMalloc: calls that reached the runtime (libbench_count.so preloaded after the shim)."
		print "time xN: async's time / this one's (above 1: faster than async). gpupool: no stream created"
		print "(immediate reuse); gpupool-fenced: after one was (event fences, as in programs with streams;"
		print "with kernels on several streams gpupool is always fenced). -exact: again with GPUPOOL_OVERSIZE=1;"
		print "-poll: again with GPUPOOL_REUSE_POLL=20us.\n"
	}
	if ("plain" in nc_med) nocuda_section()
}
