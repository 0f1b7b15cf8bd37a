#!/usr/bin/python3
"""Decode and prefill speed on a shared machine: coda (default threads, -t 1, -t 2) and llama.cpp's
llama-bench (-t 2), quiet and beside a neighbour:

  quiet      nothing else running
  busy1      one busy loop pinned to CPU 0
  busy2      busy loops pinned to CPUs 0 and 1
  coda       a second coda process decoding the same model (default threads) in a loop

Each cell is the median of --reps runs of one repetition each (`coda bench-model -r 1`,
`llama-bench -r 1`): the best of several would hide exactly the stalls this measures. Runs
alternate between the tools within each load. The ratio column is each speed over its quiet speed.

Usage: /usr/bin/python3 bench/contention.py build/coda OUT_DIR [--llama-bench /tmp/llama.cpp/build/bin/llama-bench]
       [--models bundled,1b] [--loads quiet,busy1,busy2,coda] [--reps 3]
The 1B model is `coda synth --shape llama-3.2-1b --type Q4_K` (Llama 3.2 1B's shapes, random weights:
the same work per token as the real Q4_K_M file). Writes OUT_DIR/contention.json and contention.md.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time


def cpus():
    return sorted(os.sched_getaffinity(0))


def start_load(load, coda, model):
    """Starts the neighbour processes for `load`; returns them."""
    procs = []
    if load.startswith("busy"):
        for c in cpus()[: int(load[4:])]:
            procs.append(subprocess.Popen(["taskset", "-c", str(c), "sh", "-c", "while :; do :; done"],
                                          start_new_session=True))
    elif load == "coda":
        loop = f"while :; do '{coda}' bench-model -m '{model}' -p 16 -n 512 -r 1 --no-warmup >/dev/null 2>&1; done"
        procs.append(subprocess.Popen(["sh", "-c", loop], start_new_session=True))
    time.sleep(0.5 if procs else 0)  # let the neighbour reach its steady state
    return procs


def stop_load(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def coda_run(coda, model, threads, n_prompt, n_gen):
    cmd = [coda, "bench-model", "-m", model, "-p", str(n_prompt), "-n", str(n_gen), "-r", "1", "--json"]
    if threads:
        cmd += ["-t", str(threads)]
    r = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return r["prefill_tps"], r["decode_tps"], r["threads"]


def llama_run(bench, model, threads, n_prompt, n_gen):
    cmd = [bench, "-m", model, "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen), "-r", "1", "-o", "json"]
    rows = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    return pp, tg, threads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("out")
    ap.add_argument("--llama-bench", default="")
    ap.add_argument("--models", default="bundled,1b")
    ap.add_argument("--loads", default="quiet,busy1,busy2,coda")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    coda = os.path.abspath(a.coda)
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "?")
    results = []
    for m in a.models.split(","):
        if m == "bundled":
            model = json.loads(subprocess.run([coda, "bench-model", "-p", "1", "-n", "1", "-r", "1", "--json"],
                                              capture_output=True, text=True, check=True).stdout)["model"]
            n_prompt, n_gen = 128, 128
        elif m == "1b":
            model = os.path.join(a.out, "llama-3.2-1b-Q4_K.gguf")
            if not os.path.exists(model):
                subprocess.run([coda, "synth", "--shape", "llama-3.2-1b", "--type", "Q4_K", "-o", model], check=True)
            n_prompt, n_gen = 128, 32
        else:
            model, n_prompt, n_gen = m, 128, 32
        configs = [("coda default", lambda: coda_run(coda, model, 0, n_prompt, n_gen)),
                   ("coda -t 1", lambda: coda_run(coda, model, 1, n_prompt, n_gen)),
                   ("coda -t 2", lambda: coda_run(coda, model, 2, n_prompt, n_gen))]
        if a.llama_bench:
            configs.append(("llama.cpp -t 2", lambda: llama_run(a.llama_bench, model, 2, n_prompt, n_gen)))
        for load in a.loads.split(","):
            samples = {name: [] for name, _ in configs}
            procs = start_load(load, coda, model)
            try:
                for rep in range(a.reps):
                    for name, fn in configs:
                        samples[name].append(fn())
                        print(f"{m} {load} {name} rep {rep + 1}/{a.reps}: pp {samples[name][-1][0]:.1f} "
                              f"tg {samples[name][-1][1]:.1f} t/s", file=sys.stderr, flush=True)
            finally:
                stop_load(procs)
            for name, _ in configs:
                s = samples[name]
                results.append({"model": m, "load": load, "config": name, "threads": s[0][2],
                                "prefill_tps": statistics.median(x[0] for x in s),
                                "decode_tps": statistics.median(x[1] for x in s),
                                "prefill_runs": [x[0] for x in s], "decode_runs": [x[1] for x in s]})
    quiet = {(r["model"], r["config"]): r for r in results if r["load"] == "quiet"}
    md = f"CPU: {cpu}, {len(cpus())} CPUs; median of {a.reps} runs; ratio = speed / quiet speed\n\n"
    md += "| model | config | load | prefill t/s | decode t/s | prefill ratio | decode ratio |\n|---|---|---|---|---|---|---|\n"
    for r in results:
        q = quiet.get((r["model"], r["config"]))
        pr = f"{r['prefill_tps'] / q['prefill_tps']:.2f}" if q else ""
        dr = f"{r['decode_tps'] / q['decode_tps']:.2f}" if q else ""
        md += (f"| {r['model']} | {r['config']} ({r['threads']} threads) | {r['load']} | {r['prefill_tps']:.1f} | "
               f"{r['decode_tps']:.1f} | {pr} | {dr} |\n")
    print(md)
    with open(os.path.join(a.out, "contention.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, "contention.json"), "w") as f:
        json.dump({"cpu": cpu, "cpus": len(cpus()), "reps": a.reps, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
