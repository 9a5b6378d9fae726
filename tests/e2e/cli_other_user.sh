#!/usr/bin/env bash
# cli_other_user.sh — proves a live view is private: another user can neither read
# /dev/shm/gpupool.<pid> (mode 0600) nor get figures or a release out of gpupool for it (exit 4,
# "permission denied", naming the owner), nor suspend it (exit 4), and gpupool top says such
# processes are not shown;
# the owner still can. Needs root (to create a throwaway user with useradd and act as it with
# runuser); otherwise skipped (exit 77).
# Usage: cli_other_user.sh <gpupool> <e2e_cli> [sanitizer runtime to preload]
set -u
cli=$1 prog=$2
user=gpupool-e2e
unset "${!GPUPOOL_@}"
if [[ -n ${3:-} ]]; then export LD_PRELOAD=$3; else unset LD_PRELOAD; fi

skip() { echo "SKIP e2e_cli_other_user: $*"; exit 77; }
fail() { echo "FAIL e2e_cli_other_user: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }

[[ $(id -u) -eq 0 ]] || skip "not root: cannot create a second user to check the view's mode"
command -v useradd >/dev/null && command -v runuser >/dev/null || skip "useradd or runuser missing"
created=0
pid=
cleanup() {
	[[ -n $pid ]] && kill -9 "$pid" 2>/dev/null
	[[ $created -eq 1 ]] && userdel "$user" 2>/dev/null
}
trap cleanup EXIT
if ! id "$user" >/dev/null 2>&1; then
	useradd --system --no-create-home --shell /usr/sbin/nologin "$user" || skip "useradd failed"
	created=1
fi
runuser -u "$user" -- test -x "$cli" ||
	skip "$user cannot run $cli (a folder above it is not searchable by others)"
as_other() { runuser -u "$user" -- env LD_PRELOAD= "$@"; }

"$cli" run -- "$prog" --hold 30 >/dev/null &
pid=$!
for _ in $(seq 500); do
	[[ -e /dev/shm/gpupool.$pid ]] && break
	sleep 0.01
done
[[ -e /dev/shm/gpupool.$pid ]] || fail "no live view appeared"

as_other cat "/dev/shm/gpupool.$pid" >/dev/null 2>&1 && fail "$user could read the view"
ok "$user cannot read /dev/shm/gpupool.$pid"
out=$(as_other "$cli" stats "$pid" 2>&1)
rc=$?
[[ $rc -eq 4 ]] && grep -q "permission denied: /dev/shm/gpupool.$pid belongs to root" <<<"$out" ||
	fail "gpupool stats as $user: exit $rc: $out"
ok "gpupool stats as $user: exit 4: $out"
out=$(as_other "$cli" release "$pid" 2>&1)
rc=$?
[[ $rc -eq 4 ]] && grep -q "permission denied" <<<"$out" || fail "gpupool release as $user: exit $rc: $out"
ok "gpupool release as $user: exit 4"
out=$(as_other "$cli" suspend "$pid" 2>&1)
rc=$?
[[ $rc -eq 4 ]] && grep -q "permission denied: process $pid belongs to another user" <<<"$out" ||
	fail "gpupool suspend as $user: exit $rc: $out"
ok "gpupool suspend as $user: exit 4"
out=$(as_other "$cli" top --once 2>&1)
grep -q "of other users not shown: permission denied" <<<"$out" || fail "gpupool top as $user: $out"
ok "gpupool top as $user says other users' processes are not shown"
"$cli" stats "$pid" >/dev/null || fail "the owner cannot read its own view"
ok "the owner still reads it"
kill -TERM "$pid"
wait "$pid"
pid=
echo "PASS e2e_cli_other_user"
