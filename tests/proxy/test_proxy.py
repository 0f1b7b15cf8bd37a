#!/usr/bin/python3
"""coda proxy over real HTTP on loopback, in front of two upstreams: `coda serve` on the bundled
model, and a scripted OpenAI-compatible server (scripted_upstream.py) with deterministic loops,
logprobs in both shapes and the failures of a real deployment. Checks the policies (stop cancels
the upstream and its KV cache empties; repair gives one coherent stream without a loop),
passthrough (byte-identical content to a direct request), client disconnects, 502/504, refused
logprobs, malformed and hung streams, and 64 concurrent streams with random disconnects. Every
wait is on a condition; deadlines only bound a hang.

Usage: /usr/bin/python3 tests/proxy/test_proxy.py build/coda WORK_DIR [--no-rss]
  --no-rss: skip the resident-memory check (a sanitizer build's allocator keeps freed memory in
            quarantine on purpose), keep everything else
"""
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import test_server as ts  # noqa: E402  (SseParser, Server, check)
from guard_eval import reference_loop  # noqa: E402  (the guard-eval reference definition of a loop)

check = ts.check


class Proc(ts.Server):
    """A `coda proxy` (or any process printing 'listening on ...:PORT')."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError("did not start: " + line + self.proc.stderr.read())
        self.port = int(line.strip().split(":")[-1].split()[-1])

    def metric_sum(self, name, **labels):
        """Sum of a metric's samples whose labels include `labels` (histograms: use name_count)."""
        _, _, raw = self.request("GET", "/metrics")
        total = 0.0
        for line in raw.decode().splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_until(self, what, cond, deadline_s=60):
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if cond():
                return True
            time.sleep(0.02)
        check(False, f"condition never held within {deadline_s} s: {what}")
        return False


def proxy(coda, upstream_port, *args):
    return Proc([coda, "proxy", "--upstream", f"http://127.0.0.1:{upstream_port}", "--port", "0", *args])


def scripted(*args):
    p = Proc([sys.executable, os.path.join(HERE, "scripted_upstream.py"), *args])
    return p


def stream_text(events, chat):
    out = ""
    for e in events:
        for c in e.get("choices", []):
            out += (c.get("delta", {}).get("content") or "") if chat else (c.get("text") or "")
    return out


def responses_stream(server, rq):
    """A /v1/responses stream read whole: its raw text, and its events as (event line's type, data)."""
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    c.request("POST", "/v1/responses", body=json.dumps(dict(rq, stream=True)).encode(),
              headers={"Content-Type": "application/json"})
    raw = c.getresponse().read().decode()
    c.close()
    return raw, [(b.split("\n")[0][7:], json.loads(b.split("\n")[1][6:])) for b in raw.split("\n\n")
                 if b.startswith("event: ")]


def finish_of(events):
    for e in events:
        for c in e.get("choices", []):
            if c.get("finish_reason"):
                return c["finish_reason"]
    return None


def ids_of(tokens):
    table = {}
    return [table.setdefault(t, len(table)) for t in tokens]


CHECK_RSS = True


def peak_rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def long_generation_memory_test(coda, up):
    """A 50,000-token generation through the proxy: the upstream is asked for 20 alternatives a
    token (the guard's signals), the client for none. The proxy keeps what it needs, not a copy of
    every alternative: about 1 MB of growth per 1,000 tokens before (2 KB a token), 0.3 now."""
    px = proxy(coda, up.port, "--guard", "observe")
    try:
        st, _, body = px.json("POST", "/v1/completions", {"prompt": "[text] warm up|", "max_tokens": 8})
        before = peak_rss_kib(px.proc.pid)
        st, _, body = px.json("POST", "/v1/completions", {"prompt": "[loop] go|", "max_tokens": 50000,
                                                          "temperature": 1.0})
        grown = peak_rss_kib(px.proc.pid) - before
        check(st == 200 and body["usage"]["completion_tokens"] == 50000, f"50,000 tokens through the proxy: {st}")
        check(not CHECK_RSS or grown < 50 * 1024, f"the proxy's peak RSS grew by {grown} KiB for 50,000 tokens (at most 50 MiB)")
        print(f"long generation: proxy peak RSS +{grown} KiB for 50,000 tokens")
    finally:
        px.stop()


def socket_count(pid):
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


LOOP_PROMPT = "In the beginning God"


def coda_upstream_tests(coda, up, px):
    # Stop: the greedy loop ends with "repetition"; the upstream aborts it and frees its KV cache.
    aborts = up.metric('coda:request_success_total{finished_reason="abort"}')
    st, events, done = px.stream("/v1/completions", {"prompt": LOOP_PROMPT, "max_tokens": 1500, "temperature": 0,
                                                     "ignore_eos": True, "stream": True, "coda": {"guard": "stop"},
                                                     "stream_options": {"include_usage": True}})
    t_end = time.monotonic()
    check(st == 200 and done and finish_of(events) == "repetition", f"proxy stop: {st} {finish_of(events)}")
    report = next((e["coda"] for e in events if "coda" in e), {})
    check(report.get("proxy", {}).get("guarded_on") == "tokens", f"guarded on coda's streamed tokens: {report}")
    # The stop closed the upstream stream before its closing usage chunk; the prompt's tokens are
    # still counted (the proxy asks coda serve, as vLLM, for usage in every chunk).
    usage = [e["usage"] for e in events if e.get("usage")]
    direct = up.json("POST", "/v1/completions", {"prompt": LOOP_PROMPT, "max_tokens": 1})[2]["usage"]
    check(len(usage) == 1 and usage[0]["prompt_tokens"] == direct["prompt_tokens"] > 0
          and not report.get("proxy", {}).get("usage_estimated"),
          f"a stopped stream's usage counts the prompt: {usage} against {direct}, {report.get('proxy')}")
    up.wait_for("the upstream aborted the stopped request",
                lambda m: m('coda:request_success_total{finished_reason="abort"}') == aborts + 1)
    up.wait_for("the upstream is idle with an empty KV cache",
                lambda m: m("coda:num_requests_running") == 0 and m("coda:kv_cache_usage_perc") == 0)
    print(f"stop -> upstream idle, KV 0 after {time.monotonic() - t_end:.3f} s")
    # llama-server's monitoring routes through the proxy: coda serve's /slots (idle now), each slot
    # marked with its upstream, and its /props as it is.
    st, _, own = up.json("GET", "/slots")
    st2, _, via = px.json("GET", "/slots")
    check(st == st2 == 200 and via == [dict(x, upstream=f"http://127.0.0.1:{up.port}") for x in own],
          f"/slots through the proxy: {st2} {via} against {own}")
    check(px.json("GET", "/props")[2] == up.json("GET", "/props")[2], "/props through the proxy")

    # vLLM's return_tokens_as_token_ids: without logprobs of its own the client sees no difference,
    # and the guard still reads the upstream's tokens as text; with them it is refused, not guarded
    # on text alone while the client's logprobs come back empty.
    st, _, body = px.json("POST", "/v1/completions", {"prompt": "The king said", "max_tokens": 4,
                                                      "return_tokens_as_token_ids": True})
    check(st == 200 and body["coda"]["proxy"]["guarded_on"] == "tokens",
          f"return_tokens_as_token_ids without logprobs: guarded on tokens: {body}")
    for path, extra in (("/v1/completions", {"prompt": "x", "logprobs": 1}),
                        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True})):
        st, _, body = px.json("POST", path, {**extra, "max_tokens": 2, "return_tokens_as_token_ids": True})
        check(st == 400 and body["error"]["param"] == "return_tokens_as_token_ids",
              f"return_tokens_as_token_ids with logprobs through the proxy ({path}): {st} {body}")

    # llama-server's /completion, guarded: the same text and stop as coda serve's own route, a loop
    # stopped by the guard, a stream that ends without [DONE], and what needs token ids refused.
    ask = {"prompt": LOOP_PROMPT, "n_predict": 12, "temperature": 0, "stop": ["LORD"]}
    st, _, mine = px.json("POST", "/completion", ask)
    _, _, theirs = up.json("POST", "/completion", ask)
    check(st == 200 and mine["content"] == theirs["content"] and mine["stop_type"] == theirs["stop_type"] == "word"
          and mine["stopping_word"] == "LORD" and mine["tokens_predicted"] == theirs["tokens_predicted"]
          and "proxy" in mine["coda"], f"/completion through the proxy: {mine} vs {theirs}")
    st, _, looped = px.json("POST", "/completions", {"prompt": LOOP_PROMPT, "n_predict": 1500, "temperature": 0,
                                                     "ignore_eos": True, "coda": {"guard": "stop"}})
    check(st == 200 and looped["stop_type"] == "repetition" and looped["tokens_predicted"] < 1500,
          f"the guard stops a loop on llama-server's route: {looped.get('stop_type')} {looped.get('tokens_predicted')}")
    st, events, done = px.stream("/completion", {**ask, "stop": [], "stream": True})
    check(st == 200 and not done and events and events[-1]["stop"] is True and events[-1]["stop_type"] == "limit"
          and "".join(e["content"] for e in events) == up.json("POST", "/completion", {**ask, "stop": []})[2]["content"],
          f"/completion streamed through the proxy: {events}")
    for field, value in (("n_probs", 2), ("return_tokens", True)):
        st, _, body = px.json("POST", "/completion", {**ask, field: value})
        check(st == 400 and body["error"]["param"] == field, f"/completion {field} through the proxy: {st} {body}")
    # vLLM's stop_reason comes through on the OpenAI route.
    st, _, body = px.json("POST", "/v1/completions", {"prompt": LOOP_PROMPT, "max_tokens": 12, "temperature": 0,
                                                      "stop": ["LORD"]})
    check(st == 200 and body["choices"][0]["stop_reason"] == "LORD", f"stop_reason through the proxy: {body}")

    # Repair: streamed and not, the same seed gives the same text; no loop by the reference definition.
    req = {"prompt": LOOP_PROMPT, "max_tokens": 300, "temperature": 0, "seed": 11, "logprobs": 0,
           "coda": {"guard": "repair"}}
    st, _, body = px.json("POST", "/v1/completions", req)
    text = body["choices"][0]["text"]
    tokens = body["choices"][0]["logprobs"]["tokens"]
    check(st == 200 and len(body["coda"]["repairs"]) >= 1, f"repair happened: {body.get('coda')}")
    check("".join(tokens) == text, "repair: the logprobs' tokens spell the text")
    check(reference_loop(ids_of(tokens)) is None, f"repair: no loop by the reference definition: {text[:300]!r}")
    check(body["usage"]["completion_tokens"] == len(tokens), f"usage counts what the client got: {body['usage']}")
    st, events, done = px.stream("/v1/completions", {**req, "stream": True})
    check(done and stream_text(events, False) == text, "repair: the stream equals the non-streamed text")
    lp_tokens = [t for e in events for c in e.get("choices", []) if c.get("logprobs") for t in c["logprobs"]["tokens"]]
    check(lp_tokens == tokens, "repair: the streamed logprobs are the kept tokens, none rolled back")

    # A request held to a format is stopped, not repaired: a continuation would start the JSON over.
    st, _, body = px.json("POST", "/v1/completions", {
        "prompt": LOOP_PROMPT, "max_tokens": 300, "temperature": 0, "coda": {"guard": "repair"},
        "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": {
            "type": "object", "properties": {"t": {"type": "string"}}, "required": ["t"]}}}})
    check(st == 200 and body["coda"]["repairs"] == [] and body["coda"]["policy"].startswith("stop"),
          f"a structured-output request is stopped, not repaired: {st} {body.get('coda')}")
    st, _, body = px.json("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": LOOP_PROMPT}], "max_tokens": 300, "temperature": 0,
        "coda": {"guard": "repair"}, "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"t": {"type": "string"}}, "required": ["t"]}}}]})
    check(st == 200 and body["coda"]["repairs"] == [] and body["coda"]["policy"].startswith("stop"),
          f"a forced tool call is stopped, not repaired: {st} {body.get('coda')}")

    # Passthrough: content byte-identical to a direct request with the same seed, chat and not.
    for chat, path, body in [
        (False, "/v1/completions", {"prompt": "The king said", "max_tokens": 40, "temperature": 0.9, "seed": 5}),
        (True, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me"}], "max_tokens": 40,
                                        "temperature": 0.8, "seed": 3}),
    ]:
        direct = up.json("POST", path, body)[2]
        via = px.json("POST", path, body)[2]
        key = (lambda b: b["choices"][0]["message"]["content"]) if chat else (lambda b: b["choices"][0]["text"])
        check(key(direct) == key(via), f"passthrough {path}: {key(direct)!r} vs {key(via)!r}")
        check(direct["choices"][0]["finish_reason"] == via["choices"][0]["finish_reason"], "passthrough finish")
        check(via["choices"][0]["logprobs"] is None, "logprobs the client did not ask for are stripped")
        check(via["usage"]["completion_tokens"] == direct["usage"]["completion_tokens"], "passthrough usage")
        _, events, done = px.stream(path, {**body, "stream": True})
        check(done and stream_text(events, chat) == key(direct), f"passthrough stream {path}")
    # Logprobs the client asked for, trimmed to its top_logprobs.
    st, _, body = px.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                           "max_tokens": 8, "temperature": 0, "logprobs": True,
                                                           "top_logprobs": 2})
    content = body["choices"][0]["logprobs"]["content"]
    check(len(content) >= 1 and all(len(c["top_logprobs"]) == 2 for c in content), "top_logprobs trimmed to 2")

    # The client going away cancels the upstream.
    aborts = up.metric('coda:request_success_total{finished_reason="abort"}')
    px.stream("/v1/completions", {"prompt": "The king", "max_tokens": 1500, "temperature": 0.9, "ignore_eos": True,
                                  "stream": True}, disconnect_after=3)
    up.wait_for("a client disconnect aborts the upstream request",
                lambda m: m('coda:request_success_total{finished_reason="abort"}') == aborts + 1)
    up.wait_for("the upstream is idle again", lambda m: m("coda:num_requests_running") == 0)

    # vLLM's repetition_detection, in coda serve and through the proxy.
    rd = {"prompt": LOOP_PROMPT, "max_tokens": 300, "temperature": 0,
          "repetition_detection": {"max_pattern_size": 10, "min_count": 3}}
    for who in (up, px):
        st, _, body = who.json("POST", "/v1/completions", rd)
        check(st == 200 and body["choices"][0]["finish_reason"] == "repetition", f"repetition_detection: {body}")
    st, _, body = up.json("POST", "/v1/completions", {**rd, "repetition_detection": {"max_pattern_size": 5}})
    check(st == 400 and body["error"]["param"] == "repetition_detection.min_count", "repetition_detection checked")

    # Routes: models from the upstream, health, metrics with upstream and model labels.
    st, _, body = px.json("GET", "/v1/models")
    check(st == 200 and body["data"][0]["id"] == "coda", f"/v1/models from the upstream: {body}")
    st, _, one = px.json("GET", "/v1/models/coda")
    check(st == 200 and one == body["data"][0], f"/v1/models/coda from the upstream's list: {one}")
    st, _, err = px.json("GET", "/v1/models/other")
    check(st == 404 and err["error"]["code"] == "model_not_found", f"/v1/models/other: 404 model_not_found: {err}")
    st, _, body = px.json("GET", "/health")
    check(st == 200 and body["status"] == "ok", f"/health: {body}")
    # The engine's tokenizer routes and version pass through, answers and errors alike.
    direct = up.json("POST", "/tokenize", {"prompt": "In the beginning"})[2]
    st, _, body = px.json("POST", "/tokenize", {"prompt": "In the beginning"})
    check(st == 200 and body == direct and body["count"] > 0, f"/tokenize through the proxy: {body}")
    st, _, body = px.json("POST", "/detokenize", {"tokens": direct["tokens"]})
    check(st == 200 and body["prompt"] == "In the beginning", f"/detokenize through the proxy: {body}")
    st, _, body = px.json("POST", "/detokenize", {"tokens": [-5]})
    check(st == 400 and body["error"]["param"] == "tokens", f"the upstream's 400 passes through: {st} {body}")
    st, _, body = px.json("POST", "/apply-template", {"messages": [{"role": "user", "content": "Hi"}]})
    check(st == 200 and body == up.json("POST", "/apply-template", {"messages": [{"role": "user", "content": "Hi"}]})[2],
          f"/apply-template through the proxy: {st} {body}")
    st, _, body = px.json("GET", "/version")
    check(st == 200 and body == up.json("GET", "/version")[2], f"/version through the proxy: {body}")
    # OpenAI's Responses API is guarded as chat: the same answer as coda serve's own route, a loop
    # stopped as an incomplete response with the guard's reason, and the typed event stream.
    rq = {"instructions": "Answer briefly.", "input": "Who was Moses?", "max_output_tokens": 12, "temperature": 0}
    direct = up.json("POST", "/v1/responses", rq)[2]
    st, _, body = px.json("POST", "/v1/responses", rq)
    text = body["output"][0]["content"][0]["text"] if st == 200 else None
    check(st == 200 and text == direct["output"][0]["content"][0]["text"] and body["status"] == direct["status"] and
          body["usage"]["output_tokens"] == direct["usage"]["output_tokens"] and "proxy" in body["coda"],
          f"/v1/responses through the proxy: coda serve's answer, guarded: {str(body)[:160]}")
    st, _, body = px.json("POST", "/v1/responses", {"input": "Tell me a story", "max_output_tokens": 400,
                                                    "temperature": 0, "ignore_eos": True, "coda": {"guard": "stop"}})
    check(st == 200 and body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "repetition"},
          f"/v1/responses: a loop stopped by the proxy: {body.get('status')} {body.get('incomplete_details')}")
    raw, events = responses_stream(px, rq)
    types = [t for t, _ in events]
    deltas = "".join(d["delta"] for t, d in events if t == "response.output_text.delta")
    check(types[:2] == ["response.created", "response.in_progress"] and types[-1] in ("response.completed",
          "response.incomplete") and deltas == text and "[DONE]" not in raw and
          [d["sequence_number"] for _, d in events] == list(range(len(events))) and all(t == d["type"] for t, d in events),
          f"/v1/responses streamed through the proxy: typed events whose deltas make the text: {types[:3]} {deltas!r}")
    # previous_response_id: the proxy keeps the conversation and sends the upstream all of it; the
    # second turn gets coda serve's own answer to the whole conversation.
    st, _, first = px.json("POST", "/v1/responses", {"input": "My name is Ada.", "max_output_tokens": 6,
                                                     "temperature": 0})
    said = first["output"][0]["content"][0]["text"] if st == 200 else ""
    for stream in (False, True):
        ask = {"previous_response_id": first.get("id"), "input": "What is my name?", "max_output_tokens": 6,
               "temperature": 0}
        if stream:
            _, events = responses_stream(px, ask)
            st, body = 200, events[-1][1].get("response", {}) if events else {}
        else:
            st, _, body = px.json("POST", "/v1/responses", ask)
        direct = up.json("POST", "/v1/chat/completions", {"messages": [
            {"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": said},
            {"role": "user", "content": "What is my name?"}], "max_tokens": 6, "temperature": 0})[2]
        check(st == 200 and body.get("previous_response_id") == first.get("id") and
              body["output"][0]["content"][0]["text"] == direct["choices"][0]["message"]["content"],
              f"previous_response_id through the proxy (stream {stream}): {str(body)[:300]}")
    st, _, got = px.json("GET", f"/v1/responses/{first.get('id')}")
    st2, _, gone = px.json("DELETE", f"/v1/responses/{first.get('id')}")
    st3, _, _ = px.json("GET", f"/v1/responses/{first.get('id')}")
    check(st == 200 and got == first and st2 == 200 and gone["deleted"] is True and st3 == 404,
          f"GET and DELETE /v1/responses/{{id}} on the proxy's own store: {st} {st2} {st3}")
    st, _, body = px.json("POST", "/v1/responses", {"input": "x", "previous_response_id": "resp_1"})
    check(st == 400 and body["error"]["param"] == "previous_response_id" and
          body["error"]["code"] == "previous_response_not_found", f"an unknown previous_response_id: {st} {body}")
    # Embeddings pass through as coda serve answers them (written in chunks there), errors too.
    direct = up.json("POST", "/v1/embeddings", {"input": ["In the beginning", "And Moses"]})[2]
    st, _, body = px.json("POST", "/v1/embeddings", {"input": ["In the beginning", "And Moses"]})
    check(st == 200 and body == direct and len(body["data"]) == 2, f"/v1/embeddings through the proxy: {str(body)[:100]}")
    st, _, body = px.json("POST", "/v1/embeddings", {"input": ""})
    check(st == 400 and body["error"]["param"] == "input", f"an embeddings 400 passes through: {st} {body}")
    check(px.metric_sum("coda:request_success_total", finished_reason="repetition", model="") >= 0, "metrics")
    check(px.metric_sum("coda:guard_stops_total") >= 1 and px.metric_sum("coda:guard_repairs_total") >= 1,
          "stops and repairs counted")
    _, _, raw = px.request("GET", "/metrics")
    check(f'upstream="http://127.0.0.1:{up.port}"' in raw.decode(), "series carry the upstream label")
    return raw.decode()


def choices_tests(up, px):
    """n > 1 and batches of prompts, not streamed: every choice a guarded session of its own, with the
    seeds coda serve gives its own choices (seed + i), so the proxy's answer holds the upstream's."""
    def texts(body, chat):
        return [c["message"]["content"] if chat else c["text"] for c in body["choices"]]

    for path, rq, chat in (
            ("/v1/completions", {"prompt": "The king said", "n": 3}, False),
            ("/v1/completions", {"prompt": ["The king said", "And Moses went up to"], "n": 2}, False),
            ("/v1/completions", {"prompt": ["La vita è come", "In the beginning God", "And David took"]}, False),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me of the king"}], "n": 2}, True)):
        rq = dict(rq, max_tokens=8, temperature=1.0, seed=11)
        st, _, mine = px.json("POST", path, rq)
        _, _, theirs = up.json("POST", path, rq)
        want = len(theirs.get("choices", []))
        check(st == 200 and want > 1 and texts(mine, chat) == texts(theirs, chat)
              and [c["index"] for c in mine["choices"]] == list(range(want))
              and all("proxy" in c.get("coda", {}) for c in mine["choices"])
              and mine["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]
              and mine["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"],
              f"{want} choices through the proxy ({path} {rq}): {st} {mine} against {theirs}")
    print(f"n > 1 and batches: the upstream's own choices, each guarded")
    for rq, why in (({"n": 2, "stream": True}, "need stream: false"), ({"n": 0}, "from 1 to 128"),
                    ({"n": 129}, "from 1 to 128"), ({"n": 1.5}, "from 1 to 128"),
                    ({"prompt": ["a"] * 65, "n": 2}, "130 choices")):
        st, _, body = px.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2, **rq})
        check(st == 400 and body["error"]["param"] == "n" and why in body["error"]["message"],
              f"{rq} refused with a clear error: {st} {body}")


def scripted_tests(coda, work):
    up = scripted()
    refuse = scripted("--refuse-logprobs")
    px = proxy(coda, up.port, "--upstream-timeout", "2", "--guard", "stop")
    px_refuse = proxy(coda, refuse.port, "--guard", "stop")
    dead_sock = socket.socket()
    dead_sock.bind(("127.0.0.1", 0))
    dead_port = dead_sock.getsockname()[1]
    # Bound but never listening: a connect there is refused, and the port stays ours for the whole
    # test. Closing it would free the port for the next `--port 0` server of a test running beside
    # this one (proxy_http and proxy_http_asan run in parallel), and the "dead" upstream would answer.
    px_dead = proxy(coda, dead_port)
    px_strict = proxy(coda, up.port, "--finish-reason-compat", "--max-repairs", "0", "--max-connections", "1",
                      "--upstream-timeout", "2")
    hang = scripted("--hang-models")
    px_hang = proxy(coda, hang.port, "--upstream", f"http://127.0.0.1:{up.port}")
    # The load test's own proxy keeps the default upstream timeout: under px's 2 s, a stream that a
    # loaded machine (sanitizers, a parallel build) leaves silent for 2 s would count as lost.
    px_load = proxy(coda, up.port, "--guard", "stop")
    procs = [up, refuse, px, px_refuse, px_dead, px_strict, hang, px_hang, px_load]
    try:
        sockets_before = socket_count(px.proc.pid)
        load_sockets_before = socket_count(px_load.proc.pid)
        # Loops in both logprob shapes, stopped on tokens with signals.
        for prompt in ("[loop] go|", "[loop][llamacpp] go|"):
            st, events, done = px.stream("/v1/completions", {"prompt": prompt, "max_tokens": 500, "stream": True})
            rep = next((e["coda"] for e in events if "coda" in e), {})
            check(done and finish_of(events) == "repetition", f"scripted loop {prompt}: {finish_of(events)}")
            check(rep.get("proxy", {}).get("guarded_on") == "tokens" and "mean_entropy" in rep.get("signals", {}),
                  f"tokens and signals from {prompt}: {rep}")
        # What went upstream: stream on, usage on, top 20 logprobs, max_tokens injected, coda's field out,
        # repetition_detection forwarded.
        px.json("POST", "/v1/completions", {"prompt": "[text] hi|", "coda": {"guard": "observe"},
                                            "repetition_detection": {"max_pattern_size": 4, "min_count": 3}})
        sent = up.json("GET", "/last-bodies")[2][-1]
        check(sent.get("stream") is True and sent["stream_options"]["include_usage"] is True and
              sent.get("logprobs") == 20 and sent.get("max_tokens") == 8192 and "coda" not in sent and
              sent.get("repetition_detection", {}).get("max_pattern_size") == 4, f"upstream body: {sent}")
        # The body goes upstream in the client's key order: vLLM's structured output writes a schema's
        # properties in the order given, and a chat template renders tools in it.
        schema = {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"},
                                                   "mid": {"type": "boolean"}}, "required": ["zeta"]}
        px.json("POST", "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "[text] hi|"}],
                                                 "response_format": {"type": "json_schema",
                                                                     "json_schema": {"name": "p", "schema": schema}},
                                                 "tools": [{"type": "function", "function": {
                                                     "name": "f", "parameters": schema}}]})
        sent = up.json("GET", "/last-bodies")[2][-1]
        check(list(sent["response_format"]["json_schema"]["schema"]["properties"]) == ["zeta", "alpha", "mid"] and
              list(sent["tools"][0]["function"]["parameters"]) == ["type", "properties", "required"] and
              list(sent)[:4] == ["model", "messages", "response_format", "tools"], f"upstream key order: {sent}")
        # An upstream that writes past max_tokens is cut there, streamed and whole, and counted.
        st, events, done = px.stream("/v1/completions", {"prompt": "[overrun] go|", "max_tokens": 30, "stream": True})
        text = "".join(c.get("text", "") for e in events for c in e.get("choices", []))
        check(done and finish_of(events) == "length" and text.split() == [f"v{i}" for i in range(30)],
              f"overrun streamed: {finish_of(events)} {text!r}")
        st, _, body = px.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "[overrun] go"}],
                                                               "max_tokens": 12})
        check(st == 200 and body["choices"][0]["finish_reason"] == "length" and
              body["choices"][0]["message"]["content"].split() == [f"v{i}" for i in range(12)] and
              body["coda"]["proxy"]["upstream_overrun"] is True, f"overrun whole: {body}")
        check(px.metric_sum("coda:upstream_overruns_total") == 2,
              "coda:upstream_overruns_total counts both")
        # On text alone (this upstream refuses logprobs) word pieces only approximate tokens: cut at
        # 4 x 10 + 64 pieces, well before the 200 words the upstream would send.
        st, _, body = px_refuse.json("POST", "/v1/completions", {"prompt": "[overrun] go|", "max_tokens": 10})
        words_out = body["choices"][0]["text"].split() if st == 200 else []
        check(st == 200 and body["choices"][0]["finish_reason"] == "length" and 10 < len(words_out) < 200 and
              body["coda"]["proxy"]["upstream_overrun"] is True and body["coda"]["proxy"]["guarded_on"] == "text",
              f"overrun on text alone: {st} {len(words_out)} words {body.get('coda', {}).get('proxy')}")
        # Repair, completions and chat: rolled back, continued hot, then normally; no loop reaches the client.
        st, _, body = px.json("POST", "/v1/completions", {"prompt": "[loop] go|", "max_tokens": 400,
                                                          "coda": {"guard": "repair"}})
        text = body["choices"][0]["text"]
        check(st == 200 and body["choices"][0]["finish_reason"] == "stop" and text.endswith(" The end."),
              f"scripted repair: {body['choices'][0]}")
        check(text.count("The cat sat on the mat") <= 3, f"repair kept at most the copies before the loop: {text!r}")
        # An upstream that says "stop" for a cut at max_tokens (ik_llama.cpp before its pull request 2362,
        # llama.cpp before 7198): the repair's hot stretch, cut at its limit, is continued all the same,
        # not taken for the end of the text; and a text cut at the client's limit comes back "length".
        st, _, body = px.json("POST", "/v1/completions", {"prompt": "[loop] [stop-at-limit] go|", "max_tokens": 400,
                                                          "coda": {"guard": "repair"}})
        text = body["choices"][0]["text"] if st == 200 else ""
        check(st == 200 and body["choices"][0]["finish_reason"] == "stop" and text.endswith(" The end.") and
              len(body["coda"]["repairs"]) >= 1, f"repair over an upstream that says stop at the limit: {text[-120:]!r}")
        st, _, body = px.json("POST", "/v1/completions", {"prompt": "[text] [stop-at-limit] hi|", "max_tokens": 4})
        check(st == 200 and body["choices"][0]["finish_reason"] == "length" and
              len(body["choices"][0]["text"].split()) == 4, f"a cut the upstream calls stop is length: {body.get('choices')}")
        st, events, done = px.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "[text] [stop-at-limit] hi"}],
                                                              "max_tokens": 4, "stream": True})
        ends = [c["finish_reason"] for e in events for c in e.get("choices", []) if c.get("finish_reason")]
        check(done and ends == ["length"], f"streamed, too: {ends}")
        st, _, body = px.json("POST", "/v1/completions", {"prompt": "[text] [stop-at-limit] hi|", "max_tokens": 40})
        check(st == 200 and body["choices"][0]["finish_reason"] == "stop", "a text that ended before the limit stays stop")
        # A repair's penalty reaches llama.cpp's server, which reads only `repeat_penalty`: an upstream
        # whose /v1/models says owned_by llamacpp is sent both names; the others only vLLM's.
        bodies = up.json("GET", "/last-bodies")[2]
        hot = [b for b in bodies if "[stop-at-limit]" in b.get("prompt", "") and b.get("temperature", 0) >= 1]
        check(hot and all(b.get("repetition_penalty", 1) > 1 and "repeat_penalty" not in b for b in hot),
              f"a repair over vLLM-like upstream: repetition_penalty only: {[(b.get('repetition_penalty'), b.get('repeat_penalty')) for b in hot]}")
        llamacpp = scripted("--owned-by", "llamacpp")
        px_llamacpp = proxy(coda, llamacpp.port, "--guard", "stop")
        try:
            st, _, body = px_llamacpp.json("POST", "/v1/completions", {"prompt": "[loop] go|", "max_tokens": 400,
                                                                       "repeat_penalty": 1.01, "coda": {"guard": "repair"}})
            hot = [b for b in llamacpp.json("GET", "/last-bodies")[2] if b.get("temperature", 0) >= 1]
            check(st == 200 and body["choices"][0]["text"].endswith(" The end.") and hot and
                  all(b.get("repetition_penalty", 1) > 1.01 and b.get("repeat_penalty") == b["repetition_penalty"]
                      for b in hot),
                  f"a repair over llama.cpp's server sends repeat_penalty too: "
                  f"{[(b.get('repetition_penalty'), b.get('repeat_penalty')) for b in hot]}")
            # The client's own vLLM-named penalty too; the plain upstream is sent it as it came.
            px_llamacpp.json("POST", "/v1/completions", {"prompt": "[text] hi|", "repetition_penalty": 1.05})
            sent = llamacpp.json("GET", "/last-bodies")[2][-1]
            px.json("POST", "/v1/completions", {"prompt": "[text] hi|", "repetition_penalty": 1.05})
            plain = up.json("GET", "/last-bodies")[2][-1]
            check(sent.get("repeat_penalty") == 1.05 and sent.get("repetition_penalty") == 1.05 and
                  "repeat_penalty" not in plain and plain.get("repetition_penalty") == 1.05,
                  f"a client's repetition_penalty reaches llama.cpp as repeat_penalty: {sent} / {plain}")
        finally:
            px_llamacpp.stop()
            llamacpp.stop()
        # X-Request-Id: the client's goes upstream, with -r1, -r2 on the requests after a repair (vLLM
        # refuses an id still running), and comes back on the answer; without one the proxy makes one.
        st, hdrs, body = px.json("POST", "/v1/completions", {"prompt": "[loop] go|", "max_tokens": 400,
                                                             "coda": {"guard": "repair"}}, {"X-Request-Id": "trace-42"})
        ids = up.json("GET", "/last-request-ids")[2]
        mine = ids[ids.index("trace-42"):] if "trace-42" in ids else []
        check(st == 200 and hdrs.get("X-Request-Id") == "trace-42" and len(mine) >= 2 and
              mine == ["trace-42"] + [f"trace-42-r{i}" for i in range(1, len(mine))],
              f"X-Request-Id through a repair: answered {hdrs.get('X-Request-Id')}, upstream saw {ids}")
        st, hdrs, _ = px.json("POST", "/v1/completions", {"prompt": "[text] hi|"})
        made = hdrs.get("X-Request-Id", "")
        check(st == 200 and re.fullmatch(r"[0-9a-f]{32}", made) and up.json("GET", "/last-request-ids")[2][-1] == made,
              f"X-Request-Id made by the proxy and sent upstream: {made!r}")
        # The upstream's key from a file (kept out of the process list): its first key line.
        key_file = os.path.join(work, "upstream-key")
        with open(key_file, "w") as f:
            f.write("# the vLLM deployment's key\n\nup-key\nsecond\n")
        px_key = proxy(coda, up.port, "--upstream-api-key-file", key_file)
        try:
            st, _, _ = px_key.json("POST", "/v1/completions", {"prompt": "[text] hi|"})
            check(st == 200 and up.json("GET", "/last-authorizations")[2][-1] == "Bearer up-key",
                  f"--upstream-api-key-file: upstream saw {up.json('GET', '/last-authorizations')[2][-1:]}")
        finally:
            px_key.stop()
        r = subprocess.run([coda, "proxy", "--upstream", f"http://127.0.0.1:{up.port}", "--port", "0",
                            "--upstream-api-key-file", os.path.join(work, "no-such-file")],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and "--upstream-api-key-file: cannot read" in r.stderr,
              f"a missing upstream key file stops the proxy at start: {r.stderr.strip()}")
        st, events, done = px.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "[loop] go|"}],
                                                              "max_tokens": 400, "stream": True,
                                                              "coda": {"guard": "repair"}})
        chat_text = stream_text(events, True)
        check(done and chat_text.endswith(" The end."), f"chat repair: {chat_text!r}")
        bodies = up.json("GET", "/last-bodies")[2]
        last = bodies[-1]
        check(last.get("continue_final_message") is True and last.get("add_generation_prompt") is False and
              last["messages"][-1]["role"] == "assistant", f"chat continuation request: {last}")
        hot = bodies[-2]
        check(hot.get("temperature", 0) > 0.7 and hot.get("repetition_penalty", 1) > 1, f"hot continuation: {hot}")
        # Reasoning (vLLM's reasoning parsers) and tool calls reach the client in their own fields,
        # streamed and whole, and the guard watches them too.
        def chat_req(content, **kw):
            return {"messages": [{"role": "user", "content": content}], "max_tokens": 600, **kw}

        def field(events, key):
            return "".join((c.get("delta", {}).get(key) or "") for e in events for c in e.get("choices", []))

        answer = " It is a fine day, and the work is done."
        for key, marker in (("reasoning_content", "[think] go"), ("reasoning", "[think][reasoning] go")):
            st, events, done = px.stream("/v1/chat/completions", chat_req(marker, stream=True))
            check(done and field(events, key) == " The user wants a fine day." and stream_text(events, True) == answer
                  and finish_of(events) == "stop", f"streamed {key}: {field(events, key)!r} {stream_text(events, True)!r}")
            st, _, body = px.json("POST", "/v1/chat/completions", chat_req(marker))
            m = body["choices"][0]["message"] if st == 200 else {}
            check(m.get(key) == " The user wants a fine day." and m.get("content") == answer, f"whole {key}: {body}")
            # Through the Responses API: a reasoning item before the message, whole and streamed.
            st, _, body = px.json("POST", "/v1/responses", {"input": marker})
            out = body.get("output", [])
            check(st == 200 and [o["type"] for o in out] == ["reasoning", "message"] and
                  out[0]["content"][0]["text"] == " The user wants a fine day." and out[1]["content"][0]["text"] == answer,
                  f"/v1/responses {key} through the proxy: {out}")
            _, events = responses_stream(px, {"input": marker})
            thought = "".join(d["delta"] for t, d in events if t == "response.reasoning_text.delta")
            text = "".join(d["delta"] for t, d in events if t == "response.output_text.delta")
            added = [(d["output_index"], d["item"]["type"]) for t, d in events if t == "response.output_item.added"]
            check(thought == " The user wants a fine day." and text == answer and
                  added == [(0, "reasoning"), (1, "message")] and events[-1][0] == "response.completed",
                  f"/v1/responses {key} streamed through the proxy: {[t for t, _ in events]}")
        # With coda.reasoning_loop "stop", a loop inside the reasoning (the content never starts) is
        # stopped, and so is one under repair: a reasoning cannot be continued from its middle, so no
        # continuation is asked. (The default closes the thinking instead: reasoning_tests.)
        for policy in ("stop", "repair"):
            before = up.json("GET", "/stats")[2]["requests"]
            st, events, done = px.stream("/v1/chat/completions",
                                         chat_req("[think-loop] go", stream=True,
                                                  coda={"guard": policy, "reasoning_loop": "stop"}))
            thought = field(events, "reasoning_content")
            check(done and finish_of(events) == "repetition" and stream_text(events, True) == ""
                  and 0 < thought.count("I should check the answer again.") < 60,
                  f"reasoning loop under {policy}: {finish_of(events)} {len(thought)} bytes")
            after = up.json("GET", "/stats")[2]["requests"]
            check(after == before + 1, f"{policy}: one upstream request, no continuation ({after - before})")
        # Tool calls streamed as vLLM streams them (id and name, then the arguments in pieces).
        st, events, done = px.stream("/v1/chat/completions", chat_req("[tools] go", stream=True))
        calls = {}
        for e in events:
            for c in e.get("choices", []):
                for tc in c.get("delta", {}).get("tool_calls") or []:
                    k = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                    k["id"] += tc.get("id", "")
                    k["name"] += tc.get("function", {}).get("name", "")
                    k["arguments"] += tc.get("function", {}).get("arguments", "")
        want = {0: {"id": "call_a", "name": "get_weather", "arguments": '{"city": "Paris"}'},
                1: {"id": "call_b", "name": "get_time", "arguments": '{"tz": "CET"}'}}
        check(done and calls == want and stream_text(events, True) == " Checking." and finish_of(events) == "tool_calls",
              f"streamed tool calls: {calls} {stream_text(events, True)!r} {finish_of(events)}")
        st, _, body = px.json("POST", "/v1/chat/completions", chat_req("[tools] go"))
        m = body["choices"][0]["message"] if st == 200 else {}
        got = [(t["id"], t["type"], t["function"]["name"], t["function"]["arguments"]) for t in m.get("tool_calls", [])]
        check(got == [("call_a", "function", "get_weather", '{"city": "Paris"}'), ("call_b", "function", "get_time", '{"tz": "CET"}')]
              and m.get("content") == " Checking." and body["choices"][0]["finish_reason"] == "tool_calls",
              f"whole tool calls: {body}")
        # The same calls asked through the Responses API: function_call items after the message,
        # whole and streamed (each call's item, its arguments, done), and the response completed.
        want_items = [("call_a", "get_weather", '{"city": "Paris"}'), ("call_b", "get_time", '{"tz": "CET"}')]
        rq = {"input": "[tools] go", "tools": [{"type": "function", "name": "get_weather"},
                                               {"type": "function", "name": "get_time"}]}
        st, _, body = px.json("POST", "/v1/responses", rq)
        out = body.get("output", [])
        check(st == 200 and body["status"] == "completed" and [o["type"] for o in out] == ["message", "function_call",
              "function_call"] and out[0]["content"][0]["text"] == " Checking." and
              [(o["call_id"], o["name"], o["arguments"]) for o in out[1:]] == want_items,
              f"/v1/responses tool calls through the proxy: {str(body)[:400]}")
        events = [e for _, e in responses_stream(px, rq)[1]]
        types = [e["type"] for e in events]
        added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
        args = [e["arguments"] for e in events if e["type"] == "response.function_call_arguments.done"]
        final = events[-1].get("response", {}) if events else {}
        check(added == ["message", "function_call", "function_call"] and args == [a for _, _, a in want_items] and
              "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == " Checking." and
              types[-1] == "response.completed" and
              [(o.get("call_id"), o.get("name"), o.get("arguments")) for o in final.get("output", [])[1:]] == want_items and
              [e["sequence_number"] for e in events] == list(range(len(events))),
              f"/v1/responses tool calls streamed through the proxy: {types}")
        # The operator's bounds: a request asking for 5 repairs gets the operator's 0, so the guard stops;
        # --finish-reason-compat reports that as "stop" for strict clients.
        st, _, body = px_strict.json("POST", "/v1/completions", {"prompt": "[loop] go|", "max_tokens": 400,
                                                                 "coda": {"guard": "repair", "max_repairs": 5}})
        ch = body["choices"][0]
        check(st == 200 and ch["finish_reason"] == "stop" and not body["coda"]["repairs"] and
              body["coda"]["events"][0]["action"] == "stop" and "The end." not in ch["text"],
              f"max_repairs clamped, finish reason mapped: {ch['finish_reason']} {body['coda']}")
        # --max-connections 1: while one request hangs upstream, the next gets 429.
        held = threading.Thread(target=px_strict.request, args=("POST", "/v1/completions", {"prompt": "[hang-first] x"}))
        held.start()
        px_strict.wait_until("one request in flight", lambda: px_strict.metric_sum("coda:num_requests_running") == 1)
        st, hdrs, body = px_strict.json("POST", "/v1/completions", {"prompt": "[text] x|"})
        check(st == 429 and body["error"]["code"] == "rate_limit_exceeded" and hdrs.get("Retry-After") == "1",
              f"beyond --max-connections -> {st} {body}")
        held.join()
        def client_leaves(body, arrived, what, count=1):
            """Sends `body` on a raw connection, closes it once `arrived(stats0)` holds upstream, and
            waits for the upstream connections (`count`: one per choice) to close and the proxy to
            count as many aborts."""
            stats0 = up.json("GET", "/stats")[2]
            aborts0 = px.metric_sum("coda:request_success_total", finished_reason="abort")
            raw_body = json.dumps(body).encode()
            c = socket.create_connection(("127.0.0.1", px.port))
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(raw_body) + raw_body)
            up.wait_until(f"the upstream has the request ({what})", lambda: arrived(stats0, up.json("GET", "/stats")[2]))
            c.close()
            up.wait_until(f"the upstream connection closed after the client left ({what})",
                          lambda: up.json("GET", "/stats")[2]["cancelled"] == stats0["cancelled"] + count)
            px.wait_until(f"the proxy counts an abort, not an upstream timeout ({what})",
                          lambda: px.metric_sum("coda:request_success_total", finished_reason="abort") == aborts0 + count)

        # A non-streaming client that leaves is noticed though nothing was written to it: the upstream
        # stream is closed (a cancellation there) instead of running on to max_tokens at 20 ms a token.
        client_leaves({"prompt": "[pace:20][loop] go|", "max_tokens": 100000, "coda": {"guard": "observe"}},
                      lambda s0, s: s["open"] == s0["open"] + 1, "non-streaming, paced upstream")
        # The same with n = 3: each choice's upstream stream is closed.
        client_leaves({"prompt": "[pace:20][loop] go|", "max_tokens": 100000, "n": 3, "coda": {"guard": "observe"}},
                      lambda s0, s: s["open"] == s0["open"] + 3, "n = 3, non-streaming, paced upstream", count=3)
        # One choice that fails fails the request, with the upstream's failure.
        st, _, body = px.json("POST", "/v1/completions", {"prompt": ["[text] x|", "[hang-first] x"], "max_tokens": 4})
        check(st == 504 and body["error"]["code"] == "upstream_timeout",
              f"a batch with one hung choice -> {st} {body}")
        # A client that leaves before the upstream says anything (a long prefill), streaming or not:
        # the proxy looks for it while waiting and closes the upstream connection at once, where it
        # used to hold it until the upstream's first byte or the read timeout.
        for streaming in (False, True):
            client_leaves({"prompt": "[hang-first] a long prefill", "stream": streaming},
                          lambda s0, s: s["requests"] == s0["requests"] + 1, f"silent upstream, stream={streaming}")
        # A refused logprobs request is retried without; the guard works on text alone.
        refused0 = px_refuse.metric_sum("coda:upstream_logprobs_refused_total")
        st, events, done = px_refuse.stream("/v1/completions", {"prompt": "[loop] go|", "max_tokens": 500,
                                                                "stream": True})
        rep = next((e["coda"] for e in events if "coda" in e), {})
        check(done and finish_of(events) == "repetition" and rep.get("proxy", {}).get("guarded_on") == "text",
              f"refused logprobs: {finish_of(events)} {rep}")
        check(px_refuse.metric_sum("coda:upstream_logprobs_refused_total") == refused0 + 1, "refusal counted")
        # Failures, in OpenAI's shape with the right status.
        for who, body, status, code in [
            (px_dead, {"prompt": "x"}, 502, "upstream_unreachable"),
            (px, {"prompt": "[hang-first] x"}, 504, "upstream_timeout"),
            (px, {"prompt": "[hang-mid] x"}, 504, "upstream_timeout"),
            # Kept alive without tokens: comments or empty chunks are not an answer.
            (px, {"prompt": "[ping-mid] x"}, 504, "upstream_timeout"),
            (px, {"prompt": "[empty-mid] x"}, 504, "upstream_timeout"),
            (px, {"prompt": "[malformed] x"}, 502, None),
            (px, {"prompt": "[drop] x"}, 502, None),
            (px, {"prompt": "[error500] x"}, 500, None),
        ]:
            for stream in (False, True):
                st, _, raw = who.request("POST", "/v1/completions", {**body, "stream": stream})
                try:
                    if st == 200:  # failed after text went out: an error event ends the stream
                        datas = [ln[6:] for ln in raw.decode().splitlines() if ln.startswith("data: ")]
                        err = json.loads(datas[-2] if datas[-1] == "[DONE]" else datas[-1])["error"]
                        ok = stream and status in (502, 504) and isinstance(err["message"], str)
                    else:
                        err = json.loads(raw)["error"]
                        ok = st == status and isinstance(err["message"], str) and (code is None or err["code"] == code)
                except (ValueError, KeyError, IndexError):
                    ok = False
                check(ok, f"{body['prompt']} stream={stream} -> {st} {raw[:300]!r}")
        # The Responses API ends a stream that fails after text went out with its own `error` event.
        for marker in ("[drop] x", "[malformed] x"):
            raw, events = responses_stream(px, {"input": marker})
            check(events and events[-1][0] == "error" and isinstance(events[-1][1].get("message"), str) and
                  events[-1][1]["sequence_number"] == len(events) - 1 and
                  all(b.startswith("event: ") for b in raw.split("\n\n") if b.strip()),
                  f"/v1/responses {marker} through the proxy: an error event ends the stream: {raw[-300:]!r}")
        check(px.metric_sum("coda:upstream_errors_total", status="timeout") >= 2, "timeouts counted")
        st, _, body = px_dead.json("GET", "/health")
        check(st == 503 and body["status"] == "unavailable", f"/health of a dead upstream: {st} {body}")
        # A passed-through answer without end, or trickled a byte at a time, is cut (size, deadline).
        # The endless answer goes through a proxy with the default deadline (two minutes): how fast
        # 256 MiB pass through depends on the machine, and under px's 2 s the deadline may cut first.
        for via, path, why in ((px_refuse, "/v1/endless", "larger than 256 MiB"),
                               (px, "/v1/trickle", "took longer than 2 s")):
            st, _, body = via.json("GET", path)
            check(st == 502 and why in body["error"]["message"], f"GET {path} through the proxy: {st} {body}")
        # A replica that hangs on /v1/models: /health answers within its probe's few seconds (the
        # upstream timeout of px_hang is the default two minutes), naming it, while the other is ok.
        st, _, body = px_hang.json("GET", "/health")
        states = {u["upstream"]: u for u in body.get("upstreams", [])}
        hung = states.get(f"http://127.0.0.1:{hang.port}", {})
        check(st == 200 and hung.get("status") == "unavailable" and "no answer within 5 s" in hung.get("error", "")
              and states.get(f"http://127.0.0.1:{up.port}", {}).get("status") == "ok", f"/health with a hung replica: {st} {body}")
        st, _, body = px.json("POST", "/v1/completions", {"prompt": "x", "echo": True, "logprobs": 1})
        check(st == 400 and body["error"]["param"] == "echo", "echo (prompt scoring) refused with a clear error")
        for raw in (b"{not json", b"[1]"):
            st, _, body = px.json("POST", "/v1/completions", raw)
            check(st == 400 and "error" in body, f"malformed body {raw!r} -> {st}")
        load_test(px_load, up)
        long_generation_memory_test(coda, up)
        # Nothing leaked: the proxy holds no more sockets than before, nothing runs, upstream streams closed.
        px.wait_until("the proxy's sockets are back to before",
                      lambda: socket_count(px.proc.pid) <= sockets_before)
        px_load.wait_until("the load proxy's sockets are back to before",
                           lambda: socket_count(px_load.proc.pid) <= load_sockets_before)
        px_load.wait_until("no request in flight after the load",
                           lambda: px_load.metric_sum("coda:num_requests_running") == 0)
        px.wait_until("no request in flight", lambda: px.metric_sum("coda:num_requests_running") == 0)
        up.wait_until("every upstream stream closed", lambda: up.json("GET", "/stats")[2]["open"] == 0)
    finally:
        dead_sock.close()
        for p in procs:
            err = p.stop()
            if p.proc.returncode not in (0, -15):
                check(False, f"process exited with {p.proc.returncode}: {err[-2000:]}")


def reasoning_tests(coda):
    """A reasoning model always answers through the proxy: a loop in the thinking (exact, or near with a
    counter and swapped words) is dropped, the upstream's looping generation cancelled, and a
    continuation carrying the kept reasoning asks the upstream for the answer; budgets hold; normal
    thinkers pass through as they are, their reasoning_tokens with them."""
    up = scripted()
    px = proxy(coda, up.port)
    px_fwd = proxy(coda, up.port, "--upstream-reasoning-budget", "forward")
    llama_up = scripted("--owned-by", "llamacpp")
    px_llama = proxy(coda, llama_up.port)
    procs = [up, px, px_fwd, llama_up, px_llama]
    answer = " The answer is four."

    def ask(p, content, stream=True, **kw):
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 600, "stream": stream, **kw}
        if stream:
            st, events, done = p.stream("/v1/chat/completions", body)
            thought = "".join((c.get("delta", {}).get("reasoning") or c.get("delta", {}).get("reasoning_content") or "")
                              for e in events for c in e.get("choices", []))
            rep = next((e["coda"] for e in events if "coda" in e), {})
            usage = next((e["usage"] for e in events if e.get("usage")), {})
            return {"ok": st == 200 and done, "thought": thought, "text": stream_text(events, True),
                    "finish": finish_of(events), "coda": rep, "usage": usage,
                    "keys": {k for e in events for c in e.get("choices", []) for k in c.get("delta", {})}}
        st, _, b = p.json("POST", "/v1/chat/completions", body)
        m = b["choices"][0]["message"] if st == 200 else {}
        return {"ok": st == 200, "thought": m.get("reasoning") or m.get("reasoning_content") or "",
                "text": m.get("content"), "finish": b["choices"][0]["finish_reason"] if st == 200 else None,
                "coda": b.get("coda", {}), "usage": b.get("usage", {}), "keys": set(m)}

    try:
        for marker, key in (("[think-loop] go", "reasoning_content"), ("[think-loop][reasoning] go", "reasoning"),
                            ("[think-near] go", "reasoning_content")):
            for stream in (True, False):
                before = up.json("GET", "/stats")[2]
                # 20,000 tokens with 20 alternatives each are far more than the sockets between hold:
                # the upstream cannot finish before the proxy cancels it, however slow the proxy runs.
                r = ask(px, marker, stream=stream, max_tokens=20000)
                # The upstream counts a cancellation when its next write fails, which may come after
                # the proxy has answered: wait for it, and for nothing left open.
                up.wait_until("the upstream saw the looping generation cancelled",
                              lambda: (lambda st: st["cancelled"] >= before["cancelled"] + 1 and st["open"] == 0)(
                                  up.json("GET", "/stats")[2]))
                after = up.json("GET", "/stats")[2]
                what = f"{marker} stream={stream}"
                ev = r["coda"].get("events", [])
                check(r["ok"] and r["text"] == answer and r["finish"] == "stop", f"{what}: an answer: {r}")
                check(any(e["action"] == "answer" for e in ev) and r["coda"].get("reasoning", {}).get("ended_by") == "loop",
                      f"{what}: the loop was answered: {ev}")
                check(key in r["keys"], f"{what}: the upstream's field name {key} passes through: {r['keys']}")
                # The rolled-back loop never reached the client: the thinking holds no copy of it twice.
                # (A near loop's onset may be its second copy: the first differs from the rest by more.)
                sentences = [x.strip() for x in r["thought"].split(".") if x.strip()]
                check(r["thought"].startswith(" Let me think") and len(sentences) <= 3,
                      f"{what}: the loop was dropped: {r['thought']!r}")
                check(after["requests"] == before["requests"] + 2 and after["cancelled"] >= before["cancelled"] + 1,
                      f"{what}: the looping generation was cancelled and one continuation asked: {before} {after}")
                cont = up.json("GET", "/last-bodies")[2][-1]
                last = cont["messages"][-1]
                check(cont.get("continue_final_message") is True and cont.get("add_generation_prompt") is False
                      and last["role"] == "assistant" and last.get("reasoning") == r["thought"].rstrip()
                      and last.get("reasoning_content") == last.get("reasoning"),
                      f"{what}: the continuation carries the kept reasoning: {last}")
        # The thinking inside the content (no reasoning parser), opened by the reply or by the
        # template's prompt, in front of llama.cpp's server: the continuation is a completion of the
        # prompt it renders (/apply-template), the thinking and its close; the client reads the close
        # in the content, then the answer.
        for marker in ("[think-tags][think-loop] go", "[think-tags][think-loop][opens] go"):
            for stream in (True, False):
                r = ask(px_llama, marker, stream=stream)
                text = r["text"] or ""
                head = "" if "[opens]" in marker else "<think>"
                # (An exact loop's onset may take in the "." before its first copy: ". I should ... again"
                # repeats as well.)
                kept = re.escape(head + " Let me think about the sum of the numbers") + r"\.?"
                check(r["finish"] == "stop" and re.fullmatch(kept + re.escape("\n</think>\n\n" + answer), text),
                      f"{marker} stream={stream} (llama.cpp): {r['finish']} {text!r}")
                cont = llama_up.json("GET", "/last-bodies")[2][-1]
                check("prompt" in cont and re.search(r"<think>\nLet me think about the sum of the numbers\.?\n</think>\n\n$",
                                                     cont["prompt"]) and cont["prompt"].count("<think>") == 1,
                      f"{marker}: the llama.cpp continuation: {cont}")
        # coda.reasoning_loop "stop" per request: the old behaviour (tested with the policies above).
        r = ask(px, "[think-loop] go", coda={"reasoning_loop": "stop"})
        check(r["finish"] == "repetition" and r["text"] == "", f"reasoning_loop stop: {r['finish']} {r['text']!r}")
        # Under observe nothing changes: the loop runs to max_tokens, all reasoning.
        r = ask(px, "[think-loop] go", coda={"guard": "observe"}, max_tokens=200)
        check(r["finish"] == "length" and r["text"] == "" and len(r["thought"].split(".")) > 20, f"observe: {r['finish']}")
        # Budgets: enforced by the proxy (the fields stay here), closed at a sentence end within the grace.
        for field, n in (("thinking_token_budget", 40), ("thinking_budget_tokens", 25)):
            r = ask(px, "[think-long] go", **{field: n}, stream_options={"include_usage": True})
            first = up.json("GET", "/last-bodies")[2][-2]
            got = r["coda"].get("reasoning", {}).get("tokens", -1)
            check(r["text"] == answer and r["coda"]["reasoning"]["ended_by"] == "budget" and n <= got <= n + 32
                  and r["thought"].rstrip().endswith("."), f"{field} {n}: {got} units, {r['thought'][-40:]!r} {r['text']!r}")
            check(field not in first, f"{field}: not sent upstream when enforced: {first}")
            check(r["usage"].get("completion_tokens_details", {}).get("reasoning_tokens") == got,
                  f"{field}: reasoning_tokens {r['usage']}")
        r = ask(px, "[think-long] go", reasoning_effort="low", max_tokens=3000)
        check(r["coda"]["reasoning"]["ended_by"] == "budget" and 1024 <= r["coda"]["reasoning"]["tokens"] <= 1056,
              f"reasoning_effort low: {r['coda'].get('reasoning')}")
        # forward: the upstream gets the field and enforces it (this one does not, so it runs on).
        r = ask(px_fwd, "[think-long] go", thinking_token_budget=40, max_tokens=200)
        sent = up.json("GET", "/last-bodies")[2][-1]
        check(sent.get("thinking_token_budget") == 40 and r["finish"] == "length" and r["text"] == "",
              f"forward: {sent.get('thinking_token_budget')} {r['finish']}")
        # A normal thinker passes through as it is, with the upstream's reasoning_tokens.
        for stream in (True, False):
            r = ask(px, "[think] go", stream=stream, stream_options={"include_usage": True})
            check(r["thought"] == " The user wants a fine day." and r["text"] == " It is a fine day, and the work is done."
                  and r["usage"].get("completion_tokens_details", {}).get("reasoning_tokens") == 7,
                  f"a normal thinker, stream={stream}: {r}")
        for bad in ({"thinking_token_budget": "x"}, {"reasoning_effort": "max"}, {"coda": {"reasoning_loop": 1}}):
            st, _, e = px.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], **bad})
            check(st == 400, f"refused {bad}: {st} {e}")
        metrics = px.request("GET", "/metrics")[2].decode()
        for name in ("coda:reasoning_loops_answered_total", "coda:reasoning_budgets_enforced_total",
                     "coda:reasoning_tokens_count"):
            check(name in metrics, f"proxy metric {name}")
    finally:
        for p in procs:
            p.stop()


def perpetual_proxy_tests(coda):
    """Perpetual generation through the proxy: an upstream that ends by itself (EOS, finish_reason
    "stop") before min_tokens is stepped back from and continued, hotter then at the request's own
    sampling; the client never sees text that a backstep took back."""
    up = scripted()
    px = proxy(coda, up.port)
    try:
        body = {"prompt": "[eos:20] go|", "max_tokens": 300, "temperature": 0.5,
                "coda": {"perpetual": {"min_tokens": 50, "backstep": 8}}}
        st, _, whole = px.json("POST", "/v1/completions", body)
        rep = whole.get("coda", {}).get("proxy", {})
        words = whole["choices"][0]["text"].split() if st == 200 else []
        # 20 words, back to 12, 10 hot ones (22), 20 more (42), back to 34, 10 hot (44), 20 more: 64.
        check(st == 200 and whole["choices"][0]["finish_reason"] == "stop" and len(words) == 64 and
              rep.get("perpetual_backsteps") == 2 and rep.get("upstream_requests") == 5,
              f"perpetual through the proxy: {len(words)} words, {rep}")
        bodies = up.json("GET", "/last-bodies")[2][-5:]
        check(bodies[1]["temperature"] > 0.7 and bodies[1]["max_tokens"] == 10 and bodies[2]["temperature"] == 0.5,
              f"the continuation after a backstep is hot for the decay's stretch, then the request's own: "
              f"{[(b.get('temperature'), b.get('max_tokens')) for b in bodies]}")
        st, events, done = px.stream("/v1/completions", dict(body, stream=True))
        check(done and stream_text(events, False) == whole["choices"][0]["text"],
              "streamed, the same text: no backstep took back what the client had")
        st, _, plain = px.json("POST", "/v1/completions", {"prompt": "[eos:20] go|", "max_tokens": 300})
        check(len(plain["choices"][0]["text"].split()) == 20, "without perpetual mode the upstream's end stands")
        st, _, e = px.json("POST", "/v1/completions", {"prompt": "x", "coda": {"perpetual": {"backstep": -2}}})
        check(st == 400 and e["error"]["param"] == "coda.perpetual.backstep", f"a bad perpetual field: {st} {e}")
    finally:
        for p in (up, px):
            p.stop()


def load_test(px, up, n_streams=64, rounds=6):
    """64 concurrent streams, half looping (stopped by the guard), some clients leaving early. Each
    stream's text carries its own tag word, so a mixed-up stream shows."""
    errors = []
    rss = []
    lock = threading.Lock()

    def one(i):
        rng = random.Random(i)
        for r in range(rounds):
            tag = f"t{i}x{r}"
            looping = i % 2 == 0
            prompt = f"[tag:{tag}]" + ("[loop] go|" if looping else "[text] go|")
            leave = rng.random() < 0.2
            st, events, done = px.stream("/v1/completions", {"prompt": prompt, "max_tokens": 2000, "stream": True},
                                         disconnect_after=2 if leave else None)
            if leave:
                continue
            text = stream_text(events, False)
            want = "repetition" if looping else "stop"
            if st != 200 or not done or finish_of(events) != want or not text.startswith(" " + tag + " "):
                with lock:
                    errors.append((i, r, st, finish_of(events), text[:80]))
            if not looping and text != f" {tag} It is a fine day, and the work is done.":
                with lock:
                    errors.append((i, r, "text", text))
        with lock:
            rss.append(rss_kib(px.proc.pid))

    base_rss = rss_kib(px.proc.pid)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n_streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, f"64 streams: {len(errors)} lost or mixed, e.g. {errors[:3]}")
    print(f"load: RSS {base_rss} KiB before, {max(rss)} KiB at most after {n_streams * rounds} streams")


def replica_tests(coda):
    """Several upstreams: requests spread by load, a refused connection moves to another replica,
    and /health, /v1/models and the tokenizer routes keep answering while one replica is down."""
    a, b = scripted(), scripted()
    dead_sock = socket.socket()
    dead_sock.bind(("127.0.0.1", 0))
    dead_port = dead_sock.getsockname()[1]
    # Bound but never listening: a connect there is refused, and the port stays ours for the whole
    # test. Closing it would free the port for the next `--port 0` server of a test running beside
    # this one (proxy_http and proxy_http_asan run in parallel), and the "dead" upstream would answer.
    dead = f"http://127.0.0.1:{dead_port}"
    ua, ub = f"http://127.0.0.1:{a.port}", f"http://127.0.0.1:{b.port}"
    # The dead replica first: every request is tried there before the proxy learns it is down.
    px = Proc([coda, "proxy", "--upstream", dead, "--upstream", f"{ua},{ub}", "--port", "0",
               "--upstream-fail-timeout", "600", "--upstream-affinity", "none"])
    # Prefix affinity (the default): a conversation's turns stay on one replica; many prompts spread.
    pa = Proc([coda, "proxy", "--upstream", f"{ua},{ub}", "--port", "0"])
    bad = subprocess.run([coda, "proxy", "--upstream", ua, "--upstream", ua, "--port", "0"], capture_output=True,
                         text=True, timeout=30)
    procs = [a, b, px, pa]
    try:
        check(bad.returncode != 0 and "given twice" in bad.stderr, "an upstream given twice: " + bad.stderr.strip())
        convo = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "[text] Tell me a story."}]
        for turn in range(6):
            st, _, r = pa.json("POST", "/v1/chat/completions", {"messages": convo, "max_tokens": 8})
            check(st == 200, f"conversation turn {turn}: {st}")
            convo = convo + [{"role": "assistant", "content": "Once."}, {"role": "user", "content": f"[text] more {turn}"}]
        turns_a = pa.metric_sum("coda:upstream_requests_total", upstream=ua)
        turns_b = pa.metric_sum("coda:upstream_requests_total", upstream=ub)
        check(sorted([turns_a, turns_b]) == [0, 6], f"a conversation's turns stay on one replica: {turns_a} + {turns_b}")
        for i in range(40):
            pa.json("POST", "/v1/completions", {"prompt": f"[text] document {i} begins here|", "max_tokens": 4})
        spread_a = pa.metric_sum("coda:upstream_requests_total", upstream=ua) - turns_a
        spread_b = pa.metric_sum("coda:upstream_requests_total", upstream=ub) - turns_b
        check(spread_a + spread_b == 40 and spread_a > 0 and spread_b > 0,
              f"40 different prompts spread over both replicas: {spread_a} + {spread_b}")
        n = 12
        for i in range(n):
            stream = i % 2 == 0
            body = {"prompt": f"[text] replica {i}|", "max_tokens": 8, "stream": stream}
            if stream:
                st, events, done = px.stream("/v1/completions", body)
                check(st == 200 and done and finish_of(events) in ("stop", "length"),
                      f"streamed request {i} through the replicas: {st} {finish_of(events)}")
            else:
                st, _, raw = px.json("POST", "/v1/completions", body)
                check(st == 200, f"request {i} through the replicas: {st} {str(raw)[:120]}")
        on_a = px.metric_sum("coda:upstream_requests_total", upstream=ua)
        on_b = px.metric_sum("coda:upstream_requests_total", upstream=ub)
        check(on_a + on_b == n and on_a > 0 and on_b > 0, f"requests spread over the live replicas: {on_a} + {on_b}")
        failovers = px.metric_sum("coda:upstream_failovers_total", upstream=dead)
        check(failovers == 1, f"the dead replica was tried once, then passed over: {failovers} failover(s)")
        st, _, health = px.json("GET", "/health")
        states = {u["upstream"]: u["status"] for u in health.get("upstreams", [])}
        check(st == 200 and health["status"] == "ok" and states.get(dead) == "unavailable" and
              states.get(ua) == "ok" and states.get(ub) == "ok", f"/health with one replica down: {st} {health}")
        st, _, m = px.json("GET", "/v1/models")
        check(st == 200 and "data" in m, f"/v1/models from a live replica: {st}")
        # llama-server's /slots over the pool: every live replica's slots, each marked with its
        # upstream; the dead one adds none. One of each replica's two slots is idle.
        st, _, slots = px.json("GET", "/slots")
        check(st == 200 and sorted((x["upstream"], x["id"], x["is_processing"]) for x in slots) ==
              sorted([(ua, 0, False), (ua, 1, True), (ub, 0, False), (ub, 1, True)]),
              f"/slots over the replicas: {st} {slots}")
        check(px.request("GET", "/slots?fail_on_no_slot=1")[0] == 200, "fail_on_no_slot with idle slots: 200")
        busy = scripted("--slots-busy")
        procs.append(busy)
        pb = Proc([coda, "proxy", "--upstream", dead, "--upstream", f"http://127.0.0.1:{busy.port}", "--port", "0"])
        procs.append(pb)
        st, _, e = pb.json("GET", "/slots?fail_on_no_slot=1")
        check(st == 503 and isinstance(e["error"]["message"], str), f"fail_on_no_slot, every slot busy: {st} {e}")
        check(pb.json("GET", "/slots")[0] == 200, "/slots with every slot busy: 200")
        # The older slot shape (`state`, no `is_processing`) that ik_llama.cpp's server sends.
        for flags, want in (([], 200), (["--slots-busy"], 503)):
            old_shape = scripted("--slots-state", *flags)
            procs.append(old_shape)
            po = Proc([coda, "proxy", "--upstream", f"http://127.0.0.1:{old_shape.port}", "--port", "0"])
            procs.append(po)
            st, _, e = po.json("GET", "/slots?fail_on_no_slot=1")
            check(st == want, f"fail_on_no_slot over slots with `state` {flags}: {st} {e}")
        # The engine's other routes pass through (unwatched), errors with their status.
        st, _, e = px.json("POST", "/v1/embeddings", {"input": ["ab", "abcd"], "model": "m"})
        check(st == 200 and [d["embedding"] for d in e.get("data", [])] == [[2, 0.5, -1.25], [4, 0.5, -1.25]],
              f"/v1/embeddings passes through: {st} {str(e)[:120]}")
        st, _, e = px.json("POST", "/v1/rerank", {"query": "hi", "documents": ["a"], "stream": True})
        check(st == 400 and e.get("error", {}).get("param") == "stream", f"a stream on a pass-through route: {st} {e}")
        st, _, e = px.json("POST", "/v1/nonsense", {"x": 1})
        check(st == 404 and "no route /v1/nonsense" in json.dumps(e), f"an unknown upstream route: {st} {str(e)[:120]}")
        form = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nRIFF\r\n'
                b'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n--b--\r\n')
        st, _, e = px.request("POST", "/v1/audio/transcriptions", form, {"Content-Type": "multipart/form-data; boundary=b"})
        check(st == 415, f"a non-JSON body is refused with 415: {st}")
        check(px.metric_sum("coda:passthrough_requests_total", route="/v1/embeddings") == 1 and
              px.metric_sum("coda:passthrough_requests_total", route="other") == 1,
              "pass-through counted by known route, the rest as other")
        # Every replica down: the client gets 502, as with one upstream.
        a.stop()
        b.stop()
        st, _, raw = px.json("POST", "/v1/completions", {"prompt": "[text] x|", "max_tokens": 4})
        check(st == 502 and "unreachable" in json.dumps(raw), f"every replica down: {st} {str(raw)[:160]}")
        st, _, h = px.json("GET", "/health")
        check(st == 503, f"/health with every replica down: {st}")
        st, _, e = px.json("GET", "/slots")
        check(st == 502 and "No upstream answered GET /slots" in e["error"]["message"],
              f"/slots with every replica down: {st} {e}")
    finally:
        dead_sock.close()
        for p in procs:
            p.stop()


def tls_tests(coda, work):
    """An https upstream with a self-signed certificate, through the shared client: coda proxy and
    coda bench refuse it with a message that names the flag, and trust it with that flag."""
    tls = os.path.join(HERE, "..", "data", "tls")
    cert, key = os.path.join(tls, "cert.pem"), os.path.join(tls, "key.pem")
    up = scripted("--tls", cert, key)
    url = f"https://127.0.0.1:{up.port}"  # self-signed: in no trust store, so only the flag trusts it
    plain = Proc([coda, "proxy", "--upstream", url, "--port", "0"])
    trusting = Proc([coda, "proxy", "--upstream", url, "--port", "0", "--upstream-ca-cert", cert])
    try:
        req = {"prompt": "[text] hi|", "max_tokens": 20}
        st, _, body = plain.json("POST", "/v1/completions", req)
        check(st == 502 and "--upstream-ca-cert" in body.get("error", {}).get("message", ""),
              f"https upstream with an untrusted certificate: {st} {body}")
        st, _, body = trusting.json("POST", "/v1/completions", req)
        check(st == 200 and body["choices"][0]["text"] == " It is a fine day, and the work is done.",
              f"https upstream with --upstream-ca-cert: {st} {body}")
        st, events, done = trusting.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "[text] hi"}],
                                                                    "max_tokens": 20, "stream": True})
        check(st == 200 and done and stream_text(events, True).startswith(" It is a fine day"),
              f"https upstream streamed: {st} {done}")
        out = os.path.join(work, "tls-bench")
        r = subprocess.run([coda, "bench", "--url", url, "--requests", "3", "-n", "16", "-o", out],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode != 0 and "--ca-cert" in r.stderr, f"bench, untrusted https: {r.returncode} {r.stderr[-300:]}")
        r = subprocess.run([coda, "bench", "--url", url, "--ca-cert", cert, "--requests", "3", "-n", "16", "-o", out],
                           capture_output=True, text=True, timeout=120)
        summary = json.load(open(os.path.join(out, "summary.json"))) if r.returncode == 0 else {}
        check(r.returncode == 0 and summary.get("requests") == 3 and summary.get("errors", 0) == 0,
              f"bench --ca-cert: {r.returncode} {r.stderr[-300:]} {summary.get('requests')}")
        # The proxy itself on https (vLLM's --ssl-certfile/--ssl-keyfile), in front of the https upstream.
        secure = Proc([coda, "proxy", "--upstream", url, "--port", "0", "--upstream-ca-cert", cert,
                       "--ssl-certfile", cert, "--ssl-keyfile", key])
        try:
            import ssl
            ctx = ssl.create_default_context(cafile=cert)
            c = http.client.HTTPSConnection("127.0.0.1", secure.port, timeout=60, context=ctx)
            c.request("POST", "/v1/completions", body=json.dumps(req), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            body = json.loads(r.read())
            check(r.status == 200 and body["choices"][0]["text"] == " It is a fine day, and the work is done.",
                  f"https proxy in front of an https upstream: {r.status} {body}")
        finally:
            secure.stop()
        r = subprocess.run([coda, "proxy", "--upstream", url, "--port", "0", "--ssl-certfile", cert, "--ssl-keyfile",
                            cert], capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and "the key must match the certificate" in r.stderr,
              f"a key that is not a key stops the proxy at start: {r.returncode} {r.stderr[-200:]}")
    finally:
        for p in (plain, trusting, up):
            p.stop()


def main():
    global CHECK_RSS
    coda, work = sys.argv[1], sys.argv[2]
    CHECK_RSS = "--no-rss" not in sys.argv[3:]
    os.makedirs(work, exist_ok=True)
    up = ts.Server(coda, "--guard", "observe")
    px = proxy(coda, up.port)
    try:
        metrics_text = coda_upstream_tests(coda, up, px)
        choices_tests(up, px)
        with open(os.path.join(work, "proxy-metrics.txt"), "w") as f:
            f.write(metrics_text)
        promtool = "/usr/bin/promtool"
        if os.path.exists(promtool):
            r = subprocess.run([promtool, "check", "metrics"], input=metrics_text, capture_output=True, text=True)
            # coda names its series like vLLM ("coda:..."); promtool's linter flags the colon, which the
            # exposition format allows. Anything else it says is a failure.
            problems = [ln for ln in (r.stdout + r.stderr).splitlines()
                        if ln.strip() and not ln.endswith("metric names should not contain ':'")]
            check(not problems, f"promtool check metrics: {problems}")
        else:
            check(False, "promtool is missing: run scripts/bootstrap.sh test")
    finally:
        for p in (px, up):
            p.stop()
    scripted_tests(coda, work)
    reasoning_tests(coda)
    perpetual_proxy_tests(coda)
    replica_tests(coda)
    tls_tests(coda, work)
    if ts.failures:
        print(f"{len(ts.failures)} failure(s)")
        sys.exit(1)
    print("proxy: all checks passed")


if __name__ == "__main__":
    main()
