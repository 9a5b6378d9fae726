#!/usr/bin/env bash
# check_standin.sh — proves the e2e setup is the hard case: the stand-in runtime exports its entry
# points under the real runtime's version node (cudaMalloc@@libcudart.so.13), and the e2e programs
# import the versioned symbol (cudaMalloc@libcudart.so.13), as PyTorch's libc10_cuda.so does.
# Usage: check_standin.sh <stand-in libcudart.so.13> <an e2e program>
set -u
lib=${1:?usage: check_standin.sh <libcudart.so.13> <program>}
prog=${2:?usage: check_standin.sh <libcudart.so.13> <program>}
fail=0

for sym in cudaMalloc cudaFree; do
	if nm -D --defined-only --with-symbol-versions "$lib" | grep -qE " ${sym}@@libcudart\.so\.13$"; then
		echo "ok   the stand-in exports ${sym}@@libcudart.so.13"
	else
		echo "FAIL e2e_standin_versioned: the stand-in does not export ${sym}@@libcudart.so.13" >&2
		fail=1
	fi
	if nm -D --undefined-only --with-symbol-versions "$prog" | grep -qE " ${sym}@libcudart\.so\.13( |$)"; then
		echo "ok   $(basename "$prog") imports ${sym}@libcudart.so.13"
	else
		echo "FAIL e2e_standin_versioned: $(basename "$prog") does not import ${sym}@libcudart.so.13" >&2
		fail=1
	fi
done
if [[ $(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p') == libcudart.so.13 ]]; then
	echo "ok   the stand-in's soname is libcudart.so.13"
else
	echo "FAIL e2e_standin_versioned: the stand-in's soname is not libcudart.so.13" >&2
	fail=1
fi
if [[ $fail -ne 0 ]]; then
	exit 1
fi
echo "PASS e2e_standin_versioned"
