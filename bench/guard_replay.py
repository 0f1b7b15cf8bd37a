#!/usr/bin/python3
"""Replays the saved generations of bench/guard_eval.py through `coda scan` with other guard
thresholds and scores them against the same reference: what a threshold change would do to the
false-positive rate, recall and detection delay, in seconds instead of regenerating.

  /usr/bin/python3 bench/guard_eval.py build/coda OUT --save-runs runs.jsonl     # once (6 min)
  /usr/bin/python3 bench/guard_replay.py build/coda runs.jsonl [--setting greedy] -- --loop-min-span 40

Everything after `--` goes to `coda scan` (its threshold flags: `coda scan --help`). Loop-family
events (loop, near_loop, flooding) count as flagged, as in guard_eval; `--types loop,flooding`
counts only those.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guard_eval import LOOP_TYPES  # noqa: E402


def main():
    argv = sys.argv[1:]
    scan_flags = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("runs")
    ap.add_argument("--setting", default="greedy", help="greedy, temp 0.7 or temp 1.0 (guard_eval's labels)")
    ap.add_argument("--types", default=",".join(LOOP_TYPES), help="event types that count as flagged")
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    types = set(a.types.split(","))
    runs = [json.loads(line) for line in open(a.runs)]
    runs = [dict(r, id=str(i)) for i, r in enumerate(runs) if r["label"] == a.setting]
    if not runs:
        sys.exit(f"{a.runs}: no runs labelled {a.setting!r}")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for r in runs:
            f.write(json.dumps({"id": r["id"], "tokens": r["tokens"]}) + "\n")
    try:
        out = subprocess.run([a.coda, "scan", "--json", f.name] + scan_flags, capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if out.returncode not in (0, 2):  # 2: something was flagged under --check; not an error here
        sys.exit(out.stderr)
    events = {j["id"]: [e for e in j["events"] if e["type"] in types]
              for j in map(json.loads, out.stdout.splitlines())}
    loops = [r for r in runs if r["reference_onset"] is not None]
    negatives = [r for r in runs if r["reference_onset"] is None]
    delays = [events[r["id"]][0]["detected_at"] - r["reference_onset"] for r in loops if events[r["id"]]]
    false_pos = [r for r in negatives if events[r["id"]]]
    print(f"{a.setting}, coda scan {' '.join(scan_flags) or '(defaults)'}")
    print(f"recall {len(delays)}/{len(loops)} = {len(delays) / max(1, len(loops)):.3f}; "
          f"false positives {len(false_pos)}/{len(negatives)} = {len(false_pos) / max(1, len(negatives)):.3f}; "
          f"median delay {statistics.median(delays) if delays else float('nan')}")
    for r in false_pos:
        e = events[r["id"]][0]
        print(f"  false positive: {r['prompt']!r}: {e['type']} at token {e['detected_at']}")


if __name__ == "__main__":
    main()
