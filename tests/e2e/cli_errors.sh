#!/usr/bin/env bash
# cli_errors.sh — proves the gpupool command's answers from outside a process: a clear message
# and exit status for no such process (2), not a gpupool process (3), a stale view (5, and the
# file removed; `top` removes them too) and bad usage (1); a live view is /dev/shm/gpupool.<pid>,
# mode 0600, owned by the user, and leaves with a normal exit; `--help` lists the options;
# `release` of a process without a release signal says so; every subcommand (exporter too)
# answers --help, and a bad number, an unknown option or two flags that conflict get a line
# naming them.
# Usage: cli_errors.sh <gpupool> <e2e_cli> <formatcheck> [sanitizer runtime to preload]
set -u
cli=$1 prog=$2 formatcheck=$3
unset "${!GPUPOOL_@}"
if [[ -n ${4:-} ]]; then export LD_PRELOAD=$4; else unset LD_PRELOAD; fi
holders=()
trap 'for p in "${holders[@]}"; do kill -9 "$p" 2>/dev/null; done' EXIT

fail() { echo "FAIL e2e_cli_errors: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }

# expect RC PATTERN CMD...: CMD exits with RC and its output contains PATTERN.
expect() {
	local rc=$1 pattern=$2 out got
	shift 2
	out=$("$@" 2>&1)
	got=$?
	[[ $got -eq $rc ]] || fail "$* exited $got (want $rc): $out"
	grep -qF -- "$pattern" <<<"$out" || fail "$* did not say \"$pattern\": $out"
	ok "$(printf '%q ' "${@:2}")-> $rc: $(head -n 1 <<<"$out")"
}

# hold [run options]: start e2e_cli --hold under gpupool run; sets $pid once its view shows the
# program's two frees (the view is made at the first CUDA call, before its first device entry).
hold() {
	"$cli" run "$@" -- "$prog" --hold 30 >/dev/null &
	pid=$!
	holders+=("$pid")
	for _ in $(seq 500); do
		"$cli" stats --json "$pid" 2>/dev/null | grep -q '"frees":2,' && return 0
		sleep 0.01
	done
	fail "no live view /dev/shm/gpupool.$pid showing two frees appeared within 5 s"
}

expect 2 "no such process: 999999999" "$cli" stats 999999999
expect 2 "no such process" "$cli" release 999999999
expect 3 "process $$ is not a gpupool process" "$cli" stats $$
expect 3 "not a gpupool process" "$cli" release $$
expect 1 "not a pid: abc" "$cli" stats abc
expect 1 "not a pid: 4294967297" "$cli" stats 4294967297
expect 0 "gpupool " "$cli" -V
expect 0 "gpupool " "$cli" version
expect 0 "gpupool " "$cli" --version
expect 1 "unknown command: bogus" "$cli" bogus
expect 1 "--max-cached 12XB is not valid (accepted:" "$cli" run --max-cached 12XB -- true
expect 1 "unknown option --nonsense" "$cli" run --nonsense 1 -- true
expect 127 "cannot run /nonexistent/program" "$cli" run -- /nonexistent/program
expect 0 "usage: gpupool run" "$cli" run --help
expect 0 "usage: gpupool release" "$cli" release --help
expect 0 "usage: gpupool stats" "$cli" stats --help
expect 0 "usage: gpupool top" "$cli" top --help
expect 1 "-d abc: not a number of seconds" "$cli" top -d abc
expect 1 "-d -1: not a number of seconds" "$cli" top -d -1
expect 1 "-d 0.01: at least 0.05 seconds" "$cli" top -d 0.01
expect 1 "-n 0: not a whole number" "$cli" top -n 0
expect 1 "unknown option --bogus" "$cli" top --bogus
expect 1 "--once and -n: give one" "$cli" top --once -n 2
expect 1 "--timeout abc: not a number of seconds" "$cli" release --wait --timeout abc 1
expect 1 "--timeout needs --wait" "$cli" release --timeout 5 1
expect 1 "--json and --prometheus: give one" "$cli" stats --json --prometheus 1
expect 1 "--all and pids" "$cli" stats --all 1
expect 1 "--max-cached needs a value" "$cli" run --max-cached
expect 0 "usage: gpupool exporter" "$cli" exporter --help
expect 1 "unknown option --bogus" "$cli" exporter --bogus
expect 1 "--timeout 0: not a whole number" "$cli" exporter --timeout 0
expect 1 "--max-connections 100001: at most 100000" "$cli" exporter --max-connections 100001
expect 1 "unexpected argument: extra" "$cli" exporter extra
for c in "" run release stats top suspend resume exporter; do
	wide=$("$cli" $c --help | awk 'length > 80' | head -n 3)
	[[ -z $wide ]] || fail "gpupool $c --help has lines wider than 80 columns: $wide"
done
ok "gpupool --help and every command's --help fit 80 columns"
help=$("$cli" --help)
grep -q -- "--max-cached" <<<"$help" && grep -q "GPUPOOL_TRACE" <<<"$help" &&
	grep -q "gpupool release PID" <<<"$help" && grep -q "gpupool resume PID... \[--json\]" <<<"$help" &&
	grep -q "suspend PID.*--json" <<<"$help" && grep -q "gpupool exporter \[--listen HOST:PORT\]" <<<"$help" ||
	fail "--help lacks the options or the commands: $help"
ok "--help lists the commands and the GPUPOOL_* options"

hold --log error
read -r mode owner < <(stat -c '%a %u' "/dev/shm/gpupool.$pid")
[[ $mode == 600 && $owner == "$(id -u)" ]] || fail "the view has mode $mode, owner $owner"
ok "the live view /dev/shm/gpupool.$pid has mode 0600 and belongs to uid $owner"
expect 0 "pid $pid: " "$cli" stats "$pid"
# The view names a device once the program has allocated and the view was published after it.
uuid_seen=0
for _ in $(seq 500); do
	"$cli" stats "$pid" --json | grep -q '"uuid":"GPU-5354414e-4449-4e2d-4750-550000000000"' &&
		{ uuid_seen=1; break; }
	sleep 0.01
done
[[ $uuid_seen == 1 ]] ||
	fail "stats --json lacks the device's UUID (the stand-in's): $("$cli" stats "$pid" --json)"
ok "stats --json names the device's UUID as NVML would"
topout=$("$cli" top --once)
grep -qE "^ *$pid e2e_cli " <<<"$topout" || fail "top does not name the program e2e_cli: $topout"
[[ -z $(awk 'length > 80' <<<"$topout") ]] || fail "top's rows are wider than 80 columns: $topout"
ok "top names the program (e2e_cli) and fits 80 columns"
"$cli" stats "$pid" --prometheus | "$formatcheck" prometheus || fail "--prometheus is not valid"
"$cli" stats --all --json | "$formatcheck" json || fail "stats --all --json is not valid"
kill -TERM "$pid"
wait "$pid"
[[ ! -e /dev/shm/gpupool.$pid ]] || fail "the view outlived a normal exit"
ok "a normal exit removes the view"

hold
kill -9 "$pid"
wait "$pid" 2>/dev/null
[[ -e /dev/shm/gpupool.$pid ]] || fail "a killed process left no view to be stale"
expect 5 "stale view: process $pid has exited" "$cli" stats "$pid"
[[ ! -e /dev/shm/gpupool.$pid ]] || fail "the stale view was not removed"
ok "the stale view was removed"
expect 2 "no such process: $pid" "$cli" release "$pid"

hold
kill -9 "$pid"
wait "$pid" 2>/dev/null
expect 0 "stale view(s) of exited processes removed" "$cli" top --once
[[ ! -e /dev/shm/gpupool.$pid ]] || fail "gpupool top left the stale view of $pid"
ok "gpupool top removed the stale view of $pid"

# No release signal: the request goes through the view, and the release still comes.
hold --signal none
expect 0 "pid $pid: released 4.00 MiB" "$cli" release --wait --timeout 5 "$pid"
kill -TERM "$pid"
wait "$pid"

# A program that installs its own SIGUSR1 handler after start-up: the view stops naming the
# signal (gpupool says so at warn level), release --wait still works, and the program's own
# handler still runs when the signal comes.
out=$(mktemp)
"$cli" run --log warn -- "$prog" --hold-own 30 >"$out" 2>&1 &
pid=$!
holders+=("$pid")
for _ in $(seq 500); do
	"$cli" stats --json "$pid" 2>/dev/null | grep -q '"signal":0,"start_time_ns"' && break
	sleep 0.01
done
"$cli" stats --json "$pid" 2>/dev/null | grep -q '"signal":0,"start_time_ns"' ||
	fail "the view of $pid still names a release signal after the program took SIGUSR1"
ok "the program took SIGUSR1 over: its view names no release signal"
expect 0 "pid $pid: released 4.00 MiB" "$cli" release --wait --timeout 5 "$pid"
kill -USR1 "$pid"
sleep 0.1
kill -TERM "$pid"
wait "$pid"
grep -q "own SIGUSR1 handler ran 1 time(s)" "$out" || fail "the program's own handler: $(cat "$out")"
grep -q "replaced gpupool's SIGUSR1 handler" "$out" || fail "no warning about the handler: $(cat "$out")"
ok "the program's own SIGUSR1 handler ran once; gpupool warned once about it"
rm -f "$out"
echo "PASS e2e_cli_errors"
