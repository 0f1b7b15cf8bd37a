#!/usr/bin/python3
"""Near loops beyond the shapes the guard's word rules were tuned on (docs/guard-eval/realtext.md):
other edit rates and unit lengths, built with bench/guard_realtext_corpus.py's own pieces from the
excerpts of a corpus it wrote, plus the legitimate excerpts of a second corpus (its false positives).

Usage: /usr/bin/python3 bench/guard_nearloop_beyond.py LOOPS_FROM.jsonl LEGIT_FROM.jsonl OUT.jsonl [--seed 99]
  e.g. guard_realtext_corpus.py /tmp/rt/heldout13.jsonl --seed 13; ... /tmp/rt/seed29.jsonl --seed 29;
       guard_nearloop_beyond.py /tmp/rt/heldout13.jsonl /tmp/rt/seed29.jsonl /tmp/rt/beyond.jsonl
then bench/guard_realtext.py build/coda OUT.jsonl DIR --passes tokens,pieces [--scan-flags ...].
"""
import argparse
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guard_realtext_corpus as corpus  # noqa: E402

# name, unit words (low, high), share of words swapped in each copy
SHAPES = [("swap30", 10, 40, 0.3), ("swap15_long", 30, 48, 0.15), ("swap25_short", 10, 16, 0.25),
          ("swap20_60w", 49, 70, 0.2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loops_from")
    ap.add_argument("legit_from")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=99)
    ap.add_argument("--per-shape", type=int, default=40)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    legit = [json.loads(l) for l in open(a.legit_from)]
    sources = [r for r in (json.loads(l) for l in open(a.loops_from)) if not r["loop"]]
    with open(a.out, "w") as out:
        for name, lo, hi, swap in SHAPES:
            for i in range(a.per_shape):
                base = rng.choice(sources)["text"]
                prefix = " ".join(base.split()[:rng.randint(60, 200)])
                vocab = re.findall(r"[A-Za-z][A-Za-z'-]{2,}", base) or ["the"]
                unit = corpus.unit_of_words(rng, base, lo, hi)
                sep, copies, period = corpus.near_copies(rng, unit, vocab, swap, 520)
                out.write(json.dumps({"id": f"{name}-{i}", "label": name, "loop": True,
                                      "text": prefix + sep + sep.join(copies),
                                      "onset_words": len(prefix.split()), "budget_words": 400,
                                      "period_words": period}) + "\n")
        for r in legit:
            if not r["loop"]:
                out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
