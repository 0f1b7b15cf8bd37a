#!/usr/bin/python3
"""How often `coda tune` recommends a configuration, and how good it truly is, on the failure test
problem: 24 phase-1 trials, the top 5 re-run in phase 2, over many seeds. Give one coda binary, or
two to compare (e.g. builds of 7a7286b and 2268af8: their phase 1 is identical, and only the phase-2
ranking differs, raw values against denoised ones; docs/lab.md).

Usage: /usr/bin/python3 bench/tune_phase2.py CODA [CODA2] [SEEDS=200] [PHASE2_REQUESTS=600]
Prints, per binary: runs with a recommendation, the mean true failure rate of the recommended
configuration (the test problem's noise-free rate) and its mean repetition_penalty deviation.
"""
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor


def recommended(coda, seed, requests):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([coda, "tune", "--test-problem", "failure", "--trials", "24", "--phase2-top", "5",
                        "--phase2-requests", str(requests), "--tune-seed", str(seed), "-o", d],
                       check=True, capture_output=True)
        p = json.load(open(os.path.join(d, "pareto.json")))
    r = p["recommendation"]
    if r is None:
        return None
    return next(t for t in p["trials"] if t["number"] == r["trial"])["details"]["true_values"]


def main():
    args = sys.argv[1:]
    binaries = [a for a in args if not a.isdigit()]
    numbers = [int(a) for a in args if a.isdigit()]
    seeds = numbers[0] if numbers else 200
    requests = numbers[1] if len(numbers) > 1 else 600
    for coda in binaries:
        with ThreadPoolExecutor(2) as ex:
            out = list(ex.map(lambda s: recommended(coda, s, requests), range(seeds)))
        recs = [o for o in out if o is not None]
        mean = lambda k: sum(r[k] for r in recs) / len(recs) if recs else float("nan")
        print(f"{coda}: recommended in {len(recs)}/{seeds}; true failure rate of the recommendation "
              f"{100 * mean(0):.2f}%, repetition_penalty deviation {mean(1):.3f} ({requests} phase-2 requests)")


if __name__ == "__main__":
    main()
