#!/usr/bin/python3
"""What prefix affinity buys behind `coda proxy`: two `coda serve` replicas (the bundled model, one
thread each) behind one proxy; 8 conversations of 4 turns, each with a system prompt of its own
(500 words); the time to the first streamed chunk of turns 2-4 with --upstream-affinity none and
prefix. A turn that lands on the replica that served the conversation before reuses its prefix
cache; one that lands elsewhere prefills the whole conversation again.

Usage: /usr/bin/python3 bench/proxy_affinity.py build/coda
"""
import json, subprocess, sys, time, http.client, statistics
coda = sys.argv[1]
def start(argv):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    return p, int(line.strip().split(":")[-1].split()[-1])
def ttft(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = dict(body, stream=True)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    while True:
        line = r.readline()
        if not line: break
        if line.startswith(b"data: {") and first is None:
            first = time.monotonic() - t0
        if line.strip() == b"data: [DONE]": break
    c.close()
    return first
words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()
res = {}
for mode in ("none", "prefix"):
    s1, p1 = start([coda, "serve", "--port", "0", "-t", "1"])
    s2, p2 = start([coda, "serve", "--port", "0", "-t", "1"])
    px, pp = start([coda, "proxy", "--upstream", f"http://127.0.0.1:{p1},http://127.0.0.1:{p2}", "--port", "0", "--upstream-affinity", mode])
    later = []
    try:
        for conv in range(8):
            system = f"Conversation {conv}. " + " ".join(words[(conv + i) % len(words)] for i in range(500))
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Tell me a story."}]
            for turn in range(4):
                t = ttft(pp, {"messages": msgs, "max_tokens": 8, "temperature": 0})
                if turn > 0: later.append(t)
                msgs = msgs + [{"role": "assistant", "content": "Once upon a time."}, {"role": "user", "content": f"And then {turn}?"}]
    finally:
        for p in (px, s1, s2): p.terminate(); p.wait()
    res[mode] = later
    print(mode, "turns 2-4 TTFT: mean %.1f ms, median %.1f ms" % (1000 * statistics.mean(later), 1000 * statistics.median(later)))
