#!/usr/bin/python3
"""Thinking loops through `coda proxy`, measured: for N loops of each shape in the scripted upstream
(tests/proxy/scripted_upstream.py), the share that ended with an answer, the median tokens saved
against running to max_tokens, and the reasoning tokens delivered to the client after the loop's
onset (the rolled-back part a client still saw).

Shapes (each varied by [seed:i]: the sentence, the counter's start, the swapped words):
  exact       one sentence repeated word for word ("Wait, let me check again.")
  near        a sentence with a climbing counter and about one word in ten swapped
  paraphrase  paraphrases of "let me check again" in a random order (no period at all)

Each reply starts with a 10-token preamble, then the loop: the onset is token 10.

Usage: /usr/bin/python3 bench/reasoning_loops.py build/coda [--n 100] [--max-tokens 4000] [--json OUT]
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
UPSTREAM = os.path.join(HERE, "..", "tests", "proxy", "scripted_upstream.py")
ANSWER = " The answer is four."
ONSET = 10  # tokens of " Let me think about the sum of the numbers."
SHAPES = {"exact": "[think-loop]", "near": "[think-near]", "paraphrase": "[think-para]"}


def words(text):  # the scripted upstream's tokens
    return re.findall(r" ?[A-Za-z]+| ?[0-9]+|[.,:?]", text)


def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    port = int(re.search(r"(\d+)\s*$", line.strip()).group(1))
    return p, port


def ask(port, content, max_tokens, extra):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    out = json.loads(c.getresponse().read())
    c.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=4000)
    ap.add_argument("--json")
    ap.add_argument("--proxy-args", default="", help="more flags for coda proxy (e.g. --guard repair)")
    a = ap.parse_args()
    up, up_port = start([sys.executable, UPSTREAM])
    px, px_port = start([a.coda, "proxy", "--upstream", f"http://127.0.0.1:{up_port}", "--port", "0",
                         *a.proxy_args.split()])
    results = {}
    try:
        for shape, marker in SHAPES.items():
            answered, saved, after_onset, kinds = 0, [], [], {}
            t0 = time.monotonic()
            for i in range(a.n):
                out = ask(px_port, f"{marker}[seed:{i}] go", a.max_tokens, {})
                m = out["choices"][0]["message"]
                thought = m.get("reasoning_content") or m.get("reasoning") or ""
                if m.get("content") == ANSWER and out["choices"][0]["finish_reason"] == "stop":
                    answered += 1
                saved.append(a.max_tokens - out["usage"]["completion_tokens"])
                after_onset.append(max(0, len(words(thought)) - ONSET))
                for e in out["coda"]["events"]:
                    if e["action"] == "answer":
                        kinds[e["type"]] = kinds.get(e["type"], 0) + 1
                print(f"\r{shape}: {i + 1}/{a.n}", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
            results[shape] = {"n": a.n, "answered": answered, "median_tokens_saved": statistics.median(saved),
                              "median_reasoning_after_onset": statistics.median(after_onset),
                              "max_reasoning_after_onset": max(after_onset), "answered_by": kinds,
                              "seconds": round(time.monotonic() - t0, 1)}
    finally:
        px.terminate()
        up.terminate()
    print(f"{'shape':<11} {'answered':>9} {'median saved':>13} {'after onset (median, max)':>26}  detectors")
    for shape, r in results.items():
        print(f"{shape:<11} {r['answered']:>4}/{r['n']:<4} {r['median_tokens_saved']:>13.0f} "
              f"{r['median_reasoning_after_onset']:>18.0f}, {r['max_reasoning_after_onset']:<6}  {r['answered_by']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"max_tokens": a.max_tokens, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
