#!/usr/bin/python3
"""A broader reference for the guard's greedy evaluation: copy coverage instead of a fixed period.

guard_eval.py's reference calls a run a loop only when one period repeats with 90% matches over 64
tokens, so a phrase said a hundred times with a word changed every few copies ("and thy sons, and thy
sons of Israel, ...") is no loop to it. This script labels a run degenerate when, in some window of
W tokens, at least a share S of the tokens lie inside a copy of M or more tokens that already
occurred in the previous D tokens, whatever the period. That catches near loops, and it is computed
from the tokens alone, independently of the guard's detectors. The runs and the guard's events come
from `guard_eval.py --save-runs` and a replay through `coda scan` (guard_replay.py's way).

Usage: /usr/bin/python3 bench/guard_reference_coverage.py build/coda RUNS.jsonl [--min-copy 8]
       [--distance 512] [--window 128] [--share 0.9]
Prints, for the greedy runs: the negatives of the 64-token reference that this one calls degenerate,
which of them the guard flags, and recall and false positives scored against the union of both.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guard_eval import LOOP_TYPES  # noqa: E402


def covered(tokens, min_copy, distance):
    """Per token: inside a run of min_copy tokens that also starts 1..distance tokens earlier."""
    n = len(tokens)
    cov = np.zeros(n, bool)
    seen = {}
    for j in range(n - min_copy + 1):
        key = tuple(tokens[j:j + min_copy])
        starts = seen.setdefault(key, [])
        if any(0 < j - s <= distance for s in starts):
            cov[j:j + min_copy] = True
        starts.append(j)
    return cov


def degenerate(tokens, a):
    cov = covered(tokens, a.min_copy, a.distance)
    if len(cov) < a.window:
        return False
    c = np.concatenate([[0], np.cumsum(cov)])
    return bool(((c[a.window:] - c[:-a.window]) >= a.share * a.window).any())


def flagged_ids(coda, runs, types=LOOP_TYPES):
    """Ids of the runs whose guard events (coda scan with its defaults) include one of `types`."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "runs.jsonl")
        with open(path, "w") as f:
            for r in runs:
                f.write(json.dumps({"id": r["id"], "tokens": r["tokens"]}) + "\n")
        out = subprocess.run([coda, "scan", "--json", path], capture_output=True, text=True)
    if out.returncode not in (0, 2):  # 2: something was flagged under --check; not an error here
        sys.exit(out.stderr)
    return {str(j["id"]) for j in map(json.loads, out.stdout.splitlines())
            if any(e["type"] in types for e in j["events"])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("runs")
    ap.add_argument("--min-copy", type=int, default=8)
    ap.add_argument("--distance", type=int, default=512)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--share", type=float, default=0.9)
    ap.add_argument("--types", default=",".join(sorted(LOOP_TYPES)),
                    help="event types that count as flagged (phrase_loop too: loop,near_loop,flooding,phrase_loop)")
    a = ap.parse_args()
    runs = [json.loads(line) for line in open(a.runs)]
    runs = [dict(r, id=str(i)) for i, r in enumerate(runs) if r["label"] == "greedy"]
    flagged = flagged_ids(a.coda, runs, set(a.types.split(",")))
    loops = {r["id"] for r in runs if r["reference_onset"] is not None}
    broader = {r["id"] for r in runs if r["id"] not in loops and degenerate(r["tokens"], a)}
    by_id = {r["id"]: r for r in runs}
    print(f"{len(runs)} greedy runs; {len(loops)} loops by the 64-token reference, {len(runs) - len(loops)} negatives")
    print(f"negatives degenerate by copy coverage (copies >= {a.min_copy} tokens within {a.distance}, "
          f"a {a.window}-token window >= {a.share:.0%} covered): {len(broader)}")
    for i in sorted(broader, key=lambda x: by_id[x]["prompt"]):
        print(f"  {by_id[i]['prompt']!r}: {'flagged' if i in flagged else 'not flagged'} by the guard")
    positives = loops | broader
    negatives = {r["id"] for r in runs} - positives
    print(f"against the union: recall {len(positives & flagged)}/{len(positives)} = "
          f"{len(positives & flagged) / len(positives):.3f}, false positives {len(negatives & flagged)}/{len(negatives)}")


if __name__ == "__main__":
    main()
