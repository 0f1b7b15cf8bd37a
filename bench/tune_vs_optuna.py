#!/usr/bin/python3
"""coda tune's MOTPE against Optuna 3.1's (Debian python3-optuna, TPESampler on a two-objective
study) on the same noisy test problems, the same budgets and 20 seeds each: the hypervolume of the
front found after 24 and 48 trials, computed on the noise-free objective values of the trials each
tuner evaluated (so both are judged by what they found, not by their luck in the noise).

Problems (also in src/lab/tune.cpp): zdt1 (f1 = x1 seen through Binomial(120, x1)/120, f2 = ZDT1's
g(1 - sqrt(x1/g))) and failure (the study's shape: a failure probability over temperature, min_p
and repetition_penalty seen through Binomial(120, p)/120, and repetition_penalty - 1). Both start
from the same baseline trial and 10 random trials.

Usage: /usr/bin/python3 bench/tune_vs_optuna.py build/coda [SEEDS] [FIRST_SEED]
CODA_TUNE_ARGS="--multivariate" (or any coda tune flags) tries a variant on coda's side. The column
"paired mean" is the mean over seeds of (coda - Optuna) / Optuna's median, each seed's two runs
paired, with its standard error. With 40 seeds or more, "20-seed windows" counts the consecutive
windows of 20 seeds (the issue's budget) in which coda's median is at least Optuna's: how often a
20-seed table would call the cell a pass.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import optuna

warnings.filterwarnings("ignore")
optuna.logging.set_verbosity(optuna.logging.WARNING)

REQUESTS = 120
EXTRA = os.environ.get("CODA_TUNE_ARGS", "").split()
REF = {"zdt1": (1.1, 11.0), "failure": (0.05, 0.11)}
BASELINE = {"zdt1": {"x1": 0.5, "x2": 0.5},
            "failure": {"temperature": 0.9, "min_p": 0.0, "repetition_penalty": 1.0}}


def true_values(problem, p):
    if problem == "zdt1":
        g = 1 + 9 * p["x2"]
        return p["x1"], g * (1 - math.sqrt(p["x1"] / g))
    t, m, r = p["temperature"], p["min_p"], p["repetition_penalty"]
    rate = 0.002 + 0.012 * ((t - 0.8) / 0.1) ** 2 + 0.02 * max(0.0, 1.03 - r) / 0.03 + 0.004 * m / 0.1
    return min(max(rate, 0.0), 1.0), r - 1


def hv2(points, ref):
    pts = sorted(p for p in points if p[0] < ref[0] and p[1] < ref[1])
    area, best_y = 0.0, ref[1]
    for x, y in pts:
        if y < best_y:
            area += (ref[0] - x) * (best_y - y)
            best_y = y
    return area


def run_optuna(problem, seed, n):
    rng = np.random.default_rng(seed + 1000)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial(BASELINE[problem])
    found = []

    def objective(trial):
        if problem == "zdt1":
            p = {"x1": trial.suggest_float("x1", 0, 1), "x2": trial.suggest_float("x2", 0, 1)}
        else:
            p = {"temperature": trial.suggest_float("temperature", 0.7, 0.9),
                 "min_p": trial.suggest_float("min_p", 0, 0.1),
                 "repetition_penalty": trial.suggest_float("repetition_penalty", 1.0, 1.1)}
        rate, f2 = true_values(problem, p)
        found.append((rate, f2))
        return rng.binomial(REQUESTS, rate) / REQUESTS, f2

    study.optimize(objective, n_trials=n)
    return found


def run_coda(coda, problem, seed, n):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([coda, "tune", "--test-problem", problem, "--trials", str(n), "--tune-seed", str(seed),
                        "-o", d] + EXTRA, check=True, capture_output=True)
        pareto = json.load(open(os.path.join(d, "pareto.json")))
    return [tuple(t["details"]["true_values"]) for t in pareto["trials"] if t["phase"] == 1]


def win_count(c, o, windows):
    """Windows of 20 consecutive seeds where coda's median hypervolume is at least Optuna's."""
    return sum(int(np.median(c[20 * w:20 * w + 20]) >= np.median(o[20 * w:20 * w + 20])) for w in range(windows))


def main():
    coda = sys.argv[1]
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    windows = seeds // 20 if seeds >= 40 else 0
    print("| problem | trials | coda median HV (IQR) | Optuna 3.1 median HV (IQR) | coda / Optuna | paired mean (se) |"
          + (" 20-seed windows |" if windows else ""))
    print("|---|---|---|---|---|---|" + ("---|" if windows else ""))
    for problem in ("zdt1", "failure"):
        res = {"coda": {24: [], 48: []}, "optuna": {24: [], 48: []}}
        for seed in range(first, first + seeds):
            for name, found in (("coda", run_coda(coda, problem, seed, 48)), ("optuna", run_optuna(problem, seed, 48))):
                for n in (24, 48):
                    res[name][n].append(hv2(found[:n], REF[problem]))
        for n in (24, 48):
            c, o = np.array(res["coda"][n]), np.array(res["optuna"][n])
            d = (c - o) / np.median(o)  # per seed, the same seed's runs paired
            iqr = lambda a: f"{np.percentile(a, 25):.4g}-{np.percentile(a, 75):.4g}"
            print(f"| {problem} | {n} | {np.median(c):.5g} ({iqr(c)}) | {np.median(o):.5g} ({iqr(o)}) | "
                  f"{np.median(c) / np.median(o):.3f} | {100 * d.mean():+.2f}% ({100 * d.std() / np.sqrt(len(d)):.2f}) |"
                  + (f" {win_count(c, o, windows)}/{windows} |" if windows else ""))


if __name__ == "__main__":
    main()
