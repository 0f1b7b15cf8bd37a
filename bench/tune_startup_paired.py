#!/usr/bin/python3
"""What the Latin-hypercube startup of `coda tune` buys: coda against itself with --random-startup
(Optuna's independent draws), on the same seeds of bench/tune_vs_optuna.py's noisy problems; the
mean and median relative change of the hypervolume found after 24 and 48 trials, with the mean's
standard error. Pairing on seeds removes most of the seed-to-seed spread.

Usage: /usr/bin/python3 bench/tune_startup_paired.py build/coda [SEEDS] [VARIANT FLAGS]
  VARIANT FLAGS (one quoted string, e.g. "--n-ei-candidates 64"): compare coda's default with those
  flags instead of with --random-startup; the change is then the variant's over the default.
"""
import sys

import numpy as np

import tune_vs_optuna as T


def main():
    coda = sys.argv[1]
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    variant = sys.argv[3].split() if len(sys.argv) > 3 else None
    print("| problem | trials | mean change (standard error) | median change |")
    print("|---|---|---|---|")
    for problem in ("zdt1", "failure"):
        gain = {24: [], 48: []}
        for seed in range(seeds):
            T.EXTRA = []
            default = T.run_coda(coda, problem, seed, 48)
            T.EXTRA = variant or ["--random-startup"]
            other = T.run_coda(coda, problem, seed, 48)
            # The startup comparison reports what the Latin hypercube buys over random draws; a
            # variant, what it buys over the default.
            new, old = (other, default) if variant else (default, other)
            for n in (24, 48):
                gain[n].append(T.hv2(new[:n], T.REF[problem]) / T.hv2(old[:n], T.REF[problem]) - 1)
        for n in (24, 48):
            x = np.array(gain[n])
            print(f"| {problem} | {n} | {100 * x.mean():+.2f}% ({100 * x.std() / np.sqrt(len(x)):.2f}%) | "
                  f"{100 * np.median(x):+.2f}% |", flush=True)


if __name__ == "__main__":
    main()
