#!/usr/bin/python3
"""What continuous batching buys: aggregate decode tokens/s and time to first token (p50/p99) at 1,
4 and 8 concurrent streams against `coda serve` on the synthetic Llama-3.2-1B Q4_K model.

Each stream asks for 64 tokens (ignore_eos, temperature 1) after a short prompt; each concurrency
level runs `rounds` waves of that many simultaneous streaming requests.

Usage: /usr/bin/python3 bench/bench_server.py build/coda out [--threads 2] [--rounds 3]
       /usr/bin/python3 bench/bench_server.py --url http://127.0.0.1:8080 out [--rounds 3]

With --url it measures a server that is already running (llama-server started with -np 8, vLLM,
another coda) on whatever model it serves; a server that sends no usage is counted by its chunks.
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import threading
import time
import urllib.parse

from sse import sse_events


def stream_one(host, port, prompt, max_tokens, out):
    c = http.client.HTTPConnection(host, port, timeout=600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, "coda": {"guard": "observe"}}
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, tokens, chunks = None, None, 0
    for j in sse_events(r):
        if j.get("choices") and j["choices"][0].get("text"):
            chunks += 1
            if first is None:
                first = time.perf_counter() - t0
        if j.get("usage"):
            tokens = j["usage"]["completion_tokens"]
    tokens = chunks if tokens is None else tokens
    out.append({"ttft": first if first is not None else float("nan"), "tokens": tokens,
                "end": time.perf_counter()})
    c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda", nargs="?")
    ap.add_argument("out")
    ap.add_argument("--url", help="measure this running server instead of starting coda")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if not a.url and not a.coda:
        ap.error("give the coda binary, or --url of a running server")
    os.makedirs(a.out, exist_ok=True)
    proc = None
    if a.url:
        u = urllib.parse.urlsplit(a.url)
        host, port = u.hostname, u.port or 80
        try:
            http.client.HTTPConnection(host, port, timeout=10).connect()
        except OSError as e:
            raise SystemExit(f"cannot reach {a.url}: {e}; start the server first, or check the host and port")
    else:
        model = os.path.join(a.out, "llama-3.2-1b-Q4_K.gguf")
        if not os.path.exists(model):
            subprocess.run([a.coda, "synth", "--shape", "llama-3.2-1b", "--type", "Q4_K", "-o", model], check=True)
        proc = subprocess.Popen([a.coda, "serve", "-m", model, "--port", "0", "-t", str(a.threads), "--max-num-seqs",
                                 "8", "-c", "4096"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        host, port = "127.0.0.1", int(proc.stdout.readline().strip().rsplit(":", 1)[1])
    rows = []
    try:
        stream_one(host, port, "Warm up", 4, [])
        for conc in (1, 4, 8):
            results, wall = [], 0.0
            for _ in range(a.rounds):
                out = []
                threads = [threading.Thread(target=stream_one, args=(host, port, f"The quick brown fox {i}", 64, out))
                           for i in range(conc)]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall += time.perf_counter() - t0
                results += out
            tokens = sum(r["tokens"] for r in results)
            ttfts = sorted(r["ttft"] * 1000 for r in results)
            p99 = ttfts[min(len(ttfts) - 1, int(round(0.99 * (len(ttfts) - 1))))]
            rows.append({"concurrency": conc, "requests": len(results), "tokens": tokens,
                         "aggregate_tokens_per_s": tokens / wall, "ttft_p50_ms": statistics.median(ttfts),
                         "ttft_p99_ms": p99})
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
    base = rows[0]["aggregate_tokens_per_s"]
    print("| concurrent streams | requests | aggregate decode tokens/s | vs 1 stream | TTFT p50 (ms) | TTFT p99 (ms) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['requests']} | {r['aggregate_tokens_per_s']:.1f} | "
              f"{r['aggregate_tokens_per_s'] / base:.2f}x | {r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} |")
    with open(os.path.join(a.out, "bench-server.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
