#!/usr/bin/python3
"""Replies in the model's own words over real HTTP: with `tools` and tool_choice "auto", coda
serve reads the calls the model writes in its chat template's format (hermes for Qwen2.5's template,
llama3_json when --tool-call-parser asks) and answers them as OpenAI `tool_calls`, streamed or not;
and a reasoning model's <think> block goes out as `reasoning` (vLLM's current name; `reasoning_content` with --reasoning-field) (DeepSeek-R1's template opens
the block in its generation prompt; Qwen3's model opens it itself, and may call tools after it).

The bundled model does not write tool calls by itself, so the replies are fixed with guided_choice
(one text per request): the model generates exactly that text, token by token, and the server
parses what was generated, as it would any reply. Text that holds no call, a call cut off by
max_tokens, tool_choice "none", and a server with no known format all leave the text as content.

Usage: /usr/bin/python3 tests/server/test_tool_calls.py build/coda
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server, check, failures  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN = os.path.join(HERE, "..", "data", "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CHAT = [{"role": "user", "content": "Weather in Paris?"}]
CALL = 'I will look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def ask(server, reply, **extra):
    body = {"messages": CHAT, "tools": TOOLS, "guided_choice": [reply], "max_tokens": 200, "coda": {"guard": "observe"},
            **extra}
    status, _, out = server.json("POST", "/v1/chat/completions", body)
    check(status == 200, f"status {status}: {out}")
    return out["choices"][0] if status == 200 else None


def ask_stream(server, reply, **extra):
    body = {"messages": CHAT, "tools": TOOLS, "guided_choice": [reply], "max_tokens": 200, "stream": True,
            "coda": {"guard": "observe"}, **extra}
    status, events, done = server.stream("/v1/chat/completions", body)
    check(status == 200 and done, f"stream status {status}, done {done}")
    content, calls, finish = "", [], None
    for e in events:
        for c in e.get("choices", []):
            d = c.get("delta", {})
            content += d.get("content") or ""
            calls += d.get("tool_calls") or []
            finish = c.get("finish_reason") or finish
    return content, calls, finish


def is_weather_call(call, city):
    return (call.get("type") == "function" and call["function"]["name"] == "get_weather"
            and json.loads(call["function"]["arguments"]) == {"city": city} and call.get("id", "").startswith("call_"))


# The Responses API's shape of the same tool: flat, not nested under "function".
RESPONSES_TOOLS = [dict(type="function", **TOOLS[0]["function"])]


def is_weather_item(item, city):
    return (item.get("type") == "function_call" and item.get("name") == "get_weather" and item.get("status") == "completed"
            and json.loads(item.get("arguments", "null")) == {"city": city} and item.get("call_id", "").startswith("call_")
            and item.get("id", "").startswith("fc_"))


def responses_tests(s):
    """/v1/responses with function tools: the calls the model writes come back as function_call items,
    streamed as OpenAI's events, and a conversation that carries calls and their outputs back as items
    is the prompt the chat route builds from the same turns."""
    def ask_responses(reply, **extra):
        body = {"input": "Weather in Paris?", "tools": RESPONSES_TOOLS, "guided_choice": [reply],
                "max_output_tokens": 200, "coda": {"guard": "observe"}, **extra}
        st, _, out = s.json("POST", "/v1/responses", body)
        check(st == 200, f"responses with tools: status {st}: {out}")
        return out if st == 200 else {"output": []}

    r = ask_responses(CALL)
    out = r["output"]
    check(r.get("status") == "completed" and [o["type"] for o in out] == ["message", "function_call"] and
          out[0]["content"][0]["text"] == "I will look." and is_weather_item(out[1], "Paris") and
          r["tools"] == RESPONSES_TOOLS and r["tool_choice"] == "auto",
          f"responses: the text as a message, the call as a function_call item: {out}")
    r = ask_responses('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    check([o["type"] for o in r["output"]] == ["function_call"] and is_weather_item(r["output"][0], "Oslo"),
          f"responses: a call alone is the only item: {r['output']}")
    r = ask_responses(CALL, tool_choice="none")
    check([o["type"] for o in r["output"]] == ["message"] and r["output"][0]["content"][0]["text"] == CALL,
          f"responses: tool_choice none leaves the text: {r['output']}")

    # Streamed: the message's events, then the call's item, its arguments and done, then completed.
    def stream_responses(reply):
        st, events, _ = s.stream("/v1/responses", {"input": "Weather in Paris?", "tools": RESPONSES_TOOLS,
                                                   "guided_choice": [reply], "max_output_tokens": 200, "stream": True,
                                                   "coda": {"guard": "observe"}})
        check(st == 200, f"responses stream: status {st}")
        return events

    events = stream_responses(CALL)
    types = [e.get("type") for e in events]
    deltas = "".join(e["delta"] for e in events if e.get("type") == "response.output_text.delta")
    added = [e for e in events if e.get("type") == "response.output_item.added"]
    args = [e for e in events if e.get("type") == "response.function_call_arguments.done"]
    final = events[-1].get("response", {}) if events else {}
    check([e.get("sequence_number") for e in events] == list(range(len(events))) and
          types[-5:] == ["response.output_item.added", "response.function_call_arguments.delta",
                         "response.function_call_arguments.done", "response.output_item.done", "response.completed"] and
          [a["item"]["type"] for a in added] == ["message", "function_call"] and added[1]["output_index"] == 1 and
          deltas.strip() == "I will look." and "<tool_call" not in deltas and
          len(args) == 1 and json.loads(args[0]["arguments"]) == {"city": "Paris"} and
          [o["type"] for o in final.get("output", [])] == ["message", "function_call"] and
          is_weather_item(final["output"][1], "Paris"),
          f"responses stream with a call: {types} {deltas!r}")
    events = stream_responses('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    types = [e.get("type") for e in events]
    check(types[:3] == ["response.created", "response.in_progress", "response.output_item.added"] and
          events[2]["item"]["type"] == "function_call" and "response.output_text.delta" not in types and
          types[-1] == "response.completed", f"responses stream, a call alone: no message item: {types}")

    # The next turn: the call and its output as items. The prompt is the chat route's for the same
    # turns (the same count, and the same greedy reply).
    call = {"type": "function_call", "call_id": "call_abc123", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    items = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "I will look."}, call,
             {"type": "function_call_output", "call_id": "call_abc123", "output": "sunny, 21 C"}]
    turns = CHAT + [{"role": "assistant", "content": "I will look.", "tool_calls": [
        {"id": "call_abc123", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                    {"role": "tool", "tool_call_id": "call_abc123", "content": "sunny, 21 C"}]
    st, _, r = s.json("POST", "/v1/responses", {"input": items, "tools": RESPONSES_TOOLS, "max_output_tokens": 6,
                                                 "temperature": 0})
    st2, _, c = s.json("POST", "/v1/chat/completions", {"messages": turns, "tools": TOOLS, "max_tokens": 6,
                                                         "temperature": 0})
    check(st == 200 and st2 == 200 and r["usage"]["input_tokens"] == c["usage"]["prompt_tokens"] and
          r["output"][0]["content"][0]["text"] == c["choices"][0]["message"]["content"],
          f"responses: call and output items make the chat route's prompt: {st} {st2} {str(r)[:300]} {str(c)[:200]}")
    st, _, tok = s.json("POST", "/tokenize", {"messages": turns, "tools": TOOLS})
    st2, _, text = s.json("POST", "/detokenize", {"tokens": tok.get("tokens", [])})
    check("sunny, 21 C" in text.get("prompt", "") and "get_weather" in text.get("prompt", ""),
          f"the chat route's prompt holds the call and its output: {text.get('prompt', '')[-300:]}")

    # A forced call (tool_choice required, or by name): the output is held to the call's JSON (the
    # city an enum, so that the small model's call ends).
    bounded = [dict(RESPONSES_TOOLS[0], parameters={"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"], "additionalProperties": False})]
    for choice in ("required", {"type": "function", "name": "get_weather"}):
        st, _, r = s.json("POST", "/v1/responses", {"input": "Weather in Paris?", "tools": bounded,
                                                     "tool_choice": choice, "max_output_tokens": 1500, "temperature": 1.0,
                                                     "seed": 0})
        calls = [o for o in r.get("output", []) if o.get("type") == "function_call"]
        ok = st == 200 and len(calls) >= 1 and calls[0]["name"] == "get_weather"
        try:
            ok = ok and isinstance(json.loads(calls[0]["arguments"]), dict)
        except ValueError:
            ok = False
        check(ok and r["status"] == "completed", f"responses: tool_choice {choice} forces a call: {st} {str(r)[:300]}")

    # What the Responses API offers and coda does not run: refused with the field named.
    for body, param in (({"input": "x", "tools": [{"type": "web_search"}]}, "tools"),
                        ({"input": "x", "tools": RESPONSES_TOOLS, "tool_choice": {"type": "file_search"}}, "tool_choice"),
                        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input"),
                        ({"input": [{"type": "function_call_output", "output": "1"}]}, "input"),
                        ({"input": "x", "parallel_tool_calls": "yes"}, "parallel_tool_calls")):
        st, _, e = s.json("POST", "/v1/responses", body)
        check(st == 400 and e["error"]["param"] == param, f"responses refuses {body}: {st} {e}")


def main():
    coda = sys.argv[1]

    s = Server(coda, "--chat-template", QWEN)  # Qwen2.5's template teaches <tool_call> blocks
    try:
        c = ask(s, CALL)
        if c:
            m = c["message"]
            check(c["finish_reason"] == "tool_calls", f"finish {c['finish_reason']}")
            check(m.get("content") == "I will look.", f"content {m.get('content')!r}")
            check(len(m.get("tool_calls") or []) == 1 and is_weather_call(m["tool_calls"][0], "Paris"),
                  f"tool_calls {m.get('tool_calls')}")
        two = CALL + '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
        c = ask(s, two)
        if c:
            calls = c["message"].get("tool_calls") or []
            check(len(calls) == 2 and is_weather_call(calls[1], "Rome") and calls[0]["id"] != calls[1]["id"],
                  f"two calls: {calls}")
        # Two requests under one X-Request-Id (a client's trace id per conversation): their answers
        # share an id, their calls do not, so a conversation never holds two calls of one id.
        ids = []
        for _ in range(2):
            body = {"messages": CHAT, "tools": TOOLS, "guided_choice": [CALL], "max_tokens": 200,
                    "coda": {"guard": "observe"}}
            st, _, out = s.json("POST", "/v1/chat/completions", body, {"X-Request-Id": "conversation-1"})
            check(st == 200 and out["id"] == "chatcmpl-conversation-1", f"answer id from X-Request-Id: {out.get('id')}")
            ids += [t["id"] for t in out["choices"][0]["message"].get("tool_calls") or []]
        check(len(ids) == 2 and ids[0] != ids[1] and all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids),
              f"tool call ids stay unique under one X-Request-Id: {ids}")
        # A call alone: content is null, as OpenAI sends it.
        c = ask(s, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
        if c:
            check(c["message"]["content"] is None and is_weather_call(c["message"]["tool_calls"][0], "Oslo"),
                  f"call alone: {c['message']}")
        # Text with no call, and tool_choice "none": the text as it is.
        for reply, extra in (("It is sunny, a < b.", {}), (CALL, {"tool_choice": "none"})):
            c = ask(s, reply, **extra)
            if c:
                check(c["message"]["content"] == reply and "tool_calls" not in c["message"]
                      and c["finish_reason"] == "stop", f"{extra} plain reply: {c}")
        # Cut off by max_tokens inside the call: no call, the text as content, finish "length".
        # Greedy, so that the cut falls inside the marker: guided_choice lets the model spell the
        # reply in any tokens, and at the default temperature 1 about one draw in 30 spells "I will
        # look." one character a token, when 12 tokens end before the marker begins.
        c = ask(s, CALL, max_tokens=16, temperature=0)
        if c:
            check(c["finish_reason"] == "length" and "tool_calls" not in c["message"]
                  and CALL.startswith(c["message"]["content"]) and "<t" in c["message"]["content"], f"cut off: {c}")

        # Streamed: the content before the call arrives as text, the call whole at the end.
        content, calls, finish = ask_stream(s, CALL)
        check(content.strip() == "I will look." and "<tool_call" not in content, f"streamed content {content!r}")
        check(len(calls) == 1 and calls[0].get("index") == 0 and is_weather_call(calls[0], "Paris"),
              f"streamed calls {calls}")
        check(finish == "tool_calls", f"streamed finish {finish}")
        # Text that only looks like the start of a marker streams whole once it is clearly not one.
        content, calls, finish = ask_stream(s, "Use <b>bold</b> or <tool> tags.")
        check(content == "Use <b>bold</b> or <tool> tags." and not calls and finish == "stop",
              f"streamed plain {content!r} {calls} {finish}")
        # The held-back start of the marker is sent as content at the end.
        content, calls, finish = ask_stream(s, CALL, max_tokens=16, temperature=0)
        check(not calls and finish == "length" and CALL.startswith(content) and "<t" in content,
              f"streamed cut off {content!r} {calls} {finish}")
        responses_tests(s)
    finally:
        s.stop()

    # Mistral Nemo's template (its format read by default) refuses a conversation whose tool-call
    # ids are not 9 characters: the ids coda gives its calls must come back through it.
    nemo = os.path.join(HERE, "..", "data", "templates", "mistralai-Mistral-Nemo-Instruct-2407.jinja")
    s = Server(coda, "--chat-template", nemo)
    try:
        c = ask(s, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}]')
        calls = (c or {}).get("message", {}).get("tool_calls") or []
        check(len(calls) == 1 and re.fullmatch(r"[0-9a-f]{9}", calls[0]["id"]) is not None and
              calls[0]["function"]["name"] == "get_weather", f"mistral: one call with a 9-character id: {c}")
        if calls:
            turn = CHAT + [{"role": "assistant", "content": None, "tool_calls": calls},
                           {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny"}]
            st, _, out = s.json("POST", "/v1/chat/completions", {"messages": turn, "tools": TOOLS, "max_tokens": 2})
            check(st == 200, f"mistral: the call's id comes back through the template: {st} {out}")
        # A conversation carried over from another server, with OpenAI-style ids: kept to their last
        # 9 characters (as vLLM does for Mistral) instead of a 400 from the template.
        long_id = "call_Zx81fUPq2m0Yb7TnLw4s9aRc"
        turn = CHAT + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": long_id, "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                       {"role": "tool", "tool_call_id": long_id, "content": "sunny"}]
        st, _, out = s.json("POST", "/v1/chat/completions", {"messages": turn, "tools": TOOLS, "max_tokens": 2})
        check(st == 200, f"mistral: a conversation with 28-character call ids is answered: {st} {out}")
        st, _, tok = s.json("POST", "/tokenize", {"messages": turn, "tools": TOOLS})
        ids = tok.get("tokens", [])
        st2, _, text = s.json("POST", "/detokenize", {"tokens": ids})
        check(st == 200 and st2 == 200 and long_id[-9:] in text.get("prompt", "") and long_id not in text.get("prompt", ""),
              f"mistral: the prompt holds the id's last 9 characters: {text.get('prompt', '')[-300:]}")
    finally:
        s.stop()

    # llama3_json asked by flag: the whole reply is the call, with "parameters".
    s = Server(coda, "--chat-template", "chatml", "--tool-call-parser", "llama3_json", "--enable-auto-tool-choice")
    try:
        c = ask(s, '{"name": "get_weather", "parameters": {"city": "Rome"}}')
        if c:
            check(c["finish_reason"] == "tool_calls" and c["message"]["content"] is None
                  and is_weather_call(c["message"]["tool_calls"][0], "Rome"), f"llama3_json: {c}")
        content, calls, finish = ask_stream(s, '{"name": "get_weather", "parameters": {"city": "Rome"}}')
        check(content == "" and len(calls) == 1 and finish == "tool_calls", f"llama3_json streamed {content!r} {calls}")
        c = ask(s, '{"answer": 42}')
        if c:
            check(c["message"]["content"] == '{"answer": 42}' and c["finish_reason"] == "stop", f"not a call: {c}")
    finally:
        s.stop()

    # The bundled model's own template knows no tool-call format: replies stay text.
    s = Server(coda)
    try:
        c = ask(s, CALL)
        if c:
            check(c["message"]["content"] == CALL and c["finish_reason"] == "stop", f"no format: {c}")
    finally:
        s.stop()

    # DeepSeek-R1's template opens <think> in the generation prompt: the reply starts inside it.
    r1 = os.path.join(HERE, "..", "data", "templates", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")
    reply = "Two and two make four.\n</think>\n\nFour."
    s = Server(coda, "--chat-template", r1)
    try:
        c = ask(s, reply)
        if c:
            m = c["message"]
            check(m.get("reasoning") == "Two and two make four.\n" and m["content"] == "\n\nFour."
                  and c["finish_reason"] == "stop", f"R1 reasoning: {m}")
        content, calls, finish = ask_stream(s, reply)
        _, events, _ = s.stream("/v1/chat/completions", {"messages": CHAT, "guided_choice": [reply], "max_tokens": 200,
                                                         "stream": True, "coda": {"guard": "observe"}})
        thought = "".join(c.get("delta", {}).get("reasoning") or "" for e in events for c in e.get("choices", []))
        check(thought == "Two and two make four.\n" and content == "\n\nFour.", f"R1 streamed: {thought!r} {content!r}")
        # Cut off while thinking: all of it is reasoning, the content empty.
        c = ask(s, reply, max_tokens=6)
        if c:
            check(c["finish_reason"] == "length" and c["message"]["content"] == ""
                  and reply.startswith(c["message"].get("reasoning", "")), f"R1 cut off: {c['message']}")
    finally:
        s.stop()
    # llama.cpp's (and vLLM's older) name for the field, when the operator asks for it.
    s = Server(coda, "--chat-template", r1, "--reasoning-field", "reasoning_content")
    try:
        c = ask(s, reply)
        if c:
            m = c["message"]
            check(m.get("reasoning_content") == "Two and two make four.\n" and "reasoning" not in m,
                  f"--reasoning-field reasoning_content: {m}")
        _, events, _ = s.stream("/v1/chat/completions", {"messages": CHAT, "guided_choice": [reply], "max_tokens": 200,
                                                         "stream": True, "coda": {"guard": "observe"}})
        deltas = [c.get("delta", {}) for e in events for c in e.get("choices", [])]
        check("".join(d.get("reasoning_content") or "" for d in deltas) == "Two and two make four.\n"
              and not any("reasoning" in d for d in deltas), f"--reasoning-field streamed: {deltas}")
    finally:
        s.stop()
    s = Server(coda, "--chat-template", r1, "--reasoning-parser", "none")
    try:
        c = ask(s, reply)
        if c:
            check(c["message"]["content"] == reply and "reasoning" not in c["message"], f"parser none: {c}")
    finally:
        s.stop()

    # Qwen3: the model opens <think> itself, then calls a tool in the hermes format.
    qwen3 = os.path.join(HERE, "..", "data", "templates", "Qwen-Qwen3-0.6B.jinja")
    reply = '<think>\nThe user wants weather.\n</think>\n\n' + CALL
    s = Server(coda, "--chat-template", qwen3)
    try:
        c = ask(s, reply)
        if c:
            m = c["message"]
            check(m.get("reasoning") == "\nThe user wants weather.\n" and m.get("content") == "I will look."
                  and is_weather_call((m.get("tool_calls") or [{}])[0], "Paris") and c["finish_reason"] == "tool_calls",
                  f"Qwen3 reasoning and a call: {m}")
        content, calls, finish = ask_stream(s, reply)
        check(content.strip() == "I will look." and len(calls) == 1 and finish == "tool_calls",
              f"Qwen3 streamed: {content!r} {calls} {finish}")
        c = ask(s, "Plain answer.")
        if c:
            check(c["message"]["content"] == "Plain answer." and "reasoning" not in c["message"], f"Qwen3 plain: {c}")
        # The Responses API: the thinking as a reasoning item, then the message and the call; streamed,
        # the reasoning item closes before the message opens, and the indexes follow the items.
        rq = {"input": "Weather in Paris?", "tools": RESPONSES_TOOLS, "guided_choice": [reply], "max_output_tokens": 200,
              "coda": {"guard": "observe"}}
        st, _, r = s.json("POST", "/v1/responses", rq)
        out = r.get("output", [])
        check(st == 200 and [o["type"] for o in out] == ["reasoning", "message", "function_call"] and
              out[0]["content"] == [{"type": "reasoning_text", "text": "\nThe user wants weather.\n"}] and
              out[1]["content"][0]["text"] == "I will look." and is_weather_item(out[2], "Paris"),
              f"Qwen3 through /v1/responses: reasoning, message and call items: {out}")
        st, events, _ = s.stream("/v1/responses", dict(rq, stream=True))
        types = [e.get("type") for e in events]
        thought = "".join(e["delta"] for e in events if e.get("type") == "response.reasoning_text.delta")
        added = [(e["output_index"], e["item"]["type"]) for e in events if e.get("type") == "response.output_item.added"]
        done = [(e["output_index"], e["item"]["type"]) for e in events if e.get("type") == "response.output_item.done"]
        final = events[-1].get("response", {}) if events else {}
        check(st == 200 and thought == "\nThe user wants weather.\n" and
              added == [(0, "reasoning"), (1, "message"), (2, "function_call")] and added == done and
              types.index("response.reasoning_text.done") < types.index("response.content_part.added") and
              [o["type"] for o in final.get("output", [])] == ["reasoning", "message", "function_call"] and
              [e.get("sequence_number") for e in events] == list(range(len(events))),
              f"Qwen3 streamed through /v1/responses: {types}")
    finally:
        s.stop()

    # An unknown parser name is refused at start, with the names that exist.
    p = subprocess.run([coda, "serve", "--port", "0", "--tool-call-parser", "pythonic"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode != 0 and "hermes" in p.stderr and "pythonic" in p.stderr, f"bad parser: {p.returncode} {p.stderr}")
    p = subprocess.run([coda, "serve", "--port", "0", "--reasoning-parser", "granite"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode != 0 and "deepseek_r1" in p.stderr, f"bad reasoning parser: {p.returncode} {p.stderr}")

    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("tool calls over HTTP: all checks passed")


if __name__ == "__main__":
    main()
