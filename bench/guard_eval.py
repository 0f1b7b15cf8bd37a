#!/usr/bin/python3
"""The degeneration guard on the bundled model: how often generations loop, how well the guard
sees it, how early, and what repair changes.

200 prompts (100 English, 100 Italian) x 3 sampling settings (greedy, temperature 0.7, 1.0; no
penalties, no truncation), max_tokens 1,024, each run twice through `coda run --json`: with the
guard observing (its events against the reference below) and with the guard repairing.

Reference definition of a loop (independent of the guard's detectors, computed here with NumPy):
a generation loops if it contains a stretch of at least max(4p, 64) tokens in which at least 90%
of positions repeat the token p positions earlier, for some period 1 <= p <= 200. The onset is the
first token of the earliest such stretch. The guard "flags" a generation when it reports a loop,
near_loop or flooding event; its delay is the event's detected_at minus the reference onset.

Then the corpora of bench/guard_corpus.py through `coda scan`: 247 texts that repeat legitimately
(every loop-family event on them is a false positive) and 56 loops (recall), tokenized three ways:
Llama 3's tokenizer (tests/node, installed by npm ci), the bundled model's, and the proxy's word
pieces (an upstream without logprobs).

--prompts 1200 adds 1,000 prompts written for stop 52 from 20 more subjects and 10 more verbs per
language (500 English, 500 Italian, alternating, so any prefix is balanced) after the first 200,
which stay the default set. --settings and --policies run a subset (e.g. --policies observe, which
is all the false-positive rate and recall need); the rows of what was not run are left out.

Usage: /usr/bin/python3 bench/guard_eval.py build/coda OUT_DIR [--prompts N] [--jobs J] [--save-runs FILE]
       [--settings greedy,temp 0.7,temp 1.0] [--policies observe,repair]
Writes OUT_DIR/guard-eval.json and OUT_DIR/guard-eval.md.
"""
import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys

import numpy as np

MAX_TOKENS = 1024
SETTINGS = [("greedy", ["--temp", "0"]), ("temp 0.7", ["--temp", "0.7"]), ("temp 1.0", ["--temp", "1.0"])]
LOOP_TYPES = {"loop", "near_loop", "flooding"}


# The prompts' subjects and verbs: the default 200 are every subject with every verb.
EN_SUBJECTS = ["And the LORD", "And Moses", "The king", "And the people", "Then Jesus", "And David", "The wise man",
               "A fool", "My son", "The children of Israel"]
EN_VERBS = ["said unto", "went up to", "spake unto", "came to", "looked upon", "gave unto", "took", "heard", "sent",
            "remembered"]
IT_SUBJECTS = ["La vita", "Il tempo", "L'amore", "Chi dorme", "Un amico", "La fortuna", "Il lavoro", "La donna",
               "Il saggio", "Ogni giorno"]
IT_VERBS = ["è come", "non aspetta", "vale più di", "porta sempre", "insegna che", "ci dice che", "sa bene che",
            "diventa", "cambia", "somiglia a"]


def prompts(n):
    en = [f"{s} {v}" for s in EN_SUBJECTS for v in EN_VERBS]
    it = [f"{s} {v}" for s in IT_SUBJECTS for v in IT_VERBS]
    if n <= 200:
        half = n // 2
        return [("en", p) for p in en[:half]] + [("it", p) for p in it[: n - half]]
    if n > 1200:
        raise SystemExit(f"--prompts {n}: at most 1200 (200 + the 1,000 of the extended set)")
    return prompts(200) + extended_prompts()[: n - 200]


def extended_prompts():
    """1,000 prompts beyond the first 200, alternating English and Italian: 20 new subjects with the
    old and 10 new verbs, and the old subjects with the new verbs, per language."""
    en_new_s = ["The priest", "The servant", "The prophet", "The woman", "And Joseph", "And Abraham",
                "The angel of the LORD", "And Samuel", "The elders", "And Solomon", "The rich man", "The shepherd",
                "And Aaron", "The men of Judah", "And Pharaoh", "The stranger", "And Jacob", "The daughter of Zion",
                "And Elijah", "The multitude"]
    en_new_v = ["answered and said", "went forth unto", "built an altar to", "wrote unto", "commanded", "blessed",
                "arose and went to", "called unto", "cried unto", "turned unto"]
    it_new_s = ["La speranza", "Il mare", "La notte", "Un uomo", "La madre", "Il cuore", "La città", "Il vento",
                "La guerra", "Il silenzio", "Un bambino", "La musica", "Il padre", "La luna", "Il fiume", "La verità",
                "Il destino", "La paura", "Il ricordo", "La pace"]
    it_new_v = ["non dimentica", "ricorda che", "nasconde", "trova sempre", "ha bisogno di", "parla di", "sembra",
                "chiede a", "aspetta che", "racconta che"]
    en = [f"{s} {v}" for s in en_new_s for v in EN_VERBS + en_new_v] + [f"{s} {v}" for s in EN_SUBJECTS
                                                                         for v in en_new_v]
    it = [f"{s} {v}" for s in it_new_s for v in IT_VERBS + it_new_v] + [f"{s} {v}" for s in IT_SUBJECTS
                                                                         for v in it_new_v]
    out = []
    for e, i in zip(en, it):
        out += [("en", e), ("it", i)]
    return out


def reference_loop(tokens, floor=64):
    """Earliest onset of a stretch >= max(4p, floor) tokens repeating at period p with >= 90% matches
    (floor 64 is the definition; bench/guard_reference_sensitivity.py varies it)."""
    t = np.asarray(tokens, dtype=np.int64)
    n = len(t)
    best = None
    for p in range(1, 201):
        w = max(4 * p, floor)
        if w > n:
            break
        m = (t[p:] == t[:-p]).astype(np.int32)  # m[k]: position k + p repeats
        # A stretch of w tokens starting at s covers positions s..s+w-1; positions s+p..s+w-1 are compared.
        need = w - p
        if len(m) < need:
            continue
        c = np.concatenate([[0], np.cumsum(m)])
        sums = c[need:] - c[:-need]  # sums[k] = matches over m[k : k + need], i.e. stretch start s = k
        ok = np.nonzero(sums >= 0.9 * need)[0]
        if len(ok):
            onset = int(ok[0])
            if best is None or onset < best[0]:
                best = (onset, p)
    return best


def run_one(coda, prompt, setting_args, seed, policy):
    cmd = [coda, "run", "-t", "1", "-n", str(MAX_TOKENS), "-p", prompt, "--json", "--guard", policy, "-s", str(seed),
           "--guard-runaway", "0"] + setting_args
    r = subprocess.run(cmd, capture_output=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.stderr.decode()}")
    return json.loads(r.stdout)


def evaluate(coda, items, jobs, settings=None, policies=("observe", "repair")):
    runs = []
    with cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        futures = {}
        for si, (name, args) in enumerate(SETTINGS):
            if settings is not None and name not in settings:
                continue
            for pi, (lang, prompt) in enumerate(items):
                for policy in policies:
                    f = ex.submit(run_one, coda, prompt, args, 1000 * si + pi, policy)
                    futures[f] = (name, lang, prompt, policy)
        for f in cf.as_completed(futures):
            name, lang, prompt, policy = futures[f]
            r = f.result()
            runs.append({"setting": name, "lang": lang, "prompt": prompt, "policy": policy, "result": r})
    return runs


def summarize(runs):
    table = []
    for name, _ in SETTINGS:
        obs = [x for x in runs if x["setting"] == name and x["policy"] == "observe"]
        if not obs:
            continue
        rep = {x["prompt"]: x for x in runs if x["setting"] == name and x["policy"] == "repair"}
        n = len(obs)
        hit_max = sum(1 for x in obs if x["result"]["finish_reason"] == "length")
        loops, flagged, tp, fp, delays, saved = 0, 0, 0, 0, [], 0
        events_by_type = {}
        for x in obs:
            r = x["result"]
            ref = reference_loop(r["tokens"])
            evs = [e for e in r["coda"]["events"] if e["type"] in LOOP_TYPES]
            for e in r["coda"]["events"]:
                events_by_type[e["type"]] = events_by_type.get(e["type"], 0) + 1
            is_flagged = bool(evs)
            loops += ref is not None
            flagged += is_flagged
            if ref is not None and is_flagged:
                tp += 1
                delays.append(evs[0]["detected_at"] - ref[0])
            if ref is None and is_flagged:
                fp += 1
            if is_flagged:  # what the stop policy would have saved
                saved += r["usage"]["completion_tokens"] - (evs[0]["detected_at"] + 1)
        negatives = n - loops
        # Repair: how the same prompts end when the guard repairs.
        normal_obs = sum(1 for x in obs if x["result"]["finish_reason"] == "stop")
        # Failed: ran to max_tokens or contains a loop (reference); with the guard also: stopped by it.
        failed_obs = sum(1 for x in obs if x["result"]["finish_reason"] != "stop"
                         or reference_loop(x["result"]["tokens"]) is not None)
        failed_rep = 0
        normal_rep = loop_rep = 0
        sig_obs, sig_rep = [], []
        for x in obs:
            if x["prompt"] not in rep:
                continue
            rr = rep[x["prompt"]]["result"]
            normal_rep += rr["finish_reason"] == "stop"
            loop_rep += reference_loop(rr["tokens"]) is not None
            failed_rep += rr["finish_reason"] != "stop" or reference_loop(rr["tokens"]) is not None
            if reference_loop(x["result"]["tokens"]) is not None:
                sig_obs.append(x["result"]["coda"]["signals"])
                sig_rep.append(rr["coda"]["signals"])
        total_tokens = sum(x["result"]["usage"]["completion_tokens"] for x in obs)

        def mean(rows, key):
            return float(np.mean([s[key] for s in rows])) if rows else float("nan")

        table.append({
            "setting": name,
            "generations": n,
            "hit_max_tokens": hit_max,
            "loop_reference": loops,
            "flagged": flagged,
            "recall": tp / loops if loops else float("nan"),
            "false_positive_rate": fp / negatives if negatives else float("nan"),
            "false_positives": fp,
            "negatives": negatives,
            "false_positive_ci95": wilson(fp, negatives),
            "repair_run": bool(rep),
            "delay_median": float(np.median(delays)) if delays else float("nan"),
            "delay_p90": float(np.percentile(delays, 90)) if delays else float("nan"),
            "events_by_type": events_by_type,
            "tokens_generated": total_tokens,
            "tokens_saved_by_stop": saved,
            "ended_normally_observe": normal_obs,
            "failed_observe": failed_obs,
            "failed_repair": failed_rep,
            "ended_normally_repair": normal_rep,
            "loop_reference_after_repair": loop_rep,
            "repairs": sum(rep[p]["result"].get("repairs", 0) for p in rep),
            "looping_mean_distinct2_before": mean(sig_obs, "distinct2"),
            "looping_mean_distinct2_after": mean(sig_rep, "distinct2"),
            "looping_mean_surprisal_before": mean(sig_obs, "mean_surprisal"),
            "looping_mean_surprisal_after": mean(sig_rep, "mean_surprisal"),
            "looping_mean_entropy_before": mean(sig_obs, "mean_entropy"),
            "looping_mean_entropy_after": mean(sig_rep, "mean_entropy"),
        })
    return table


def wilson(k, n, z=1.959964):
    """95% Wilson score interval of k successes in n trials ([nan, nan] for n = 0)."""
    if n == 0:
        return [float("nan"), float("nan")]
    p, d = k / n, 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / d, z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [max(0.0, float(centre - half)), min(1.0, float(centre + half))]


REPAIR_ROWS = {"ended_normally_repair", "loop_reference_after_repair", ("failed_observe", "failed_repair"), "repairs",
               ("looping_mean_distinct2_before", "looping_mean_distinct2_after"),
               ("looping_mean_surprisal_before", "looping_mean_surprisal_after"),
               ("looping_mean_entropy_before", "looping_mean_entropy_after")}


def false_positive_cell(t):
    lo, hi = t["false_positive_ci95"]
    return f"{t['false_positives']}/{t['negatives']} = {t['false_positive_rate']:.3f} (95% CI {lo:.3f}-{hi:.3f})"


def markdown(table, n_prompts):
    rows = [
        ("generations", "generations", "{}"),
        ("hit max_tokens (1,024)", "hit_max_tokens", "{}"),
        ("loop (reference)", "loop_reference", "{}"),
        ("flagged by the guard (loop/near_loop/flooding)", "flagged", "{}"),
        ("recall", "recall", "{:.3f}"),
        ("false positive rate", "false_positive_rate", "{:.3f}"),
        ("detection delay after onset, median (tokens)", "delay_median", "{:.0f}"),
        ("detection delay, 90th percentile", "delay_p90", "{:.0f}"),
        ("tokens generated (observe)", "tokens_generated", "{}"),
        ("tokens saved by `--guard stop`", "tokens_saved_by_stop", "{}"),
        ("ended with EOS, observe", "ended_normally_observe", "{}"),
        ("ended with EOS, repair", "ended_normally_repair", "{}"),
        ("loop (reference) after repair", "loop_reference_after_repair", "{}"),
        ("failed (max_tokens, loop, or stopped by the guard): observe -> repair", ("failed_observe", "failed_repair"),
         "{}"),
        ("repairs made", "repairs", "{}"),
        ("looping generations: distinct-2 before -> after repair", ("looping_mean_distinct2_before",
                                                                      "looping_mean_distinct2_after"), "{:.3f}"),
        ("looping generations: mean surprisal (nats)", ("looping_mean_surprisal_before",
                                                         "looping_mean_surprisal_after"), "{:.2f}"),
        ("looping generations: mean entropy (nats)", ("looping_mean_entropy_before",
                                                      "looping_mean_entropy_after"), "{:.2f}"),
    ]
    out = [f"| {n_prompts} prompts | " + " | ".join(t["setting"] for t in table) + " |",
           "|---|" + "---|" * len(table)]
    for label, key, fmt in rows:
        if key in REPAIR_ROWS and not any(t["repair_run"] for t in table):
            continue
        cells = []
        for t in table:
            if key == "false_positive_rate":
                cells.append(false_positive_cell(t))
            elif isinstance(key, tuple):
                cells.append(fmt.format(t[key[0]]) + " -> " + fmt.format(t[key[1]]))
            else:
                cells.append(fmt.format(t[key]))
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "tests", "data", "guard")
LLAMA3 = os.path.join(HERE, "..", "tests", "node", "node_modules", "@lenml", "tokenizer-llama3", "models",
                      "tokenizer.json")


def corpus_table(coda):
    """False positives on the legitimate corpus and recall on the loop corpus, per tokenization."""
    rows = []
    for name, extra in (("Llama 3 tokenizer", ["--vocab", LLAMA3]), ("bundled model's tokenizer", []),
                        ("word pieces (proxy, no logprobs)", ["--pieces"])):
        row = {"units": name}
        for corpus in ("legit", "loops"):
            r = subprocess.run([coda, "scan", "--json"] + extra + [os.path.join(CORPUS, corpus + ".jsonl")],
                               capture_output=True, text=True, check=True)
            res = [json.loads(line) for line in r.stdout.splitlines()]
            flagged = [x for x in res if any(e["type"] in LOOP_TYPES for e in x["events"])]
            stop = [x for x in res if any(e["type"] in ("loop", "flooding") for e in x["events"])]
            row[corpus] = {"texts": len(res), "flagged": len(flagged), "flagged_loop_or_flood": len(stop),
                           "flagged_ids": [x["id"] for x in flagged] if corpus == "legit" else
                           [x["id"] for x in res if x not in flagged]}
        rows.append(row)
    return rows


def corpus_markdown(rows):
    out = ["| tokenized with | legitimate texts flagged (loop/near_loop/flooding) | of which loop or flooding "
           "(stopped by default) | loops found (recall) |", "|---|---|---|---|"]
    for r in rows:
        lg, lp = r["legit"], r["loops"]
        out.append(f"| {r['units']} | {lg['flagged']} of {lg['texts']} ({lg['flagged'] / lg['texts']:.1%}) | "
                   f"{lg['flagged_loop_or_flood']} | {lp['flagged']} of {lp['texts']} "
                   f"({lp['flagged'] / lp['texts']:.3f}) |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("out")
    ap.add_argument("--prompts", type=int, default=200, help="200 (the default set) or up to 1200 (the extended set)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--settings", default=",".join(name for name, _ in SETTINGS),
                    help="comma-separated: greedy, temp 0.7, temp 1.0")
    ap.add_argument("--policies", default="observe,repair", help="observe and/or repair")
    ap.add_argument("--save-runs", metavar="FILE.jsonl",
                    help="also write the observe runs' tokens, for `coda scan` to replay with other thresholds")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    items = prompts(a.prompts)
    settings = a.settings.split(",")
    if not set(settings) <= {name for name, _ in SETTINGS}:
        sys.exit(f"--settings {a.settings!r}: choose among greedy, temp 0.7, temp 1.0")
    policies = a.policies.split(",")
    if "observe" not in policies or not set(policies) <= {"observe", "repair"}:
        sys.exit(f"--policies {a.policies!r}: observe, and optionally repair")
    runs = evaluate(a.coda, items, a.jobs, settings, policies)
    table = summarize(runs)
    if a.save_runs:
        with open(a.save_runs, "w") as f:
            for r in runs:
                if r["policy"] == "observe":
                    ref = reference_loop(r["result"]["tokens"])
                    f.write(json.dumps({"id": r["prompt"], "label": r["setting"], "prompt": r["prompt"],
                                        "tokens": r["result"]["tokens"],
                                        "reference_onset": ref[0] if ref else None}) + "\n")
    with open(os.path.join(a.out, "guard-eval.json"), "w") as f:
        json.dump({"summary": table, "runs": [{k: v for k, v in r.items() if k != "result"} | {
            "finish_reason": r["result"]["finish_reason"], "completion_tokens": r["result"]["usage"]["completion_tokens"],
            "events": r["result"]["coda"]["events"], "repairs": r["result"].get("repairs", 0)} for r in runs]}, f)
    corpus = corpus_table(a.coda)
    md = markdown(table, len(items)) + "\n\n" + corpus_markdown(corpus)
    with open(os.path.join(a.out, "guard-eval-corpus.json"), "w") as f:
        json.dump(corpus, f, indent=1)
    with open(os.path.join(a.out, "guard-eval.md"), "w") as f:
        f.write(md + "\n")
    print(md)


if __name__ == "__main__":
    sys.exit(main())
