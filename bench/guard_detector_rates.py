#!/usr/bin/python3
"""Per detector: what each would flag on a corpus (bench/guard_multilingual_corpus.py's or
bench/guard_realtext_corpus.py's) under `--guard observe`, whatever the other detectors do. For each
legitimate kind, the texts on which the detector reports anything (its false positives if it were
to stop); for each degenerate shape, the texts it catches from the onset to the budget, and its
median delay in words. This is how the default scope was chosen (a detector stops by default only
below 1% on every legitimate kind).

Usage: /usr/bin/python3 bench/guard_detector_rates.py build/coda CORPUS.jsonl [--pieces] [--lang xx]
       [--detectors garbage,script_mixing,language_drift,invented_words,flooding]
Prints a Markdown table and the ids of the flagged legitimate texts.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("corpus")
    ap.add_argument("--pieces", action="store_true", help="cut into word pieces, as the proxy without logprobs")
    ap.add_argument("--detectors", default="garbage,script_mixing,language_drift,invented_words,flooding")
    a = ap.parse_args()
    corpus = [json.loads(l) for l in open(a.corpus, encoding="utf-8")]
    dets = a.detectors.split(",")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for r in corpus:
            f.write(json.dumps({"id": r["id"], "text": r["text"]}) + "\n")
        src = f.name
    cmd = [a.coda, "scan", "--json", "--guard", "observe"] + (["--pieces"] if a.pieces else []) + [src]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    os.unlink(src)
    legit = list(dict.fromkeys(r["label"] for r in corpus if not r["loop"]))
    shapes = list(dict.fromkeys(r["label"] for r in corpus if r["loop"]))
    hits = {}  # (label, detector) -> [(id, words at detection)]
    for r, line in zip(corpus, out):
        o = json.loads(line)
        seen = set()
        for e in o["events"]:
            if e["type"] in dets and e["type"] not in seen:
                seen.add(e["type"])
                at = e.get("at_byte", 0)
                words = len(r["text"].encode("utf-8")[:at].decode("utf-8", "ignore").split())
                hits.setdefault((r["label"], e["type"]), []).append((r["id"], words))
    print("| | " + " | ".join(dets) + " |\n|---|" + "---|" * len(dets))
    flagged = []
    for label in legit:
        n = sum(r["label"] == label for r in corpus)
        cells = []
        for d in dets:
            h = hits.get((label, d), [])
            cells.append(f"{len(h)}/{n}")
            flagged += [f"{d}: {i}" for i, _ in h]
        print(f"| {label} (false positives) | " + " | ".join(cells) + " |")
    by_id = {r["id"]: r for r in corpus}
    for shape in shapes:
        n = sum(r["label"] == shape for r in corpus)
        cells = []
        for d in dets:
            delays = [w - by_id[i]["onset_words"] for i, w in hits.get((shape, d), [])]
            ok = [x for x in delays if 0 <= x <= by_id[next(iter(hits[(shape, d)]))[0]]["budget_words"]] if delays else []
            cells.append(f"{len(ok)}/{n}" + (f", {statistics.median(ok):g} w" if ok else ""))
        print(f"| {shape} (caught) | " + " | ".join(cells) + " |")
    if flagged:
        print("\nFlagged legitimate texts: " + ", ".join(flagged), file=sys.stderr)


if __name__ == "__main__":
    main()
