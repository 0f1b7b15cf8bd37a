#!/usr/bin/python3
"""coda serve over real HTTP on loopback: the API, its errors, streaming, and a bounded fault and
load test (concurrent streams on the bundled model and on a random-weight synthetic model, random
disconnects, oversized and malformed bodies, invalid parameters, a flood beyond the queue bound).
Afterwards every accepted request must have a complete, well-formed answer or a proper error, the
KV usage gauge must be back to zero and /health must be ok.

Usage: /usr/bin/python3 tests/server/test_server.py build/coda WORK_DIR
"""
import http.client
import json
import os
import random
import re
import socket
import subprocess
import tempfile
import sys
import threading
import time

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


class SseParser:
    """Server-Sent Events by the WHATWG specification: lines end in CRLF, LF or CR; a line starting
    with ':' is a comment (coda's keep-alive `: waiting`); `field:value` drops one leading space from
    the value; several `data` lines join with LF; a blank line dispatches the event, if it has data.
    feed() returns the data of each event completed by the bytes given. Invalid UTF-8 raises."""

    def __init__(self):
        self.buf = b""
        self.data = []

    def feed(self, chunk):
        self.buf += chunk
        out = []
        while True:
            i = min((k for k in (self.buf.find(b"\r"), self.buf.find(b"\n")) if k >= 0), default=-1)
            if i < 0:
                return out
            if self.buf[i:i + 1] == b"\r" and i + 1 == len(self.buf):
                return out  # a CR at the end may be the first half of CRLF: wait for the next byte
            line = self.buf[:i].decode("utf-8")
            self.buf = self.buf[i + (2 if self.buf[i:i + 2] == b"\r\n" else 1):]
            if line == "":
                if self.data:
                    out.append("\n".join(self.data))
                self.data = []
            elif line.startswith(":"):
                continue
            else:
                field, _, value = line.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if field == "data":
                    self.data.append(value)


def sse_parser_tests():
    """The parser against the specification's own examples and coda's keep-alive comments."""
    def parse(raw, step=None):
        p, out = SseParser(), []
        step = step or len(raw)
        for k in range(0, len(raw), step):
            out += p.feed(raw[k:k + step])
        return out
    check(parse(b": waiting\n\ndata: {}\n\n") == ["{}"], "SSE: a comment is not an event")
    check(parse(b"data:x\n\n") == ["x"], "SSE: no space after the colon")
    check(parse(b"data:  x\n\n") == [" x"], "SSE: only one leading space is dropped")
    check(parse(b"data: YHOO\ndata: +2\ndata: 10\n\n") == ["YHOO\n+2\n10"], "SSE: data lines join with LF")
    check(parse(b"event: add\nid: 7\ndata: 73857293\r\n\r\n") == ["73857293"], "SSE: other fields, CRLF")
    check(parse(b"data: a\r\rdata: b\n\n") == ["a", "b"], "SSE: CR line ends")
    check(parse(b"data\n\ndata\ndata\n\ndata:\n\n") == ["", "\n", ""], "SSE: fields without a colon")
    check(parse(b"event: x\n\n") == [], "SSE: an event without data is not dispatched")
    raw = b": waiting\r\n\r\ndata: {\"a\": 1}\r\n\r\n: waiting\n\ndata: [DONE]\r\n\r\n"
    check(all(parse(raw, k) == ['{"a": 1}', "[DONE]"] for k in (1, 2, 3, 7)), "SSE: any split of the bytes")


class Server:
    def __init__(self, coda, *args, env=None):
        self.proc = subprocess.Popen([coda, "serve", "--port", "0", "-t", "1", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError("server did not start: " + line + self.proc.stderr.read())
        self.port = int(line.strip().rsplit(":", 1)[1])

    def request(self, method, path, body=None, headers=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r.status, dict(r.getheaders()), raw

    def json(self, method, path, body=None, headers=None):
        status, hdrs, raw = self.request(method, path, body, headers)
        return status, hdrs, json.loads(raw.decode("utf-8"))

    def stream(self, path, body, disconnect_after=None):
        """Returns (status, events, done) where events are the JSON payloads of the stream's events."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raw = r.read()
            c.close()
            return r.status, [json.loads(raw)], False
        events, done = [], False
        parser = SseParser()
        while True:
            chunk = r.read1(4096) if hasattr(r, "read1") else r.read(1)
            if not chunk:
                break
            for data in parser.feed(chunk):
                if data == "[DONE]":
                    done = True
                else:
                    events.append(json.loads(data))
            if disconnect_after is not None and len(events) >= disconnect_after:
                c.sock.shutdown(socket.SHUT_RDWR)
                c.close()
                return 200, events, False
        c.close()
        return 200, events, done

    def wait_for(self, what, cond, deadline_s=120):
        """Polls /metrics until cond(metric) holds; the deadline only bounds a hang, it decides nothing."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if cond(self.metric):
                return True
            time.sleep(0.02)
        check(False, f"condition never held within {deadline_s} s: {what}")
        return False

    def metric(self, name):
        """A sample's value by its exact name, labels included: 'coda:x' or 'coda:x_bucket{le="1"}'."""
        _, _, raw = self.request("GET", "/metrics")
        for line in raw.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def admin(self, action):
        st, _, body = self.json("POST", "/admin/" + action)
        check(st == 200 and body["paused"] == (action == "pause"), f"/admin/{action} -> {st} {body}")
        return body

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return self.proc.stderr.read()


def api_tests(s):
    status, events, _ = s.stream("/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True})
    ids = {e.get("id") for e in events}
    check(status == 200 and len(ids) == 1 and re.fullmatch(r"cmpl-[0-9a-f]{32}", ids.pop() or "") is not None,
          f"a stream's chunks share one id, from the new X-Request-Id: {events[:2]}")
    st, _, body = s.json("GET", "/health")
    check(st == 200 and body == {"status": "ok"}, "/health")
    st, _, body = s.json("GET", "/v1/models")
    check(st == 200 and body["data"][0]["id"] == "coda" and body["object"] == "list", "/v1/models")
    st, _, one = s.json("GET", "/v1/models/coda")
    check(st == 200 and one == body["data"][0], f"/v1/models/coda is the listed model (OpenAI's retrieve): {one}")
    st, _, err = s.json("GET", "/v1/models/gpt-4o")
    check(st == 404 and err["error"]["code"] == "model_not_found" and "serves `coda`" in err["error"]["message"],
          f"/v1/models/gpt-4o: 404 model_not_found, naming what is served: {err}")
    # Completion, greedy: the bundled model's reference continuation.
    st, _, body = s.json("POST", "/v1/completions", {"model": "coda", "prompt": "In the beginning God",
                                                     "max_tokens": 12, "temperature": 0})
    check(st == 200 and body["choices"][0]["text"].startswith(" of Israel, and the LORD God"), f"completion {body}")
    check(body.get("usage", {}).get("completion_tokens") == 12 and body["choices"][0]["finish_reason"] == "length",
          "completion usage")
    check("coda" in body and "events" in body["coda"], "completion carries the guard report")
    # Chat with logprobs.
    st, _, body = s.json("POST", "/v1/chat/completions", {
        "model": "coda", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0,
        "logprobs": True, "top_logprobs": 3})
    check(st == 200 and body["object"] == "chat.completion", f"chat {body}")
    lp = body["choices"][0]["logprobs"]["content"]
    check(len(lp) == body["usage"]["completion_tokens"] and len(lp[0]["top_logprobs"]) == 3, "chat logprobs")
    # Seeds reproduce.
    req = {"prompt": "The king said", "max_tokens": 20, "temperature": 1.0, "seed": 7}
    a = s.json("POST", "/v1/completions", req)[2]["choices"][0]["text"]
    b = s.json("POST", "/v1/completions", req)[2]["choices"][0]["text"]
    check(a == b, "same seed, same text")
    # Streaming with usage; concatenated deltas equal the non-streamed text.
    req = {"messages": [{"role": "user", "content": "Tell me"}], "max_tokens": 30, "temperature": 0.8, "seed": 3}
    full = s.json("POST", "/v1/chat/completions", req)[2]["choices"][0]["message"]["content"]
    st, events, done = s.stream("/v1/chat/completions", {**req, "stream": True,
                                                          "stream_options": {"include_usage": True}})
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e.get("choices"))
    check(done and text == full, f"stream equals non-stream: {text!r} vs {full!r}")
    check(events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] > 0, "stream usage chunk")
    check(events[0]["choices"][0]["delta"].get("role") == "assistant", "first chunk has the role")
    # A seed reproduces a request whatever else runs: alone, and batched with others.
    reqs = [{"prompt": p, "max_tokens": 40, "temperature": 0.9, "seed": i, "ignore_eos": True}
            for i, p in enumerate(["And the king", "La vita", "In the beginning", "Il tempo"])]
    alone = [s.json("POST", "/v1/completions", q)[2]["choices"][0]["text"] for q in reqs]
    together = [None] * len(reqs)

    def run(i):
        together[i] = s.json("POST", "/v1/completions", reqs[i])[2]["choices"][0]["text"]

    # Paused, the four queue up; resumed, the worker admits all four into one batch.
    s.admin("pause")
    batched_before = s.metric('coda:iteration_sequences_bucket{le="2"}')
    steps_before = s.metric("coda:iteration_sequences_count")
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs))]
    for t in ts:
        t.start()
    s.wait_for("four requests queued", lambda m: m("coda:num_requests_waiting") == len(reqs))
    s.admin("resume")
    for t in ts:
        t.join()
    check(alone == together, "seeded requests give the same text alone and batched")
    # Steps with 3 or 4 sequences happened: those in buckets above le=2.
    steps = s.metric("coda:iteration_sequences_count") - steps_before
    batched = steps - (s.metric('coda:iteration_sequences_bucket{le="2"}') - batched_before)
    check(batched > 0, f"the four seeded requests ran batched ({batched} of {steps} steps had 3-4 sequences)")
    # The guard through the API: a greedy loop stopped with finish_reason "repetition".
    st, _, body = s.json("POST", "/v1/completions", {"prompt": "In the beginning God", "max_tokens": 300,
                                                     "temperature": 0, "coda": {"guard": "stop"}})
    check(body["choices"][0]["finish_reason"] == "repetition", f"guard stop: {body['choices'][0]['finish_reason']}")
    st, _, body = s.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 5, "coda": {"trace": True}})
    check(st == 200 and len(body["coda"]["trace"]) == body["usage"]["completion_tokens"], "coda.trace")
    # Errors in OpenAI's shape with the right status.
    cases = [
        ("POST", "/v1/completions", {"prompt": "x", "temperature": 5}, 400, "temperature"),
        ("POST", "/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
        ("POST", "/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ("POST", "/v1/completions", {"prompt": "x", "n": 0}, 400, "n"),
        ("POST", "/v1/completions", {"prompt": "x", "n": 129}, 400, "n"),
        ("POST", "/v1/completions", {"prompt": ["x"] * 65, "n": 2}, 400, "n"),
        ("POST", "/v1/completions", {"prompt": "x", "n": 2, "stream": True}, 400, "n"),
        ("POST", "/v1/completions", {"prompt": ["x", [1, 2]]}, 400, "prompt"),
        ("POST", "/v1/completions", {"prompt": ["x", ""]}, 400, "prompt"),
        ("POST", "/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
        ("POST", "/v1/completions", {"prompt": "x", "stop": 5}, 400, "stop"),
        ("POST", "/v1/completions", {"prompt": "x", "logit_bias": {"abc": 1}}, 400, "logit_bias"),
        ("POST", "/v1/completions", {"prompt": "def f(", "suffix": "    return x"}, 400, "suffix"),
        ("POST", "/v1/completions", {"prompt": "x", "best_of": 3}, 400, "best_of"),
        ("POST", "/v1/completions", {"prompt": ""}, 400, "prompt"),
        ("POST", "/v1/completions", {}, 400, "prompt"),
        ("POST", "/v1/completions", {"prompt": "x", "max_tokens": 5000}, 400, "prompt"),
        ("POST", "/v1/chat/completions", {"messages": []}, 400, "messages"),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, 400,
         "top_logprobs"),
        ("POST", "/v1/completions", {"model": "gpt-4", "prompt": "x"}, 404, "model"),
        ("GET", "/v1/nothing", None, 404, None),
        ("POST", "/v1/completions", b"{not json", 400, None),
        ("POST", "/v1/completions", b"[1, 2]", 400, None),
    ]
    for method, path, body, status, param in cases:
        st, _, raw = s.request(method, path, body)
        try:
            err = json.loads(raw)["error"]
            ok = st == status and isinstance(err["message"], str) and "type" in err and (param is None or
                                                                                        err["param"] == param)
        except (ValueError, KeyError, TypeError):
            ok = False
        check(ok, f"{method} {path} {body!r:.60} -> {st} {raw[:200]!r}")
    # n > 1 and batches of prompts: choice i of n is the request with seed + i, and each prompt of a
    # batch gets what it gets alone; usage counts each prompt once.
    one = lambda body: s.json("POST", "/v1/completions", body)[2]
    st, _, body = s.json("POST", "/v1/completions", {"prompt": "And Moses", "max_tokens": 6, "temperature": 1.0,
                                                     "seed": 40, "n": 3})
    alone = [one({"prompt": "And Moses", "max_tokens": 6, "temperature": 1.0, "seed": 40 + i}) for i in range(3)]
    check(st == 200 and [c["index"] for c in body["choices"]] == [0, 1, 2]
          and [c["text"] for c in body["choices"]] == [a["choices"][0]["text"] for a in alone],
          "n = 3: choice i is the request with seed + i")
    check(body["usage"]["prompt_tokens"] == alone[0]["usage"]["prompt_tokens"]
          and body["usage"]["completion_tokens"] == sum(a["usage"]["completion_tokens"] for a in alone)
          and all("policy" in c["coda"] for c in body["choices"]), "n = 3: usage and a guard report per choice")
    prompts = ["In the beginning God", "And Moses"]
    st, _, body = s.json("POST", "/v1/completions", {"prompt": prompts, "max_tokens": 5, "temperature": 0})
    alone = [one({"prompt": p, "max_tokens": 5, "temperature": 0}) for p in prompts]
    check(st == 200 and [c["text"] for c in body["choices"]] == [a["choices"][0]["text"] for a in alone]
          and body["usage"]["prompt_tokens"] == sum(a["usage"]["prompt_tokens"] for a in alone),
          "a batch of two prompts: each choice is its prompt's greedy text")
    st, _, raw = s.request("POST", "/v1/completions", b"x" * (9 << 20))
    check(st == 413 and b"error" in raw, f"oversized body -> {st}")
    # JSON sent as a form (curl -d without -H): readable while small, and past cpp-httplib's 8 KiB
    # form limit a 413 that names the header to send, not the --max-body limit it did not reach.
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    small = json.dumps({"prompt": "Hi", "max_tokens": 2}).encode()
    st, _, _ = s.request("POST", "/v1/completions", small, headers=form)
    check(st == 200, f"a small JSON body sent as a form is read -> {st}")
    big = json.dumps({"prompt": "Hi " * 4000, "max_tokens": 2}).encode()
    st, _, raw = s.request("POST", "/v1/completions", big, headers=form)
    check(st == 413 and b"Content-Type: application/json" in raw,
          f"a 12 KB JSON body sent as a form -> {st}, the message says what to send: {raw[:140]!r}")
    # Unknown fields are ignored, like OpenAI does.
    st, _, body = s.json("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2, "frobnicate": {"x": 1},
                                                     "user": "u1"})
    check(st == 200, "unknown fields ignored")


def burst_tests(s):
    """100 connections at once, each answered: the listen backlog must hold a burst (cpp-httplib's
    default of 5 reset some connections before a response)."""
    results = []

    def one():
        try:
            results.append(s.request("GET", "/health")[0])
        except Exception as e:  # noqa: BLE001 - a reset connection is the failure looked for
            results.append(repr(e))

    ts = [threading.Thread(target=one) for _ in range(100)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(results.count(200) == 100, f"a burst of 100 connections all answered: {[r for r in results if r != 200][:3]}")


def prefix_cache_tests(s):
    """A shared system prompt is prefilled once: the second request copies its KV (usage reports it as
    prompt_tokens_details.cached_tokens) and gets exactly the logprobs of the cold run; a chat's next
    turn reuses the previous turn's prompt and reply; the metrics count the tokens."""
    system = ("You are the archivist of a small library. " * 3 +
              "Answer in one sentence, and cite the shelf. " * 2 + f"Session {os.getpid()}.")

    def chat(messages):
        st, _, body = s.json("POST", "/v1/chat/completions", {"messages": messages, "max_tokens": 8, "temperature": 0,
                                                              "logprobs": True, "top_logprobs": 2})
        check(st == 200, f"prefix cache request -> {st} {body}")
        return body

    hits0 = s.metric("coda:prefix_cache_hits_total")
    queries0 = s.metric("coda:prefix_cache_queries_total")
    check(hits0 is not None and queries0 is not None, "prefix cache counters are exported from the start")
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Where is the atlas?"}]
    cold, warm = chat(msgs), chat(msgs)
    n = cold["usage"]["prompt_tokens"]
    c0 = cold["usage"]["prompt_tokens_details"]["cached_tokens"]
    # Earlier chats share at most the template's opening tokens with this system prompt.
    check(c0 < 16, f"first request is cold but for the template's opening: {cold['usage']}")
    cached = warm["usage"]["prompt_tokens_details"]["cached_tokens"]
    # Its prompt's whole 16-token blocks; the reply's few tokens are not worth a second snapshot
    # (PrefixCache::kMinExtension), so the blocks the reply completed are not there.
    check(cached == min(n // 16 * 16, n - 1), f"second request reuses the prompt's whole blocks: {n} {cached}")
    check(warm["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]
          and warm["choices"][0]["logprobs"] == cold["choices"][0]["logprobs"],
          "a prefix-cache hit gives exactly the logprobs of the cold run")
    other = chat([msgs[0], {"role": "user", "content": "And the dictionaries?"}])
    c2 = other["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(0 < c2 < other["usage"]["prompt_tokens"], f"a new question after the same system prompt hits its prefix: {c2}")
    turn2 = chat(msgs + [{"role": "assistant", "content": cold["choices"][0]["message"]["content"]},
                         {"role": "user", "content": "Thanks. Which floor?"}])
    c3 = turn2["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(c3 >= n - 16, f"a chat's next turn reuses the previous turn: {c3} of {turn2['usage']['prompt_tokens']}")
    hits = s.metric("coda:prefix_cache_hits_total") - hits0
    queries = s.metric("coda:prefix_cache_queries_total") - queries0
    prompts = sum(b["usage"]["prompt_tokens"] for b in (cold, warm, other, turn2))
    check(hits == c0 + cached + c2 + c3 and queries == prompts, f"prefix cache metrics: hits {hits} "
          f"queries {queries} (expected {c0 + cached + c2 + c3} and {prompts})")
    check(s.metric("coda:prefix_cache_tokens") > 0, "the gauge shows the cached positions")


def no_prefix_cache_tests(coda):
    s = Server(coda, "--no-prefix-cache")
    try:
        body = {"prompt": "The library opens at nine. " * 8, "max_tokens": 2, "temperature": 0}
        for _ in range(2):
            st, _, r = s.json("POST", "/v1/completions", body)
            check(st == 200 and r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
                  f"--no-prefix-cache: nothing is reused: {r.get('usage')}")
        check(s.metric("coda:prefix_cache_hits_total") is None, "--no-prefix-cache: no prefix cache metrics")
    finally:
        err = s.stop()
        check("Sanitizer" not in err and "runtime error" not in err, "server stderr clean: " + err[-300:])


def other_engines_flag_tests(coda):
    """vLLM's and llama-server's spellings of serve's flags, so that their command lines run."""
    s = Server(coda, "--max-model-len", "1024", "--parallel", "2", "--no-enable-prefix-caching", "--jinja")
    try:
        st, _, models = s.json("GET", "/v1/models")
        check(st == 200 and models["data"][0]["max_model_len"] == 1024, f"--max-model-len 1024: {models}")
        body = {"prompt": "The library opens at nine. " * 8, "max_tokens": 2, "temperature": 0}
        for _ in range(2):
            st, _, r = s.json("POST", "/v1/completions", body)
        check(st == 200 and r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
              f"--no-enable-prefix-caching: nothing is reused: {r.get('usage')}")
    finally:
        err = s.stop()
        check("Sanitizer" not in err and "runtime error" not in err, "server stderr clean: " + err[-300:])
    s = Server(coda, "--enable-prefix-caching")
    s.stop()
    # llama-server's --slots is accepted (GET /slots is served anyway); --no-slots turns it off.
    s = Server(coda, "--slots")
    st_on = s.request("GET", "/slots")[0]
    s.stop()
    s = Server(coda, "--no-slots")
    try:
        st, _, e = s.json("GET", "/slots")
        check(st_on == 200 and st == 501 and "--no-slots" in e["error"]["message"], f"--slots {st_on}, --no-slots {st}")
    finally:
        s.stop()
    # `vllm serve MODEL`: the model file as the first argument.
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "coda-tiny-en-it-f16.gguf")
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "positional.gguf")  # another path than the default model's
        os.symlink(os.path.abspath(bundled), model)
        # After older llama.cpp's value-less -fa, which must not take the model for its value.
        s = Server(coda, "-fa", model, "--served-model-name", "tiny")
        try:
            st, _, models = s.json("GET", "/v1/models")
            check(st == 200 and models["data"][0]["id"] == "tiny", f"coda serve MODEL (vLLM's form): {models}")
        finally:
            err = s.stop()
    check("positional.gguf" in err, "the positional model is the one loaded: " + err[:200])
    # A llama-server line as its users write it: several-letter short options (-np, -ctk, -ngl, ...),
    # GPU flags that a CPU engine notes and goes on without, -a for the model id, -n for max_tokens.
    s = Server(coda, "-c", "1024", "-np", "2", "-ngl", "99", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-cb",
               "-a", "acme/local-llama", "-to", "60", "-n", "24")
    try:
        st, _, models = s.json("GET", "/v1/models")
        check(st == 200 and models["data"][0]["id"] == "acme/local-llama" and
              models["data"][0]["max_model_len"] == 1024,
              f"llama-server flags: -a names the model, -c sizes the context: {models}")
        st, _, one = s.json("GET", "/v1/models/acme/local-llama")
        check(st == 200 and one.get("id") == "acme/local-llama", f"/v1/models/ORG/NAME: an id with a slash: {one}")
        st, _, r = s.json("POST", "/v1/completions", {"model": "acme/local-llama", "prompt": "Once upon a time",
                                                      "ignore_eos": True, "coda": {"guard": "observe"}})
        check(st == 200 and r["usage"]["completion_tokens"] == 24 and r["choices"][0]["finish_reason"] == "length",
              f"llama-server's -n 24 is the max_tokens of requests that omit it: {r.get('usage')}")
    finally:
        err = s.stop()
    check("keys q8_0, values q8_0" in err and "batches of up to 2 sequences" in err,
          "-ctk/-ctv q8_0 and -np 2 reach the engine: " + err[:600])
    check("--n-gpu-layers 99 ignored: coda runs every layer on the CPU" in err, "-ngl 99 is noted: " + err[:300])
    check("Sanitizer" not in err and "runtime error" not in err, "server stderr clean: " + err[-300:])


def non_stream_disconnect_tests(coda):
    """A non-streaming client that leaves is noticed though nothing is written to it: its generation
    ends as "abort" instead of running to max_tokens, and so do the choices of an n=2 request (one
    running, one queued behind it with --max-num-seqs 1). The generations are 16,000 tokens long,
    so none of them can end on its own while the test closes its socket."""
    s = Server(coda, "-c", "16384", "--max-num-seqs", "1")
    try:
        for n, what in ((1, "one non-streaming request"), (2, "n=2, one choice queued")):
            aborts = s.metric('coda:request_success_total{finished_reason="abort"}')
            body = json.dumps({"prompt": "Once upon a time", "max_tokens": 16000, "ignore_eos": True, "n": n,
                               "coda": {"guard": "observe"}}).encode()
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            s.wait_for(f"{what}: running", lambda m: m("coda:num_requests_running") == 1 and
                       m("coda:num_requests_waiting") == n - 1)
            c.close()
            s.wait_for(f"{what}: idle after the client left", lambda m: m("coda:num_requests_running") == 0 and
                       m("coda:num_requests_waiting") == 0)
            check(s.metric('coda:request_success_total{finished_reason="abort"}') == aborts + n and
                  s.metric('coda:request_success_total{finished_reason="length"}') == 0,
                  f"{what}: the client left, the generation was aborted")
    finally:
        err = s.stop()
        check("Sanitizer" not in err and "runtime error" not in err, "server stderr clean: " + err[-300:])


def tls_serve_tests(coda):
    """coda serve on https with vLLM's --ssl-certfile/--ssl-keyfile (a self-signed test certificate)."""
    import ssl
    tls = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tls")
    cert, key = os.path.join(tls, "cert.pem"), os.path.join(tls, "key.pem")
    s = Server(coda, "--ssl-certfile", cert, "--ssl-keyfile", key)
    try:
        c = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=120,
                                        context=ssl.create_default_context(cafile=cert))
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "In the beginning God", "max_tokens": 4,
                                                             "temperature": 0}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        body = json.loads(r.read())
        check(r.status == 200 and body["choices"][0]["text"].startswith(" of Israel"), f"https serve: {body}")
    finally:
        err = s.stop()
        check("Sanitizer" not in err and "runtime error" not in err, "server stderr clean: " + err[-300:])


def auth_tests(coda):
    s = Server(coda, "--api-key", "sekret")
    try:
        st, _, body = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
        check(st == 401 and body["error"]["code"] == "invalid_api_key", "missing key -> 401")
        st, _, body = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1},
                             {"Authorization": "Bearer wrong"})
        check(st == 401, "wrong key -> 401")
        st, _, _ = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1},
                          {"Authorization": "Bearer sekret"})
        check(st == 200, "right key -> 200")
        st, _, _ = s.json("GET", "/health")
        check(st == 200, "/health needs no key")
        st, _, _ = s.json("POST", "/tokenize", {"prompt": "x"})
        check(st == 401, "/tokenize needs the key")
        for path in ("/completion", "/completions"):
            st, _, _ = s.json("POST", path, {"prompt": "x", "n_predict": 1})
            st2, _, _ = s.json("POST", path, {"prompt": "x", "n_predict": 1}, {"Authorization": "Bearer sekret"})
            check(st == 401 and st2 == 200, f"llama-server's {path} needs the key: {st} {st2}")
        st, _, _ = s.json("GET", "/props")
        check(st == 401, "/props needs the key")
        st, _, body = s.json("GET", "/version")
        check(st == 200 and body.get("version"), "/version needs no key")
        # X-Request-Id comes back as sent (vLLM's habit), on refusals too; without one, a new one.
        st, hdrs, body = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1},
                                {"Authorization": "Bearer sekret", "X-Request-Id": "trace-7"})
        check(st == 200 and hdrs.get("X-Request-Id") == "trace-7", f"X-Request-Id echoed: {hdrs.get('X-Request-Id')}")
        check(body.get("id") == "cmpl-trace-7", f"the answer's id is built from X-Request-Id, as vLLM builds it: {body}")
        st, hdrs, body = s.json("POST", "/v1/chat/completions",
                                {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1},
                                {"Authorization": "Bearer sekret"})
        rid = hdrs.get("X-Request-Id", "")
        check(st == 200 and re.fullmatch(r"[0-9a-f]{32}", rid) is not None and body.get("id") == "chatcmpl-" + rid,
              f"without X-Request-Id, the new one names the answer too: {rid} {body.get('id')}")
        st, hdrs, _ = s.json("POST", "/v1/completions", {"prompt": "x"}, {"X-Request-Id": "trace-8"})
        check(st == 401 and hdrs.get("X-Request-Id") == "trace-8", "X-Request-Id on a 401")
        st, hdrs, _ = s.json("GET", "/health")
        check(re.fullmatch(r"[0-9a-f]{32}", hdrs.get("X-Request-Id", "")) is not None,
              f"a new X-Request-Id: {hdrs.get('X-Request-Id')}")
        st, hdrs, _ = s.json("GET", "/health", headers={"X-Request-Id": "x" * 200})
        check(re.fullmatch(r"[0-9a-f]{32}", hdrs.get("X-Request-Id", "")) is not None,
              "an X-Request-Id over 128 characters is replaced, not echoed")
    finally:
        err = s.stop()
        check("Sanitizer" not in err and "runtime error" not in err, "auth server stderr clean: " + err[-300:])
    # Several keys (a new one live before the old one is retired), from the flag and from a file.
    with tempfile.TemporaryDirectory() as d:
        key_file = os.path.join(d, "keys")
        with open(key_file, "w") as f:
            f.write("# rotated monthly\n\n  from-file  \n")
        s = Server(coda, "--api-key", "old-key,new-key", "--api-key", "third", "--api-key-file", key_file)
        try:
            body = {"prompt": "x", "max_tokens": 1}
            for key in ("old-key", "new-key", "third", "from-file"):
                st, _, _ = s.json("POST", "/v1/completions", body, {"Authorization": "Bearer " + key})
                check(st == 200, "key %s -> 200" % key)
            st, _, _ = s.json("POST", "/v1/completions", body, {"Authorization": "bearer new-key"})
            check(st == 200, "the Bearer scheme in any case (RFC 6750) -> 200")
            for wrong in ("new-ke", "new-keyy", "old-key,new-key", "# rotated monthly", ""):
                st, _, _ = s.json("POST", "/v1/completions", body, {"Authorization": "Bearer " + wrong})
                check(st == 401, "near miss %r -> 401" % wrong)
            st, _, _ = s.json("POST", "/v1/completions", body, {"Authorization": "Basic new-key"})
            check(st == 401, "another scheme -> 401")
        finally:
            err = s.stop()
            check("Sanitizer" not in err and "runtime error" not in err, "key file server stderr clean: " + err[-300:])
            check("/v1/* needs an API key (4 keys)" in err, "the start says how many keys guard the server")
        # $CODA_API_KEY when no flag names a key.
        env_nokey = {k: v for k, v in os.environ.items() if k != "CODA_API_KEY"}
        env = dict(env_nokey, CODA_API_KEY="from-env")
        s = Server(coda, env=env)
        try:
            st, _, _ = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
            check(st == 401, "CODA_API_KEY guards the server")
            st, _, _ = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1},
                              {"Authorization": "Bearer from-env"})
            check(st == 200, "CODA_API_KEY's key -> 200")
        finally:
            s.stop()
        # Beyond loopback without a key: a warning at start.
        s = Server(coda, "--host", "0.0.0.0", env=env_nokey)
        err = s.stop()
        check("warning: listening on 0.0.0.0 without an API key" in err, "no key beyond loopback warns: " + err[-300:])
        # Bad key sources are refused at start with a message that names them.
        empty = os.path.join(d, "empty")
        with open(empty, "w") as f:
            f.write("# nothing yet\n")
        for args, says in ((["--api-key-file", os.path.join(d, "missing")], "cannot read"),
                           (["--api-key-file", empty], "holds no key"),
                           (["--api-key", ""], "an empty key"),
                           (["--api-key", "two words"], "space or a control character")):
            r = subprocess.run([coda, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=60)
            check(r.returncode != 0 and says in r.stderr, "serve %s refused: %s" % (" ".join(args), r.stderr.strip()))


def tokenizer_tests(s):
    """POST /tokenize and /detokenize in vLLM's and llama.cpp's shapes. The counts must equal the
    prompt_tokens that a generation of the same prompt reports (the generation path's own count)."""
    text = "In the beginning God created the heaven"
    st, _, t = s.json("POST", "/tokenize", {"prompt": text})
    _, _, gen = s.json("POST", "/v1/completions", {"prompt": text, "max_tokens": 1})
    _, _, models = s.json("GET", "/v1/models")
    check(st == 200 and t["count"] == len(t["tokens"]) == gen["usage"]["prompt_tokens"]
          and t["max_model_len"] == models["data"][0]["max_model_len"], f"tokenize a prompt: {t}")
    st, _, plain = s.json("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})
    check(st == 200 and plain["tokens"] == t["tokens"][1:], f"add_special_tokens false drops the BOS: {plain}")
    st, _, lc = s.json("POST", "/tokenize", {"content": text, "with_pieces": True})  # llama.cpp's names
    check(st == 200 and lc["tokens"] == plain["tokens"] and len(lc["token_strs"]) == len(lc["tokens"]),
          f"llama.cpp's shape: {lc}")
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who made the heaven?"}]
    st, _, ct = s.json("POST", "/tokenize", {"messages": msgs})
    _, _, cgen = s.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 1})
    check(st == 200 and ct["count"] == cgen["usage"]["prompt_tokens"], f"tokenize messages: {ct['count']} vs {cgen['usage']}")
    # OpenAI's "developer" role (its newer name for "system") renders as the system message it is;
    # the bundled model's template refuses any role it does not know.
    dev = [dict(msgs[0], role="developer"), msgs[1]]
    st, _, dt = s.json("POST", "/tokenize", {"messages": dev})
    st2, _, dgen = s.json("POST", "/v1/chat/completions", {"messages": dev, "max_tokens": 1})
    check(st == 200 and dt["tokens"] == ct["tokens"] and st2 == 200,
          f"a developer message is a system message: {st} {st2} {dgen if st2 != 200 else ''}")
    # The conversation continued: a final assistant message adds its tokens.
    st, _, more = s.json("POST", "/tokenize", {"messages": msgs + [{"role": "assistant", "content": "God did"}],
                                               "continue_final_message": True, "add_generation_prompt": False})
    check(st == 200 and more["count"] > ct["count"], f"continue_final_message counts the reply too: {more}")
    st, _, d = s.json("POST", "/detokenize", {"tokens": plain["tokens"]})
    check(st == 200 and d["prompt"] == text and d["content"] == text, f"detokenize: {d}")
    for body, param in (({"tokens": [5, -1]}, "tokens"), ({"tokens": [10 ** 9]}, "tokens"), ({"tokens": "x"}, "tokens")):
        st, _, e = s.json("POST", "/detokenize", body)
        check(st == 400 and e["error"]["param"] == param, f"detokenize {body}: {st} {e}")
    for body in ({}, {"prompt": 5}, {"prompt": "x", "add_special_tokens": "yes"}):
        st, _, e = s.json("POST", "/tokenize", body)
        check(st == 400 and e["error"]["message"], f"tokenize {body}: {st} {e}")
    st, _, raw = s.request("POST", "/tokenize", b"{not json")
    check(st == 400, f"tokenize bad JSON: {st}")
    st, _, v = s.json("GET", "/version")
    check(st == 200 and isinstance(v.get("version"), str) and v["version"], f"/version: {v}")


def vllm_sampling_field_tests(s):
    """vLLM's allowed_token_ids, return_tokens_as_token_ids and truncate_prompt_tokens. Each is
    checked against something the server computes another way: /tokenize and /detokenize, and the
    same prompt sent as token ids."""
    _, _, t = s.json("POST", "/tokenize", {"prompt": " Moses, the LORD said unto", "add_special_tokens": False})
    allowed = sorted(set(t["tokens"]))
    ids_of = lambda body: [int(x.split(":", 1)[1]) for x in body["choices"][0]["logprobs"]["tokens"]]  # noqa: E731
    base = {"prompt": "The king said", "max_tokens": 16, "temperature": 1.0, "seed": 3, "logprobs": 0,
            "return_tokens_as_token_ids": True}
    st, _, free = s.json("POST", "/v1/completions", base)
    check(st == 200 and not set(ids_of(free)) <= set(allowed),
          f"without allowed_token_ids the sample leaves the list (else the next check proves nothing): {free}")
    for temp in (1.0, 0):
        st, _, held = s.json("POST", "/v1/completions", dict(base, temperature=temp, allowed_token_ids=allowed))
        got = ids_of(held) if st == 200 else []
        check(st == 200 and len(got) == 16 and set(got) <= set(allowed),
              f"allowed_token_ids at temperature {temp}: every token from the list: {got} vs {allowed}")
    for bad in ([], [10 ** 9], [-1], "5", [1.5]):
        st, _, e = s.json("POST", "/v1/completions", dict(base, allowed_token_ids=bad))
        check(st == 400 and e["error"]["param"] == "allowed_token_ids", f"allowed_token_ids {bad!r}: {st} {e}")
    st, _, e = s.json("POST", "/v1/completions", dict(base, allowed_token_ids=allowed, guided_choice=["yes", "no"]))
    check(st == 400 and "structured output" in e["error"]["message"], f"allowed_token_ids with a format: {e}")
    # Token ids in logprobs: each id decodes to the text the plain response names, on both routes.
    plain = {"prompt": "In the beginning God", "max_tokens": 6, "temperature": 0, "logprobs": 2}
    _, _, a = s.json("POST", "/v1/completions", plain)
    _, _, b = s.json("POST", "/v1/completions", dict(plain, return_tokens_as_token_ids=True))
    joined = s.json("POST", "/detokenize", {"tokens": ids_of(b)})[2]["prompt"]
    tops = b["choices"][0]["logprobs"]["top_logprobs"]
    check(len(ids_of(b)) == 6 and joined.strip() == a["choices"][0]["text"].strip() == b["choices"][0]["text"].strip()
          and b["choices"][0]["logprobs"]["token_logprobs"] == a["choices"][0]["logprobs"]["token_logprobs"]
          and all(re.fullmatch(r"token_id:\d+", k) for top in tops for k in top) and all(len(top) == 2 for top in tops),
          f"return_tokens_as_token_ids on completions: the ids decode to the text: {joined!r} vs {a['choices'][0]}; {tops}")
    chat = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "temperature": 0, "logprobs": True,
            "top_logprobs": 2}
    _, _, ca = s.json("POST", "/v1/chat/completions", chat)
    _, _, cb = s.json("POST", "/v1/chat/completions", dict(chat, return_tokens_as_token_ids=True))
    la, lb = ca["choices"][0]["logprobs"]["content"], cb["choices"][0]["logprobs"]["content"]
    check(len(la) == len(lb) == 4 and all(re.fullmatch(r"token_id:\d+", e["token"]) and e["bytes"] == f["bytes"]
                                          and e["logprob"] == f["logprob"] for e, f in zip(lb, la)),
          f"return_tokens_as_token_ids on chat: {lb}")
    # truncate_prompt_tokens keeps the prompt's last K tokens: the same as sending those as ids.
    text = "In the beginning God created the heaven and the earth. And the earth was"
    _, _, full = s.json("POST", "/tokenize", {"prompt": text})
    req = {"max_tokens": 8, "temperature": 0}
    st, _, cut = s.json("POST", "/v1/completions", dict(req, prompt=text, truncate_prompt_tokens=5))
    _, _, ref = s.json("POST", "/v1/completions", dict(req, prompt=full["tokens"][-5:]))
    check(st == 200 and cut["usage"]["prompt_tokens"] == 5 and cut["choices"][0]["text"] == ref["choices"][0]["text"],
          f"truncate_prompt_tokens 5: {cut} vs {ref}")
    st, _, whole = s.json("POST", "/v1/completions", dict(req, prompt=text, truncate_prompt_tokens=-1))
    check(st == 200 and whole["usage"]["prompt_tokens"] == full["count"], f"-1 leaves a short prompt whole: {whole}")
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who made the heaven?"}]
    _, _, ct = s.json("POST", "/tokenize", {"messages": msgs})
    st, _, cc = s.json("POST", "/v1/chat/completions", dict(req, messages=msgs, truncate_prompt_tokens=6))
    _, _, cref = s.json("POST", "/v1/completions", dict(req, prompt=ct["tokens"][-6:]))
    check(st == 200 and cc["usage"]["prompt_tokens"] == 6 and cc["choices"][0]["message"]["content"] ==
          cref["choices"][0]["text"], f"truncate_prompt_tokens on chat: {cc} vs {cref}")
    _, _, models = s.json("GET", "/v1/models")
    ctx = models["data"][0]["max_model_len"]
    for k, word in ((0, "out of range"), (-2, "out of range"), (ctx + 1, "more than the context"), ("5", "number")):
        st, _, e = s.json("POST", "/v1/completions", dict(req, prompt=text, truncate_prompt_tokens=k))
        check(st == 400 and e["error"]["param"] == "truncate_prompt_tokens" and word in e["error"]["message"],
              f"truncate_prompt_tokens {k!r}: {st} {e}")
    st, _, e = s.json("POST", "/v1/completions", dict(req, prompt=text, truncate_prompt_tokens=5, echo=True))
    check(st == 400 and "echo" in e["error"]["message"], f"truncate_prompt_tokens with echo: {e}")
    # vLLM's stop_reason: the stop string, or the stop_token_ids id, that ended the text; null else.
    prompt = {"prompt": "In the beginning God", "max_tokens": 8, "temperature": 0}
    _, _, by_word = s.json("POST", "/v1/completions", dict(prompt, stop=["LORD"]))
    first_id = ids_of(s.json("POST", "/v1/completions", dict(prompt, logprobs=0, return_tokens_as_token_ids=True))[2])[1]
    _, _, by_id = s.json("POST", "/v1/completions", dict(prompt, stop_token_ids=[first_id]))
    _, _, by_length = s.json("POST", "/v1/completions", prompt)
    _, events, _ = s.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8,
                                                     "temperature": 0, "stop": ["\n"], "stream": True})
    last = [e for e in events if e.get("choices") and e["choices"][0].get("finish_reason")]
    check(by_word["choices"][0]["stop_reason"] == "LORD" and by_id["choices"][0]["stop_reason"] == first_id
          and by_length["choices"][0]["stop_reason"] is None and len(last) == 1
          and last[0]["choices"][0]["stop_reason"] == ("\n" if last[0]["choices"][0]["finish_reason"] == "stop" else None),
          f"stop_reason: {by_word['choices'][0]}, {by_id['choices'][0]}, {by_length['choices'][0]}, {last}")
    # skip_special_tokens false: control tokens come out as their text (forced here with logit_bias
    # onto the BOS token, which /tokenize names), streamed and not; by default they write nothing.
    _, _, bos = s.json("POST", "/tokenize", {"prompt": "x", "return_token_strs": True})
    force = {"prompt": "The king", "max_tokens": 3, "temperature": 0, "logit_bias": {str(bos["tokens"][0]): 100}}
    _, _, quiet = s.json("POST", "/v1/completions", force)
    _, _, loud = s.json("POST", "/v1/completions", dict(force, skip_special_tokens=False))
    _, events, _ = s.stream("/v1/completions", dict(force, skip_special_tokens=False, stream=True))
    streamed = "".join(c.get("text", "") for e in events for c in e.get("choices", []))
    check(quiet["choices"][0]["text"] == "" and loud["choices"][0]["text"] == streamed == bos["token_strs"][0] * 3,
          f"skip_special_tokens: {quiet['choices'][0]['text']!r}, {loud['choices'][0]['text']!r}, {streamed!r}")
    # Sampling methods coda lacks are refused rather than answered with plain sampling.
    for field, value in (("use_beam_search", True), ("mirostat", 2)):
        st, _, e = s.json("POST", "/v1/completions", {"prompt": "x", field: value})
        check(st == 400 and e["error"]["param"] == field, f"{field} {value}: {st} {e}")
        st, _, e = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1, field: type(value)(0)})
        check(st == 200, f"{field} off is accepted: {st} {e}")
    # stream_options.continuous_usage_stats: every chunk carries the usage so far. Counted against
    # the tokens the stream's logprobs have named by then, and against the final usage chunk.
    for route, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}],
                                                   "logprobs": True, "max_tokens": 24}),
                        # The repair policy holds back 256 tokens, so the counts come in steps.
                        ("/v1/completions", {"prompt": "And the LORD said unto", "logprobs": 0, "max_tokens": 300,
                                             "ignore_eos": True, "coda": {"guard": "repair"}})):
        body = dict(body, temperature=0.8, seed=5, stream=True,
                    stream_options={"include_usage": True, "continuous_usage_stats": True})
        st, events, _ = s.stream(route, body)
        chunks = [e for e in events if e.get("choices")]
        named, ok, last = 0, st == 200 and len(chunks) > 2, -1
        for e in chunks:
            u = e.get("usage") or {}
            lp = e["choices"][0].get("logprobs") or {}
            named += len(lp.get("content") or lp.get("tokens") or [])
            c = u.get("completion_tokens", -1)
            # A count may run ahead of the named tokens by a character's bytes held back, no more:
            # under repair it counts only the tokens no rollback can take back.
            ok = ok and max(named, last) <= c <= named + 4 and u.get("total_tokens") == u.get("prompt_tokens", -1) + c
            last = c
        final = events[-1].get("usage", {}) if events else {}
        check(ok and final.get("completion_tokens") == last == named and final.get("prompt_tokens") ==
              chunks[0]["usage"]["prompt_tokens"] > 0 and (route != "/v1/chat/completions" or
                                                          chunks[0]["usage"]["completion_tokens"] == 0),
              f"continuous usage on {route}: {[e.get('usage') for e in chunks]} named {named}, final {final}")
        plain = dict(body, stream_options={"include_usage": True})
        _, events, _ = s.stream(route, plain)
        check(all("usage" not in e for e in events if e.get("choices")),
              f"without continuous_usage_stats only the last chunk has usage ({route})")
        _, events, _ = s.stream(route, dict(body, stream_options={"continuous_usage_stats": True}))
        check(all("usage" not in e for e in events), f"continuous_usage_stats needs include_usage, as vLLM ({route})")
    st, _, e = s.json("POST", "/v1/completions", dict(req, prompt="x", stream=True,
                                                      stream_options={"continuous_usage_stats": "yes"}))
    check(st == 400 and e["error"]["param"] == "stream_options.continuous_usage_stats", f"bad continuous_usage_stats: {e}")


def apply_template_tests(s):
    """llama-server's POST /apply-template: the prompt a chat completion of the same body runs on."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who was Moses?"}]
    st, _, a = s.json("POST", "/apply-template", {"messages": messages})
    _, _, t = s.json("POST", "/tokenize", {"messages": messages, "return_token_strs": True})
    _, _, d = s.json("POST", "/detokenize", {"tokens": t["tokens"]})
    _, _, c = s.json("POST", "/v1/chat/completions", {"messages": messages, "max_tokens": 1})
    # /detokenize leaves special tokens out (the template writes the BOS as text: "<s>").
    specials = [p for p in t["token_strs"] if re.fullmatch(r"<[^<>]+>", p) and not p.startswith("<0x")]
    text = a.get("prompt", "")
    for p in specials:
        text = text.replace(p, "", 1)
    check(st == 200 and specials and text == d["prompt"] and "Who was Moses?" in a["prompt"] and
          t["count"] == c["usage"]["prompt_tokens"],
          f"/apply-template: the chat prompt, as /tokenize and the chat route see it: {st} {a} {d}")
    for body in ({}, {"messages": "x"}, {"messages": [{"role": "robot"}]}):
        st, _, e = s.json("POST", "/apply-template", body)
        check(st == 400 and e["error"]["message"], f"/apply-template refuses {body}: {st} {e}")


def llama_native_tests(s):
    """llama-server's native POST /completion: the same generation as /v1/completions asked the same
    way, in llama-server's shape, with its sampling defaults when the request gives none."""
    prompt = "In the beginning God"
    st, _, n = s.json("POST", "/completion", {"prompt": prompt, "n_predict": 12, "temperature": 0,
                                              "return_tokens": True})
    _, _, o = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 0,
                                                 "return_tokens_as_token_ids": True})
    o_ids = [int(t.split(":")[1]) for t in o["choices"][0]["logprobs"]["tokens"]]
    check(st == 200 and n["content"] == o["choices"][0]["text"] and n["tokens"] == o_ids and n["stop"] is True
          and n["stop_type"] == "limit" and n["tokens_predicted"] == 12 == o["usage"]["completion_tokens"]
          and n["tokens_evaluated"] == o["usage"]["prompt_tokens"] and n["generation_settings"]["n_predict"] == 12
          and n["timings"]["predicted_n"] == 12, f"/completion as /v1/completions: {n} vs {o}")
    st, _, w = s.json("POST", "/completions", {"prompt": prompt, "n_predict": 12, "temperature": 0, "stop": ["LORD"]})
    _, _, ow = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 12, "temperature": 0, "stop": ["LORD"]})
    check(st == 200 and w["stop_type"] == "word" and w["stopping_word"] == "LORD" and "LORD" not in w["content"]
          and w["content"] == ow["choices"][0]["text"], f"/completions (alias) with a stop word: {w}")
    # Streamed: the events spell the same text and ids; the last carries stop and the statistics; no [DONE].
    st, events, done = s.stream("/completion", {"prompt": prompt, "n_predict": 12, "temperature": 0, "stream": True,
                                                "n_probs": 2})
    check(st == 200 and not done and events and events[-1]["stop"] is True and not any(e["stop"] for e in events[:-1])
          and "".join(e["content"] for e in events) == n["content"]
          and [i for e in events for i in e["tokens"]] == n["tokens"] and events[-1]["tokens_predicted"] == 12
          and events[-1]["stop_type"] == "limit", f"/completion streamed: {events}")
    probs = [p for e in events for p in e.get("completion_probabilities", [])]
    check(len(probs) == 12 and all(len(p["top_logprobs"]) == 2 for p in probs)
          and [p["id"] for p in probs] == n["tokens"]
          and [round(p["logprob"], 4) for p in probs] == [round(x, 4) for x in o["choices"][0]["logprobs"]["token_logprobs"]],
          f"n_probs: llama-server's probabilities, the logprobs of /v1/completions: {probs[:2]}")
    # Without sampling fields, llama-server's defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05).
    _, _, d = s.json("POST", "/completion", {"prompt": prompt, "n_predict": 16, "seed": 9})
    _, _, od = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 16, "seed": 9, "temperature": 0.8,
                                                  "top_k": 40, "top_p": 0.95, "min_p": 0.05})
    _, _, plain = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 16, "seed": 9})
    check(d["content"] == od["choices"][0]["text"] != plain["choices"][0]["text"],
          f"llama-server's defaults: {d['content']!r} vs {od['choices'][0]['text']!r} (OpenAI's: {plain['choices'][0]['text']!r})")
    # logit_bias in llama-server's list form; false bans the token.
    _, _, banned = s.json("POST", "/completion", {"prompt": prompt, "n_predict": 3, "temperature": 0,
                                                  "return_tokens": True, "logit_bias": [[n["tokens"][0], False]]})
    check(banned["tokens"] and banned["tokens"][0] != n["tokens"][0], f"logit_bias [[id, false]] bans it: {banned}")
    for body, param in (({"n_predict": 4}, "prompt"), ({"prompt": ["a", "b"]}, "prompt"), ({"prompt": "x", "n_predict": 0}, "n_predict"), ({"prompt": "x", "n_predict": 10 ** 12}, "n_predict"),
                        ({"prompt": "x", "n_probs": 50}, "n_probs"), ({"prompt": "x", "mirostat": 2}, "mirostat"),
                        ({"prompt": "x", "logit_bias": [["Hello", 1.0]]}, "logit_bias")):
        st, _, e = s.json("POST", "/completion", body)
        check(st == 400 and e["error"]["param"] == param, f"/completion {body}: {st} {e}")
    st, _, raw = s.request("POST", "/completion", b"{not json")
    check(st == 400, f"/completion with a body that is not JSON: {st}")
    # GET /props, checked against the GGUF as an independent reader sees it (tests/reference).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
    from gguf_ref import Reader  # noqa: E402
    st, _, props = s.json("GET", "/props")
    _, _, models = s.json("GET", "/v1/models")
    path = props.get("model_path", "")
    kv = Reader(path).kv if os.path.isfile(path) else {}
    check(st == 200 and props["default_generation_settings"]["n_ctx"] == models["data"][0]["max_model_len"]
          and props["chat_template"] == kv.get("tokenizer.chat_template", props["chat_template"]) != ""
          and props["chat_template_source"] == ("model" if "tokenizer.chat_template" in kv else "builtin")
          and props["bos_token"] == kv["tokenizer.ggml.tokens"][kv["tokenizer.ggml.bos_token_id"]]
          and props["default_generation_settings"]["params"]["temperature"] == 0.8 and props["total_slots"] == 4,
          f"/props: {dict(props, chat_template=props.get('chat_template', '')[:40])}")
    # The template is the one in use (the bundled GGUF has none, so coda's own): it renders in
    # Jinja2 to a prompt that holds the message.
    import jinja2  # noqa: E402
    rendered = jinja2.Environment().from_string(props["chat_template"]).render(
        messages=[{"role": "user", "content": "Who made the heaven?"}], add_generation_prompt=True,
        bos_token=props["bos_token"], eos_token=props["eos_token"])
    check("Who made the heaven?" in rendered, f"/props' chat template renders in Jinja2: {rendered!r}")
    st, _, h = s.json("GET", "/v1/health")
    check(st == 200 and h == {"status": "ok"}, f"/v1/health (llama-server's alias): {st} {h}")


def load_tests(s, label, n_streams=16, max_queue=None, max_batch=None):
    """Concurrent streams with random disconnects, bad requests in between, then a flood."""
    rng = random.Random(label)
    results = []

    def one(i):
        kind = rng.random()
        try:
            if kind < 0.1:
                st, _, raw = s.request("POST", "/v1/completions", b'{"prompt": ')
                results.append(("malformed", st == 400 and b"error" in raw))
            elif kind < 0.15:
                st, _, raw = s.request("POST", "/v1/completions", b'{"prompt": "' + b"a" * (9 << 20) + b'"}')
                results.append(("oversized", st == 413 and b"error" in raw))
            elif kind < 0.25:
                st, _, raw = s.request("POST", "/v1/chat/completions", {"messages": [], "stream": True})
                results.append(("invalid", st == 400 and b"error" in raw))
            else:
                cut = rng.choice([None, None, 1, 3])
                st, events, done = s.stream("/v1/completions", {
                    "prompt": rng.choice(["In the beginning", "La vita", "And Moses", "\u00bfQu\u00e9?"]),
                    "max_tokens": rng.choice([8, 32, 64]), "temperature": 1.0, "stream": True}, disconnect_after=cut)
                if st == 429:
                    results.append(("429", True))
                elif cut is not None:
                    results.append(("disconnect", True))
                else:
                    ok = done and events and events[-1]["choices"][0]["finish_reason"] is not None
                    results.append(("stream", bool(ok)))
        except Exception as e:  # noqa: BLE001 - any exception is a failed request
            results.append(("exception", False))
            print(label, "request", i, "raised", repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n_streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    bad = [r for r in results if not r[1]]
    kinds = {}
    for k, _ in results:
        kinds[k] = kinds.get(k, 0) + 1
    print(f"{label}: {kinds}")
    check(len(results) == n_streams and not bad, f"{label}: {len(results)} answered, bad: {bad}")
    # A flood beyond the queue bound, made exact by pausing the scheduler: of the requests sent
    # while it is paused, exactly `max_queue` wait and the rest are refused with 429 and Retry-After;
    # resumed, the waiting ones are answered and run batched.
    if max_queue is not None:
        # Idle first, so the queue bound is all that admits or refuses.
        s.wait_for(f"{label}: idle before the flood",
                   lambda m: m("coda:num_requests_running") == 0 and m("coda:num_requests_waiting") == 0)
        s.admin("pause")
        statuses = []
        lock = threading.Lock()

        def flood():
            st, hdrs, raw = s.request("POST", "/v1/completions", {"prompt": "Flood", "max_tokens": 48,
                                                                  "temperature": 1.0, "ignore_eos": True})
            with lock:
                statuses.append((st, hdrs.get("Retry-After"), raw))

        n_flood = 3 * (max_queue + max_batch)
        steps_before = s.metric("coda:iteration_sequences_count")
        single_before = s.metric('coda:iteration_sequences_bucket{le="1"}')
        threads = [threading.Thread(target=flood) for _ in range(n_flood)]
        for t in threads:
            t.start()
        # Every request has either been queued or refused: the condition, not a clock.
        s.wait_for(f"{label}: flood queued or refused",
                   lambda m: m("coda:num_requests_waiting") == max_queue and len(statuses) == n_flood - max_queue)
        s.admin("resume")
        for t in threads:
            t.join(timeout=300)
        codes = sorted(x[0] for x in statuses)
        print(f"{label}: flood of {len(codes)}: {codes.count(200)} answered, {codes.count(429)} refused with 429")
        check(codes.count(200) == max_queue and codes.count(429) == n_flood - max_queue,
              f"{label}: flood statuses {codes}")
        check(all(x[1] == "1" for x in statuses if x[0] == 429), f"{label}: 429 carries Retry-After")
        check(all(json.loads(x[2]).get("choices") or json.loads(x[2]).get("error") for x in statuses),
              f"{label}: flood answers are JSON")
        steps = s.metric("coda:iteration_sequences_count") - steps_before
        multi = steps - (s.metric('coda:iteration_sequences_bucket{le="1"}') - single_before)
        print(f"{label}: {multi} of {steps} forward passes ran several sequences")
        check(multi > 0, f"{label}: sequences were batched ({multi} of {steps} steps)")
    # Afterwards: idle, KV back to zero, healthy.
    # (Disconnected streams are cancelled by the server when its next write fails.)
    s.wait_for(f"{label}: idle with the KV cache back to 0",
               lambda m: m("coda:num_requests_running") == 0 and m("coda:num_requests_waiting") == 0
               and m("coda:kv_cache_usage_perc") == 0)
    check(s.json("GET", "/health")[0] == 200, f"{label}: healthy after the storm")
    _, _, raw = s.request("GET", "/metrics")
    check(b'coda:request_success_total{finished_reason="abort"}' in raw, f"{label}: metrics list finish reasons")
    # Prometheus text exposition, checked by Debian's promtool. Its only remark may be the `coda:`
    # prefix the API asks for (colons are reserved for recording rules; vLLM's `vllm:` gets the same).
    p = subprocess.run(["promtool", "check", "metrics"], input=raw, capture_output=True)
    remarks = [l for l in (p.stdout + p.stderr).decode().splitlines() if l.strip()]
    ok = p.returncode == 0 or (p.returncode == 3 and all(l.endswith("metric names should not contain ':'")
                                                          for l in remarks))
    check(ok, f"{label}: promtool check metrics: rc {p.returncode}: {remarks[:3]}")


def responses_tests(s):
    """OpenAI's Responses API for text, against the chat route it runs as."""
    rq = {"instructions": "Answer briefly.", "input": "Who was Moses?", "max_output_tokens": 12, "temperature": 0}
    chat_body = {"messages": [{"role": "system", "content": rq["instructions"]}, {"role": "user", "content": rq["input"]}],
                 "max_tokens": 12, "temperature": 0}
    _, _, chat = s.json("POST", "/v1/chat/completions", chat_body)
    st, hdrs, r = s.json("POST", "/v1/responses", rq)
    text = r["output"][0]["content"][0]["text"] if st == 200 else None
    check(st == 200 and r["object"] == "response" and r["id"].startswith("resp_") and
          text == chat["choices"][0]["message"]["content"] and r["instructions"] == rq["instructions"] and
          r["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"] and
          r["usage"]["output_tokens"] == chat["usage"]["completion_tokens"] and
          r["usage"]["total_tokens"] == chat["usage"]["total_tokens"] and "policy" in r["coda"],
          f"/v1/responses: chat's greedy text and counts: {st} {str(r)[:200]}")
    check(r.get("status") == ("incomplete" if chat["choices"][0]["finish_reason"] == "length" else "completed") and
          (r["status"] == "completed" or r["incomplete_details"] == {"reason": "max_output_tokens"}),
          f"status and incomplete_details follow the finish: {r.get('status')} {r.get('incomplete_details')}")
    # The same conversation as message items with content parts (a developer turn is a system turn).
    items = {"input": [{"role": "developer", "content": rq["instructions"]},
                       {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Who was "},
                                                                        {"type": "input_text", "text": "Moses?"}]}],
             "max_output_tokens": 12, "temperature": 0}
    st, _, r2 = s.json("POST", "/v1/responses", items)
    check(st == 200 and r2["output"][0]["content"][0]["text"] == text, f"message items with parts: {st} {str(r2)[:160]}")
    # The stream: typed events (each `event:` line names its data's type), sequence numbers 0, 1, ...,
    # the deltas make the text, and the last event holds the whole response.
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    c.request("POST", "/v1/responses", body=json.dumps(dict(rq, stream=True)).encode(),
              headers={"Content-Type": "application/json"})
    raw = c.getresponse().read().decode()
    c.close()
    events = []
    for block in raw.split("\n\n"):
        lines = [ln for ln in block.split("\n") if ln and not ln.startswith(":")]
        if len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "):
            data = json.loads(lines[1][6:])
            events.append((lines[0][7:], data))
    types = [t for t, _ in events]
    deltas = "".join(d["delta"] for t, d in events if t == "response.output_text.delta")
    last = events[-1][1].get("response", {}) if events else {}
    check(all(t == d["type"] for t, d in events) and [d["sequence_number"] for _, d in events] == list(range(len(events))),
          f"stream: every event names its type, numbered in order: {types[:6]}")
    check(types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                        "response.content_part.added"] and
          types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"] and
          types[-1] in ("response.completed", "response.incomplete"),
          f"stream: OpenAI's order of events: {types[:4]} ... {types[-4:]}")
    check(deltas == text and last.get("output", [{}])[0].get("content", [{}])[0].get("text") == text and
          last.get("usage", {}).get("output_tokens") == r["usage"]["output_tokens"],
          f"stream: the deltas make the text, and the last event holds the whole response: {deltas!r}")
    # The guard's stop is an incomplete response whose reason is the guard's.
    st, _, g = s.json("POST", "/v1/responses", {"input": "Tell me a story", "max_output_tokens": 400, "temperature": 0,
                                                 "ignore_eos": True, "coda": {"guard": "stop"}})
    check(st == 200 and g["status"] == "incomplete" and g["incomplete_details"]["reason"] == "repetition" and
          g["coda"]["events"], f"a loop stopped by the guard: {g.get('status')} {g.get('incomplete_details')}")
    # Structured output through text.format (the Responses API's flat json_schema).
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}}, "required": ["name"],
              "additionalProperties": False}
    st, _, js = s.json("POST", "/v1/responses", {"input": "A name:", "max_output_tokens": 200, "temperature": 0,
                                                  "text": {"format": {"type": "json_schema", "name": "n",
                                                                      "schema": schema, "strict": True}}})
    parsed = None
    try:
        parsed = json.loads(js["output"][0]["content"][0]["text"])
    except Exception:  # noqa: BLE001
        pass
    check(st == 200 and isinstance(parsed, dict) and list(parsed) == ["name"] and js["text"]["format"]["type"] == "json_schema",
          f"text.format json_schema holds the output to the schema: {str(js)[:200]}")
    # previous_response_id: the stored conversation (without the earlier instructions, as OpenAI
    # specifies) then the new input; the prompt is the chat route's for the same turns, whole or
    # streamed, and chained.
    first = {"instructions": "Answer briefly.", "input": "My name is Ada.", "max_output_tokens": 6, "temperature": 0}
    st, _, r1 = s.json("POST", "/v1/responses", first)
    turns = [{"role": "user", "content": "My name is Ada."},
             {"role": "assistant", "content": r1["output"][0]["content"][0]["text"] if st == 200 else ""}]
    chain = r1.get("id")
    for step, stream in ((2, False), (3, True), (4, False)):
        ask = {"previous_response_id": chain, "input": f"Question {step}: what is my name?", "max_output_tokens": 6,
               "temperature": 0}
        if stream:
            st, events, _ = s.stream("/v1/responses", dict(ask, stream=True))
            r = events[-1].get("response", {}) if st == 200 and events else {}
        else:
            st, _, r = s.json("POST", "/v1/responses", ask)
        turns.append({"role": "user", "content": ask["input"]})
        _, _, c = s.json("POST", "/v1/chat/completions", {"messages": turns, "max_tokens": 6, "temperature": 0})
        text = r.get("output", [{}])[0].get("content", [{}])[0].get("text")
        check(st == 200 and r["previous_response_id"] == chain and r["store"] is True and
              r["usage"]["input_tokens"] == c["usage"]["prompt_tokens"] and text == c["choices"][0]["message"]["content"],
              f"previous_response_id, turn {step} (stream {stream}): the chat route's prompt and reply: {str(r)[:300]}")
        turns.append({"role": "assistant", "content": text})
        chain = r.get("id")
    # A kept response comes back whole by GET /v1/responses/{id}; DELETE removes it, and then it is
    # neither found nor continued.
    st, _, got = s.json("GET", f"/v1/responses/{r1.get('id')}")
    check(st == 200 and got == r1, f"GET /v1/responses/{{id}}: the response as it was answered: {st} {str(got)[:200]}")
    st, _, gone = s.json("DELETE", f"/v1/responses/{r1.get('id')}")
    check(st == 200 and gone == {"id": r1.get("id"), "object": "response.deleted", "deleted": True},
          f"DELETE /v1/responses/{{id}}: {st} {gone}")
    st, _, e = s.json("GET", f"/v1/responses/{r1.get('id')}")
    st2, _, e2 = s.json("DELETE", f"/v1/responses/{r1.get('id')}")
    st3, _, e3 = s.json("POST", "/v1/responses", {"input": "x", "previous_response_id": r1.get("id")})
    check(st == 404 and st2 == 404 and e["error"]["code"] == "not_found" and st3 == 400,
          f"a deleted response is gone: {st} {st2} {st3} {e}")
    # store: false keeps nothing, and an unknown id says so with OpenAI's code.
    _, _, r = s.json("POST", "/v1/responses", {"input": "x", "max_output_tokens": 1, "store": False})
    st, _, e = s.json("GET", f"/v1/responses/{r.get('id')}")
    check(st == 404, f"store: false: GET finds nothing: {st} {e}")
    for prev in (r.get("id"), "resp_unknown"):
        st, _, e = s.json("POST", "/v1/responses", {"input": "x", "previous_response_id": prev})
        check(st == 400 and e["error"]["param"] == "previous_response_id" and
              e["error"]["code"] == "previous_response_not_found", f"previous_response_id {prev} not kept: {st} {e}")
    for body, param in (({"input": "x", "tools": [{"type": "web_search"}]}, "tools"),
                        ({"input": "x", "previous_response_id": 5}, "previous_response_id"),
                        ({"input": "x", "store": "yes"}, "store"),
                        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input"),
                        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input"),
                        ({"input": [{"role": "robot", "content": "x"}]}, "input"), ({"input": []}, "input"),
                        ({}, "input"), ({"input": "x", "text": {"format": {"type": "xml"}}}, "text"),
                        ({"input": "x", "max_output_tokens": 0}, "max_tokens"),
                        ({"input": "x", "temperature": 9}, "temperature")):
        st, _, e = s.json("POST", "/v1/responses", body)
        check(st == 400 and e["error"]["param"] == param, f"/v1/responses refuses {body}: {st} {e}")


def slots_tests(s):
    """GET /slots (llama-server's monitoring route): one entry per batch slot, idle or running, with
    the request's params and token counts, and the guard's live report under `coda`. Four long
    generations are caught running and the batch is held (/admin/pause) so that what /slots says
    can be checked against what was sent; then they are dropped and every slot is idle again."""
    st, _, props = s.json("GET", "/props")
    n_ctx, total = props["default_generation_settings"]["n_ctx"], props["total_slots"]
    st, _, slots = s.json("GET", "/slots")
    check(st == 200 and [x["id"] for x in slots] == list(range(total)) and
          not any(x["is_processing"] for x in slots) and all(x["id_task"] == -1 and x["n_ctx"] == n_ctx for x in slots),
          f"/slots idle: {st} {slots}")
    check(s.request("GET", "/slots?fail_on_no_slot=1")[0] == 200, "fail_on_no_slot with idle slots: 200")
    # Long enough that none can end before it is seen: the whole context (ignore_eos), one greedy
    # (it loops, and the observing guard reports it), three sampled.
    max_tokens = n_ctx - 64
    bodies = [{"prompt": "In the beginning God", "temperature": 0, "max_tokens": max_tokens, "stream": True,
               "ignore_eos": True, "coda": {"guard": "observe"}}]
    bodies += [{"prompt": f"La vita {i}", "temperature": 0.7, "top_p": 0.9, "seed": i, "max_tokens": max_tokens,
                "stream": True, "ignore_eos": True, "coda": {"guard": "observe"}} for i in range(total - 1)]
    conns = []
    s.admin("pause")
    for b in bodies:
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
        c.request("POST", "/v1/completions", body=json.dumps(b).encode(), headers={"Content-Type": "application/json"})
        conns.append(c)
    s.wait_for("all queued", lambda m: m("coda:num_requests_waiting") == len(bodies))
    s.admin("resume")
    seen = []

    def all_running_and_greedy_flagged():
        seen[:] = [s.json("GET", "/slots")[2]]
        busy = [x for x in seen[0] if x["is_processing"]]
        greedy = [x for x in busy if x["params"]["temperature"] == 0]
        return (len(busy) == total and all(x["next_token"]["n_decoded"] > 0 for x in busy) and len(greedy) == 1 and
                len(greedy[0]["coda"]["guard"]["events"]) > 0)

    end = time.monotonic() + 120
    while time.monotonic() < end and not all_running_and_greedy_flagged():
        time.sleep(0.02)
    s.admin("pause")
    st, _, a = s.json("GET", "/slots")
    st2, _, b = s.json("GET", "/slots")
    check(st == 200 and a == b, "paused: /slots holds still between steps")
    busy = [x for x in a if x["is_processing"]]
    check(len(busy) == total, f"every slot busy: {seen}")
    check(s.request("GET", "/slots?fail_on_no_slot=1")[0] == 503, "fail_on_no_slot with every slot busy: 503")
    tasks = sorted(x["id_task"] for x in busy)
    check(len(set(tasks)) == total and tasks[0] > 0, f"distinct task numbers: {tasks}")
    for x in busy:
        p, nt, cd = x["params"], x["next_token"], x["coda"]
        greedy = p["temperature"] == 0
        check(p["n_predict"] == max_tokens and nt["n_decoded"] + nt["n_remain"] == max_tokens and nt["has_next_token"],
              f"slot {x['id']}: counts against max_tokens {max_tokens}: {p['n_predict']} {nt}")
        check(greedy or (abs(p["temperature"] - 0.7) < 1e-6 and abs(p["top_p"] - 0.9) < 1e-6 and p["ignore_eos"]),
              f"slot {x['id']}: the request's sampling params: {p}")
        check(cd["state"] == "generating" and cd["n_prompt_tokens"] > 0 and
              cd["n_prompt_tokens_processed"] == cd["n_prompt_tokens"] and
              cd["kv_capacity"] == cd["n_prompt_tokens"] + max_tokens and cd["seconds"] > 0,
              f"slot {x['id']}: prompt and cache: {cd}")
        check(cd["guard"]["signals"]["tokens"] == nt["n_decoded"] and cd["guard"]["policy"] == "observe",
              f"slot {x['id']}: the guard has seen every token so far: {cd['guard']['signals']} vs {nt['n_decoded']}")
        if greedy:
            check(any(e["type"] in ("loop", "flooding", "repetition") for e in cd["guard"]["events"]),
                  f"the greedy loop is flagged while it runs: {cd['guard']['events']}")
    # Each slot carries its own generation's report: the greedy loop repeats its bigrams, the sampled
    # texts hardly do.
    d2 = {x["params"]["temperature"] == 0: [] for x in busy}
    for x in busy:
        d2[x["params"]["temperature"] == 0].append(x["coda"]["guard"]["signals"]["distinct2"])
    check(max(d2[True]) < min(d2[False]), f"distinct bigrams: greedy {d2[True]} below sampled {d2[False]}")
    # The prompt tokens /slots counts are the ones /tokenize gives (the BOS included).
    st, _, tok = s.json("POST", "/tokenize", {"content": "In the beginning God", "add_special": True})
    greedy = [x for x in busy if x["params"]["temperature"] == 0][0]
    check(greedy["coda"]["n_prompt_tokens"] == len(tok["tokens"]),
          f"n_prompt_tokens {greedy['coda']['n_prompt_tokens']} = /tokenize's {len(tok['tokens'])}")
    # Dropped clients end their generations; every slot goes idle again.
    for c in conns:
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
    s.admin("resume")
    end = time.monotonic() + 120
    while time.monotonic() < end and any(x["is_processing"] for x in s.json("GET", "/slots")[2]):
        time.sleep(0.02)
    check(not any(x["is_processing"] for x in s.json("GET", "/slots")[2]), "every slot idle after the clients left")


def main():
    coda, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    sse_parser_tests()
    s = Server(coda, "--max-queue", "6", "--max-num-seqs", "4", "--enable-admin-api")
    try:
        api_tests(s)
        tokenizer_tests(s)
        vllm_sampling_field_tests(s)
        llama_native_tests(s)
        apply_template_tests(s)
        slots_tests(s)
        responses_tests(s)
        prefix_cache_tests(s)
        burst_tests(s)
        load_tests(s, "bundled", n_streams=16, max_queue=6, max_batch=4)
    finally:
        err = s.stop()
    check("Sanitizer" not in err and "runtime error" not in err, "server stderr clean: " + err[-300:])
    auth_tests(coda)
    no_prefix_cache_tests(coda)
    other_engines_flag_tests(coda)
    non_stream_disconnect_tests(coda)
    tls_serve_tests(coda)
    # A random-weight model emits arbitrary tokens (byte pieces, special tokens): still valid JSON/SSE.
    synth = os.path.join(work, f"random-{os.getpid()}.gguf")
    subprocess.run([coda, "synth", "--shape", "tiny-llama3", "--type", "Q8_0", "--layers", "1", "-o", synth],
                   check=True, capture_output=True)
    r = Server(coda, "-m", synth, "--max-queue", "4", "--max-num-seqs", "4", "--enable-admin-api")
    try:
        load_tests(r, "random-weights", n_streams=16, max_queue=4, max_batch=4)
        st, _, body = r.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                              "max_tokens": 64, "temperature": 1.5, "logprobs": True,
                                                              "top_logprobs": 5})
        check(st == 200 and isinstance(body["choices"][0]["message"]["content"], str), "random model chat")
    finally:
        err = r.stop()
        os.remove(synth)
    check("Sanitizer" not in err and "runtime error" not in err, "random-model server stderr clean: " + err[-300:])
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
