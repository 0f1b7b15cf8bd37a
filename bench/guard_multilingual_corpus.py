#!/usr/bin/python3
"""The guard's multilingual corpus: real text Debian installs in English, Italian, French, German,
Spanish, Portuguese, Chinese and Japanese, and continuations of it that degenerate without looping.
Nobody here wrote the texts; the degenerate continuations are built from them.

Packages (installed by `scripts/bootstrap.sh test`): manpages-{fr,it,de,es,pt-br} and the English
pages of man-db and friends (rendered by `man` without hyphenation or justification), and
debian-reference-{zh-cn,ja}. The Debian Reference in the six Latin-script languages is NOT used
here: the guard's word lists are counted from it (bench/build_language_words.py).

Legitimate kinds (excerpts of 150-600 words, cut at line breaks):
  prose_LANG   a manual page in LANG (en, it, fr, de, es, pt): prose that quotes English commands,
               options and file names
  cjk_docs     the Debian Reference in Chinese or Japanese: prose full of Latin-script commands
  code_cjk     a Python source Debian installs, with comment lines of Chinese or Japanese prose
  hexdump      `od -A x -t x1z` of a binary
  log          lines of /var/log/dpkg.log and /var/log/apt/history.log (timestamps, versions)
  table        /etc/services, /usr/share/i18n/SUPPORTED, /etc/mime.types

Degenerate shapes (after a prefix of 80-200 words of a prose excerpt of any of the six languages,
at word `onset`; each runs 300 words past it). The prefix and the drift's continuation are whole
paragraphs of running prose with no English left untranslated (manual pages often keep some): the
language the text leaves must be clear for a drift to be one. The legitimate excerpts keep them.
  garbage      a non-periodic chain of a handful of symbols drawn from the excerpt's own digits and
               punctuation, with now and then one of its short words ("0: 00:0 // 1:0 (data:")
  mixing       the excerpt goes on, with letters of Chinese or Japanese text (the Debian Reference)
               written in at random places, their share rising from 1% to 10% of the characters
  drift        the excerpt goes on in another language: English manual-page prose (French after
               an English excerpt)
  invented     the excerpt goes on, with a rising share of its words (10% at the onset, 60% at
               250 words) replaced by pseudo-words recombined from the syllables of its own words
  garbage_flood a short garbage chain (40 words), then one of the excerpt's words repeated 5-8
               times, then garbage again
Budget for "caught in time" (the issue's): 250 words after the onset.

Usage: /usr/bin/python3 bench/guard_multilingual_corpus.py OUT.jsonl [--per-kind 40] [--per-shape 40] [--seed 11]
Each line: {"id", "label", "loop": bool (degenerate), "lang", "source", "text", "onset_words",
"budget_words"}.
"""
import argparse
import glob
import html
import json
import os
import random
import re
import subprocess

LANGS = {"en": "/usr/share/man/man[18]/*.gz", "it": "/usr/share/man/it/man[18]/*.gz",
         "fr": "/usr/share/man/fr/man[18]/*.gz", "de": "/usr/share/man/de/man[18]/*.gz",
         "es": "/usr/share/man/es/man[18]/*.gz", "pt": "/usr/share/man/pt_BR/man[18]/*.gz"}
LOCALE = {"en": "C.UTF-8", "it": "C.UTF-8", "fr": "C.UTF-8", "de": "C.UTF-8", "es": "C.UTF-8", "pt": "C.UTF-8"}
ENGLISH_MARKERS = {"the", "and", "of", "to", "is", "this", "with"}


def render_man(path):
    env = dict(os.environ, MANWIDTH="100", MAN_KEEP_FORMATTING="", LC_ALL="C.UTF-8")
    p = subprocess.run(["man", "--nh", "--nj", "-l", path], capture_output=True, env=env, timeout=60)
    text = p.stdout.decode("utf-8", "replace")
    text = re.sub(r".\x08", "", text)  # overstrike bold and underline
    return text


def paragraphs_of(text):
    paras = []
    for block in re.split(r"\n\s*\n", text):
        lines = [l.strip() for l in block.splitlines() if l.strip()]
        if lines:  # the page's own lines: a table stays a table
            paras.append("\n".join(lines))
    return paras


def english_share(words):
    return sum(w.lower() in ENGLISH_MARKERS for w in words) / max(1, len(words))


def prose_paragraph(p, lang):
    """A paragraph of running prose in `lang`: mostly words of letters, and (for the other
    languages) no English left untranslated."""
    words = p.split()
    alpha = sum(w.strip(".,;:()\"'«»").isalpha() for w in words)
    if alpha < 0.8 * len(words):
        return False
    return lang == "en" or english_share(words) <= 0.01


def man_prose(lang, rng, want_words, strict=False):
    """An excerpt of a man page in `lang`: whole paragraphs of 12+ words, in that language (a page
    left in English in a translation is skipped for the other languages). `strict`: only paragraphs
    of running prose with no English left in them (the prefix of a degenerate continuation, whose
    language must be clear for the continuation to be a drift)."""
    files = sorted(glob.glob(LANGS[lang]))
    rng.shuffle(files)
    for path in files:
        paras = [p for p in paragraphs_of(render_man(path)) if len(p.split()) >= 12]
        if strict:
            paras = [p for p in paras if prose_paragraph(p, lang)]
        words = " ".join(paras).split()
        if len(words) < want_words + 40:
            continue
        if lang != "en" and english_share(words) > 0.03:
            continue
        if lang == "en" and english_share(words) < 0.04:
            continue
        start = rng.randrange(0, len(paras))
        out, n = [], 0
        for p in paras[start:] + paras[:start]:
            out.append(p)
            n += len(p.split())
            if n >= want_words:
                break
        return "\n\n".join(out), path
    raise SystemExit(f"no man page in {lang} long enough: run scripts/bootstrap.sh test")


def cjk_text(rng, want_chars):
    files = sorted(glob.glob("/usr/share/debian-reference/*.zh-cn.html") +
                   glob.glob("/usr/share/debian-reference/*.ja.html"))
    path = rng.choice(files)
    raw = open(path, encoding="utf-8").read()
    raw = re.sub(r"(?is)<(script|style)[^>]*>.*?</\1>", " ", raw)
    paras = [html.unescape(re.sub(r"<[^>]+>", "", p)).strip()
             for p in re.split(r"(?i)</?p[^>]*>", raw)]
    paras = [re.sub(r"\s+", " ", p) for p in paras if sum(ord(c) > 0x3000 for c in p) > 30]
    start = rng.randrange(0, len(paras))
    out = []
    for p in paras[start:] + paras[:start]:
        out.append(p)
        if sum(len(x) for x in out) >= want_chars:
            break
    return "\n\n".join(out), path


def cut_lines(text, rng, lo, hi):
    lines = text.splitlines(keepends=True)
    start = rng.randrange(0, max(1, len(lines) - 20))
    out, n = [], 0
    want = rng.randint(lo, hi)
    for l in lines[start:]:
        out.append(l)
        n += len(l.split())
        if n >= want:
            break
    return "".join(out)


def legit(kind, rng):
    if kind.startswith("prose_"):
        lang = kind[6:]
        text, src = man_prose(lang, rng, rng.randint(150, 600))
        return text, src, lang
    if kind == "cjk_docs":
        text, src = cjk_text(rng, rng.randint(400, 1500))
        return text, src, "cjk"
    if kind == "code_cjk":
        files = sorted(glob.glob("/usr/lib/python3/dist-packages/**/*.py", recursive=True))
        while True:
            path = rng.choice(files)
            try:
                code = open(path, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            if len(code.split()) > 300:
                break
        code = cut_lines(code, rng, 150, 500)
        comments, _ = cjk_text(rng, 600)
        sentences = [s for s in re.split(r"(?<=[。！？])", comments) if len(s.strip()) > 6]
        out = []
        for line in code.splitlines(keepends=True):
            out.append(line)
            if line.strip() and rng.random() < 0.12 and sentences:
                indent = line[: len(line) - len(line.lstrip())]
                out.append(f"{indent}# {rng.choice(sentences).strip()}\n")
        return "".join(out), path, "code"
    if kind == "hexdump":
        path = rng.choice(sorted(glob.glob("/usr/bin/*")))
        p = subprocess.run(["od", "-A", "x", "-t", "x1z", "-N", "4096", "-j", str(rng.randrange(0, 8192)), path],
                           capture_output=True)
        return cut_lines(p.stdout.decode("utf-8", "replace"), rng, 150, 500), path, "data"
    if kind == "log":
        path = rng.choice(["/var/log/dpkg.log", "/var/log/apt/history.log"])
        return cut_lines(open(path, encoding="utf-8", errors="replace").read(), rng, 150, 500), path, "data"
    if kind == "table":
        path = rng.choice(["/etc/services", "/usr/share/i18n/SUPPORTED", "/etc/mime.types"])
        return cut_lines(open(path, encoding="utf-8", errors="replace").read(), rng, 150, 500), path, "data"
    raise ValueError(kind)


def garbage_chain(prefix, rng, words):
    """Non-periodic: pieces drawn at random from 1-3 digits and 2-4 of the excerpt's own punctuation
    marks (as in the ik_llama.cpp report's "0: 0:00:0: //"), now and then one of its short words."""
    digits = sorted(set("0123456789"))
    symbols = sorted({c for c in prefix if not c.isalnum() and not c.isspace()} | set(":/()"))
    alphabet = rng.sample(digits, rng.randint(1, 3)) + rng.sample(symbols, min(len(symbols), rng.randint(2, 4)))
    short = [w for w in re.findall(r"[^\W\d_]{2,6}", prefix)][:40] or ["data"]
    pieces = []
    for _ in range(words):
        if rng.random() < 0.06:
            pieces.append(rng.choice(short) + rng.choice(alphabet))
        else:
            pieces.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))))
    return " ".join(pieces)


def syllables(word):
    return re.findall(r"[^aeiouàèéìòùáíóúâêôãõäöü]*[aeiouàèéìòùáíóúâêôãõäöü]+(?:[^aeiouàèéìòùáíóúâêôãõäöü]*$)?",
                      word.lower()) or [word]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--per-kind", type=int, default=40)
    ap.add_argument("--per-shape", type=int, default=40)
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    kinds = [f"prose_{l}" for l in LANGS] + ["cjk_docs", "code_cjk", "hexdump", "log", "table"]
    shapes = ["garbage", "mixing", "drift", "invented", "garbage_flood"]
    rows = []
    for kind in kinds:
        for k in range(a.per_kind):
            text, src, lang = legit(kind, rng)
            rows.append({"id": f"{kind}-{k}", "label": kind, "loop": False, "lang": lang, "source": src,
                         "text": text})
        print(kind, file=__import__("sys").stderr)
    langs = list(LANGS)
    for shape in shapes:
        for k in range(a.per_shape):
            lang = langs[k % len(langs)]
            full, src = man_prose(lang, rng, 600, strict=True)
            words = full.split()
            onset = rng.randint(80, 200)
            prefix = " ".join(words[:onset])
            rest = words[onset:onset + 300]
            if shape == "garbage":
                cont = garbage_chain(prefix, rng, 300)
            elif shape == "garbage_flood":
                word = rng.choice([w for w in re.findall(r"[^\W\d_]{5,}", prefix)] or ["Hectometers"])
                cont = (garbage_chain(prefix, rng, 40) + " " + " ".join([word] * rng.randint(5, 8)) + " " +
                        garbage_chain(prefix, rng, 260))
            elif shape == "mixing":
                cjk, _ = cjk_text(rng, 3000)
                han = [c for c in cjk if ord(c) > 0x3000 and c.isalpha()]
                out = []
                text = " ".join(rest)
                for i, c in enumerate(text):
                    rate = 0.01 + 0.09 * min(1.0, i / max(1, len(text)))
                    if rng.random() < rate:
                        out.append(rng.choice(han))
                    out.append(c)
                cont = "".join(out)
            elif shape == "drift":
                other = "fr" if lang == "en" else "en"
                cont = man_prose(other, rng, 320, strict=True)[0]
                cont = " ".join(cont.split()[:300])
            elif shape == "invented":
                sylls = [s for w in words if w.isalpha() and len(w) > 3 for s in syllables(w)]
                out = []
                for i, w in enumerate(rest):
                    share = 0.1 + 0.5 * min(1.0, i / 250)
                    core = re.match(r"^([^\W\d_]+)(\W*)$", w)
                    if core and rng.random() < share and sylls:
                        fake = "".join(rng.choice(sylls) for _ in range(rng.randint(2, 4)))
                        out.append(fake + core.group(2))
                    else:
                        out.append(w)
                cont = " ".join(out)
            rows.append({"id": f"{shape}-{k}", "label": shape, "loop": True, "lang": lang, "source": src,
                         "text": prefix + " " + cont, "onset_words": len(prefix.split()), "budget_words": 250})
        print(shape, file=__import__("sys").stderr)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(rows)} texts -> {a.out}")


if __name__ == "__main__":
    main()
