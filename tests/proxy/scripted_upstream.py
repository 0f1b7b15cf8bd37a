"""A small OpenAI-compatible server written for the proxy's tests: deterministic text, loops and
logprobs, and the failures a real upstream shows, chosen by a marker in the prompt (or the last
message on chat):

  [loop]       a sentence repeated until max_tokens; hot sampling (temperature >= 1) gives fresh
               words instead, and a continuation at normal temperature ends the text (completion
               prompts end with "|": what follows it is text the proxy is continuing)
  [text]       a short text that ends with finish_reason "stop"
  [eos:N]      N fresh words, then finish_reason "stop": a model that ends early by EOS
  [fresh]      fresh words to max_tokens, finish_reason "length": long text that never degrades
  [llamacpp]   logprobs in the chat shape on /v1/completions, as llama.cpp sends them
  [hang-first] no response at all (the proxy's read timeout answers); a client closing counts as cancelled
  [hang-mid]   five tokens, then silence
  [malformed]  three tokens, then a data line that is not JSON
  [drop]       three tokens, then the connection closes without an end
  [error500]   HTTP 500 with an OpenAI error body
  [pace:N]     N milliseconds between tokens, like an engine decoding (the proxy benchmark)
  [think]      chat: a short reasoning in `reasoning_content` (vLLM's reasoning parsers), then the text
  [think-loop] chat: reasoning that repeats a sentence until max_tokens, content never starts
  [reasoning]  with [think]: the newer field name `reasoning` instead
  [think-near] chat: reasoning whose sentence repeats with a climbing counter and one word in ten
               swapped ("Let me check step 7 again ..."), until max_tokens
  [think-para] chat: reasoning that cycles through paraphrases of "wait, let me check again" in a
               random order (seeded by [seed:N]), until max_tokens
  [think-long] chat: reasoning of fresh words in sentences of ten, until max_tokens (a budget's case)
  [think-tags] chat: the thinking inside the content, "<think>...</think>", as a server without a
               reasoning parser sends it (with [think-loop]: a loop there)
  [opens]      with [think-tags]: the chat template's prompt opens the block (DeepSeek-R1's), so the
               content starts inside it without "<think>"; POST /apply-template (llama-server's)
               renders a prompt ending in "<think>"
  [seed:N]     varies the loop's sentence, counter start and swaps (the proxy's reasoning benchmark)
  A thinking request continued after its reasoning (a final assistant message that carries
  `reasoning` or `reasoning_content`, with continue_final_message; or a completion prompt that ends
  in "</think>" and a blank line, llama.cpp's way) answers " The answer is four." and stops; the
  usage of a [think...] reply says completion_tokens_details.reasoning_tokens.
  [tools]      chat: a short text, then two tool calls streamed as vLLM streams them (id, type and
               name first, the arguments in pieces), finish_reason "tool_calls"
  [overrun]    a broken server: fresh words to ten times max_tokens plus 100, as if it were not sent
  [stop-at-limit] a text cut at max_tokens says finish_reason "stop", not "length", as ik_llama.cpp's
               server did before its pull request 2362 (August 2026) and llama.cpp's before 7198
  [ping-mid]   five tokens, then SSE comments (": ping") every 50 ms and never another token
  [empty-mid]  five tokens, then data events with an empty delta every 50 ms and never a token
  [no-choice]  a 200 stream (or body) of events with no OpenAI choice ({"foo": 1}), then [DONE]
  [empty-choices] a 200 stream (or body) whose events all say "choices": [], then [DONE]

Flags: --refuse-logprobs answers any request asking for logprobs with 400, as some deployments do;
--tls CERT KEY serves https with that certificate (a self-signed one in tests/data/tls);
--hang-models holds GET /v1/models without an answer (a hung replica under a health probe);
--owned-by NAME puts owned_by in its /v1/models entry (llama.cpp's server says "llamacpp");
--metrics-off answers GET /metrics 501 with the error llama-server sends when started without --metrics.
GET /slots answers llama-server's shape: two slots, the second busy (both with --slots-busy); with
--slots-state, the older shape that ik_llama.cpp's server sends (`state`: 0 idle, 1 busy, and no
`is_processing`); with --slots-fill F, a busy slot holds F of its n_ctx in n_prompt_tokens (llama-server
counts the generated tokens there).
GET /v1/endless sends a JSON body without end; GET /v1/trickle one byte every 50 ms; GET or POST
/v1/echo-path (with anything after it) answers the request target exactly as it arrived.
GET /stats reports requests, streams open now and streams the client closed (cancellations);
GET /last-bodies, /last-request-ids and /last-authorizations the last ten generation requests'
bodies, X-Request-Id and Authorization headers.
Prints "listening on PORT" when ready.
"""
import argparse
import json
import random
import re
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOOP = " The cat sat on the mat and looked at the door."
# Thinking loops as reasoning models write them (exact, near with a counter, paraphrased).
LOOP_SENTENCES = ["Wait, let me check again.", "I should check the answer again.",
                  "Hmm, so the total is twelve, but let me verify that once more.",
                  "So we add the two numbers and get the sum, which we need to double check."]
NEAR_SENTENCES = ["Let me check step {n} again: the running total is {v} and the next value must match it.",
                  "Now for item {n} the sum becomes {v}, so I need to verify the remaining items in the list.",
                  "At step {n} we have {v} apples in the basket, which means the count is still not right yet."]
SWAPS = ["carefully", "maybe", "actually", "again", "still", "really", "quickly", "probably"]
PARAPHRASES = ["Wait, let me check again.", "Hmm, let me verify that once more.", "Actually, let me re-check this.",
               "Let me double-check the calculation.", "Hold on, I should confirm this again.",
               "Let me look at it one more time.", "Wait, is that right? Let me check."]
INTRO = " Once upon a time there was a house."
TEXT = " It is a fine day, and the work is done."
STATS = {"requests": 0, "open": 0, "cancelled": 0, "completed": 0, "bodies": [], "request_ids": [], "authorizations": []}
LOCK = threading.Lock()
STOP = threading.Event()


def wait_for_close(conn, limit_s=60):
    """Blocks like a hung engine until the client closes the connection (or the limit)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end and not STOP.is_set():
        r, _, _ = select.select([conn], [], [], 0.5)
        if r:
            try:
                if not conn.recv(1, socket.MSG_PEEK):
                    return True
            except OSError:
                return True
    return False


def words(text):
    return re.findall(r" ?[A-Za-z]+| ?[0-9]+|[.,:?]", text)


def top_alternatives(tok, k):
    alts = [(tok, -0.05)] + [(f" alt{i}", -3.0 - i) for i in range(max(0, k - 1))]
    return alts[:max(k, 0)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    refuse_logprobs = False
    hang_models = False
    slots_busy = False
    slots_state = False
    slots_fill = None
    metrics_off = False
    owned_by = None

    def log_message(self, *a):
        pass

    def send_json(self, status, obj):
        raw = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def keep_sending(self, piece, interval_s):
        """Sends `piece` as a chunk every interval until the client leaves (or five minutes pass: longer
        than any test waits for an answer, so a client that never leaves fails its test)."""
        end = time.monotonic() + 300
        try:
            while time.monotonic() < end and not STOP.is_set():
                self.chunk(piece)
                if interval_s:
                    time.sleep(interval_s)
        except (BrokenPipeError, ConnectionResetError):
            with LOCK:
                STATS["cancelled"] += 1
        self.close_connection = True

    def do_GET(self):
        if self.path.startswith("/v1/echo-path"):
            return self.send_json(200, {"target": self.path})
        if self.path == "/v1/models" and self.hang_models:
            wait_for_close(self.connection)
            self.close_connection = True
            return
        if self.path in ("/v1/endless", "/v1/trickle"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.chunk(b'{"data": [')
            if self.path == "/v1/endless":
                return self.keep_sending(b"1," * 32768, 0)
            return self.keep_sending(b" ", 0.05)
        if self.path == "/v1/models":
            model = {"id": "scripted", "object": "model", **({"owned_by": self.owned_by} if self.owned_by else {})}
            return self.send_json(200, {"object": "list", "data": [model]})
        if self.path == "/slots":  # llama-server's: two slots, one busy (both with --slots-busy)
            busy_key = (lambda b: {"state": int(b)}) if self.slots_state else (lambda b: {"is_processing": b})
            held = lambda b: {"n_prompt_tokens": int(self.slots_fill * 4096)} if b and self.slots_fill is not None else {}
            return self.send_json(200, [{"id": i, "id_task": 7 if busy else -1, "n_ctx": 4096, **busy_key(busy), **held(busy)}
                                        for i, busy in enumerate([self.slots_busy, True])])
        if self.path == "/metrics" and self.metrics_off:
            return self.send_json(501, {"error": {"code": 501, "type": "not_supported_error", "message":
                                                  "This server does not support metrics endpoint. Start it with `--metrics`"}})
        if self.path == "/stats":
            with LOCK:
                return self.send_json(200, {k: v for k, v in STATS.items() if k != "bodies"})
        if self.path == "/last-bodies":
            with LOCK:
                return self.send_json(200, STATS["bodies"][-10:])
        if self.path == "/last-request-ids":
            with LOCK:
                return self.send_json(200, STATS["request_ids"][-10:])
        if self.path == "/last-authorizations":
            with LOCK:
                return self.send_json(200, STATS["authorizations"][-10:])
        self.send_json(404, {"error": {"message": "no route", "type": "invalid_request_error"}})

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(n) or b"{}")
        if self.path.startswith("/v1/echo-path"):
            return self.send_json(200, {"target": self.path})
        if self.path == "/v1/embeddings":  # another route an engine serves beside generation
            inputs = body.get("input", [])
            inputs = [inputs] if isinstance(inputs, str) else inputs
            return self.send_json(200, {"object": "list", "model": body.get("model", "scripted"),
                                        "data": [{"object": "embedding", "index": i, "embedding": [len(t), 0.5, -1.25]}
                                                 for i, t in enumerate(inputs)]})
        if self.path == "/apply-template":  # llama-server's: the conversation rendered as a prompt
            msgs = body.get("messages") or []
            user = " ".join(m.get("content") or "" for m in msgs if m.get("role") == "user")
            prompt = "".join(f"<{m.get('role')}>{m.get('content') or ''}\n" for m in msgs) + "<assistant>"
            return self.send_json(200, {"prompt": prompt + ("<think>\n" if "[opens]" in user else "")})
        if not self.path.endswith("/completions"):
            return self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
        chat = self.path.endswith("/chat/completions")
        with LOCK:
            STATS["requests"] += 1
            STATS["bodies"].append(body)
            STATS["request_ids"].append(self.headers.get("X-Request-Id"))
            STATS["authorizations"].append(self.headers.get("Authorization"))
        if chat:
            msgs = body.get("messages", [])
            user = " ".join(m.get("content") or "" for m in msgs if m.get("role") == "user")
            last = msgs[-1] if msgs else {}
            continued = body.get("continue_final_message") and last.get("role") == "assistant"
            prior = last.get("content") or "" if continued else ""
            after_thought = bool(continued and (last.get("reasoning") or last.get("reasoning_content")))
        else:
            user = body.get("prompt", "")
            prior = user.split("|", 1)[1] if "|" in user else ""  # the proxy's continuation: prompt + accepted text
            after_thought = user.endswith("</think>\n\n")
        wants_lp = (body.get("logprobs") not in (None, False))
        if self.refuse_logprobs and wants_lp:
            return self.send_json(400, {"error": {"message": "logprobs are not enabled on this server",
                                                  "type": "invalid_request_error", "param": "logprobs"}})
        if "[no-choice]" in user or "[empty-choices]" in user:
            shape = {"foo": 1} if "[no-choice]" in user else {"id": "x", "object": "chat.completion.chunk", "choices": []}
            if not body.get("stream"):
                return self.send_json(200, shape)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(3):
                self.chunk(b"data: " + json.dumps(shape).encode() + b"\n\n")
            self.chunk(b"data: [DONE]\n\n")
            self.chunk(b"")
            return
        if "[error500]" in user:
            return self.send_json(500, {"error": {"message": "the engine failed", "type": "server_error"}})
        if "[hang-first]" in user:
            if wait_for_close(self.connection):
                with LOCK:
                    STATS["cancelled"] += 1
            self.close_connection = True
            return
        k = body.get("top_logprobs", 0) if chat else (body.get("logprobs") or 0)
        max_tokens = body.get("max_tokens") or 10 ** 6
        temp = body.get("temperature", 0.7)
        # What to say: the loop, fresh words when sampled hot, an end when continued at normal temperature.
        if "[loop]" in user:
            if temp >= 1.0:
                toks = [f" w{i}" for i in range(max_tokens)]
                finish = "length"
            elif prior:
                toks, finish = words(" The end."), "stop"
            else:
                toks = words(INTRO)
                while len(toks) < max_tokens:
                    toks += words(LOOP)
                finish = "length"
        elif re.search(r"\[eos:(\d+)\]", user):  # N fresh words, then the model ends (EOS)
            n = int(re.search(r"\[eos:(\d+)\]", user).group(1))
            toks, finish = [f" w{i}" for i in range(n)], "stop"
        elif "[fresh]" in user:  # fresh words to max_tokens: long and coherent, never looping
            toks, finish = [f" w{i}" for i in range(max_tokens)], "length"
        elif "[overrun]" in user:
            toks, finish = [f" v{i}" for i in range(10 * max_tokens + 100)], "stop"
        else:
            toks, finish = words(TEXT), "stop"
        # Chat only: each token is (channel, text); a tool call's argument pieces carry the call.
        think = []
        seed_m = re.search(r"\[seed:(\d+)\]", user)
        rng = random.Random(int(seed_m.group(1)) if seed_m else 0)
        if after_thought:
            toks, finish = words(" The answer is four."), "stop"
        elif chat and "[think-loop]" in user:
            think = words(" Let me think about the sum of the numbers.")
            sentence = " " + (rng.choice(LOOP_SENTENCES) if seed_m else "I should check the answer again.")
            while len(think) < max_tokens:
                think += words(sentence)
            toks, finish = [], "length"
        elif chat and "[think-near]" in user:
            think = words(" Let me think about the sum of the numbers.")
            step = rng.randint(1, 50)
            base_words = rng.choice(NEAR_SENTENCES).split()
            while len(think) < max_tokens:
                w = list(base_words)
                for j in range(len(w)):  # about one word in ten swapped in each copy
                    if rng.random() < 0.1:
                        w[j] = rng.choice(SWAPS)
                think += words(" " + " ".join(w).format(n=step, v=step * 7))
                step += 1
            toks, finish = [], "length"
        elif chat and "[think-para]" in user:
            think = words(" Let me think about the sum of the numbers.")
            while len(think) < max_tokens:
                think += words(" " + rng.choice(PARAPHRASES))
            toks, finish = [], "length"
        elif chat and "[think-long]" in user:
            think, i = [], 0
            while len(think) < max_tokens:
                think += [f" r{i}"] + (["."] if i % 10 == 9 else [])
                i += 1
            toks, finish = [], "length"
        elif chat and "[think]" in user:
            think = words(" The user wants a fine day.")
        if think and "[think-tags]" in user:  # no reasoning parser: the thinking is content
            opened = [] if "[opens]" in user else ["<think>"]  # [opens]: the template's prompt opened it
            toks = opened + think + (["</think>", "\n\n"] + toks if finish != "length" else [])
            think = []
        calls = []
        if chat and "[tools]" in user:
            calls = [("call_a", "get_weather", ['{"city"', ': "Par', 'is"}']),
                     ("call_b", "get_time", ['{"tz": "CET"}'])]
            toks, finish = words(" Checking."), "tool_calls"
        reasoning_key = "reasoning" if "[reasoning]" in user else "reasoning_content"
        tag = re.search(r"\[tag:(\w+)\]", user)
        if tag:  # the load test tells streams apart by a word only their own text has
            toks = [" " + tag.group(1)] + toks
        if len(toks) >= max_tokens and "[overrun]" not in user:
            toks, finish = toks[:max_tokens], "stop" if "[stop-at-limit]" in user else "length"
        llamacpp = "[llamacpp]" in user
        pace = re.search(r"\[pace:(\d+)\]", user)
        pace_s = int(pace.group(1)) / 1000.0 if pace else 0.0
        stream = body.get("stream", False)
        cid = f"scripted-{STATS['requests']}"
        created = int(time.time())

        def choice_for(tok, channel="content"):
            c = {"index": 0, "finish_reason": None}
            if chat:
                c["delta"] = {reasoning_key: tok} if channel == "reasoning" else {"content": tok}
            else:
                c["text"] = tok
            if wants_lp:
                alts = top_alternatives(tok, k)
                if chat or llamacpp:
                    c["logprobs"] = {"content": [{"token": tok, "logprob": -0.05,
                                                  "top_logprobs": [{"token": t, "logprob": l} for t, l in alts]}]}
                else:
                    c["logprobs"] = {"tokens": [tok], "token_logprobs": [-0.05],
                                     "top_logprobs": [{t: l for t, l in alts}]}
            return c

        if not stream:
            text = "".join(toks)
            c = {"index": 0, "finish_reason": finish}
            if chat:
                c["message"] = {"role": "assistant", "content": text}
                if think:
                    c["message"][reasoning_key] = "".join(think[:max_tokens])
            else:
                c["text"] = text
            usage = {"prompt_tokens": 7, "completion_tokens": len(toks) + len(think[:max_tokens]),
                     "total_tokens": 7 + len(toks) + len(think[:max_tokens])}
            if think:
                usage["completion_tokens_details"] = {"reasoning_tokens": len(think[:max_tokens])}
            return self.send_json(200, {"id": cid, "object": "text_completion", "created": created, "model": "scripted",
                                        "choices": [c], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with LOCK:
            STATS["open"] += 1
        try:
            def event(obj):
                self.chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

            base = {"id": cid, "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": created, "model": "scripted", "system_fingerprint": "fp-scripted"}
            if chat:
                event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                            "finish_reason": None}]})
            for i, tok in enumerate(think[:max_tokens]):
                event({**base, "choices": [choice_for(tok, "reasoning")]})
            for i, tok in enumerate(toks):
                if "[hang-mid]" in user and i == 5:
                    if wait_for_close(self.connection):
                        with LOCK:
                            STATS["cancelled"] += 1
                    self.close_connection = True
                    return
                if "[malformed]" in user and i == 3:
                    self.chunk(b"data: {not json\n\n")
                    self.chunk(b"")
                    return
                if i == 5 and ("[ping-mid]" in user or "[empty-mid]" in user):
                    idle = {**base, "choices": [{"index": 0, "finish_reason": None,
                                                 **({"delta": {}} if chat else {"text": ""})}]}
                    piece = b": ping\n\n" if "[ping-mid]" in user else b"data: " + json.dumps(idle).encode() + b"\n\n"
                    return self.keep_sending(piece, 0.05)
                if "[drop]" in user and i == 3:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if pace_s:
                    time.sleep(pace_s)
                event({**base, "choices": [choice_for(tok)]})
            for n, (cid_, name, pieces) in enumerate(calls):
                event({**base, "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
                    {"index": n, "id": cid_, "type": "function", "function": {"name": name, "arguments": ""}}]}}]})
                for piece in pieces:
                    event({**base, "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
                        {"index": n, "function": {"arguments": piece}}]}}]})
            event({**base, "choices": [{"index": 0, "finish_reason": finish,
                                        **({"delta": {}} if chat else {"text": ""})}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                n_think = len(think[:max_tokens])
                usage = {"prompt_tokens": 7, "completion_tokens": len(toks) + n_think,
                         "total_tokens": 7 + len(toks) + n_think}
                if n_think:
                    usage["completion_tokens_details"] = {"reasoning_tokens": n_think}
                event({**base, "choices": [], "usage": usage})
            self.chunk(b"data: [DONE]\n\n")
            self.chunk(b"")
            with LOCK:
                STATS["completed"] += 1
        except (BrokenPipeError, ConnectionResetError):
            with LOCK:
                STATS["cancelled"] += 1
        finally:
            with LOCK:
                STATS["open"] -= 1


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # listen(2)'s backlog is set while binding: the default 5 resets bursts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--refuse-logprobs", action="store_true")
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ap.add_argument("--hang-models", action="store_true")
    ap.add_argument("--slots-busy", action="store_true")
    ap.add_argument("--slots-state", action="store_true")
    ap.add_argument("--slots-fill", type=float)
    ap.add_argument("--metrics-off", action="store_true")
    ap.add_argument("--owned-by", help="the owned_by of its /v1/models entry (llama.cpp's server says llamacpp)")
    a = ap.parse_args()
    Handler.refuse_logprobs = a.refuse_logprobs
    Handler.hang_models = a.hang_models
    Handler.slots_busy = a.slots_busy
    Handler.slots_state = a.slots_state
    Handler.slots_fill = a.slots_fill
    Handler.metrics_off = a.metrics_off
    Handler.owned_by = a.owned_by
    srv = Server(("127.0.0.1", a.port), Handler)
    if a.tls:
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*a.tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print(f"listening on {srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    finally:
        STOP.set()


if __name__ == "__main__":
    main()
