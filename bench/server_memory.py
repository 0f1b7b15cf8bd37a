#!/usr/bin/python3
"""Resident memory of `coda serve` under large chat requests: 30 conversations of 100,000
alternating user/assistant messages (3.75 MB of JSON each, three at a time). They are templated and
tokenized, then refused because they are longer than the bundled model's context. Prints the idle
RSS, the peak seen (sampled every 10 ms) and the RSS afterwards, and the thread count.

Usage: /usr/bin/python3 bench/server_memory.py build/coda [coda serve flags...]
  e.g. ... build/coda --max-messages 200000   (the default limit, 4,096, refuses them unparsed)
An older build without the limit flags takes no extra flags.
"""
import http.client
import json
import subprocess
import sys
import threading
import time


def status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main():
    coda, extra = sys.argv[1], sys.argv[2:]
    p = subprocess.Popen([coda, "serve", "--port", "0", "-t", "1", *extra], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    port = int(p.stdout.readline().strip().rsplit(":", 1)[1])
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "hi"} for i in range(100000)]
    big = json.dumps({"messages": msgs, "max_tokens": 4}).encode()
    statuses = []

    def one():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.request("POST", "/v1/chat/completions", body=big, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        statuses.append(r.status)
    idle = peak = status(p.pid, "VmRSS") / 1024
    threads = status(p.pid, "Threads")
    for _ in range(10):
        ts = [threading.Thread(target=one) for _ in range(3)]
        for t in ts:
            t.start()
        while any(t.is_alive() for t in ts):
            peak = max(peak, status(p.pid, "VmRSS") / 1024)
            time.sleep(0.01)
    after = status(p.pid, "VmRSS") / 1024
    p.terminate()
    p.wait()
    print(f"body {len(big) / 1e6:.2f} MB x 30 (statuses {sorted(set(statuses))}); RSS idle {idle:.1f} MB, "
          f"peak {peak:.1f} MB, after {after:.1f} MB; {threads} threads idle")


if __name__ == "__main__":
    main()
