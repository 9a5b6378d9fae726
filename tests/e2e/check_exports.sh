#!/usr/bin/env bash
# check_exports.sh — proves libgpupool.so exports only what it must: every defined dynamic symbol
# is a runtime entry point (cuda*), a driver entry point (cu[A-Z]*), dlsym or the gpupool_* API;
# with the door's table (the output of door_table: "<symbol> ours|own" a line), that the cu* and
# cuda* ones are exactly its "ours" rows and cuGetProcAddress/_v2, each exported with no named
# version node (so they interpose the runtime's versioned cudaMalloc@@libcudart.so.13), dlsym too;
# with the gate's list (gate_names.txt: the driver's other functions in cuda.h, each exported as a
# gate stub, shim/door/named.c), that the cu* exports are exactly the table's, those and
# cuGetProcAddress/_v2, none twice; with the toolkit's stub libcuda.so, that every driver row and
# every gate stub names a symbol the driver exports, and that every cu* symbol the driver exports
# is one of ours or a gate stub (a program linked to libcuda.so.1 reaches none ungated); that
# the library does not depend on libcudart (the real runtime is found at run time); with N, that
# it is mapped in at most N segments (GPUPOOL_COMPACT_LOAD: 2).
# Usage: check_exports.sh <libgpupool.so> [max LOAD segments] [door_table program] [stub libcuda.so]
#                         [gate_names.txt]
set -u
lib=${1:?usage: check_exports.sh <libgpupool.so> [max LOAD segments] [door_table] [stub libcuda.so] [gate_names.txt]}
max_loads=${2:-0}
table_prog=${3:-}
stub=${4:-}
gate_list=${5:-}
fail=0

if [[ ! -f $lib ]]; then
	echo "FAIL e2e_exports: $lib does not exist" >&2
	exit 1
fi

# exported FILE: the names of the dynamic symbols FILE defines, without their versions, sorted
exported() {
	nm -D --defined-only "$1" | awk '{ n = $NF; sub(/@.*/, "", n); print n }' | sort -u
}

defined=$(exported "$lib")
leaks=$(grep -Ev '^(cuda[A-Za-z0-9_]*|cu[A-Z][A-Za-z0-9_]*|dlsym|gpupool_[A-Za-z0-9_]*)$' <<<"$defined" || true)
if [[ -n $leaks ]]; then
	echo "FAIL e2e_exports: symbols other than cuda*, cu[A-Z]*, dlsym and gpupool_* are exported:" >&2
	sed 's/^/    /' <<<"$leaks" >&2
	fail=1
else
	echo "ok   every exported symbol ($(wc -l <<<"$defined")) is cuda*, cu[A-Z]*, dlsym or gpupool_*"
fi

must=(cudaMalloc cudaFree cuMemAlloc_v2 cuMemFree_v2)
if [[ -n $table_prog ]]; then
	table=$("$table_prog") || { echo "FAIL e2e_exports: $table_prog failed" >&2; exit 1; }
	ours=$(awk '$2 == "ours" { print $1 }' <<<"$table" | sort -u)
	gated=""
	if [[ -n $gate_list ]]; then
		gated=$(sort -u "$gate_list") || { echo "FAIL e2e_exports: cannot read $gate_list" >&2; exit 1; }
		twice=$(comm -12 <(echo "$ours") <(echo "$gated"))
		if [[ -n $twice || $(wc -l <<<"$gated") -lt 100 ]]; then
			echo "FAIL e2e_exports: the gate's list ($(wc -l <<<"$gated") names) is short or names entry points of ours: $twice" >&2
			fail=1
		fi
	fi
	want=$(printf '%s\ncuGetProcAddress\ncuGetProcAddress_v2\n%s\n' "$ours" "$gated" | grep . | sort -u)
	have=$(grep -E '^cu' <<<"$defined")
	missing=$(comm -23 <(echo "$want") <(echo "$have"))
	extra=$(comm -13 <(echo "$want") <(echo "$have"))
	if [[ -n $missing || -n $extra ]]; then
		[[ -z $missing ]] || { echo "FAIL e2e_exports: rows of the door's table not exported:" >&2; sed 's/^/    /' <<<"$missing" >&2; }
		[[ -z $extra ]] || { echo "FAIL e2e_exports: cu* symbols exported that are no row of the door's table:" >&2; sed 's/^/    /' <<<"$extra" >&2; }
		fail=1
	else
		echo "ok   the cu* and cuda* exports are the door's table's entry points ($(wc -l <<<"$ours")), cuGetProcAddress/_v2 and the gate's stubs ($(grep -c . <<<"$gated"))"
	fi
	mapfile -t must <<<"$want"
	if [[ -n $stub && -f $stub ]]; then
		driver_has=$(exported "$stub")
		rows=$(printf '%s\n%s\n' "$(awk '$1 ~ /^cu[A-Z]/ { print $1 }' <<<"$table")" "$gated" | grep . | sort -u)
		unknown=$(comm -23 <(echo "$rows") <(echo "$driver_has"))
		if [[ -n $unknown ]]; then
			echo "FAIL e2e_exports: rows of the door's table or gate stubs that the driver ($stub) does not export:" >&2
			sed 's/^/    /' <<<"$unknown" >&2
			fail=1
		else
			echo "ok   every driver row and gate stub ($(wc -l <<<"$rows")) is a symbol the driver exports ($stub)"
		fi
		if [[ -n $gate_list ]]; then
			ungated=$(comm -23 <(grep -E '^cu[A-Z]' <<<"$driver_has") <(grep -E '^cu' <<<"$want"))
			if [[ -n $ungated ]]; then
				echo "FAIL e2e_exports: driver functions a program linked to libcuda.so.1 would reach ungated:" >&2
				sed 's/^/    /' <<<"$ungated" >&2
				fail=1
			else
				echo "ok   every cu* function the driver exports ($(grep -cE '^cu[A-Z]' <<<"$driver_has")) is ours or a gate stub"
			fi
		fi
	fi
fi

# SYMBOL@VERSION for the versioned ones: none of the entry points may be, nor dlsym.
versions=$(nm -D --defined-only --with-symbol-versions "$lib" | awk '{ print $NF }' | sort -u)
plain=$(sed 's/@.*//' <<<"$versions" | sort -u)
versioned=$(grep '@' <<<"$versions" | sed 's/@.*//' | sort -u)
wanted=$(printf '%s\ndlsym\n' "${must[@]}" | sort -u)
absent=$(comm -23 <(echo "$wanted") <(echo "$plain"))
named_version=$(comm -12 <(echo "$wanted") <(echo "$versioned"))
if [[ -n $absent ]]; then
	echo "FAIL e2e_exports: not exported: $(tr '\n' ' ' <<<"$absent")" >&2
	fail=1
fi
if [[ -n $named_version ]]; then
	echo "FAIL e2e_exports: exported under a named version (they must be unversioned): $(tr '\n' ' ' <<<"$named_version")" >&2
	fail=1
fi
if [[ -z $absent && -z $named_version ]]; then
	echo "ok   ${#must[@]} entry points and dlsym are exported without a version node"
fi

# named version nodes: entries of .gnu.version_d other than the BASE one (the file's own name)
named=$(readelf -V --wide "$lib" | awk '/Version definition section/ { d = 1; next }
	/Version (symbols|needs) section/ { d = 0 }
	d && /Flags:/ && !/Flags: BASE/ { for (i = 1; i <= NF; i++) if ($i == "Name:") print $(i + 1) }')
if [[ -n $named ]]; then
	echo "FAIL e2e_exports: the library defines named version nodes: $(tr '\n' ' ' <<<"$named")" >&2
	fail=1
else
	echo "ok   no named version node is defined"
fi

if readelf -d "$lib" | grep -q 'NEEDED.*libcudart'; then
	echo "FAIL e2e_exports: the library depends on libcudart (DT_NEEDED); it must find the runtime at run time" >&2
	fail=1
else
	echo "ok   no DT_NEEDED on libcudart"
fi

if readelf -d "$lib" | grep -q 'NEEDED.*libmicrohttpd'; then
	echo "FAIL e2e_exports: the library depends on libmicrohttpd (DT_NEEDED); only the gpupool command (its exporter) may" >&2
	fail=1
else
	echo "ok   no DT_NEEDED on libmicrohttpd (the exporter's HTTP server is the command's alone)"
fi

if [[ $max_loads -gt 0 ]]; then
	loads=$(readelf -lW "$lib" | grep -c '^ *LOAD ')
	if [[ $loads -gt $max_loads ]]; then
		echo "FAIL e2e_exports: the library is mapped in $loads segments (want at most $max_loads: -z noseparate-code)" >&2
		fail=1
	else
		echo "ok   mapped in $loads segments (at most $max_loads)"
	fi
fi

if [[ $fail -ne 0 ]]; then
	exit 1
fi
echo "PASS e2e_exports"
