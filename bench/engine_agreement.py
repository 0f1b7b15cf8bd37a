#!/usr/bin/python3
"""coda against another engine on the same GGUF file: greedy text and the logit gaps between the top
tokens, prompt by prompt. This is how a new weight type is checked against an independent
implementation of the format (llama.cpp's or ik_llama.cpp's llama-server, built under /tmp).

Both servers run on loopback; each prompt is continued greedily for 64 tokens with the top 3
alternatives per token. Probabilities are not compared directly: the engines normalise over different
sets (a server may report them after its sampler chain), but the gap between two tokens' log
probabilities is the gap between their logits whatever the normaliser. The report per prompt: how many
characters of greedy text agree, and the largest difference of a top-1-to-top-k logit gap over the
first 20 tokens (up to the first token where the engines choose differently). Two engines that quantize activations differently differ
by a few hundredths; a misread weight layout by whole units, with text that parts at once.

Usage: /usr/bin/python3 bench/engine_agreement.py CODA LLAMA_SERVER MODEL.gguf [PROMPT...]
"""
import json
import math
import os
import subprocess
import sys
import time
import urllib.request

PROMPTS = ["And Moses spake unto", "La fortuna non aspetta", "The king said", "Il tempo cambia",
           "A fool gave unto", "Ogni giorno porta sempre"]
OTHER_PORT, CODA_PORT = 18380, 18381


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))


def wait_ready(url, proc, what):
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with status {proc.returncode} before it answered {url}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except Exception:
            time.sleep(0.2)
    sys.exit(f"{what} did not answer {url} within 120 s")


def other_top(entry):
    """Top alternatives of one token from llama-server's /completion: {token: log probability}."""
    if "probs" in entry:  # older servers (ik_llama.cpp): probabilities
        return {p["tok_str"]: math.log(max(p["prob"], 1e-30)) for p in entry["probs"]}
    return {p["token"]: p["logprob"] for p in entry["top_logprobs"]}


def gap_difference(a, b):
    """Largest |(top1 - t)_a - (top1 - t)_b| over tokens t both list, with a's top-1 as the anchor."""
    common = [t for t in a if t in b]
    if len(common) < 2:
        return None
    return max(abs((a[common[0]] - a[t]) - (b[common[0]] - b[t])) for t in common[1:])


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    coda, server, model = sys.argv[1:4]
    prompts = sys.argv[4:] or PROMPTS
    for path, what in ((coda, "coda"), (server, "llama-server"), (model, "model")):
        if not os.path.isfile(path):
            sys.exit(f"{what}: no such file: {path} (usage: engine_agreement.py CODA LLAMA_SERVER MODEL.gguf)")
    other = subprocess.Popen([server, "-m", model, "--port", str(OTHER_PORT), "-t", "2", "-c", "1024"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The guard observes only: its default stops loops, and greedy text of a small model loops.
    ours = subprocess.Popen([coda, "serve", "-m", model, "--port", str(CODA_PORT), "-t", "2", "-c", "1024",
                             "--guard", "observe"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{OTHER_PORT}/health", other, server)
        wait_ready(f"http://127.0.0.1:{CODA_PORT}/health", ours, "coda serve")
        model_id = json.load(urllib.request.urlopen(f"http://127.0.0.1:{CODA_PORT}/v1/models"))["data"][0]["id"]
        print("| prompt | greedy text in common (chars) | largest logit-gap difference (tokens compared) |")
        print("|---|---|---|")
        for p in prompts:
            a = post(f"http://127.0.0.1:{OTHER_PORT}/completion",
                     {"prompt": p, "n_predict": 64, "temperature": 0, "n_probs": 3, "cache_prompt": False})
            b = post(f"http://127.0.0.1:{CODA_PORT}/v1/completions",
                     {"model": model_id, "prompt": p, "max_tokens": 64, "temperature": 0, "logprobs": 3})
            ta, tb = a["content"], b["choices"][0]["text"]
            same = 0
            while same < min(len(ta), len(tb)) and ta[same] == tb[same]:
                same += 1
            worst, compared = 0.0, 0
            lp = b["choices"][0]["logprobs"]
            for x, y, chosen in zip(a["completion_probabilities"], lp["top_logprobs"], lp["tokens"]):
                d = gap_difference(other_top(x), y)
                if d is None or compared == 20:
                    break
                worst, compared = max(worst, d), compared + 1
                if x.get("content", x.get("token")) != chosen:  # the contexts part after this token
                    break
            print(f"| {p} | {same} of {max(len(ta), len(tb))} | {worst:.3f} ({compared}) |")
    finally:
        other.terminate()
        ours.terminate()
        other.wait()
        ours.wait()


if __name__ == "__main__":
    main()
