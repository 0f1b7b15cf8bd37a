#!/usr/bin/python3
"""The lab's commands end to end, with independent checks:
- `coda tune` on a noisy test problem writes an Optuna journal that Debian's python3-optuna loads
  with the same trials, params and values as pareto.json; an interrupted study (cut short, even
  mid-line) resumes to exactly the trials an uninterrupted one has;
- `coda bench --url` against `coda serve` over loopback counts the finish reasons the server's
  /metrics report;
- both reports render in headless Chromium (Debian's) without console errors.

Usage: /usr/bin/python3 tests/lab/test_lab_cli.py build/coda WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import urllib.request

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def run(args, ok=True):
    p = subprocess.run(args, capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise RuntimeError(f"{args} -> {p.returncode}: {p.stderr[-2000:]}")
    return p


def load_optuna(path):
    import optuna
    import warnings
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(optuna.storages.JournalFileStorage(path))
    return optuna.load_study(study_name=None, storage=storage)


def tune_tests(coda, work):
    a = os.path.join(work, "a")
    run([coda, "tune", "--test-problem", "failure", "--trials", "14", "--phase2-top", "2",
         "--phase2-requests", "300", "--tune-seed", "5", "-o", a])
    pareto = json.load(open(os.path.join(a, "pareto.json")))
    study = load_optuna(os.path.join(a, "study.log"))
    trials = pareto["trials"]
    check(len(study.trials) == len(trials) == 14 + 3, f"optuna sees {len(study.trials)} trials, pareto.json {len(trials)}")
    same = all(st.params == pytr["params"] and
               st.values == [pytr["values"]["f1"]["value"], pytr["values"]["f2"]["value"]] and
               st.user_attrs["phase"] == pytr["phase"]
               for st, pytr in zip(study.trials, trials))
    check(same, "optuna's params, values and phases equal pareto.json's")
    check(study.directions[0].name == "MINIMIZE" and len(study.directions) == 2, "two minimised objectives")
    dist = study.trials[5].distributions
    check(dist["temperature"].low == 0.7 and dist["repetition_penalty"].high == 1.1, "distributions carried over")
    check(trials[0]["baseline"] and trials[0]["params"]["repetition_penalty"] == 1.0, "trial 0 is the baseline")
    fronts = [t for t in trials if t["phase"] == 1 and t["on_front"]]
    check(len(fronts) >= 1, f"{len(fronts)} trials on the front")
    check("recommendation" in pareto and pareto["recommendation_text"], "a recommendation line")
    # Resume: 6 trials, a line cut mid-write, then 14; equal to 14 at once (run a).
    b = os.path.join(work, "b")
    run([coda, "tune", "--test-problem", "failure", "--trials", "6", "--tune-seed", "5", "-o", b])
    with open(os.path.join(b, "study.log"), "a") as f:
        f.write('{"op_code": 4, "worker_id": "x", "stu')
    run([coda, "tune", "--test-problem", "failure", "--trials", "14", "--phase2-top", "2",
         "--phase2-requests", "300", "--tune-seed", "5", "-o", b])
    pb = json.load(open(os.path.join(b, "pareto.json")))
    check([t["params"] for t in pb["trials"]] == [t["params"] for t in trials] and
          [t["values"] for t in pb["trials"]] == [t["values"] for t in trials],
          "a resumed study has exactly the uninterrupted study's trials")
    # Bad input: a malformed study file and a bad space are clear errors.
    bad = os.path.join(work, "bad.log")
    open(bad, "w").write("not json\n{}\n")
    p = run([coda, "tune", "--test-problem", "zdt1", "--study", bad, "-o", os.path.join(work, "c")], ok=False)
    check(p.returncode != 0 and "bad.log:1" in p.stderr, "malformed study file: " + p.stderr.strip()[-120:])
    p = run([coda, "tune", "--space", "temperature=2:1", "-o", os.path.join(work, "d")], ok=False)
    check(p.returncode != 0 and "low must be below high" in p.stderr, "bad space: " + p.stderr.strip()[-120:])
    return os.path.join(a, "report.html")


def bench_http_tests(coda, work):
    srv = subprocess.Popen([coda, "serve", "--port", "0", "-t", "1"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        url = srv.stdout.readline().strip().rsplit(" ", 1)[1]
        out = os.path.join(work, "bench")
        run([coda, "bench", "--url", url + "/v1", "--rate", "0", "--requests", "20", "--sets", "2", "-n", "64",
             "--temp", "0.9", "--set", "exam,technical", "-o", out])
        s = json.load(open(os.path.join(out, "summary.json")))
        metrics = urllib.request.urlopen(url + "/metrics").read().decode()
        served = {}
        for line in metrics.splitlines():
            if line.startswith('coda:request_success_total{finished_reason="'):
                served[line.split('"')[1]] = int(float(line.rsplit(" ", 1)[1]))
        counted = {k: v for k, v in s["finish_reasons"].items()}
        check(s["requests"] == 40 and s["completed"] == 40, f"40 requests completed: {s['completed']}")
        check(all(counted.get(k, 0) == served.get(k, 0) for k in set(counted) | set(served) if k != "error"),
              f"bench counted {counted}, the server reports {served}")
        lines = open(os.path.join(out, "requests.jsonl")).read().splitlines()
        rec = json.loads(lines[0])
        check(len(lines) == 40 and all(k in rec for k in
                                       ("set", "sent_at", "ttft_ms", "e2e_ms", "completion_tokens", "finish_reason", "error")),
              "requests.jsonl has a record per request with its fields")
        for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            check(all(q in s[k] for q in ("p50", "p90", "p99")), f"summary {k} percentiles")
        # A target that is down: a clear error, a non-zero exit, and the results so far written.
        down = os.path.join(work, "down")
        p = run([coda, "bench", "--url", "http://127.0.0.1:9", "--rate", "0", "--requests", "10", "-o", down], ok=False)
        check(p.returncode != 0 and "answered no request" in p.stderr and
              os.path.exists(os.path.join(down, "summary.json")), "down target: " + p.stderr.strip()[-160:])
        return os.path.join(out, "report.html")
    finally:
        srv.terminate()
        srv.wait(timeout=30)


def render(report, work):
    """Headless Chromium loads the report; the DevTools console must stay silent."""
    chromium = shutil.which("chromium")
    if chromium is None:
        check(False, "chromium is not installed (scripts/bootstrap.sh test installs it)")
        return
    profile = os.path.join(work, "chromium-profile-" + os.path.basename(os.path.dirname(report)))
    png = report.replace(".html", ".png")
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0", "--window-size=1000,1400",
            "--screenshot=" + png, "file://" + os.path.abspath(report)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    console = [l for l in p.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
    check(p.returncode == 0 and os.path.getsize(png) > 10000 and not console,
          f"{os.path.basename(os.path.dirname(report))}/report.html renders: rc {p.returncode}, console {console[:2]}")


def main():
    coda, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tune_report = tune_tests(coda, work)
    bench_report = bench_http_tests(coda, work)
    render(tune_report, work)
    render(bench_report, work)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
