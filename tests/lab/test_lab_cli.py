#!/usr/bin/python3
"""The lab's commands end to end, with independent checks:
- `coda tune` on a noisy test problem writes an Optuna journal that Debian's python3-optuna loads
  with the same trials, params and values as pareto.json; an interrupted study (cut short, even
  mid-line) resumes to exactly the trials an uninterrupted one has;
- on the same history (a study Optuna wrote), coda's next proposal follows the distribution of
  Optuna 3.1's TPESampler's next proposal (two-sample Kolmogorov-Smirnov test per parameter);
- `coda bench --url` against `coda serve` over loopback counts the finish reasons the server's
  /metrics report;
- `coda bench` against a server that says "stop" for a generation cut at max_tokens (ik_llama.cpp
  before August 2026; tests/proxy/scripted_upstream.py's [stop-at-limit]) still counts those
  requests as failures, and takes the server at its word with --trust-finish-reason;
- a server whose /v1/models says llama.cpp (`owned_by: "llamacpp"`) is sent the repetition
  penalty as `repeat_penalty` too, the only name llama.cpp's server reads; others are not;
- `coda threshold` on the bundled model, greedy: the Kaplan-Meier curve falls where the loops of
  the guard evaluation's reference definition (bench/guard_eval.py) begin, on the same tokens;
- `coda diagnose` on the bundled model: greedy, it names the decoding plane, and its count of
  looping runs equals the reference definition's on the same generations (`coda run`); with
  repetition_penalty raised it moves on to the context plane and reports the threshold;
- `coda diagnose --url` against a llama.cpp server without /metrics (llama-server's default): the
  system plane keeps the server's own explanation and reads GET /slots, and a slot whose context
  is 97% full is the problem it names;
- the reports render in headless Chromium (Debian's) without console errors.

Usage: /usr/bin/python3 tests/lab/test_lab_cli.py build/coda WORK_DIR
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import urllib.request

failures = []
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "coda-tiny-en-it-f16.gguf")


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def run(args, ok=True, env=None):
    p = subprocess.run(args, capture_output=True, text=True, env=env)
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
    check(trials[0]["baseline"] and trials[0]["params"]["repetition_penalty"] == 1.0 and
          trials[0]["params"]["temperature"] == 0.7,
          f"trial 0 is the study's baseline (temperature 0.7, repetition_penalty 1.0): {trials[0]['params']}")
    fronts = [t for t in trials if t["phase"] == 1 and t["on_front"]]
    check(len(fronts) >= 1, f"{len(fronts)} trials on the front")
    # Phase 2 has its own front, among its re-runs (checked by hand: no other re-run at least as good
    # on both objectives and better on one), and its own plot.
    p2 = [t for t in trials if t["phase"] == 2]
    vals = [(t["values"]["f1"]["value"], t["values"]["f2"]["value"]) for t in p2]
    def dominated(i):
        return any(all(b <= a for a, b in zip(vals[i], vals[j])) and vals[j] != vals[i] for j in range(len(vals)) if j != i)
    check(len(p2) == 3 and [t["on_front"] for t in p2] == [not dominated(i) for i in range(len(p2))],
          f"phase 2's own front: {[(t['number'], t['on_front'], vals[k]) for k, t in enumerate(p2)]}")
    html = open(os.path.join(a, "report.html")).read()
    check("Phase 1: Pareto front" in html and "Phase 2: Pareto front" in html, "a Pareto plot per phase")
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


def ks_two_sample_p(a, b):
    """Asymptotic p-value of the two-sample Kolmogorov-Smirnov statistic (Kolmogorov's series)."""
    import math
    a, b = sorted(a), sorted(b)
    d, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        x = min(a[i], b[j])
        while i < len(a) and a[i] <= x:
            i += 1
        while j < len(b) and b[j] <= x:
            j += 1
        d = max(d, abs(i / len(a) - j / len(b)))
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * d
    return min(1.0, max(0.0, 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))))


def proposal_tests(coda, work, seeds=200):
    """Optuna writes a 20-trial zdt1 history (10 random, 10 crowded near the front); coda resumes it
    and proposes trial 20 under `seeds` sampler seeds, Optuna's TPESampler the same, coda with
    Optuna's settings (24 candidates, no denoising; its defaults depart there on purpose). The proposals
    must share one distribution per parameter: a sampler that scores or splits differently moves
    them (with the exact Parzen density, which Optuna 3.1.0 does not use, x2 gives p = 6e-37)."""
    import math
    import random
    import optuna
    import warnings
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rng = random.Random(0)
    hist = []
    for i in range(20):
        p = {"x1": 0.5, "x2": 0.5} if i == 0 else {"x1": rng.random(), "x2": rng.random() ** (4 if i >= 10 else 1)}
        g = 1 + 9 * p["x2"]
        noisy = sum(rng.random() < p["x1"] for _ in range(120)) / 120
        hist.append((p, (noisy, g * (1 - math.sqrt(p["x1"] / g)))))
    base = os.path.join(work, "history.log")
    storage = optuna.storages.JournalStorage(optuna.storages.JournalFileStorage(base))
    st = optuna.create_study(directions=["minimize", "minimize"], storage=storage, study_name="history")
    for p, _ in hist:
        st.enqueue_trial(p)
    values = iter([v for _, v in hist])
    st.optimize(lambda t: (t.suggest_float("x1", 0, 1), t.suggest_float("x2", 0, 1), next(values))[2], n_trials=20)
    dist = {"x1": optuna.distributions.FloatDistribution(0, 1), "x2": optuna.distributions.FloatDistribution(0, 1)}
    theirs, ours = {"x1": [], "x2": []}, {"x1": [], "x2": []}
    for seed in range(seeds):
        mem = optuna.create_study(directions=["minimize", "minimize"], sampler=optuna.samplers.TPESampler(seed=seed))
        for p, v in hist:
            mem.add_trial(optuna.trial.create_trial(params=p, distributions=dist, values=list(v)))
        t = mem.ask(dist)
        d = os.path.join(work, "prop")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        shutil.copy(base, os.path.join(d, "study.log"))
        run([coda, "tune", "--test-problem", "zdt1", "--trials", "21", "--tune-seed", str(seed), "-o", d,
             "--n-ei-candidates", "24", "--denoise", "0", "--gamma", "0.1", "--surrogate", "0"])
        last = json.load(open(os.path.join(d, "pareto.json")))["trials"][20]
        for k in ("x1", "x2"):
            theirs[k].append(t.params[k])
            ours[k].append(last["params"][k])
    for k in ("x1", "x2"):
        p = ks_two_sample_p(theirs[k], ours[k])
        check(p > 1e-3, f"next proposal's {k}: coda and Optuna 3.1 share a distribution (KS p = {p:.3g}, "
              f"{seeds} seeds; medians {sorted(ours[k])[seeds // 2]:.4f} and {sorted(theirs[k])[seeds // 2]:.4f})")


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
        # A ShareGPT dump, as vLLM users benchmark with: its first human turns go out as chat requests.
        sg = os.path.join(work, "sharegpt.json")
        json.dump([{"id": "a", "conversations": [{"from": "human", "value": "Tell me a story."},
                                                 {"from": "gpt", "value": "Once upon a time."}]},
                   {"id": "b", "conversations": [{"from": "gpt", "value": "no question first"}]},
                   {"id": "c", "conversations": [{"from": "human", "value": "La vita è come"}]}], open(sg, "w"))
        before = sum(served.values())
        sgo = os.path.join(work, "bench-sharegpt")
        run([coda, "bench", "--url", url + "/v1", "--rate", "0", "--requests", "6", "-n", "8", "--prompts", sg,
             "-o", sgo])
        s2 = json.load(open(os.path.join(sgo, "summary.json")))
        chats = urllib.request.urlopen(url + "/metrics").read().decode()
        check(s2["completed"] == 6 and "sharegpt" in json.dumps(s2.get("groups", s2)),
              f"a ShareGPT file drives the bench: {s2['completed']} completed, group sharegpt")
        after = sum(int(float(line.rsplit(" ", 1)[1])) for line in chats.splitlines()
                    if line.startswith('coda:request_success_total{finished_reason="'))
        check(after - before == 6, f"the server served the 6 ShareGPT requests ({after - before})")
        # A target that is down: a clear error, a non-zero exit, and the results so far written.
        down = os.path.join(work, "down")
        p = run([coda, "bench", "--url", "http://127.0.0.1:9", "--rate", "0", "--requests", "10", "-o", down], ok=False)
        check(p.returncode != 0 and "answered no request" in p.stderr and
              os.path.exists(os.path.join(down, "summary.json")), "down target: " + p.stderr.strip()[-160:])
        return os.path.join(out, "report.html")
    finally:
        srv.terminate()
        srv.wait(timeout=30)


def bench_finish_reason_tests(coda, work):
    """Failures that a server reports as "stop": a text cut at max_tokens, said "stop" as older
    ik_llama.cpp and llama.cpp servers say it, is still a generation that never ended."""
    here = os.path.dirname(os.path.abspath(__file__))
    up = subprocess.Popen(["/usr/bin/python3", os.path.join(here, "..", "proxy", "scripted_upstream.py")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = "http://127.0.0.1:" + up.stdout.readline().split()[-1]
        prompts = os.path.join(work, "limit-prompts.jsonl")
        with open(prompts, "w") as f:
            for p in ("[loop] [stop-at-limit] Tell", "[text] [stop-at-limit] Say", "[loop] Tell", "[text] Say"):
                f.write(json.dumps({"prompt": p, "group": "limit" if "stop-at" in p else "truthful"}) + "\n")
        for stream in (True, False):
            tag = "stream" if stream else "whole"
            base = [coda, "bench", "--url", url, "--rate", "0", "--requests", "8", "-n", "16", "--prompts", prompts,
                    "--seed", "3"] + ([] if stream else ["--no-stream"])
            out = os.path.join(work, "limit-" + tag)
            p = run(base + ["-o", out])
            s = json.load(open(os.path.join(out, "summary.json")))
            recs = [json.loads(line) for line in open(os.path.join(out, "requests.jsonl"))]
            loops = [r for r in recs if r["completion_tokens"] == 16]
            mislabelled = [r for r in loops if r["finish_reason"] == "stop"]
            check(len(recs) == 8 and loops and mislabelled and len(mislabelled) < len(loops) and
                  all(r["completion_tokens"] < 16 and r["finish_reason"] == "stop" for r in recs if r not in loops),
                  f"{tag}: the loops ran to max_tokens, some said stop, some length; the texts ended before "
                  f"({[(r['finish_reason'], r['completion_tokens']) for r in recs]})")
            check(s["failures"] == len(loops) and all(r["failure"] == (r in loops) for r in recs) and
                  all(r["stop_at_limit"] == (r in mislabelled) for r in recs) and
                  s["stop_at_limit"] == len(mislabelled) and s["finish_reasons"]["stop"] == 8 - len(loops) + len(mislabelled),
                  f"{tag}: every generation cut at max_tokens is a failure, whatever the server called it "
                  f"({s['failures']} failures of {len(loops)} loops, {s['stop_at_limit']} said stop)")
            check("counted as failures" in p.stderr and "counted as failures" in open(os.path.join(out, "report.html")).read(),
                  f"{tag}: the run and its report say what it did: {p.stderr.strip()[-300:]}")
            trusting = os.path.join(work, "limit-trust-" + tag)
            p = run(base + ["--trust-finish-reason", "-o", trusting])
            t = json.load(open(os.path.join(trusting, "summary.json")))
            check(t["failures"] == len(loops) - len(mislabelled) and t["stop_at_limit"] == len(mislabelled) and
                  t["trust_finish_reason"] is True and "--trust-finish-reason counted them as successes" in p.stderr,
                  f"{tag}: --trust-finish-reason counts only what the server called length ({t['failures']})")
        # coda tune counts them the same way, and says so per trial.
        tuned = os.path.join(work, "limit-tune")
        p = run([coda, "tune", "--url", url, "--rate", "0", "--requests", "8", "-n", "16", "--prompts", prompts,
                 "--seed", "3", "--trials", "2", "-o", tuned])
        trials = json.load(open(os.path.join(tuned, "pareto.json")))["trials"]
        check(len(trials) == 2 and all(t["details"]["stop_at_limit"] >= 1 and
                                       t["details"]["failures"] > t["details"]["finish_reasons"]["length"] for t in trials) and
              p.stderr.count('answered "stop" at max_tokens, counted as failures') == 2,
              f"coda tune counts a stop at the limit as a failure too: {[t['details'] for t in trials]}")
    finally:
        up.terminate()
        up.wait(timeout=30)


def reasoning_lab_tests(coda, work):
    """A reasoning model that never answers: coda bench counts a request that ended inside the
    thinking (reasoning and no content, or content that opened <think> and never closed it) as a
    failure of its own kind, whatever its finish_reason; coda threshold measures the thinking and the
    answer apart."""
    here = os.path.dirname(os.path.abspath(__file__))
    up = subprocess.Popen(["/usr/bin/python3", os.path.join(here, "..", "proxy", "scripted_upstream.py")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = "http://127.0.0.1:" + up.stdout.readline().split()[-1]
        prompts = os.path.join(work, "reasoning-prompts.jsonl")
        kinds = {"[think-loop] a": "no_answer", "[think-tags][think-loop] b": "no_answer", "[think] c": "answered",
                 "[think-tags][think] d": "answered"}
        with open(prompts, "w") as f:
            for p in kinds:
                f.write(json.dumps({"messages": [{"role": "user", "content": p}], "group": kinds[p]}) + "\n")
        out = os.path.join(work, "bench-reasoning")
        p = run([coda, "bench", "--url", url, "--rate", "0", "--requests", "8", "-n", "40", "--prompts", prompts,
                 "--seed", "1", "-o", out])
        s = json.load(open(os.path.join(out, "summary.json")))
        recs = [json.loads(line) for line in open(os.path.join(out, "requests.jsonl"))]
        check(all(r["no_answer"] == (r["group"] == "no_answer") and r["failure"] == r["no_answer"] for r in recs)
              and s["failure_kinds"]["no_answer"] == s["groups"]["no_answer"]["requests"] == s["failures"] > 0
              and s["groups"]["answered"]["failures"] == 0,
              f"bench: no answer is a failure of its own kind: {s['failure_kinds']} {[(r['group'], r['failure']) for r in recs]}")
        check("ended inside the model's thinking" in p.stderr, f"bench says so: {p.stderr[-400:]}")
        # --api chat: the built-in prompts as user messages without their cue, for an instruct model.
        out = os.path.join(work, "bench-api-chat")
        run([coda, "bench", "--url", url, "--rate", "0", "--requests", "12", "-n", "8", "--set", "all", "--lang", "it",
             "--api", "chat", "--seed", "1", "-o", out])
        port = url.rsplit(":", 1)[1]
        c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
        c.request("GET", "/last-bodies")
        bodies = json.loads(c.getresponse().read())
        c.close()
        contents = [b["messages"][0]["content"] for b in bodies if "messages" in b]
        check(len(contents) == 10 and all(not x.rstrip().endswith((":", "1.")) and x == x.strip() for x in contents)
              and any(x.startswith("Scrivi un lungo racconto") for x in contents)
              and all(b.get("messages", [{}])[0].get("role") == "user" for b in bodies),
              f"--api chat sends user messages without the completion cue: {contents[:3]}")
        out = os.path.join(work, "threshold-reasoning")
        run([coda, "threshold", "--url", url, "--prompts", prompts, "--runs", "2", "-n", "40", "-o", out])
        t = json.load(open(os.path.join(out, "threshold.json")))
        loop, ans = t["groups"]["no_answer"]["reasoning"], t["groups"]["answered"]["reasoning"]
        check(loop["no_answer"] == 2 and loop["median_answer_tokens"] == 0 and loop["median_reasoning_tokens"] > 0
              and ans["no_answer"] == 0 and ans["median_answer_tokens"] > 0,
              f"threshold: thinking and answer apart: {loop} {ans}")
    finally:
        up.terminate()
        up.wait(timeout=30)


def api_auto_tests(coda, work):
    """--api auto sends the built-in prompts as chat messages when the model has a chat template of
    its own: coda serve's /props says whether its template is the model's (chatml chosen with
    --chat-template) or a built-in standing in for a base model (the bundled one); a server without
    /props (vLLM) is asked a one-token chat request; in process, the GGUF decides."""
    for extra, want, why in (([], "completions", "no chat template of its own"),
                             (["--chat-template", "chatml"], "chat", "/props has a chat_template")):
        srv = subprocess.Popen([coda, "serve", "--port", "0", "-t", "1", *extra], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            url = srv.stdout.readline().strip().rsplit(" ", 1)[1]
            out = os.path.join(work, "bench-api-auto-" + want)
            p = run([coda, "bench", "--url", url, "--api", "auto", "--rate", "0", "--requests", "2", "-n", "4",
                     "-o", out])
            check(f"--api auto: {want} (" in p.stderr and why in p.stderr,
                  f"coda serve {extra}: --api auto chose {want}: {p.stderr[:300]}")
        finally:
            srv.terminate()
            srv.wait(timeout=30)
    here = os.path.dirname(os.path.abspath(__file__))
    up = subprocess.Popen(["/usr/bin/python3", os.path.join(here, "..", "proxy", "scripted_upstream.py")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = "http://127.0.0.1:" + up.stdout.readline().split()[-1]
        p = run([coda, "threshold", "--url", url, "--api", "auto", "--runs", "1", "-n", "40", "--set", "exam",
                 "--lang", "en", "-o", os.path.join(work, "threshold-api-auto")])
        check("--api auto: chat (a chat request was answered)" in p.stderr,
              f"a server without /props: a one-token chat request decides: {p.stderr[:300]}")
    finally:
        up.terminate()
        up.wait(timeout=30)
    p = run([coda, "bench", "--api", "auto", "--requests", "1", "-n", "4", "-o", os.path.join(work, "bench-api-auto-in")])
    check("--api auto: completions (the GGUF has no chat template)" in p.stderr,
          f"in process, the bundled GGUF has no chat template: {p.stderr[:300]}")


def bench_llamacpp_names_tests(coda, work):
    """llama.cpp's server reads the repetition penalty only as `repeat_penalty`."""
    here = os.path.dirname(os.path.abspath(__file__))
    for owned_by in ("llamacpp", None):
        up = subprocess.Popen(["/usr/bin/python3", os.path.join(here, "..", "proxy", "scripted_upstream.py")] +
                              (["--owned-by", owned_by] if owned_by else []),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            url = "http://127.0.0.1:" + up.stdout.readline().split()[-1]
            prompts = os.path.join(work, "names-prompts.jsonl")
            with open(prompts, "w") as f:
                f.write(json.dumps({"prompt": "[text] Say"}) + "\n")
            run([coda, "bench", "--url", url, "--rate", "0", "--requests", "3", "-n", "8", "--prompts", prompts,
                 "--repeat-penalty", "1.07", "-o", os.path.join(work, f"names-{owned_by}")])
            bodies = json.loads(urllib.request.urlopen(url + "/last-bodies").read())
            want = 1.07 if owned_by else None
            check(len(bodies) == 3 and all(b.get("repetition_penalty") == 1.07 and b.get("repeat_penalty") == want
                                           for b in bodies),
                  f"owned_by {owned_by}: repetition_penalty sent, repeat_penalty {want}: "
                  f"{[(b.get('repetition_penalty'), b.get('repeat_penalty')) for b in bodies]}")
        finally:
            up.terminate()
            up.wait(timeout=30)


def bench_api_key_tests(coda, work):
    """A target behind a key: without one every request is refused (a clear error, a non-zero exit);
    $OPENAI_API_KEY is sent when --api-key is not given, as vLLM's benchmark sends it."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "CODA_API_KEY")}
    srv = subprocess.Popen([coda, "serve", "--port", "0", "-t", "1", "--api-key", "lab-key"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = srv.stdout.readline().strip().rsplit(" ", 1)[1]
        args = [coda, "bench", "--url", url, "--rate", "0", "--requests", "2", "-n", "4"]
        p = run(args + ["-o", os.path.join(work, "bench-nokey")], ok=False, env=env)
        s = json.load(open(os.path.join(work, "bench-nokey", "summary.json")))
        check(p.returncode != 0 and s["completed"] == 0, "no key: every request refused, non-zero exit: " +
              p.stderr.strip()[-160:])
        run(args + ["-o", os.path.join(work, "bench-envkey")], env=dict(env, OPENAI_API_KEY="lab-key"))
        s = json.load(open(os.path.join(work, "bench-envkey", "summary.json")))
        check(s["completed"] == 2, f"$OPENAI_API_KEY is sent: {s['completed']} of 2 completed")
        # vLLM's `bench serve` spelling of the same run: --base-url, --dataset-name/--dataset-path,
        # --num-prompts, --request-rate (per second; inf sends all at once), --save-result --result-dir.
        sg = os.path.join(work, "vllm-sharegpt.json")
        json.dump([{"id": "a", "conversations": [{"from": "human", "value": "Tell me a story."}]}], open(sg, "w"))
        run([coda, "bench", "--base-url", url, "--dataset-name", "sharegpt", "--dataset-path", sg, "--num-prompts", "3",
             "--request-rate", "inf", "-n", "4", "--save-result", "--result-dir", os.path.join(work, "bench-vllm-flags")],
            env=dict(env, OPENAI_API_KEY="lab-key"))
        s = json.load(open(os.path.join(work, "bench-vllm-flags", "summary.json")))
        check(s["completed"] == 3 and s["options"]["rate_per_min"] == 0 and "sharegpt" in json.dumps(s["groups"]),
              f"vLLM's bench flags: 3 ShareGPT requests at once: {s['completed']}, {s['options']}")
        run([coda, "bench", "--num-prompts", "2", "--request-rate", "2.5", "-n", "2", "-o",
             os.path.join(work, "bench-per-second")])
        s = json.load(open(os.path.join(work, "bench-per-second", "summary.json")))
        check(s["options"]["rate_per_min"] == 150, f"--request-rate 2.5 per second is 150 per minute: {s['options']}")
        p = run([coda, "bench", "--request-rate", "2", "--rate", "60", "-o", os.path.join(work, "bench-both")], ok=False)
        check(p.returncode != 0 and "excludes" in p.stderr, "--request-rate and --rate together: " + p.stderr[-120:])
    finally:
        srv.terminate()
        srv.wait(timeout=30)


THRESHOLD_PROMPTS = [("kjv-en", p) for p in ("And the LORD said unto", "And Moses went up to", "The king spake unto",
                                               "And the people came to", "And David took", "In the beginning God")] + \
    [("fortune-it", p) for p in ("La vita è come", "Il tempo non aspetta", "L'amore vale più di",
                                 "Chi dorme porta sempre")]


def threshold_tests(coda, work):
    """Greedy generations of the bundled model loop (its model card); coda threshold must see them
    begin where the reference definition, independent of the guard's detectors, says they do."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    from guard_eval import reference_loop
    prompts = os.path.join(work, "threshold-prompts.jsonl")
    with open(prompts, "w") as f:
        for g, p in THRESHOLD_PROMPTS:
            f.write(json.dumps({"prompt": p, "group": g}) + "\n")
    out = os.path.join(work, "threshold")
    p = run([coda, "threshold", "-m", MODEL, "--prompts", prompts, "--runs", "6", "-n", "512", "--temp", "0",
             "--ignore-eos", "-t", "1", "-o", out])
    check("threshold" in p.stdout, "coda threshold prints a line per group: " + p.stdout.strip().replace("\n", " | "))
    summary = json.load(open(os.path.join(out, "threshold.json")))
    runs = [json.loads(l) for l in open(os.path.join(out, "runs.jsonl"))]
    for g, gj in summary["groups"].items():
        for key in ("runs", "degraded", "threshold_tokens", "threshold_ci95", "recommended_max_tokens", "episode_types"):
            check(key in gj, f"{g}: threshold.json has {key}")
        check(all(("onset" in r and "episode" in r) or "censored_at" in r for r in gj["runs_detail"]),
              f"{g}: every run has an onset with its episode, or is censored")
        ref_onsets, near_onsets = [], []
        for r in runs:
            if r["group"] != g:
                continue
            ids = {}
            ref = reference_loop([ids.setdefault(t, len(ids)) for t in r["tokens"]])
            check(len(r["tokens"]) == r["length"] == 512, f"{g} run {r['index']}: 512 tokens, each with its text")
            if ref is None:
                check(not r["degraded"] or r["episode"] not in ("loop", "near_loop", "flooding"),
                      f"{g} run {r['index']}: no reference loop and no loop episode")
                continue
            ref_onsets.append(ref)
            # A near loop (copies with edits) comes before the exact loop it turns into, which is
            # all the reference sees: an earlier near_loop onset counts when the 150 words from it
            # are repetitive by a measure of their own (under half their word 3-grams distinct;
            # running prose keeps 0.9 and more).
            words = "".join(r["tokens"][r.get("onset") or 0:]).split()[:150]
            grams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
            repetitive = len(grams) > 0 and len(set(grams)) < 0.5 * len(grams)
            if r["degraded"] and r["episode"] == "near_loop" and r["onset"] < ref[0] and repetitive:
                near_onsets.append((r["onset"], ref[1]))
            check(r["degraded"] and (abs(r["onset"] - ref[0]) <= ref[1] or
                                     (r["episode"] == "near_loop" and r["onset"] < ref[0] and repetitive)),
                  f"{g} run {r['index']}: guard onset {r.get('onset')} within one period ({ref[1]}) of the reference "
                  f"onset {ref[0]}, or an earlier near loop whose words repeat")
        thr = gj["threshold_tokens"]
        check(len(ref_onsets) >= 4, f"{g}: greedy runs loop by the reference ({len(ref_onsets)} of 6)")
        steps = [st["tokens"] for st in gj["survival"]]
        check(all(any(abs(t - o) <= per for o, per in ref_onsets + near_onsets) for t in steps),
              f"{g}: every drop of the survival curve {steps} lies within a period of a reference loop onset "
              f"{sorted(ref_onsets)} or of an earlier near loop {sorted(near_onsets)}")
        # Every run degraded, so the 10% threshold is the curve's first drop: the earliest loop.
        check(thr is not None and thr == min(steps), f"{g}: threshold {thr} at the first drop of the curve")
        lo, hi = gj["threshold_ci95"]
        check(lo is not None and lo <= thr and (hi is None or thr <= hi), f"{g}: interval [{lo}, {hi}] holds {thr}")
        check(gj["recommended_max_tokens"] == int(thr * 0.8), f"{g}: recommended max_tokens = 80% of the threshold")
    return os.path.join(out, "report.html")


def diagnose_tests(coda, work):
    """The three planes on the bundled model. Greedy decoding loops (its model card): the verdict is
    the decoding plane. At repetition_penalty 1.5 with EOS ignored (a stress test of length), the
    first 256 tokens are clean and coherence ends later: the verdict is the context plane."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    from guard_eval import reference_loop
    prompts = os.path.join(work, "diagnose-prompts.jsonl")
    texts = [p for g, p in THRESHOLD_PROMPTS if g == "kjv-en"]
    with open(prompts, "w") as f:
        for p in texts:
            f.write(json.dumps({"prompt": p, "group": "kjv-en"}) + "\n")
    # One thread, here and in `coda run` below: a pool of two spins at its barriers and, on a
    # machine busy with other tests, waits out the scheduler at each one (`coda threshold` beside four
    # busy loops: 1.7 s with -t 1, over 90 s with -t 2).
    common = [coda, "diagnose", "-m", MODEL, "--prompts", prompts, "--runs", str(len(texts)), "--decode-tokens", "256",
              "-n", "1536", "--temp", "0", "-t", "1"]
    greedy = os.path.join(work, "diagnose-greedy")
    p = run(common + ["-o", greedy])
    d = json.load(open(os.path.join(greedy, "diagnosis.json")))
    planes = {x["plane"]: x for x in d["planes"]}
    check([x["plane"] for x in d["planes"]] == ["system", "decoding", "context"], "diagnose walks system, decoding, context")
    check(d["verdict"]["plane"] == "decoding" and d["verdict"]["next_plane"] == "context",
          f"greedy: the verdict names the decoding plane, then context: {d['verdict']}")
    check("decoding" in p.stdout and "verdict" in p.stdout, "diagnose prints a summary per plane and the verdict")
    check(planes["system"]["status"] == "ok" and planes["system"]["evidence"]["errors"] == 0,
          "greedy: the system plane is fine in-process")
    # The looping runs, counted by the reference definition on the same greedy generations.
    looped = 0
    for text in texts:
        r = json.loads(run([coda, "run", "-m", MODEL, "-p", text, "-n", "256", "--temp", "0", "-t", "1",
                            "--json"]).stdout)
        looped += reference_loop(r["tokens"]) is not None
    cur = planes["decoding"]["current"]
    check(cur["looped"] == looped and looped >= len(texts) // 2,
          f"greedy: {cur['looped']} looping runs, the reference counts {looped} of {len(texts)}")
    rp = d["verdict"]["settings"].get("repetition_penalty")
    check(rp is not None and rp > 1.0 and planes["decoding"]["variant"]["looped"] < cur["looped"],
          f"greedy: the fix is the penalty variant ({rp}), which loops less")
    raised = os.path.join(work, "diagnose-penalty")
    p = run(common + ["--repeat-penalty", "1.5", "--ignore-eos", "-o", raised])
    d = json.load(open(os.path.join(raised, "diagnosis.json")))
    planes = {x["plane"]: x for x in d["planes"]}
    check(planes["decoding"]["status"] == "ok" and d["verdict"]["plane"] == "context",
          f"repetition_penalty 1.5: decoding is fine and the verdict moves to the context plane: {d['verdict']}")
    thr = planes["context"].get("threshold_tokens")
    rec = d["verdict"]["settings"].get("max_tokens")
    check(thr is not None and 256 <= thr < 1536 and rec == int(thr * 0.8),
          f"repetition_penalty 1.5: the threshold ({thr}) and max_tokens {rec} = 80% of it")
    return os.path.join(greedy, "report.html"), os.path.join(raised, "report.html")


def diagnose_http_tests(coda, work):
    """llama-server answers /metrics only when started with --metrics, and its metrics have no KV
    gauge (August 2026), so the system plane reads GET /slots: the fullest busy slot's tokens
    (n_prompt_tokens, which counts the generated ones) against its n_ctx."""
    here = os.path.dirname(os.path.abspath(__file__))
    prompts = os.path.join(work, "diagnose-http-prompts.jsonl")
    with open(prompts, "w") as f:
        f.write(json.dumps({"prompt": "[text] Say", "group": "g"}) + "\n")
    for fill in (0.97, 0.5, None):
        up = subprocess.Popen(["/usr/bin/python3", os.path.join(here, "..", "proxy", "scripted_upstream.py"),
                               "--metrics-off"] + (["--slots-fill", str(fill)] if fill is not None else []),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            url = "http://127.0.0.1:" + up.stdout.readline().split()[-1]
            out = os.path.join(work, f"diagnose-http-{fill}")
            p = run([coda, "diagnose", "--url", url, "--prompts", prompts, "--runs", "2", "--decode-tokens", "32",
                     "-n", "64", "-o", out])
            d = json.load(open(os.path.join(out, "diagnosis.json")))
            plane = d["planes"][0]
            ev = plane["evidence"]
            check(ev.get("slots") == 2 and ev.get("slots_busy_peak") == 1 and ev["metrics"] is None and
                  "Start it with `--metrics`" in ev["metrics_error"] and "Start it with `--metrics`" in p.stdout,
                  f"fill {fill}: two slots, one busy, and llama-server's own word on its metrics: {ev}")
            if fill is None:  # a slot that does not say how full it is
                check("slot_context_peak" in ev and ev["slot_context_peak"] is None and plane["status"] == "ok",
                      f"fill {fill}: no token count, no figure: {plane}")
                continue
            held = int(fill * 4096) / 4096
            check(abs((ev.get("slot_context_peak") or 0) - held) < 1e-9, f"fill {fill}: the fullest slot holds {held}: {ev}")
            if fill > 0.95:
                check(plane["status"] == "problem" and "slot's context" in plane["finding"] and
                      "-np" in plane["finding"] and "n_ctx 4096" in plane["finding"] and d["verdict"]["plane"] == "system",
                      f"fill {fill}: a slot at the end of its context is the system plane's problem: {plane['finding']}")
            else:
                check(plane["status"] == "ok" and "fullest slot 50% of its context" in plane["finding"],
                      f"fill {fill}: half a slot is fine, and said: {plane['finding']}")
        finally:
            up.terminate()
            up.wait(timeout=30)


def eos_trend_tests(coda, work):
    """Premature EOS in process: prompts the bundled model ends within 11-40 tokens under greedy
    decoding; diagnose names it and gives the EOS probability over each run's first half and before
    its end, from the engine's trace (the same numbers as the runs' own traces)."""
    prompts = os.path.join(work, "eos-trend-prompts.jsonl")
    with open(prompts, "w") as f:
        for p in ("The End.", "Fine.", "FINE"):
            f.write(json.dumps({"prompt": p, "group": "g"}) + "\n")
    out = os.path.join(work, "diagnose-eos-trend")
    p = run([coda, "diagnose", "-m", MODEL, "--prompts", prompts, "--runs", "3", "--decode-tokens", "64", "-n", "128",
             "--temp", "0", "-o", out])
    d = json.load(open(os.path.join(out, "diagnosis.json")))
    dec = [x for x in d["planes"] if x["plane"] == "decoding"][0]
    trend = dec["current"].get("eos_prob_trend") or {}
    check(dec.get("problem") == "premature_eos" and trend.get("runs") == 3 and
          0 <= trend.get("first_half", -1) <= 1 and 0 <= trend.get("before_end", -1) <= 1 and
          "The EOS probability went from" in p.stdout, f"diagnose gives the EOS trend: {trend} {dec.get('problem')}")
    # The same figures, computed here from each prompt's own trace (coda run --trace, the same greedy
    # generation): the mean over the first half of the steps before the end step, and over the last
    # 16 of them; then the median over the three runs.
    firsts, befores = [], []
    for k, prompt in enumerate(("The End.", "Fine.", "FINE")):
        tr = os.path.join(work, f"eos-trend-{k}.jsonl")
        run([coda, "run", "-m", MODEL, "-p", prompt, "-n", "128", "--temp", "0", "--trace", tr, "-t", "1"])
        eos = [json.loads(line)["eos_prob"] for line in open(tr) if '"eos_prob"' in line]
        n = len(eos) - 1
        firsts.append(sum(eos[:n // 2]) / (n // 2))
        lo = n - 16 if n > 16 else n // 2
        befores.append(sum(eos[lo:n]) / (n - lo))
    med = lambda v: sorted(v)[len(v) // 2]
    close = lambda a, b: abs(a - b) <= 1e-3 * max(abs(a), abs(b), 1e-6)
    check(close(med(firsts), trend.get("first_half", -1)) and close(med(befores), trend.get("before_end", -1)),
          f"the trend from the runs' own traces: {med(firsts)} {med(befores)} against {trend}")


def early_end_tests(coda, work):
    """A model that ends by EOS after 30-150 tokens of the 512 asked: neither tool may give an
    all-clear. threshold marks every group ended_early, diagnose names premature EOS on the decoding
    plane. A model whose runs reach the horizon coherent gets none_within and may pass. A battery
    shorter than the guard's loop minimum (32 tokens) is refused."""
    here = os.path.dirname(os.path.abspath(__file__))
    up = subprocess.Popen(["/usr/bin/python3", os.path.join(here, "..", "proxy", "scripted_upstream.py")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = "http://127.0.0.1:" + up.stdout.readline().split()[-1]
        early = os.path.join(work, "early-prompts.jsonl")
        with open(early, "w") as f:
            for g, ns in (("stories", (30, 80)), ("answers", (60, 150))):
                for n in ns:
                    f.write(json.dumps({"prompt": f"[eos:{n}] Write", "group": g}) + "\n")
        out = os.path.join(work, "threshold-early")
        p = run([coda, "threshold", "--url", url, "--prompts", early, "--runs", "4", "-n", "512", "-o", out])
        summary = json.load(open(os.path.join(out, "threshold.json")))
        for g, gj in summary["groups"].items():
            check(gj.get("status") == "ended_early" and gj["reached_max_tokens"] == 0 and gj["ended_early"] == 4,
                  f"threshold, runs ending at 30-150 of 512: {g} is ended_early, none reached: {gj.get('status')}")
            med = gj["ended_early_median_length"]
            check(med is not None and 30 <= med <= 150 and "min_tokens" in gj["note"],
                  f"{g}: the median length {med} and what to do: {gj.get('note')}")
        check("ENDED EARLY" in p.stdout and "no threshold within" not in p.stdout,
              f"threshold says so, and no all-clear: {p.stdout.strip()}")
        html = open(os.path.join(out, "report.html")).read()
        check("ended_early" in html and "min_tokens" in html, "the report shows the status and the advice")

        out = os.path.join(work, "diagnose-early")
        p = run([coda, "diagnose", "--url", url, "--prompts", early, "--runs", "2", "--decode-tokens", "256",
                 "-n", "512", "-o", out])
        d = json.load(open(os.path.join(out, "diagnosis.json")))
        planes = {x["plane"]: x for x in d["planes"]}
        dec = planes["decoding"]
        check(dec["status"] == "problem" and dec.get("problem") == "premature_eos" and
              dec["current"]["ended_early_share"] == 1.0 and "premature EOS" in dec["finding"],
              f"diagnose names premature EOS on the decoding plane: {dec.get('finding')}")
        check(d["verdict"]["plane"] == "decoding" and "premature EOS" in d["verdict"]["summary"] and
              "No problem" not in p.stdout,
              f"the verdict is premature EOS, never 'no problem': {d['verdict']['summary']}")
        check(planes["context"]["status"] != "ok", f"the context plane is not called fine: {planes['context']['status']}")

        fresh = os.path.join(work, "fresh-prompts.jsonl")
        with open(fresh, "w") as f:
            f.write(json.dumps({"prompt": "[fresh] Write", "group": "long"}) + "\n")
        out = os.path.join(work, "threshold-fresh")
        p = run([coda, "threshold", "--url", url, "--prompts", fresh, "--runs", "4", "-n", "64", "-o", out])
        gj = json.load(open(os.path.join(out, "threshold.json")))["groups"]["long"]
        check(gj.get("status") == "none_within" and gj["reached_max_tokens"] == 4,
              f"runs that reach 64 tokens coherent: none_within: {gj.get('status')} {gj.get('note')}")
        out = os.path.join(work, "diagnose-fresh")
        p = run([coda, "diagnose", "--url", url, "--prompts", fresh, "--runs", "2", "--decode-tokens", "32",
                 "-n", "64", "-o", out])
        d = json.load(open(os.path.join(out, "diagnosis.json")))
        check(d["verdict"]["plane"] is None, f"long coherent runs: no problem: {d['verdict']['summary']}")

        for args in (["diagnose", "--decode-tokens", "24"], ["threshold", "-n", "16"]):
            p = run([coda] + args + ["--url", url, "--prompts", fresh, "-o", os.path.join(work, "refused")], ok=False)
            check(p.returncode != 0 and "32" in p.stderr and "loop" in p.stderr,
                  f"{' '.join(args)}: refused with the minimum: {p.stderr.strip()}")
    finally:
        up.terminate()
        up.wait(timeout=30)


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
    proposal_tests(coda, work)
    bench_report = bench_http_tests(coda, work)
    bench_api_key_tests(coda, work)
    bench_finish_reason_tests(coda, work)
    bench_llamacpp_names_tests(coda, work)
    reasoning_lab_tests(coda, work)
    api_auto_tests(coda, work)
    threshold_report = threshold_tests(coda, work)
    diagnose_reports = diagnose_tests(coda, work)
    diagnose_http_tests(coda, work)
    early_end_tests(coda, work)
    eos_trend_tests(coda, work)
    render(tune_report, work)
    for r in diagnose_reports:
        render(r, work)
    render(bench_report, work)
    render(threshold_report, work)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
