"""check_stats_json.py — reads `test_stats --dump-json` on stdin: python3's own JSON parser must
accept it, with the fixture's exact figures and its awkward command line intact."""
import json
import sys

d = json.load(sys.stdin)
assert d["pid"] == 4242, d["pid"]
assert d["devices"][0]["in_use_bytes"] == 1610612736, d["devices"][0]
assert [dev["device"] for dev in d["devices"]] == [0, 3], d["devices"]
assert d["releases"]["oom"] == 1 and d["released_bytes"]["signal"] == 1 << 30, d["releases"]
assert d["last_release_cause"] == "signal", d["last_release_cause"]
assert d["command"] == 'python "serve.py" --name a\\b\ttab caf\u00e9 bad?', repr(d["command"])
print("ok   python3's json module accepts it, figures and command line intact")
