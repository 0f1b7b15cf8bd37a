#!/usr/bin/python3
"""The perpetual-text blog's experiment on the bundled model, through `coda serve`: 24 prompts (the
built-in exam, narrative and technical tasks in English and Italian), each generated under four
settings, and for each setting the average generated length and the share of generations holding a
semantic ending ("The End", "Fine", "In conclusion, ...", a sign-off) in their final text.

  natural       the model ends when it samples EOS
  suppress      EOS suppressed (ignore_eos): the blog's first remedy
  backstep      an EOS (or a semantic ending) before min_tokens steps back `backstep` tokens and
                resamples at the same temperature (start_factor 1)
  schedule      the same, resampling at 2x the temperature, decaying by --decay per token (the
                blog's seed code: 0.1)

Usage: /usr/bin/python3 bench/perpetual_experiment.py build/coda [--max-tokens 1024] [--temperature 0.7]
       [--decay 0.1] [--seeds 1]
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys

# Semantic endings, written independently of the guard's list: a line that is only the phrase, or a
# sentence that opens with a closing formula.
WHOLE = re.compile(r"^[\s*#_\"]*(the end|fine|the end of the story|end of story|finis|la fine|thanks for reading|"
                   r"grazie per aver letto)[\s.!*_\"]*$", re.I | re.M)
OPENING = re.compile(r"(^|[.!?]\s+)[\s*#_\"]*(in conclusion|to conclude|in summary|in conclusione|per concludere|"
                     r"sincerely|best regards|cordiali saluti|distinti saluti),", re.I | re.M)


def semantic_ending(text):
    return bool(WHOLE.search(text) or OPENING.search(text))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--decay", type=float, default=0.1)
    ap.add_argument("--backstep", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    srv = subprocess.Popen([a.coda, "serve", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(srv.stdout.readline().strip().rsplit(":", 1)[1])
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))

    def complete(body):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        out = json.loads(c.getresponse().read())
        c.close()
        return out

    # The built-in tasks (src/lab/prompts.cpp: exam, narrative and technical, in English and Italian),
    # read from the source so that the experiment sends what `coda bench --set all` sends.
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "lab", "prompts.cpp")).read()
    prompts = [json.loads('"' + m + '"') for m in re.findall(
        r'"((?:Exam question|Domanda d\'esame|Write a long|Scrivi un|Q: |D: )(?:[^"\\]|\\.)*)"', src)]
    prompts = prompts[:24]
    min_tokens = a.max_tokens
    settings = {
        "natural": {},
        "suppress": {"ignore_eos": True},
        "backstep": {"coda": {"guard": "observe", "perpetual": {"min_tokens": min_tokens, "backstep": a.backstep,
                                                                 "start_factor": 1.0, "decay": 1.0}}},
        "schedule": {"coda": {"guard": "observe", "perpetual": {"min_tokens": min_tokens, "backstep": a.backstep,
                                                                 "start_factor": 2.0, "decay": a.decay}}},
    }
    results = {}
    try:
        for name, extra in settings.items():
            lengths, endings, steps = [], 0, 0
            for seed in range(a.seeds):
                for i, p in enumerate(prompts):
                    body = {"prompt": p, "max_tokens": a.max_tokens, "temperature": a.temperature, "seed": 1000 * seed + i,
                            **extra}
                    if "coda" not in body:
                        body["coda"] = {"guard": "observe"}
                    out = complete(body)
                    text = out["choices"][0]["text"]
                    lengths.append(out["usage"]["completion_tokens"])
                    endings += semantic_ending(text)
                    steps += sum(1 for r in out["coda"]["repairs"] if r["reason"] in ("early_eos", "ending_in_words"))
            n = len(lengths)
            results[name] = {"generations": n, "mean_length": statistics.mean(lengths),
                             "semantic_endings": endings, "semantic_ending_share": endings / n, "backsteps": steps}
            print(f"{name:<9} mean length {statistics.mean(lengths):7.1f}  semantic endings {endings}/{n}  "
                  f"backsteps {steps}", flush=True)
    finally:
        srv.terminate()
    if a.json:
        json.dump({"prompts": len(prompts), "max_tokens": a.max_tokens, "temperature": a.temperature,
                   "decay": a.decay, "backstep": a.backstep, "results": results}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
