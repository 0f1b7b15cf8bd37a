"""Deterministic corpus for the tokenizer differential test: many scripts, code, numbers, whitespace
runs and mixed newlines, contractions, emoji sequences and odd-but-valid Unicode.

Usage: /usr/bin/python3 make_corpus.py OUT.jsonl [N]   (one JSON string per line)
"""
import json
import random
import sys

FRAGMENTS = {
    "latin": ["Äpfel", "naïve café", "résumé", "Ångström", "façade", "Straße", "Œuvre", "piñata", "Dvořák", "Łódź"],
    "italian": ["Chi va piano va sano e va lontano.", "perché è così", "l'amore", "dell'anno", "Città più bella",
                "Non c'è rosa senza spine", "un po' di più", "ciò che è stato"],
    "english": ["In the beginning God created", "Hello, world!", "The quick brown fox", "It's", "we'll", "they're",
                "I'd've", "DON'T", "She'S", "o'clock", "rock 'n' roll", "Y'ALL"],
    "cyrillic": ["Привет, мир!", "нещо на Български", "Съешь же ещё", "ЁЛКА", "мова"],
    "greek": ["Καλημέρα κόσμε", "ΑΒΓΔ αβγδ", "ἀρχὴ", "λόγος"],
    "cjk": ["天地玄黄", "宇宙洪荒", "こんにちは世界", "カタカナ", "한국어 텍스트", "中文，标点。", "日本語の文章です"],
    "arabic": ["مرحبا بالعالم", "السلام عليكم", "١٢٣٤٥", "كتاب"],
    "devanagari": ["नमस्ते दुनिया", "हिन्दी", "क्षत्रिय", "०१२३"],
    "emoji": ["🦙", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇮🇹🇬🇧", "🧑🏿‍💻", "😀😃😄", "✅", "☕"],
    "code": ["int main() { return 0; }", "def f(x):\n    return x**2", "for (i = 0; i < n; ++i) {", "x += y >> 3;",
             "#include <stdio.h>", "SELECT * FROM t WHERE a='b';", "console.log(`${a}`)", "<div class=\"x\">",
             "a_b_c = [1, 2, 3]", "fn main() -> Result<(), Box<dyn Error>>", "    \t// comment"],
    "numbers": ["0", "12", "123", "1234", "12345", "1234567890", "3.14159", "1,000,000", "2026-11-21", "v1.2.3",
                "0x7fffffff", "-42", "1e-10", "100%", "$9.99", "٣", "৪২"],
    "space": [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n ", "\t\t\n", "\u00a0", "\u3000", "\u2003",
              "          "],
    # U+FEFF is left out on purpose: transformers.js splits on JavaScript's \s, which counts it as
    # whitespace, while Hugging Face's Rust tokenizers (Oniguruma) and coda (PCRE2, Unicode
    # White_Space) do not. See docs/tokenizers.md.
    "odd": ["\u200b", "\u200d", "\u200e", "\ufffd", "e\u0301", "a\u0300\u0301", "\u0301", "\u00ad",
            "\U0001d4af\U0001d4ae", "\u2028", "ﬁ", "ｆｕｌｌ", "Ⅻ", "\u0378", "\U000e0041", "\x7f", "\x01"],
    "punct": ["!!!", "...", "?!", "—", "–", "«»", "“quoted”", "‘single’", "(", ")", "[]", "{}", "@#$%^&*", "''", "``",
              "'s", "'", "\"", "\\", "/"],
}


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2400
    rng = random.Random(20261121)
    keys = sorted(FRAGMENTS)
    lines = []
    # Every fragment alone, then random mixtures of 1..12 fragments with random separators.
    for k in keys:
        lines.extend(FRAGMENTS[k])
    seps = ["", " ", "  ", "\n", "\t", ", ", "\r\n", " \n"]
    # Long runs: whitespace and letter runs in the thousands (regex backtracking, BPE on long words).
    lines.extend([" " * 5000 + "x", "a" * 4000, "\n" * 3000 + "end", "ab " * 2000, "9" * 1000])
    while len(lines) < n:
        parts = []
        for _ in range(rng.randint(1, 12)):
            parts.append(rng.choice(FRAGMENTS[rng.choice(keys)]))
            parts.append(rng.choice(seps))
        s = "".join(parts)
        if rng.random() < 0.2:
            s = s.upper()
        if rng.random() < 0.1:
            s = " " + s
        lines.append(s)
    with open(out, "w", encoding="utf-8") as f:
        for s in lines[:n]:
            f.write(json.dumps(s, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
