#!/usr/bin/python3
"""How the guard's greedy false-positive rate, recall and delay depend on the reference definition
of a loop that bench/guard_eval.py judges it by.

The reference calls a generation a loop when a stretch of at least max(4p, 64) tokens repeats at
period p with 90% of positions matching. The 64-token floor is a choice: a phrase said eight times
back to back (32 tokens) and then dropped is no loop by it, though a reader calls it one, and the
guard's exact-loop detector, which confirms short periods at 32 tokens, is then "wrong". This
script runs guard_eval's 200 greedy generations once (the guard observing, as there) and scores
the same events against the reference with floors of 32 to 128 tokens.

Usage: /usr/bin/python3 bench/guard_reference_sensitivity.py build/coda [--prompts N] [--jobs J]
"""
import argparse
import concurrent.futures as cf
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guard_eval import LOOP_TYPES, SETTINGS, prompts, reference_loop, run_one  # noqa: E402

FLOORS = [32, 40, 48, 64, 96, 128]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    greedy = dict(SETTINGS)["greedy"]
    items = prompts(a.prompts)
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        # The seeds guard_eval gives greedy (setting 0): 1000 * 0 + prompt index.
        results = list(ex.map(lambda ip: run_one(a.coda, ip[1][1], greedy, ip[0], "observe"), enumerate(items)))
    print(f"{len(results)} greedy generations of the bundled model, max_tokens 1,024, the guard observing\n")
    print("| reference floor (tokens) | loops | flagged | recall | false positives | median delay |")
    print("|---|---|---|---|---|---|")
    for floor in FLOORS:
        loops = tp = fp = 0
        delays = []
        for r in results:
            ref = reference_loop(r["tokens"], floor)
            evs = [e for e in r["coda"]["events"] if e["type"] in LOOP_TYPES]
            loops += ref is not None
            if ref is not None and evs:
                tp += 1
                delays.append(evs[0]["detected_at"] - ref[0])
            fp += ref is None and bool(evs)
        neg = len(results) - loops
        flagged = sum(1 for r in results if any(e["type"] in LOOP_TYPES for e in r["coda"]["events"]))
        print(f"| {floor}{' (guard_eval)' if floor == 64 else ''} | {loops} | {flagged} | "
              f"{tp}/{loops} = {tp / loops:.3f} | {fp}/{neg} = {fp / neg:.3f} | "
              f"{statistics.median(delays) if delays else float('nan'):.0f} |")


if __name__ == "__main__":
    sys.exit(main())
