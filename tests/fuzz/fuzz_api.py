#!/usr/bin/python3
"""Random requests against coda serve (or coda proxy in front of it) over real HTTP: valid bodies with
one to four fields replaced by values of any type and size (numbers at the edges of 32 and 64 bits,
NaN-free floats, strings with special-token text, nested objects, JSON schemas, tool lists,
logit_bias maps and lists, vLLM's and llama.cpp's own fields), on every generation route and
/v1/embeddings and /v1/responses.

What must hold for every request: no 5xx and no dropped connection; every 4xx in OpenAI's error
shape; every 200 without a stream is one JSON document (llama-server's shape on /completion); the
server still answers at the end, and its stderr holds no sanitizer report. The seed fixes the
requests; the server's sampling draws its own seeds, so a failure prints the request to replay.

Usage: /usr/bin/python3 tests/fuzz/fuzz_api.py build/coda [--proxy] [--requests N] [--seed S] [--model GGUF]
"""
import argparse
import http.client
import json
import os
import random
import subprocess
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "..", "models", "coda-tiny-en-it-f16.gguf")

FIELDS = [
    "n_predict", "n_probs", "repeat_penalty", "return_tokens", "post_sampling_probs", "max_tokens", "temperature",
    "top_p", "top_k", "min_p", "seed", "n", "stop", "stream", "stream_options", "logprobs", "top_logprobs",
    "logit_bias", "presence_penalty", "frequency_penalty", "repetition_penalty", "response_format", "tools",
    "tool_choice", "parallel_tool_calls", "guided_json", "guided_choice", "json_schema", "structured_outputs",
    "min_tokens", "ignore_eos", "echo", "prompt_logprobs", "best_of", "suffix", "user", "skip_special_tokens",
    "include_stop_str_in_output", "stop_token_ids", "bad_words", "allowed_token_ids", "dry_multiplier", "dry_base",
    "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "xtc_probability", "xtc_threshold",
    "no_repeat_ngram_size", "repetition_detection", "coda", "add_generation_prompt", "continue_final_message",
    "chat_template_kwargs", "max_completion_tokens", "typical_p", "mirostat", "use_beam_search",
    "truncate_prompt_tokens", "return_tokens_as_token_ids", "add_special_tokens", "cache_prompt", "messages",
    "prompt", "model", "input", "encoding_format", "dimensions", "instructions", "max_output_tokens", "text",
    "previous_response_id", "metadata"]
KEYS = FIELDS + ["type", "name", "function", "schema", "json_schema", "properties", "items", "enum", "const", "anyOf",
                 "$ref", "$defs", "required", "guard", "trace", "include_usage", "continuous_usage_stats", "role",
                 "content", "parameters", "max_pattern_size", "min_pattern_size", "min_count", "minimum", "maximum",
                 "minItems", "maxItems", "text", "tool_calls", "tool_call_id", "arguments", "id"]
INTS = [0, 1, -1, 2, 3, 7, 64, 100, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 53, 2 ** 63 - 1, 2 ** 63, 2 ** 64, -2 ** 63,
        10 ** 30]
FLOATS = [0.0, -0.0, 0.5, 1e-300, 1e300, -1e300, 1.5, 0.999999, 1.0000001, 2.0, -0.5, 5e-324]
STRINGS = ["", "a", "0", "1", "true", "null", "\u0000", "<|im_end|>", "</s>", "x" * 1000, "{{", "{% raw %}", "é",
           "json_schema", "json_object", "text", "auto", "none", "required", "stop", "observe", "repair", "stop:loop",
           "stop:nonsense"]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.last_response_id = "resp_none"  # a stored one, for previous_response_id

    def value(self, d=0):
        r = self.r
        c = r.randrange(22)
        if c == 0:
            return None
        if c == 1:
            return r.choice([True, False])
        if c == 2:
            return r.choice(INTS)
        if c == 3:
            return r.choice(FLOATS)
        if c == 4:
            return r.choice(STRINGS)
        if c == 5 and d < 3:
            return [self.value(d + 1) for _ in range(r.randrange(5))]
        if c == 6 and d < 3:
            return {r.choice(KEYS): self.value(d + 1) for _ in range(r.randrange(5))}
        if c == 7:
            return {"type": "json_schema", "json_schema": {"name": "x", "schema": self.schema(d)}}
        if c == 8:
            return self.schema(d)
        if c == 9:
            return [{"type": "function", "function": {"name": r.choice(["f", "", "a" * 300, "get"]),
                                                      "parameters": self.schema(d)}}]
        if c == 10:
            return {"guard": r.choice(["stop", "repair", "observe", "x", 5, "repair:loop,flooding", "stop:"]),
                    "trace": self.value(3)}
        if c == 11:
            return {str(r.choice([0, 1, 2, -1, 10 ** 12, 31999, 32000])): r.choice([-100, 100, 0, 1e300, -1e300, "x"])}
        if c == 12:
            return [r.choice([0, 1, 2, -1, 32000, 10 ** 12])] * r.randrange(1, 5)
        if c == 13:
            return {"max_pattern_size": r.choice([0, 1, 2, 100, 10 ** 9, -1]), "min_pattern_size": r.choice([0, 1, 3, -1]),
                    "min_count": r.choice([0, 1, 2, 10 ** 9])}
        if c == 14:
            return {"include_usage": self.value(3), "continuous_usage_stats": self.value(3)}
        if c == 15:
            return [{"role": r.choice(["user", "assistant", "system", "tool", "developer", "function"]),
                     "content": r.choice(["hi", "", None, [{"type": "text", "text": "x"}], [{"type": "text"}],
                                          self.value(3)])} for _ in range(r.randrange(1, 4))]
        if c == 16:
            return [[r.choice([0, 5, -1, 10 ** 12]), r.choice([1, False, True, "x", 1e300])] for _ in range(r.randrange(4))]
        return r.choice([1, 4, 16, 0.7, "hi", [], {}])

    def schema(self, d):
        r = self.r
        c = r.randrange(12)
        if d > 3:
            return {"type": "string"}
        if c == 0:
            return {"type": "object", "properties": {"a": self.schema(d + 1), "b": self.schema(d + 1)},
                    "required": r.choice([["a"], ["a", "b"], ["c"], [], "a"])}
        if c == 1:
            return {"type": "array", "items": self.schema(d + 1), "minItems": r.choice([0, 1, 5, -1, 10 ** 9]),
                    "maxItems": r.choice([0, 1, 3, 10 ** 9])}
        if c == 2:
            return {"type": "integer", "minimum": r.choice([0, 1, -5, 10 ** 18, -10 ** 18, 1.5]),
                    "maximum": r.choice([0, 3, 10 ** 18, 2000])}
        if c == 3:
            return {"enum": [self.value(3) for _ in range(r.randrange(4))]}
        if c == 4:
            return {"anyOf": [self.schema(d + 1) for _ in range(r.randrange(3))]}
        if c == 5:
            return {"$ref": r.choice(["#/$defs/a", "#/$defs/missing", "#", "http://x", "#/definitions/a"]),
                    "$defs": {"a": r.choice([{"$ref": "#/$defs/a"}, {"type": "string"},
                                             {"type": "array", "items": {"$ref": "#/$defs/a"}}])}}
        if c == 6:
            return {"type": r.choice(["string", "number", "boolean", "null", ["string", "null"], [], "wat", 5])}
        if c == 7:
            return {"const": self.value(3)}
        if c == 8:
            return {"type": "string", "minLength": r.choice([0, 1, 10 ** 9, -1, 1000]), "maxLength": r.choice([0, 1, 5, 10 ** 9])}
        if c == 9:
            return {"allOf": [self.schema(d + 1)]}
        if c == 10:
            return {"oneOf": [self.schema(d + 1), self.schema(d + 1)], "nullable": True}
        return self.value(d + 1)

    def request(self):
        r = self.r
        path = r.choice(["/v1/chat/completions", "/v1/chat/completions", "/v1/completions", "/v1/completions",
                         "/completion", "/completion", "/tokenize", "/v1/embeddings", "/v1/responses"])
        if path == "/v1/chat/completions":
            body = {"messages": [{"role": "user", "content": "The king said"}], "max_tokens": r.choice([1, 4, 8])}
        elif path == "/v1/responses":
            body = {"input": r.choice(["The king said", [{"role": "user", "content": "Hi"}],
                                       [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
                                       [{"role": "user", "content": "Hi"},
                                        {"type": "function_call", "call_id": self.value(2), "name": self.value(2),
                                         "arguments": self.value(2)},
                                        {"type": "function_call_output", "call_id": "c", "output": self.value(2)}]]),
                    "max_output_tokens": r.choice([1, 4, 8])}
            if r.randrange(4) == 0:
                body["previous_response_id"] = r.choice(["resp_unknown", self.value(2), self.last_response_id])
            if r.randrange(6) == 0:
                body["store"] = self.value(2)
            if r.randrange(3) == 0:
                body["tools"] = [{"type": r.choice(["function", "function", "web_search", 5]), "name": self.value(2),
                                  "parameters": self.schema(0)}]
                body["tool_choice"] = r.choice(["auto", "none", "required", {"type": "function", "name": "f"},
                                                self.value(2)])
        elif path == "/v1/embeddings":
            body = {"input": r.choice(["The king said", ["a", "b"], [1, 2, 3], [[1, 2], [3]]])}
        elif path == "/completion":
            body = {"prompt": r.choice(["The king said", [1, 2, 3]]), "n_predict": r.choice([1, 4, 8])}
        else:
            body = {"prompt": r.choice(["The king said", ["a", "b"], [1, 2, 3], [[1, 2], [3]]]),
                    "max_tokens": r.choice([1, 4, 8])}
        for _ in range(r.randrange(1, 5)):
            body[r.choice(FIELDS)] = self.value()
        for cap in ("max_tokens", "n_predict", "max_output_tokens"):  # a random length would only make the run long
            if isinstance(body.get(cap), int) and not isinstance(body[cap], bool) and body[cap] > 16:
                body[cap] = 16
        return path, body


def start(argv, err_path):
    err = open(err_path, "w")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise RuntimeError("did not start: " + line + open(err_path).read())
    return proc, int(line.strip().rsplit(":", 1)[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coda")
    ap.add_argument("--proxy", action="store_true", help="through coda proxy in front of coda serve")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--work", default="/tmp")
    a = ap.parse_args()
    errs = [os.path.join(a.work, f"fuzz_api_serve_{os.getpid()}.err")]
    serve, port = start([a.coda, "serve", "-m", a.model, "--port", "0", "-c", "512", "--read-timeout", "5"], errs[0])
    procs = [serve]
    if a.proxy:
        errs.append(os.path.join(a.work, f"fuzz_api_proxy_{os.getpid()}.err"))
        px, port = start([a.coda, "proxy", "--upstream", f"http://127.0.0.1:{port}", "--port", "0", "--guard", "repair"],
                         errs[1])
        procs.append(px)
    gen, statuses, failures = Gen(a.seed), Counter(), []
    try:
        for i in range(a.requests):
            path, body = gen.request()
            data = json.dumps(body)
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                c.request("POST", path, body=data, headers={"Content-Type": "application/json"})
                resp = c.getresponse()
                raw = resp.read()
                c.close()
            except Exception as e:  # noqa: BLE001 (any transport failure is a finding)
                failures.append(f"request {i} {path}: {e!r}: {data[:500]}")
                if any(p.poll() is not None for p in procs):
                    failures.append("a server process died")
                    break
                continue
            statuses[resp.status] += 1
            if resp.status >= 500:
                failures.append(f"request {i} {path}: {resp.status} {raw[:200]!r}: {data[:500]}")
            elif resp.status >= 400:
                try:
                    err = json.loads(raw)["error"]
                    assert isinstance(err["message"], str) and err["message"]
                except Exception:  # noqa: BLE001
                    failures.append(f"request {i} {path}: {resp.status} without OpenAI's error shape: {raw[:200]!r}")
            elif not body.get("stream") is True:
                try:
                    answer = json.loads(raw)
                    if path == "/completion":
                        assert answer["stop"] is True and isinstance(answer["content"], str)
                    if path == "/v1/responses":
                        assert answer["object"] == "response" and answer["output"] and all(
                            o["type"] in ("message", "function_call", "reasoning") for o in answer["output"])
                        gen.last_response_id = answer["id"]
                    if path == "/v1/embeddings":
                        assert answer["object"] == "list" and answer["data"][0]["object"] == "embedding"
                except Exception:  # noqa: BLE001
                    failures.append(f"request {i} {path}: 200 but not the expected JSON: {raw[:200]!r}: {data[:300]}")
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/health")
        if c.getresponse().status != 200:
            failures.append("/health does not answer 200 after the run")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    for path in errs:
        text = open(path).read()
        if "Sanitizer" in text or "runtime error" in text:
            failures.append(f"{path}: sanitizer report: {text[-800:]}")
        os.remove(path)
    for f in failures:
        print("FAIL:", f)
    print(f"{sum(statuses.values())} requests ({dict(sorted(statuses.items()))}), {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
