#!/usr/bin/python3
"""The guard's real-text corpus: excerpts of files that Debian installs (no one here wrote them),
and continuations of other excerpts that turn into loops of the shapes users report.

Legitimate kinds (each an excerpt of 150-1,500 words cut at line breaks, from a file chosen at
random): Python sources, C headers, licences and copyright files, Debian changelogs, tables
(services, MIME types, protocols, locales, time zones, the dpkg status database), documentation
(READMEs and Markdown).

Loop shapes (each after a prefix of 60-300 words of a real excerpt, at word `onset`):
  sentence    a sentence or line of 8-40 words from the excerpt, repeated verbatim
  flood       one word of the excerpt repeated
  garbage     a short unit of zeros, colons, slashes and spaces, repeated ("0: 0:00 //")
  block       a block of 300-1,000 words of the excerpt, repeated verbatim four times
  near        a 10-40-word sentence with a running counter, about one word in ten swapped per copy
  near_long   the same with a 40-120-word unit (beyond the issue's shapes)
  near_heavy  10-40 words, one word in five swapped (beyond)
Each loop runs 400 words past its onset at least (blocks: four copies).

Budget for "caught in time" (the issue's): 400 words after the onset, or 3 periods plus 200 words
for a block.

Usage: /usr/bin/python3 bench/guard_realtext_corpus.py OUT.jsonl [--per-kind 50] [--per-shape 50] [--seed 7]
Each line: {"id", "label" (kind or loop shape), "loop": bool, "text", "onset_words", "budget_words",
"period_words"}.
"""
import argparse
import glob
import gzip
import json
import os
import random
import re

KINDS = {
    "python": ["/usr/lib/python3/dist-packages/**/*.py", "/usr/lib/python3.11/**/*.py"],
    "c_header": ["/usr/include/**/*.h"],
    "licence": ["/usr/share/common-licenses/*", "/usr/share/doc/*/copyright"],
    "changelog": ["/usr/share/doc/*/changelog.Debian.gz", "/usr/share/doc/*/changelog.gz"],
    "table": ["/etc/services", "/etc/mime.types", "/etc/protocols", "/usr/share/i18n/SUPPORTED",
              "/usr/share/zoneinfo/*.tab", "/var/lib/dpkg/status", "/usr/share/i18n/locales/*"],
    "docs": ["/usr/share/doc/**/*.md", "/usr/share/doc/*/README", "/usr/share/doc/*/README.Debian",
             "/usr/share/doc/**/*.txt"],
}


def read(path):
    try:
        if os.path.getsize(path) > 4 << 20:
            return None
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
        if b"\0" in raw:
            return None
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def files(kind):
    out = []
    for pat in KINDS[kind]:
        out += [p for p in glob.glob(pat, recursive=True) if os.path.isfile(p)]
    return sorted(set(out))


def excerpt(rng, text, lo, hi):
    """Consecutive whole lines from a random line on, lo..hi words (None if the file is too short)."""
    lines = text.splitlines(keepends=True)
    total = sum(len(l.split()) for l in lines)
    if total < lo:
        return None
    want = rng.randint(lo, min(hi, total))
    for _ in range(20):
        start = rng.randrange(len(lines))
        out, words = [], 0
        for l in lines[start:]:
            out.append(l)
            words += len(l.split())
            if words >= want:
                return "".join(out)
    return None


def pick_excerpt(rng, pool, lo, hi):
    while True:
        path = rng.choice(pool)
        t = read(path)
        if t:
            e = excerpt(rng, t, lo, hi)
            if e and len(e.split()) >= lo:
                return path, e


def cut_words(text, n):
    """The text up to the end of its n-th word (line structure kept)."""
    count = 0
    for m in re.finditer(r"\S+", text):
        count += 1
        if count == n:
            return text[: m.end()]
    return text


def sentences(text, lo, hi):
    """Lines or sentences of lo..hi words."""
    out = []
    for l in text.splitlines():
        for s in re.split(r"(?<=[.!?])\s+", l.strip()):
            if lo <= len(s.split()) <= hi:
                out.append(s)
    return out


def unit_of_words(rng, text, lo, hi):
    cands = sentences(text, lo, hi)
    if cands:
        return rng.choice(cands)
    words = text.split()
    n = rng.randint(lo, hi)
    i = rng.randrange(max(1, len(words) - n))
    return " ".join(words[i:i + n])


COUNTERS = ["Step {k}:", "{k}.", "Attempt {k}:", "(item {k})", "line {k},", "Day {k}:", "#{k}"]


def near_copies(rng, unit, vocab, swap, min_words):
    words = unit.split()
    form = rng.choice(COUNTERS)
    at = rng.randrange(len(words) + 1)
    sep = rng.choice([" ", "\n", "\n\n"])
    k0 = rng.randint(1, 40)
    copies, total, k = [], 0, k0
    while total < min_words:
        w = [rng.choice(vocab) if rng.random() < swap else x for x in words]
        w.insert(at, form.format(k=k))
        copies.append(" ".join(w))
        total += len(w)
        k += 1
    return sep, copies, len(words) + 1


def build_loop(rng, shape, prefix_text, source_text):
    vocab = [w for w in re.findall(r"[A-Za-z][A-Za-z'-]{2,}", source_text)] or ["the"]
    if shape == "sentence":
        unit = unit_of_words(rng, source_text, 8, 40)
        sep = rng.choice([" ", "\n"])
        n = len(unit.split())
        reps = max(3, -(-520 // n))
        return sep + sep.join([unit] * reps), n, 400
    if shape == "flood":
        w = rng.choice(vocab)
        return " " + " ".join([w] * 520), 1, 400
    if shape == "garbage":
        alphabet = ["0", "00", ":", ": ", "0:", " 0", "//", "/", " (", "\"1:", " +"]
        unit = "".join(rng.choice(alphabet) for _ in range(rng.randint(3, 8))) + " "
        reps = max(3, -(-520 // max(1, len(unit.split()))))
        return " " + unit * reps, max(1, len(unit.split())), 400
    if shape == "block":
        words = source_text.split()
        n = rng.randint(300, min(1000, max(300, len(words) - 1)))
        lines = source_text.splitlines(keepends=True)
        # Whole lines from a random line on, about n words.
        start = rng.randrange(max(1, len(lines) // 3))
        out, c = [], 0
        for l in lines[start:]:
            out.append(l)
            c += len(l.split())
            if c >= n:
                break
        block = "".join(out)
        if not block.endswith("\n"):
            block += "\n"
        p = len(block.split())
        return "\n" + block * 4, p, 3 * p + 200
    if shape.startswith("near"):
        lo, hi, swap = (40, 120, 0.1) if shape == "near_long" else (10, 40, 0.2 if shape == "near_heavy" else 0.1)
        unit = unit_of_words(rng, source_text, lo, hi)
        sep, copies, period = near_copies(rng, unit, vocab, swap, 520)
        return sep + sep.join(copies), period, 400
    raise ValueError(shape)


SHAPES = ["sentence", "flood", "garbage", "block", "near", "near_long", "near_heavy"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--per-kind", type=int, default=50)
    ap.add_argument("--per-shape", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    pools = {k: files(k) for k in KINDS}
    for k, v in pools.items():
        if not v:
            raise SystemExit(f"no {k} files found under {KINDS[k]}")
    rows = []
    for kind in KINDS:
        for i in range(a.per_kind):
            path, text = pick_excerpt(rng, pools[kind], 150, 1500)
            rows.append({"id": f"{kind}-{i}", "label": kind, "loop": False, "source": path, "text": text,
                         "onset_words": None, "budget_words": None, "period_words": None})
    kinds = list(KINDS)
    for shape in SHAPES:
        for i in range(a.per_shape):
            kind = kinds[i % len(kinds)]
            need = 1100 if shape == "block" else 200
            path, src = pick_excerpt(rng, pools[kind], need, 3000)
            onset = rng.randint(60, 300)
            prefix = cut_words(src, onset)
            onset = len(prefix.split())
            loop, period, budget = build_loop(rng, shape, prefix, src)
            rows.append({"id": f"{shape}-{i}", "label": shape, "loop": True, "source": path, "text": prefix + loop,
                         "onset_words": onset, "budget_words": budget, "period_words": period})
    with open(a.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(rows)} texts: {a.per_kind} per legitimate kind x {len(KINDS)}, {a.per_shape} per loop shape x "
          f"{len(SHAPES)} -> {a.out}")


if __name__ == "__main__":
    main()
