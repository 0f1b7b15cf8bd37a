#!/usr/bin/python3
"""The guard on real text: the corpus of bench/guard_realtext_corpus.py (excerpts of files Debian
installs, and continuations of other excerpts that turn into loops) through the guard four ways:

  tokens     in process: `coda scan --guard stop` over Llama 3's token ids (tests/node's
             tokenizer.json), no logits (no model here wrote these texts)
  logprobs   `coda proxy --guard stop` in front of an upstream that streams each Llama 3 token with
             its logprob and top-5 alternatives (as vLLM does with logprobs)
  text       the same proxy in front of the same upstream refusing logprobs (400), so the guard
             sees text deltas only and counts its own units
  vllm       vLLM's exact repetition detector, offline on the same token ids: the last 3L tokens
             are three copies of one L-gram, for some L in 8..512 (min_count 3)

`--guard stop` acts on every detector of the loop and degenerate families (not on `runaway`: a
bare policy leaves length to a scope that names it); the proxy passes ask for 16,384 tokens. The
proxy passes print the proxy's CPU time per 1,000 streamed tokens. A legitimate text is a false positive when the
guard stops it; a loop counts as caught when it is stopped after its onset and at most its budget
of words later (400, or 3 periods + 200 for a block). The delay is in words after the onset.

Usage: /usr/bin/python3 bench/guard_realtext.py build/coda CORPUS.jsonl OUT_DIR [--passes tokens,logprobs,text,vllm]
       [--jobs 4] [--usage]
--usage: the upstream reports its token counts in every chunk (vLLM's continuous_usage_stats).
Writes OUT_DIR/realtext.json (per text and pass) and OUT_DIR/realtext.md (the tables).
"""
import argparse
import concurrent.futures as cf
import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3 = os.path.join(HERE, "..", "tests", "node", "node_modules", "@lenml", "tokenizer-llama3", "models",
                      "tokenizer.json")
LEGIT = ["python", "c_header", "licence", "changelog", "table", "docs"]
SHAPES = ["sentence", "flood", "garbage", "block", "near", "near_long", "near_heavy"]


def byte_decoder():
    """GPT-2's byte-level alphabet, inverted: the printable stand-in of each byte back to the byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_texts(coda, corpus, work):
    """Llama 3 ids of every text, and each token's text (tokens that end inside a UTF-8 character
    are merged with the next, as a server's deltas are)."""
    gguf = os.path.join(work, "llama3-vocab.gguf")
    subprocess.run([coda, "import-tokenizer", LLAMA3, "-o", gguf], check=True, capture_output=True)
    src = os.path.join(work, "texts.jsonl")
    with open(src, "w", encoding="utf-8") as f:
        for r in corpus:
            f.write(json.dumps(r["text"]) + "\n")
    p = subprocess.run([coda, "tokenize", "-m", gguf, "--no-bos", "--jsonl", src], check=True, capture_output=True,
                       text=True)
    ids = [json.loads(l)["ids"] for l in p.stdout.splitlines()]
    vocab = json.load(open(LLAMA3, encoding="utf-8"))["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    dec = byte_decoder()
    out = []
    for seq in ids:
        toks, pending = [], b""
        for i in seq:
            pending += bytes(dec[c] for c in by_id[i])
            try:
                toks.append(pending.decode("utf-8"))
                pending = b""
            except UnicodeDecodeError:
                continue
        if pending:
            toks.append(pending.decode("utf-8", "replace"))
        out.append((seq, toks))
    return gguf, out


def words_before(text, nbytes):
    return len(text.encode("utf-8")[:nbytes].decode("utf-8", "ignore").split())


# --- the upstream: streams a corpus text by its id, token by token ---

class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    texts = {}
    refuse_logprobs = False
    usage = False
    sent = None  # [tokens streamed], shared by the handler's threads
    lock = threading.Lock()

    def log_message(self, *a):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/v1/models"):
            return self.send_json(200, {"object": "list", "data": [{"id": "realtext", "object": "model"}]})
        self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        wants_lp = body.get("logprobs") not in (None, False, 0)
        if self.refuse_logprobs and wants_lp:
            return self.send_json(400, {"error": {"message": "logprobs are not enabled on this server",
                                                  "type": "invalid_request_error", "param": "logprobs"}})
        m = re.search(r"\[doc:([\w-]+)\]", body.get("prompt", ""))
        toks = self.texts[m.group(1)] if m else [" nothing"]
        k = body.get("logprobs") or 0
        max_tokens = body.get("max_tokens") or 10 ** 6
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for n, tok in enumerate(toks[:max_tokens]):
                c = {"index": 0, "text": tok, "finish_reason": None}
                if wants_lp:
                    alts = [(tok, -0.3)] + [(f" alt{j}", -1.5 - j) for j in range(max(0, min(k, 5) - 1))]
                    c["logprobs"] = {"tokens": [tok], "token_logprobs": [-0.3], "top_logprobs": [dict(alts)]}
                ev = {"id": "rt", "object": "text_completion", "model": "realtext", "choices": [c]}
                if self.usage:
                    ev["usage"] = {"prompt_tokens": 5, "completion_tokens": n + 1, "total_tokens": n + 6}
                self.chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
                with self.lock:
                    self.sent[0] += 1
            fin = "stop" if len(toks) <= max_tokens else "length"
            self.chunk(b"data: " + json.dumps({"id": "rt", "object": "text_completion", "model": "realtext",
                                                "choices": [{"index": 0, "text": "", "finish_reason": fin}]}).encode()
                       + b"\n\n")
            self.chunk(b"data: [DONE]\n\n")
            self.chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def chunk(self, data):
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def serve(texts, refuse, usage):
    handler = type("H", (Upstream,), {"texts": texts, "refuse_logprobs": refuse, "usage": usage, "sent": [0]})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def proxy_pass(coda, corpus, texts, refuse, usage, jobs, guard="stop"):
    up = serve(texts, refuse, usage)
    proc = subprocess.Popen([coda, "proxy", "--upstream", f"http://127.0.0.1:{up.server_port}", "--port", "0",
                             "--guard", guard], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    port = int(line.strip().split(":")[-1].split()[-1])

    def one(r):
        req = {"model": "realtext", "prompt": f"[doc:{r['id']}]", "max_tokens": 16384, "stream": True,
               "temperature": 0.7}
        data = json.dumps(req).encode()
        q = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=data,
                                   headers={"Content-Type": "application/json"})
        text, finish = "", None
        with urllib.request.urlopen(q, timeout=600) as resp:
            for raw in resp:
                raw = raw.decode().strip()
                if not raw.startswith("data: ") or raw == "data: [DONE]":
                    continue
                ev = json.loads(raw[6:])
                for c in ev.get("choices", []):
                    text += c.get("text") or ""
                    finish = c.get("finish_reason") or finish
        stopped = finish in ("repetition", "degenerate")
        return {"stopped": stopped, "finish": finish, "at_words": len(text.split()) if stopped else None}

    try:
        with cf.ThreadPoolExecutor(jobs) as ex:
            res = list(ex.map(one, corpus))
        # The proxy's CPU (user + system) per 1,000 tokens the upstream streamed to it.
        with open(f"/proc/{proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu_ms = (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")
        tokens = up.RequestHandlerClass.sent[0]
        print(f"proxy CPU: {cpu_ms:.0f} ms for {tokens} streamed tokens = {1000 * cpu_ms / max(1, tokens):.1f} ms "
              "per 1,000", file=sys.stderr)
        return res
    finally:
        proc.terminate()
        proc.wait()
        up.shutdown()


def scan_pass(coda, corpus, work, extra, pieces=None):
    """`pieces`: each text's token texts, to place an event by its token index where the binary
    reports no `at_byte` (builds before it had one)."""
    src = os.path.join(work, "corpus-scan.jsonl")
    with open(src, "w", encoding="utf-8") as f:
        for r in corpus:
            f.write(json.dumps({"id": r["id"], "text": r["text"]}) + "\n")
    p = subprocess.run([coda, "scan", "--json", *extra, src], capture_output=True, text=True,
                       check=True)
    out = []
    for r, l in zip(corpus, p.stdout.splitlines()):
        o = json.loads(l)
        # The first event the policy acted on (a scoped policy observes the others), as the proxy
        # passes count a stop.
        acted = [e for e in o["events"] if e.get("action", "stop") != "observe"]
        ev = acted[0] if acted else None
        at = None
        if ev:
            at = ev.get("at_byte")
            if at is None and pieces is not None:
                at = len("".join(pieces[r["id"]][: ev["detected_at"] + 1]).encode("utf-8"))
        out.append({"stopped": bool(ev), "type": ev and ev["type"],
                    "at_words": words_before(r["text"], at) if at is not None else None})
    return out


def vllm_pass(corpus, toks):
    """vLLM's repetition_detection (8..512, min_count 3), offline: the first token at which the last
    3L tokens are three copies of one L-gram."""
    out = []
    for r, (ids, pieces) in zip(corpus, toks):
        t = np.array(ids, dtype=np.int64)
        n = len(t)
        first = None
        for L in range(8, min(512, n // 3) + 1):
            eq = (t[L:] == t[:-L]).astype(np.int32)  # eq[j]: token j+L equals token j
            # Length of the run of matches ending at each position.
            idx = np.arange(len(eq))
            breaks = np.where(eq == 0, idx, -1)
            last_break = np.maximum.accumulate(breaks)
            run = idx - last_break
            hit = np.nonzero(run >= 2 * L)[0]
            if len(hit):
                at = int(hit[0]) + L  # token index
                first = at if first is None else min(first, at)
        if first is None:
            out.append({"stopped": False, "at_words": None})
        else:
            text = "".join(pieces)
            nbytes = len("".join(pieces[: first + 1]).encode("utf-8")) if len(pieces) == len(ids) else None
            out.append({"stopped": True,
                        "at_words": words_before(text, nbytes) if nbytes is not None else
                        len(text.split()) * (first + 1) // max(1, len(ids))})
    return out


def labels_of(corpus):
    """The corpus's legitimate kinds and degenerate shapes, in the order they first appear (the
    real-text corpus's, or another one's such as bench/guard_multilingual_corpus.py's)."""
    global LEGIT, SHAPES
    LEGIT = list(dict.fromkeys(r["label"] for r in corpus if not r["loop"]))
    SHAPES = list(dict.fromkeys(r["label"] for r in corpus if r["loop"]))


def score(corpus, res):
    rows = {}
    for label in LEGIT:
        sel = [(r, x) for r, x in zip(corpus, res) if r["label"] == label]
        fp = [r["id"] for r, x in sel if x["stopped"]]
        rows[label] = {"n": len(sel), "false_positives": len(fp), "ids": fp}
    for shape in SHAPES:
        sel = [(r, x) for r, x in zip(corpus, res) if r["label"] == shape]
        caught, delays, early, late, missed = 0, [], [], [], []
        for r, x in sel:
            if not x["stopped"]:
                missed.append(r["id"])
                continue
            d = x["at_words"] - r["onset_words"]
            if d < 0:
                early.append(r["id"])
            elif d > r["budget_words"]:
                late.append(r["id"])
            else:
                caught += 1
                delays.append(d)
        rows[shape] = {"n": len(sel), "caught": caught, "median_delay_words": statistics.median(delays) if delays
                       else None, "before_onset": early, "late": late, "missed": missed}
    return rows


def table(results, passes):
    head = "| | " + " | ".join(passes) + " |\n|---|" + "---|" * len(passes) + "\n"
    out = "Loops caught within the budget (recall), median delay in words after the onset:\n\n" + head
    for shape in SHAPES:
        cells = []
        for p in passes:
            s = results[p][shape]
            d = s["median_delay_words"]
            cells.append(f"{s['caught']}/{s['n']}" + (f", {d:g} w" if d is not None else ""))
        out += f"| {shape} | " + " | ".join(cells) + " |\n"
    out += "\nFalse positives (legitimate excerpts stopped):\n\n" + head
    tot = {p: [0, 0] for p in passes}
    for label in LEGIT:
        cells = []
        for p in passes:
            s = results[p][label]
            tot[p][0] += s["false_positives"]
            tot[p][1] += s["n"]
            cells.append(f"{s['false_positives']}/{s['n']}")
        out += f"| {label} | " + " | ".join(cells) + " |\n"
    out += "| all | " + " | ".join(f"{a}/{b} = {100 * a / b:.1f}%" for a, b in tot.values()) + " |\n"
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--passes", default="tokens,logprobs,text,vllm")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--usage", action="store_true")
    ap.add_argument("--guard", default="stop", help="the policy of every pass (e.g. stop:loop,near_loop,...)")
    ap.add_argument("--scan-flags", default="", help="extra `coda scan` flags for the tokens and pieces passes")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    corpus = [json.loads(l) for l in open(a.corpus, encoding="utf-8")]
    passes = a.passes.split(",")
    labels_of(corpus)
    gguf, toks = token_texts(a.coda, corpus, a.out)
    texts = {r["id"]: pieces for r, (_, pieces) in zip(corpus, toks)}
    results, raw = {}, {}
    for p in passes:
        t0 = time.time()
        if p == "tokens":
            res = scan_pass(a.coda, corpus, a.out, ["--guard", a.guard, "--vocab", gguf] + a.scan_flags.split(), texts)
        elif p == "pieces":
            res = scan_pass(a.coda, corpus, a.out, ["--guard", a.guard, "--pieces"] + a.scan_flags.split())
        elif p == "logprobs":
            res = proxy_pass(a.coda, corpus, texts, False, a.usage, a.jobs, a.guard)
        elif p == "text":
            res = proxy_pass(a.coda, corpus, texts, True, a.usage, a.jobs, a.guard)
        elif p == "vllm":
            res = vllm_pass(corpus, toks)
        else:
            raise SystemExit(f"unknown pass {p}")
        raw[p] = res
        results[p] = score(corpus, res)
        print(f"{p}: {time.time() - t0:.0f} s", file=sys.stderr)
    md = table(results, passes)
    print(md)
    with open(os.path.join(a.out, "realtext.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, "realtext.json"), "w") as f:
        json.dump({"summary": results, "runs": {p: [dict(id=r["id"], **x) for r, x in zip(corpus, raw[p])]
                                                 for p in passes}}, f, indent=1)


if __name__ == "__main__":
    main()
