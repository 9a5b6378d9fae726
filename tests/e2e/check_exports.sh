#!/usr/bin/env bash
# check_exports.sh — proves libgpupool.so exports only what it must: every defined dynamic symbol
# is a runtime entry point (cuda*), a driver entry point (cu[A-Z]*), dlsym or the gpupool_* API;
# cudaMalloc, cudaFree, cuMemAlloc_v2, cuGetProcAddress_v2 and dlsym are exported with no named
# version node (so they interpose the runtime's versioned cudaMalloc@@libcudart.so.13), and the
# library does not depend on libcudart (the real runtime is found at run time); with a second
# argument N, that it is mapped in at most N segments (GPUPOOL_COMPACT_LOAD: 2).
# Usage: check_exports.sh <path of libgpupool.so> [max LOAD segments]
set -u
lib=${1:?usage: check_exports.sh <libgpupool.so> [max LOAD segments]}
max_loads=${2:-0}
fail=0

if [[ ! -f $lib ]]; then
	echo "FAIL e2e_exports: $lib does not exist" >&2
	exit 1
fi

defined=$(nm -D --defined-only "$lib" | awk '{ n = $NF; sub(/@.*/, "", n); print n }')
leaks=$(grep -Ev '^(cuda[A-Za-z0-9_]*|cu[A-Z][A-Za-z0-9_]*|dlsym|gpupool_[A-Za-z0-9_]*)$' <<<"$defined" || true)
if [[ -n $leaks ]]; then
	echo "FAIL e2e_exports: symbols other than cuda*, cu[A-Z]*, dlsym and gpupool_* are exported:" >&2
	sed 's/^/    /' <<<"$leaks" >&2
	fail=1
else
	echo "ok   every exported symbol ($(wc -l <<<"$defined")) is cuda*, cu[A-Z]*, dlsym or gpupool_*"
fi

for sym in cudaMalloc cudaFree cuMemAlloc_v2 cuMemFree_v2 cuGetProcAddress_v2 dlsym; do
	line=$(nm -D --defined-only --with-symbol-versions "$lib" | awk -v s="$sym" '{ n = $NF; sub(/@.*/, "", n); if (n == s) print $NF }')
	if [[ -z $line ]]; then
		echo "FAIL e2e_exports: $sym is not exported" >&2
		fail=1
	elif [[ $line == *@* ]]; then
		echo "FAIL e2e_exports: $sym is exported under a named version ($line); it must be unversioned" >&2
		fail=1
	else
		echo "ok   $sym is exported without a version node"
	fi
done

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
