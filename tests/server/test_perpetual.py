#!/usr/bin/python3
"""Perpetual generation (the ICLR 2025 blog on perpetual text) in coda serve and coda run, under
every guard policy: an EOS before min_tokens is stepped back from and sampling resumes hotter;
the stream holds back the last backstep + 1 tokens until min_tokens, so a backstep never takes back
text already sent; the EOS never stays in the output.

Usage: /usr/bin/python3 tests/server/test_perpetual.py build/coda
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server, check, failures  # noqa: E402

def early_eos_prompt(s):
    """A prompt the bundled model ends early by EOS under greedy decoding (found, not assumed)."""
    for p in ("The End.", "Fine.", "FINE", "1 In the beginning God created the heaven and the earth."):
        st, _, out = s.json("POST", "/v1/completions", {"prompt": p, "max_tokens": 200, "temperature": 0,
                                                        "coda": {"guard": "observe"}})
        c = out["choices"][0]
        if st == 200 and c["finish_reason"] == "stop" and 8 < out["usage"]["completion_tokens"] < 60:
            return p, out["usage"]["completion_tokens"]
    return None, None


def main():
    coda = sys.argv[1]
    s = Server(coda)
    try:
        prompt, natural = early_eos_prompt(s)
        check(prompt is not None, "a prompt the model ends early by itself")
        if prompt is None:
            raise SystemExit(1)
        # The natural greedy text's tokens, to compare the text before each backstep with.
        st, _, nat = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 200, "temperature": 0,
                                                        "logprobs": 0, "coda": {"guard": "observe"}})
        natural_tokens = nat["choices"][0]["logprobs"]["tokens"]
        for policy in ("observe", "stop:loop,flooding", "repair"):
            body = {"prompt": prompt, "max_tokens": 200, "temperature": 0, "seed": 3, "logprobs": 0,
                    "coda": {"guard": policy, "trace": True,
                             "perpetual": {"min_tokens": 80, "backstep": 6, "decay": 0.1}}}
            st, _, out = s.json("POST", "/v1/completions", body)
            c = out["choices"][0]
            reps = [r for r in out["coda"]["repairs"] if r["reason"] == "early_eos"]
            tokens = c["logprobs"]["tokens"]
            check(st == 200 and reps and out["usage"]["completion_tokens"] > natural,
                  f"{policy}: stepped back from the early EOS ({natural} tokens naturally): {out['usage']} {reps}")
            check(reps[0]["at"] == natural - 1 and all(r["keep"] == max(0, r["at"] - 6) for r in reps),
                  f"{policy}: the first EOS where the model ends by itself, each backstep 6 tokens: {reps}")
            check(not any(t in ("</s>", "<s>") for t in tokens), f"{policy}: no EOS or BOS left in the output: {tokens}")
            # The text before the first backstep is the natural text's (greedy): kept unchanged.
            keep = reps[0]["keep"] if reps else 0
            check(tokens[:keep] == natural_tokens[:keep] and keep == natural - 1 - 6,
                  f"{policy}: the first {keep} tokens are unchanged: {tokens[:keep]} {natural_tokens[:keep]}")
            # The generation really went back where the report says (the trace's rollbacks).
            back = [t["rollback_to"] for t in out["coda"]["trace"] if "rollback_to" in t]
            check(back == [r["keep"] for r in out["coda"]["repairs"]], f"{policy}: rolled back to {back}, reported {reps}")
            # Streamed: the same text (greedy, seeded), so no backstep took back what was sent.
            st, events, done = s.stream("/v1/completions", dict(body, stream=True, logprobs=None))
            streamed = "".join(ch.get("text", "") for e in events for ch in e.get("choices", []))
            check(done and streamed == c["text"], f"{policy}: streamed {streamed!r} against {c['text']!r}")
        # The top-level shorthand, and refusals naming the field.
        st, _, out = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 200, "temperature": 0,
                                                        "perpetual_min_tokens": 80})
        check(st == 200 and any(r["reason"] == "early_eos" for r in out["coda"]["repairs"]), f"shorthand: {out.get('coda')}")
        for bad, param in (({"perpetual": {"min_tokens": -1}}, "coda.perpetual.min_tokens"),
                           ({"perpetual": {"decay": 0}}, "coda.perpetual.decay"), ({"perpetual": 3}, "coda.perpetual")):
            st, _, e = s.json("POST", "/v1/completions", {"prompt": prompt, "coda": bad})
            check(st == 400 and e["error"]["param"] == param, f"refused {bad}: {st} {e}")
        # Through coda proxy in front of coda serve: the proxy steps back from the upstream's early
        # EOS itself, and the client never sees what it took back.
        px = subprocess.Popen([coda, "proxy", "--upstream", f"http://127.0.0.1:{s.port}", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            port = int(px.stdout.readline().strip().rsplit(":", 1)[1].split()[0])
            proxied = Server.__new__(Server)
            proxied.port = port
            # (Seeded: the hot continuations sample, and the streamed run must draw the same.)
            body = {"prompt": prompt, "max_tokens": 200, "temperature": 0, "seed": 11,
                    "coda": {"perpetual": {"min_tokens": 80, "backstep": 6}}}
            st, _, out = proxied.json("POST", "/v1/completions", body)
            rep = out.get("coda", {}).get("proxy", {})
            check(st == 200 and rep.get("perpetual_backsteps", 0) >= 1 and out["usage"]["completion_tokens"] > natural,
                  f"proxy in front of coda serve: {out.get('usage')} {rep}")
            st, events, done = proxied.stream("/v1/completions", dict(body, stream=True))
            streamed = "".join(ch.get("text", "") for e in events for ch in e.get("choices", []))
            check(done and streamed == out["choices"][0]["text"], f"proxy, streamed: {streamed!r} {out['choices'][0]['text']!r}")
        finally:
            px.terminate()
            px.wait(timeout=10)
    finally:
        s.stop()
    # coda run: --guard off no longer ignores the flag.
    for guard in ("off", "observe"):
        p = subprocess.run([coda, "run", "-p", prompt, "-n", "200", "--temp", "0", "--guard", guard,
                            "--perpetual-min-tokens", "80", "--perpetual-backstep", "6", "-t", "1"],
                           capture_output=True, text=True, timeout=120)
        check(p.returncode == 0 and len(p.stdout) > 0, f"coda run --guard {guard}: {p.returncode} {p.stderr[-300:]}")
        q = subprocess.run([coda, "run", "-p", prompt, "-n", "200", "--temp", "0", "--guard", guard, "-t", "1"],
                           capture_output=True, text=True, timeout=120)
        check(len(p.stdout) > len(q.stdout), f"coda run --guard {guard}: longer with perpetual mode "
                                             f"({len(p.stdout)} against {len(q.stdout)} bytes)")
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("perpetual generation: all checks passed")


if __name__ == "__main__":
    main()
