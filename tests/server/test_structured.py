#!/usr/bin/python3
"""Structured output over real HTTP: coda serve holds generations to a JSON Schema (OpenAI's
response_format json_schema, vLLM's guided_json, llama.cpp's json_schema), to any JSON object, to
one of a list of texts (guided_choice), or to a forced tool call (tool_choice "required" or named). Every output is checked by independent parts: Python's json
module and Debian's python3-jsonschema validator.

The schemas bound every string (maxLength) and array (maxItems) and do not recurse, and the server
bounds whitespace, digits and nesting, so a whole document is at most about 1,700 bytes: with
max_tokens 2,000 every generation must end with finish_reason "stop" and a valid document, whatever
the model writes. The bundled model (a small SentencePiece vocabulary) and a random-weight model
with the Llama 3 vocabulary (128K tokens, byte-level BPE) both run.

Usage: /usr/bin/python3 tests/server/test_structured.py build/coda WORK_DIR
"""
import json
import os
import subprocess
import sys

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server, check, failures  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12, "description": "annotations are ignored"},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "rank": {"type": "integer", "exclusiveMinimum": 0},
        "lang": {"enum": ["en", "it", "fr"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "address": {"anyOf": [{"$ref": "#/$defs/addr"}, {"type": "null"}]},
        "score": {"type": ["number", "null"]},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "rank", "lang", "tags", "address", "score", "ok"],
    "additionalProperties": False,
    "$defs": {"addr": {"type": "object", "title": "Address",
                       "properties": {"city": {"type": "string", "maxLength": 10}, "zip": {"type": "integer"}},
                       "required": ["city"], "additionalProperties": False}},
}
CHAT = [{"role": "user", "content": "Describe a person as JSON."}]
# The guard observes here: the property under test is the format, and a stopped loop (the server's
# default policy) would end a document early.
OBSERVE = {"guard": "observe"}


def valid(text, schema, what):
    try:
        doc = json.loads(text)
    except ValueError as e:
        check(False, f"{what}: not JSON ({e}): {text[:200]!r}")
        return None
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as e:
        check(False, f"{what}: breaks the schema ({e.message}): {text[:200]!r}")
        return None
    return doc


def schema_tests(s, label):
    for seed in range(4):
        body = {"messages": CHAT, "max_tokens": 2000, "temperature": 1.0, "seed": seed,
                "coda": OBSERVE,
                "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                                           "strict": True}}}
        st, _, r = s.json("POST", "/v1/chat/completions", body)
        check(st == 200, f"{label} chat json_schema seed {seed}: {st} {r}")
        if st != 200:
            continue
        c = r["choices"][0]
        check(c["finish_reason"] == "stop", f"{label} chat json_schema seed {seed}: finish {c['finish_reason']}")
        valid(c["message"]["content"], PERSON, f"{label} chat json_schema seed {seed}")
    # Greedy, vLLM's spelling on completions, several choices in one request.
    st, _, r = s.json("POST", "/v1/completions", {"prompt": "Person:", "max_tokens": 2000, "temperature": 0.7, "n": 3,
                                                  "seed": 5, "guided_json": PERSON, "coda": OBSERVE})
    check(st == 200 and len(r.get("choices", [])) == 3, f"{label} completions guided_json n=3: {st}")
    for c in r.get("choices", []):
        check(c["finish_reason"] == "stop", f"{label} guided_json choice {c['index']}: {c['finish_reason']}")
        valid(c["text"], PERSON, f"{label} guided_json choice {c['index']}")
    # The schema as JSON text (vLLM accepts both), greedy.
    st, _, r = s.json("POST", "/v1/completions", {"prompt": "Person:", "max_tokens": 2000, "temperature": 0,
                                                  "guided_json": json.dumps(PERSON), "coda": OBSERVE})
    check(st == 200 and r["choices"][0]["finish_reason"] == "stop", f"{label} greedy guided_json text: {st}")
    if st == 200:
        valid(r["choices"][0]["text"], PERSON, f"{label} greedy guided_json text")
    # Streamed: the deltas join into a valid document.
    st, events, done = s.stream("/v1/chat/completions", {
        "messages": CHAT, "max_tokens": 2000, "temperature": 1.0, "seed": 9, "stream": True, "json_schema": PERSON,
        "coda": OBSERVE})
    text = "".join(e["choices"][0]["delta"].get("content", "") or "" for e in events if e.get("choices"))
    finish = [e["choices"][0]["finish_reason"] for e in events if e.get("choices") and e["choices"][0]["finish_reason"]]
    check(st == 200 and done and finish == ["stop"], f"{label} streamed json_schema: {st} {done} {finish}")
    valid(text, PERSON, f"{label} streamed json_schema")


def other_format_tests(s, label):
    # Any JSON object: when it ends on its own, it parses as an object. It may also run to its length
    # or be stopped by the guard (a loop inside a string, say).
    ended = 0
    for seed in range(4):
        st, _, r = s.json("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 300, "temperature": 1.0,
                                                          "seed": seed, "response_format": {"type": "json_object"}})
        check(st == 200, f"{label} json_object: {st}")
        c = r["choices"][0]
        if c["finish_reason"] == "stop":
            ended += 1
            doc = valid(c["message"]["content"], {"type": "object"}, f"{label} json_object seed {seed}")
            check(isinstance(doc, dict), f"{label} json_object seed {seed} is an object")
        else:
            check(c["finish_reason"] in ("length", "repetition"), f"{label} json_object finish {c['finish_reason']}")
    print(f"{label}: json_object ended on its own in {ended} of 4")
    # One of a list of texts.
    choices = ["yes", "no", "not sure", "n/a"]
    for seed in range(6):
        st, _, r = s.json("POST", "/v1/completions", {"prompt": "Is it raining?", "max_tokens": 50, "temperature": 1.0,
                                                      "seed": seed, "guided_choice": choices})
        c = r["choices"][0] if st == 200 else {}
        check(st == 200 and c["text"] in choices and c["finish_reason"] == "stop",
              f"{label} guided_choice seed {seed}: {st} {c}")
    # response_format text is plain generation.
    st, _, r = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 4, "response_format": {"type": "text"}})
    check(st == 200, f"{label} response_format text: {st}")


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "$defs": {"tz": {"enum": ["UTC", "CET", "JST"]}}, "type": "object",
        "properties": {"tz": {"$ref": "#/$defs/tz"}, "hours": {"type": "integer", "minimum": 0, "maximum": 23}},
        "required": ["tz"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "ping"}},  # no parameters: {} is its only argument
]


def tool_tests(s, label):
    """Forced tool calls (tool_choice "required" or a named function): the output is held to the
    call's JSON and answered as tool_calls whose arguments validate against the tool's parameters."""
    params = {t["function"]["name"]: t["function"].get("parameters", {"type": "object", "properties": {},
                                                                      "additionalProperties": False})
              for t in TOOLS}

    def calls_ok(msg, what):
        calls = msg.get("tool_calls") or []
        check(msg.get("content") is None and len(calls) >= 1, f"{what}: tool_calls, no content: {msg}")
        for c in calls:
            check(c["type"] == "function" and c["id"].startswith("call_") and c["function"]["name"] in params,
                  f"{what}: a call's shape: {c}")
            if c["function"]["name"] in params:
                valid(c["function"]["arguments"], params[c["function"]["name"]], f"{what}: {c['function']['name']}")
        return calls

    base = {"messages": [{"role": "user", "content": "What time is it in Tokyo?"}], "max_tokens": 2000,
            "temperature": 1.0, "tools": TOOLS, "coda": OBSERVE}
    for seed in range(3):
        st, _, r = s.json("POST", "/v1/chat/completions", {**base, "seed": seed, "tool_choice": "required"})
        check(st == 200 and r["choices"][0]["finish_reason"] == "tool_calls", f"{label} required seed {seed}: {st}")
        if st == 200:
            calls_ok(r["choices"][0]["message"], f"{label} required seed {seed}")
        for name in ("get_time", "ping"):
            st, _, r = s.json("POST", "/v1/chat/completions", {
                **base, "seed": seed, "tool_choice": {"type": "function", "function": {"name": name}}})
            check(st == 200 and r["choices"][0]["finish_reason"] == "stop", f"{label} named {name}: {st}")
            if st == 200:
                calls = calls_ok(r["choices"][0]["message"], f"{label} named {name} seed {seed}")
                check([c["function"]["name"] for c in calls] == [name], f"{label} named {name}: {calls}")
    # Streamed: the calls arrive whole in one delta, then the finish_reason.
    st, events, done = s.stream("/v1/chat/completions", {**base, "seed": 1, "stream": True, "tool_choice": "required"})
    deltas = [e["choices"][0]["delta"] for e in events if e.get("choices")]
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    finish = [e["choices"][0]["finish_reason"] for e in events if e.get("choices") and e["choices"][0]["finish_reason"]]
    check(st == 200 and done and finish == ["tool_calls"] and calls and all("index" in c for c in calls) and
          not any(d.get("content") for d in deltas), f"{label} streamed tool calls: {st} {finish} {deltas[-3:]}")
    for c in calls:
        valid(c["function"]["arguments"], params[c["function"]["name"]], f"{label} streamed {c['function']['name']}")


def error_tests(s):
    def refused(body, param, says, path="/v1/chat/completions"):
        body = {"messages": CHAT, "max_tokens": 8, **body} if path.endswith("chat/completions") else body
        st, _, r = s.json("POST", path, body)
        e = r.get("error", {})
        check(st == 400 and e.get("param") == param and says in e.get("message", ""),
              f"refused {param} ({says}): {st} {r}")

    refused({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"n": {"type": "number", "minimum": 0}}}}}},
        "response_format.json_schema.schema", "`minimum` is enforced on integers only")
    refused({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format",
            "json_schema.schema: required")
    refused({"response_format": {"type": "yaml"}}, "response_format", "'yaml' is not one of")
    refused({"response_format": "json"}, "response_format", "expected")
    refused({"guided_regex": "[a-z]+"}, "guided_regex", "not supported")
    refused({"grammar": "root ::= \"a\""}, "grammar", "not supported")
    refused({"guided_json": "{not json"}, "guided_json", "not valid JSON")
    refused({"guided_json": {"$ref": "#/$defs/none"}}, "guided_json", "points nowhere")
    refused({"guided_choice": []}, "guided_choice", "non-empty")
    refused({"guided_choice": ["a", 1]}, "guided_choice", "array of strings")
    refused({"guided_choice": ["a"], "response_format": {"type": "json_object"}}, "guided_choice", "only one")
    refused({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
            "no tool is named 'nope'")
    refused({"tool_choice": "required"}, "tool_choice", "has no tools")
    refused({"tools": TOOLS, "tool_choice": "always"}, "tool_choice", "expected")
    refused({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice",
            "cannot be combined")
    refused({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "string", "pattern": "a+"}}}}}], "tool_choice": "required"}, "tools", "`pattern` is not supported")
    refused({"guided_json": {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}}, "guided_json",
            "admits no value")
    deep = {"type": "string"}
    for _ in range(80):  # deeper than a schema may nest (64): refused, whatever refuses it first
        deep = {"type": "object", "properties": {"a": deep}}
    st, _, r = s.json("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "guided_json": deep})
    check(st == 400, f"an 80-deep schema is refused: {st} {r}")
    st, _, r = s.json("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8,
                                                       "guided_json": {"enum": list(range(5000))}})
    check(st == 400 and "enum" in r.get("error", {}).get("message", ""), f"a 5,000-value enum is refused: {st} {r}")
    st, _, r = s.json("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "guided_json": {
        "type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(65)}}})
    check(st == 400 and "64" in r.get("error", {}).get("message", ""), f"65 properties are refused: {st} {r}")
    st, _, r = s.json("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "min_tokens": 4,
                                                       "response_format": {"type": "json_object"}})
    check(st == 400 and "min_tokens" in r.get("error", {}).get("message", ""), f"min_tokens with a format: {st} {r}")
    st, _, _ = s.request("GET", "/health")
    check(st == 200, "health after the refusals")


def main():
    coda, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    s = Server(coda, "--max-num-seqs", "4")
    try:
        schema_tests(s, "bundled")
        other_format_tests(s, "bundled")
        tool_tests(s, "bundled")
        error_tests(s)
    finally:
        err = s.stop()
    check("runtime error" not in err, "server stderr clean: " + err[-300:])
    # A random-weight model with the Llama 3 vocabulary: 128K byte-level tokens to mask every step.
    synth = os.path.join(work, f"structured-l3-{os.getpid()}.gguf")
    subprocess.run([coda, "synth", "--shape", "tiny-llama3", "--type", "Q8_0", "--layers", "1", "-o", synth],
                   check=True, capture_output=True)
    r = Server(coda, "-m", synth, "--max-num-seqs", "4")
    try:
        schema_tests(r, "llama3-vocab")
        other_format_tests(r, "llama3-vocab")
        tool_tests(r, "llama3-vocab")
    finally:
        err = r.stop()
        os.remove(synth)
    check("runtime error" not in err, "llama3-vocab server stderr clean: " + err[-300:])
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
