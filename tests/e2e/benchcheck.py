"""benchcheck.py — what the check_*.py scripts of the benchmark scripts share: the bench folder
(their first argument) on the import path, and a check that prints "ok"/"FAIL" and counts the
failures for the exit status (finish())."""
import sys

sys.path.insert(0, sys.argv[1])
failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok


def finish():
    sys.exit(1 if failed else 0)
