#!/usr/bin/python3
"""A reasoning model always answers, over real HTTP on loopback (coda serve).

The bundled model under DeepSeek-R1's template (whose generation prompt opens <think>) is a model
that thinks and, under greedy decoding, floods its thinking with zeros. So:
- under the default policy the loop is dropped, the thinking closed, and the reply has content;
- the rolled-back flood never reaches a streaming client;
- `reasoning_tokens` counts the tokens before the close, as the logprobs show them token by token;
- a budget (vLLM's thinking_token_budget, llama.cpp's thinking_budget_tokens, reasoning_effort) gives
  at most budget + grace reasoning tokens, then an answer, under any policy;
- coda.reasoning_loop "stop" and the observe policy keep the old behaviour;
- the Responses API counts the reasoning tokens; the metrics count what happened;
- an assistant turn's `reasoning` is rendered as its `reasoning_content` would be.

Usage: /usr/bin/python3 tests/server/test_reasoning.py build/coda
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server, check, failures  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
R1 = os.path.join(HERE, "..", "data", "templates", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")
QWEN3 = os.path.join(HERE, "..", "data", "templates", "Qwen-Qwen3-0.6B.jinja")
STORY = [{"role": "user", "content": "Tell me a story about a king."}]
GRACE = 32


def ask(s, **extra):
    body = {"messages": STORY, "max_tokens": 200, "temperature": 0, **extra}
    st, _, out = s.json("POST", "/v1/chat/completions", body)
    check(st == 200, f"status {st}: {out}")
    return out if st == 200 else None


def tokens_before_close(logprobs):
    """The generated tokens before the one where "\\n</think>" begins, from the token texts alone."""
    texts = [t["token"] for t in logprobs["content"]]
    full = "".join(texts)
    at = full.find("</think>")
    if at < 0:
        return len(texts), full
    if at > 0 and full[at - 1] == "\n":
        at -= 1
    n, pos = 0, 0
    for t in texts:
        if pos + len(t) > at:
            break
        pos += len(t)
        n += 1
    return n, full


def loop_closed_tests(s):
    out = ask(s, logprobs=True)
    if not out:
        return
    c = out["choices"][0]
    m = c["message"]
    report = out["coda"]
    events = report["events"]
    check(any(e["action"] == "answer" for e in events), f"a loop in the thinking is answered: {events}")
    check(m.get("reasoning") and m["content"].strip(), f"thinking, then a non-empty answer: {m}")
    check("</think>" not in m["content"] and "</think>" not in m["reasoning"], f"the close is in neither part: {m}")
    check(report["reasoning"]["ended_by"] == "loop", f"ended by the loop: {report['reasoning']}")
    # The flood of zeros the greedy model writes (16 in a row is the detector's bound) is gone.
    check("0" * 16 not in m["reasoning"], f"the loop was dropped from the reasoning: {m['reasoning']!r}")
    n, full = tokens_before_close(c["logprobs"])
    details = out["usage"]["completion_tokens_details"]
    check(details["reasoning_tokens"] == n, f"reasoning_tokens {details} against {n} tokens before the close")
    check(out["usage"]["completion_tokens"] == len(c["logprobs"]["content"]), f"completion tokens: {out['usage']}")
    # Streamed: the same thinking and answer (greedy), the flood never sent, the count in the usage.
    st, events_, done = s.stream("/v1/chat/completions", {
        "messages": STORY, "max_tokens": 200, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}})
    check(st == 200 and done, f"stream: {st} {done}")
    deltas = [ch.get("delta", {}) for e in events_ for ch in e.get("choices", [])]
    thought = "".join(d.get("reasoning") or "" for d in deltas)
    answer = "".join(d.get("content") or "" for d in deltas)
    usage = [e["usage"] for e in events_ if e.get("usage")]
    check(thought == m["reasoning"] and answer == m["content"], f"streamed {thought!r} {answer!r} against {m}")
    check("0" * 16 not in thought, f"the rolled-back loop never reached the client: {thought!r}")
    check(usage and usage[-1]["completion_tokens_details"]["reasoning_tokens"] == n, f"streamed usage: {usage}")
    # The Responses API: a reasoning item, the answer, and the count.
    st, _, r = s.json("POST", "/v1/responses", {"input": STORY[0]["content"], "max_output_tokens": 200,
                                                "temperature": 0})
    kinds = [i["type"] for i in r.get("output", [])]
    check(st == 200 and kinds[:2] == ["reasoning", "message"]
          and r["usage"]["output_tokens_details"]["reasoning_tokens"] == n, f"responses: {st} {kinds} {r.get('usage')}")


def old_behaviour_tests(s):
    out = ask(s, coda={"reasoning_loop": "stop"})
    if out:
        c = out["choices"][0]
        check(c["finish_reason"] == "repetition" and c["message"]["content"] == "", f"reasoning_loop stop: {c}")
    out = ask(s, coda={"guard": "observe"})
    if out:
        c = out["choices"][0]
        check(c["finish_reason"] == "length" and c["message"]["content"] == ""
              and out["usage"]["completion_tokens_details"]["reasoning_tokens"] == 200
              and all(e["action"] == "observe" for e in out["coda"]["events"]), f"observe: nothing changes: {out}")
    st, _, e = s.json("POST", "/v1/chat/completions", {"messages": STORY, "coda": {"reasoning_loop": "maybe"}})
    check(st == 400 and e["error"]["param"] == "coda.reasoning_loop", f"a bad reasoning_loop: {st} {e}")
    for bad in ({"thinking_token_budget": "many"}, {"thinking_budget_tokens": -5}, {"reasoning_effort": "huge"}):
        st, _, e = s.json("POST", "/v1/chat/completions", {"messages": STORY, **bad})
        check(st == 400 and e["error"]["param"] == list(bad)[0], f"refused: {bad}: {st} {e}")


def budget_tests(s):
    # Under observe the loop runs on, so the budget is what closes the thinking.
    for field, n in (("thinking_token_budget", 10), ("thinking_budget_tokens", 3), ("thinking_token_budget", 0)):
        out = ask(s, **{field: n, "coda": {"guard": "observe"}}, logprobs=True)
        if not out:
            continue
        c = out["choices"][0]
        got = out["usage"]["completion_tokens_details"]["reasoning_tokens"]
        counted, _ = tokens_before_close(c["logprobs"])
        check(n <= got <= n + GRACE and got == counted, f"{field} {n}: {got} reasoning tokens ({counted} counted)")
        check(out["coda"]["reasoning"]["ended_by"] == "budget" and c["message"]["content"].strip(),
              f"{field} {n}: closed by the budget, then an answer: {c['message']} {out['coda']['reasoning']}")
    # reasoning_effort names the operator's budgets (--reasoning-effort-budgets 5,50,-1 here).
    out = ask(s, reasoning_effort="low", coda={"guard": "observe"})
    if out:
        got = out["usage"]["completion_tokens_details"]["reasoning_tokens"]
        check(5 <= got <= 5 + GRACE and out["coda"]["reasoning"]["ended_by"] == "budget", f"effort low: {got}")
    out = ask(s, reasoning_effort="high", coda={"guard": "observe"})
    if out:
        check(out["usage"]["completion_tokens_details"]["reasoning_tokens"] == 200, f"effort high: unlimited: {out}")
    # An explicit budget wins over the effort.
    out = ask(s, reasoning_effort="low", thinking_token_budget=60, coda={"guard": "observe"})
    if out:
        got = out["usage"]["completion_tokens_details"]["reasoning_tokens"]
        check(60 <= got <= 60 + GRACE, f"a budget beside an effort: {got}")


def metrics_tests(s):
    answered = s.metric("coda:reasoning_loops_answered_total") or 0
    budgets = s.metric("coda:reasoning_budgets_enforced_total") or 0
    count = s.metric("coda:reasoning_tokens_count") or 0
    check(answered >= 1 and budgets >= 1 and count >= 1,
          f"metrics: answered {answered}, budgets {budgets}, histogram count {count}")


def reasoning_field_in_history_tests(coda):
    # vLLM's `reasoning` and llama.cpp's `reasoning_content` on an assistant turn render alike.
    s = Server(coda, "--chat-template", QWEN3)
    try:
        user = {"role": "user", "content": "Weather in Paris?"}
        one = [user, {"role": "assistant", "content": "Sunny.", "reasoning": "The user wants weather."}]
        two = [user, {"role": "assistant", "content": "Sunny.", "reasoning_content": "The user wants weather."}]
        _, _, a = s.json("POST", "/apply-template", {"messages": one})
        _, _, b = s.json("POST", "/apply-template", {"messages": two})
        check("The user wants weather." in a.get("prompt", "") and a == b, f"reasoning in history: {a} {b}")
    finally:
        s.stop()


def main():
    coda = sys.argv[1]
    s = Server(coda, "--chat-template", R1, "--reasoning-effort-budgets", "5,50,-1")
    try:
        loop_closed_tests(s)
        old_behaviour_tests(s)
        budget_tests(s)
        metrics_tests(s)
    finally:
        s.stop()
    s = Server(coda, "--chat-template", R1, "--reasoning-loop", "stop")
    try:
        out = ask(s)
        if out:
            c = out["choices"][0]
            check(c["finish_reason"] == "repetition" and c["message"]["content"] == "", f"--reasoning-loop stop: {c}")
        out = ask(s, coda={"reasoning_loop": "answer"})
        if out:
            check(out["choices"][0]["message"]["content"].strip(), f"a request asks for answer: {out}")
    finally:
        s.stop()
    reasoning_field_in_history_tests(coda)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("reasoning over HTTP: all checks passed")


if __name__ == "__main__":
    main()
