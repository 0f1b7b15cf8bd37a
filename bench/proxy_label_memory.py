#!/usr/bin/python3
"""coda proxy's memory and /metrics size under clients that name a new model on every request
(issue 62): batches of 10,000 requests, each with a random 1 KB model name, through the proxy in
front of the scripted upstream (tests/proxy/scripted_upstream.py), 8 clients at once. After each
batch: the proxy's resident memory and the size of /metrics. Bounded labels keep both flat.

Usage: /usr/bin/python3 bench/proxy_label_memory.py build/coda [BATCHES]
"""
import http.client
import json
import os
import random
import string
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
import test_faults as tf  # noqa: E402  (the proxy and upstream launchers, rss_kib)


def batch(port, n, rng):
    lock = threading.Lock()
    it = iter(range(n))

    def client():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while True:
            with lock:
                i = next(it, None)
                name = "".join(rng.choice(string.ascii_letters) for _ in range(1024)) if i is not None else ""
            if i is None:
                break
            c.request("POST", "/v1/completions", body=json.dumps({"model": name, "prompt": "[text] hi",
                                                                  "max_tokens": 4}),
                      headers={"Content-Type": "application/json"})
            c.getresponse().read()
        c.close()
    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main():
    coda = sys.argv[1]
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    up = tf.scripted()
    px = tf.proxy(coda, up.port)
    try:
        rng = random.Random(7)
        print(f"start: RSS {tf.rss_kib(px.proc.pid) / 1024:.1f} MiB")
        for k in range(batches):
            batch(px.port, 10000, rng)
            _, _, raw = px.request("GET", "/metrics")
            print(f"after {(k + 1) * 10000} requests: RSS {tf.rss_kib(px.proc.pid) / 1024:.1f} MiB, "
                  f"/metrics {len(raw)} bytes", flush=True)
    finally:
        px.close()
        up.close()


if __name__ == "__main__":
    main()
