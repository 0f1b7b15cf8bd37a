#!/usr/bin/python3
"""coda proxy's memory and /metrics size under clients that name a new model on every request
(issue 62): batches of 10,000 requests, each with a random 1 KB model name, through the proxy in
front of the scripted upstream (tests/proxy/scripted_upstream.py), 8 clients at once. After each
batch: the proxy's resident memory and the size of /metrics. Bounded labels keep both flat.

Usage: /usr/bin/python3 bench/proxy_label_memory.py build/coda [BATCHES]
"""
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
import test_faults as tf  # noqa: E402  (the proxy and upstream launchers, made_up_models, rss_kib)


def main():
    coda = sys.argv[1]
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    up = tf.scripted()
    px = tf.proxy(coda, up.port)
    try:
        rng = random.Random(7)
        print(f"start: RSS {tf.rss_kib(px.proc.pid) / 1024:.1f} MiB")
        for k in range(batches):
            bad = tf.made_up_models(px.port, 10000, rng)
            _, _, raw = px.request("GET", "/metrics")
            print(f"after {(k + 1) * 10000} requests ({len(bad)} failed): RSS {tf.rss_kib(px.proc.pid) / 1024:.1f} MiB, "
                  f"/metrics {len(raw)} bytes", flush=True)
    finally:
        px.close()
        up.close()


if __name__ == "__main__":
    main()
