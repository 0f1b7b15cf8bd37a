#!/usr/bin/python3
"""coda proxy under load: N concurrent streams for S seconds against a paced scripted upstream
(tests/proxy/scripted_upstream.py, one token every --pace-ms like an engine decoding), half of them
looping, some clients leaving early; the same load straight to the upstream. Reports the proxy's
added latency per token (inter-token latency through the proxy minus direct, p50 and p99), added
time to first token, the proxy's CPU time per 1,000 tokens delivered, its memory over the run,
and checks nothing was lost or mixed and every upstream stream was closed.

Usage: /usr/bin/python3 bench/proxy_load.py build/coda [--seconds 60] [--streams 64] [--pace-ms 20]
"""
import argparse
import json
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "proxy"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
import test_proxy as tp  # noqa: E402
import test_server as ts  # noqa: E402


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(port, seconds, streams, pace_ms, max_tokens, label):
    """Runs the load; returns inter-token gaps, TTFTs, tokens received and problems."""
    import http.client
    gaps, ttfts, problems = [], [], []
    tokens = [0]
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def one(i):
        rng = random.Random(i)
        r = 0
        while time.monotonic() < end:
            r += 1
            tag = f"s{i}r{r}"
            looping = i % 2 == 0
            prompt = f"[pace:{pace_ms}][tag:{tag}]" + ("[loop] go|" if looping else "[text] go|")
            leave_after = rng.randint(2, 8) if rng.random() < 0.1 else None
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            t0 = time.monotonic()
            c.request("POST", "/v1/completions", body=json.dumps(
                {"prompt": prompt, "max_tokens": max_tokens, "stream": True}).encode(),
                headers={"Content-Type": "application/json"})
            resp = c.getresponse()
            parser = ts.SseParser()
            text, last, first, n, done, finish = "", None, None, 0, False, None
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                now = time.monotonic()
                for data in parser.feed(chunk):
                    if data == "[DONE]":
                        done = True
                        continue
                    ev = json.loads(data)
                    for ch in ev.get("choices", []):
                        t = ch.get("text") or ""
                        if t:
                            n += 1
                            text += t
                            if first is None:
                                first = now - t0
                            elif last is not None:
                                with lock:
                                    gaps.append(now - last)
                            last = now
                        finish = ch.get("finish_reason") or finish
                if leave_after is not None and n >= leave_after:
                    break
            c.close()
            with lock:
                tokens[0] += n
                if first is not None:
                    ttfts.append(first)
            if leave_after is not None:
                continue
            if not done or not text.startswith(" " + tag + " "):
                with lock:
                    problems.append((label, tag, finish, text[:60]))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return gaps, ttfts, tokens[0], problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--pace-ms", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=200)
    a = ap.parse_args()
    up = tp.scripted()
    px = tp.proxy(a.coda, up.port, "--guard", "stop")
    try:
        direct = drive(up.port, a.seconds, a.streams, a.pace_ms, a.max_tokens, "direct")
        rss = []
        stop = threading.Event()

        def sample():
            while not stop.wait(1.0):
                rss.append(tp.rss_kib(px.proc.pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        cpu0 = cpu_seconds(px.proc.pid)
        via = drive(px.port, a.seconds, a.streams, a.pace_ms, a.max_tokens, "proxy")
        cpu = cpu_seconds(px.proc.pid) - cpu0
        stop.set()
        sampler.join()
        px.wait_until("every upstream stream closed", lambda: up.json("GET", "/stats")[2]["open"] == 0)
        stats = up.json("GET", "/stats")[2]
        gd, td, nd, pd = direct
        gp, tp_, np_, pp = via
        third = max(1, len(rss) // 3)
        out = {
            "streams": a.streams, "seconds": a.seconds, "pace_ms": a.pace_ms,
            "tokens_direct": nd, "tokens_proxy": np_,
            "itl_ms_direct": {"p50": 1000 * percentile(gd, 0.5), "p99": 1000 * percentile(gd, 0.99)},
            "itl_ms_proxy": {"p50": 1000 * percentile(gp, 0.5), "p99": 1000 * percentile(gp, 0.99)},
            "added_ms_per_token": {"p50": 1000 * (percentile(gp, 0.5) - percentile(gd, 0.5)),
                                   "p99": 1000 * (percentile(gp, 0.99) - percentile(gd, 0.99))},
            "ttft_ms_direct_p50": 1000 * percentile(td, 0.5), "ttft_ms_proxy_p50": 1000 * percentile(tp_, 0.5),
            "proxy_cpu_s": cpu, "proxy_cpu_ms_per_1000_tokens": 1000 * cpu / max(1, np_) * 1000,
            "proxy_rss_kib": {"first_third_max": max(rss[:third] or [0]), "last_third_max": max(rss[-third:] or [0]),
                              "max": max(rss or [0])},
            "upstream": stats, "problems": len(pd) + len(pp),
        }
        print(json.dumps(out, indent=1))
        if pd or pp:
            print("problems:", (pd + pp)[:5], file=sys.stderr)
            sys.exit(1)
    finally:
        px.stop()
        up.stop()


if __name__ == "__main__":
    main()
