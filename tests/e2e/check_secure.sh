#!/usr/bin/env bash
# check_secure.sh — proves the shim takes no orders from the environment of a set-user-ID
# program: run set-user-ID (to nobody) the dynamic loader does not preload libgpupool.so at all,
# and when such a program opens the library itself, GPUPOOL_SIGNAL and GPUPOOL_LOG are ignored
# (secure_getenv): the default signal, no log. The same runs without set-user-ID show that the
# settings are read otherwise. Needs root (to give the copy to another user); exits 77 (skipped)
# without it, or when the temporary directory is mounted nosuid.
# Usage: check_secure.sh <e2e_secure> <stand-in libcudart.so.13> <libgpupool.so>
set -u
prog=${1:?usage} standin=${2:?usage} shim=${3:?usage}
name=e2e_secure
fail=0

if [ "$(id -u)" != 0 ] || ! id nobody >/dev/null 2>&1; then
	echo "SKIP $name: needs root and a user 'nobody'"
	exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-secure.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
# The stand-in runtime loads the stand-in driver beside it: both are copied.
cp "$prog" "$dir/secure" && cp "$standin" "$dir/libcudart.so.13" && cp "$shim" "$dir/libgpupool.so" &&
	cp "$(dirname "$standin")/libcuda.so.1" "$dir/libcuda.so.1" || exit 1
chmod 755 "$dir/secure" && chmod 644 "$dir/libcudart.so.13" "$dir/libcuda.so.1" "$dir/libgpupool.so"

check() { # check <what> <output> <expected line>
	if grep -qx -- "$3" <<<"$2"; then
		echo "ok   $1 ($3)"
	else
		echo "FAIL $name: $1: want '$3', got:" >&2
		sed 's/^/    /' <<<"$2" >&2
		fail=1
	fi
}

run() { # run <mode...>: stdout, then stderr after a line "--stderr--"
	local err
	err=$(mktemp)
	env GPUPOOL_SIGNAL=USR2 GPUPOOL_LOG=info LD_PRELOAD="$dir/libgpupool.so" "$dir/secure" "$@" 2>"$err"
	echo "--stderr--"
	cat "$err"
	rm -f "$err"
}

plain_maps=$(run maps)
check "plain program: LD_PRELOAD loads the shim" "$plain_maps" "shim: loaded"
plain=$(run settings "$dir/libcudart.so.13" "$dir/libgpupool.so")
check "plain program: not a secure execution" "$plain" "secure: 0"
check "plain program: GPUPOOL_SIGNAL=USR2 is read" "$plain" "signal: USR2"
check "plain program: the pool serves the second cudaMalloc" "$plain" "pool: on"
if grep -q "^gpupool: info:" <<<"$plain"; then
	echo "ok   plain program: GPUPOOL_LOG=info is read (the shim logs)"
else
	echo "FAIL $name: plain program: GPUPOOL_LOG=info was not read" >&2
	fail=1
fi

chown nobody "$dir/secure" && chmod 4755 "$dir/secure" || exit 1
suid=$(run settings "$dir/libcudart.so.13" "$dir/libgpupool.so")
if grep -qx "secure: 0" <<<"$suid"; then
	echo "SKIP $name: $dir does not honour set-user-ID (nosuid mount?)"
	exit 77
fi
check "set-user-ID program: a secure execution (AT_SECURE)" "$suid" "secure: 1"
suid_maps=$(run maps)
check "set-user-ID program: the loader ignores LD_PRELOAD" "$suid_maps" "shim: absent"
check "set-user-ID program: GPUPOOL_SIGNAL ignored, the default signal" "$suid" "signal: USR1"
check "set-user-ID program: the pool still works" "$suid" "pool: on"
if grep -q "^gpupool:" <<<"$suid"; then
	echo "FAIL $name: set-user-ID program: the shim logged (GPUPOOL_LOG was read):" >&2
	grep "^gpupool:" <<<"$suid" | sed 's/^/    /' >&2
	fail=1
else
	echo "ok   set-user-ID program: GPUPOOL_LOG ignored (nothing on stderr)"
fi
[ $fail = 0 ] && echo "PASS $name"
exit $fail
