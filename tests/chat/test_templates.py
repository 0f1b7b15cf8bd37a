#!/usr/bin/python3
"""Chat templates: coda's renderings against Jinja2's.

Renders every template in a folder for a set of conversations twice: with Debian's python3-jinja2
set up the way Hugging Face's apply_chat_template sets it up (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loop controls, raise_exception, strftime_now, a non-escaping tojson),
and with `coda template`. The outputs must be byte-identical; where Jinja2 raises, coda must fail
too (with the same text for the template's own raise_exception). Every template must render at
least 10 conversations successfully, and every template that checks role order must reject the
invalid ones.

Usage: /usr/bin/python3 tests/chat/test_templates.py build/coda TEMPLATE_DIR WORK_DIR
"""
import datetime
import json
import os
import subprocess
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

EPOCH = "1790000000"  # pins strftime_now for both renderers


class RaisedByTemplate(Exception):
    pass


def hf_environment():
    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(int(EPOCH)).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["city"],
        },
    },
}
CALL = {"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}


def conversations():
    sys_msg = {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."}
    u1 = {"role": "user", "content": "What is the capital of France?"}
    a1 = {"role": "assistant", "content": "Paris."}
    u2 = {"role": "user", "content": "And of Italy? Say \"Rome\" or 'Roma'."}
    tricky = {"role": "user", "content": "  Ünïcödé ✓ 中文 <|eot_id|> <|im_end|> [INST] {{ not a tag }} {% raw %}\n\n"}
    think = {"role": "assistant", "content": "<think>\nThe user wants Rome.\n</think>\n\nRome."}
    cases = [
        ("user", [u1], {}),
        ("system+user", [sys_msg, u1], {}),
        ("multi-turn", [u1, a1, u2], {}),
        ("system+multi-turn", [sys_msg, u1, a1, u2], {}),
        ("ends-with-assistant", [u1, a1], {}),
        ("system+ends-with-assistant", [sys_msg, u1, a1], {}),
        ("tricky-content", [tricky], {}),
        ("system+tricky", [sys_msg, tricky, a1, u2], {}),
        ("thinking-history", [u1, think, u2], {}),
        ("enable_thinking=false", [sys_msg, u1], {"enable_thinking": False}),
        ("empty-content", [{"role": "user", "content": ""}], {}),
        ("long", [u1, a1] * 6 + [u2], {}),
        ("tools", [u1], {"tools": [WEATHER_TOOL]}),
        ("system+tools", [sys_msg, u1], {"tools": [WEATHER_TOOL]}),
        ("tool-call-round-trip",
         [u1, {"role": "assistant", "content": None, "tool_calls": [CALL]},
          {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21}"}], {"tools": [WEATHER_TOOL]}),
        ("tool-call-then-answer",
         [sys_msg, u1, {"role": "assistant", "content": None, "tool_calls": [CALL]},
          {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21}"},
          {"role": "assistant", "content": "It is 21 C in Paris."}, u2], {"tools": [WEATHER_TOOL]}),
        # Invalid role orders: templates that check them must raise.
        ("invalid:assistant-first", [a1, u1], {}),
        ("invalid:two-users", [u1, u2], {}),
        ("invalid:system-in-the-middle", [u1, a1, sys_msg, u2], {}),
    ]
    out = []
    for name, messages, extra in cases:
        for agp in (True, False):
            if name.startswith("invalid") and not agp:
                continue
            out.append((f"{name} agp={agp}", messages, agp, extra))
    return out


def render_reference(env, source, messages, agp, extra):
    t = env.from_string(source)
    variables = dict(extra)
    try:
        return "ok", t.render(messages=messages, add_generation_prompt=agp, bos_token="<s>", eos_token="</s>",
                              **variables)
    except RaisedByTemplate as e:
        return "raise", str(e)
    except Exception as e:  # noqa: BLE001 - any Jinja2 failure counts as "the template fails"
        return "error", f"{type(e).__name__}: {e}"


def render_coda(coda, template_path, messages, agp, extra, work):
    doc = {"messages": messages}
    if "tools" in extra:
        doc["tools"] = extra["tools"]
    kwargs = {k: v for k, v in extra.items() if k != "tools"}
    if kwargs:
        doc["chat_template_kwargs"] = kwargs
    path = os.path.join(work, f"messages-{os.getpid()}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    cmd = [coda, "template", "--template", template_path, "--messages", path, "--bos-token", "<s>", "--eos-token",
           "</s>"]
    if agp:
        cmd.append("--add-generation-prompt")
    env = dict(os.environ, SOURCE_DATE_EPOCH=EPOCH)
    r = subprocess.run(cmd, capture_output=True, env=env, timeout=60)
    os.remove(path)
    if r.returncode == 0:
        return "ok", r.stdout.decode("utf-8")
    return "error", r.stderr.decode("utf-8", "replace").strip()


# Language features one at a time (variables: x, items, d, s, n), each checked the same way.
SNIPPETS = [
    "{% for i in items %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}",
    "{% for i in items %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for i in items if i is odd %}{{ loop.index0 }}:{{ i }} {% else %}none{% endfor %}",
    "{% for i in [] %}x{% else %}empty{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %}|{{ d | length }}|{{ d | items | list }}",
    "{% set ns = namespace(total=0) %}{% for i in items %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}",
    "{% set t = 1 %}{% for i in items %}{% set t = i %}{% endfor %}{{ t }}",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', punct='?') }}",
    "{{ items[1:] }} {{ items[:-1] }} {{ items[::-1] }} {{ items[::2] }} {{ s[1:4] }} {{ s[::-1] }} {{ items[-1] }}",
    "{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.split(' ') }} {{ s.split() }} {{ s.replace('o', '0') }}",
    "{{ '  pad  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\n\nhi'.lstrip('\n') }}|{{ s.startswith('Hel') }}",
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2.5 }} {{ 'a' ~ 1 ~ none }}",
    "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ s is string }} {{ n is number }}",
    "{{ d is mapping }} {{ items is iterable }} {{ s is iterable }} {{ n is integer }} {{ 2.0 is float }} {{ false is false }}",
    "{{ items | join(', ') }} {{ items | first }} {{ items | last }} {{ items | sum }} {{ items | max }} {{ items | reverse | list }}",
    "{{ d | tojson }} {{ d | tojson(indent=2) }} {{ [1, 'a', none, true, 2.5] | tojson }} {{ 'é\"' | tojson }}",
    "{{ [{'r': 'u'}, {'r': 'a'}, {'r': 'u'}] | selectattr('r', 'equalto', 'u') | list | length }}",
    "{{ items | reject('equalto', 2) | list }} {{ items | select('odd') | list }} {{ items | map('string') | join }}",
    "{{ [{'n': 'x'}, {'n': 'y'}] | map(attribute='n') | join('-') }} {{ ['b', 'a'] | sort }} {{ [1, 1, 2] | unique | list }}",
    "{{ y | default('dflt') }} {{ '' | default('e', true) }} {{ s | length }} {{ '中文' | length }} {{ 'ab' * 3 }}",
    "{{ [1, [2, 'x'], {'k': none}] }} {{ {'a': true} }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ \"it's\" }}",
    "{{ 'yes' if n > 3 else 'no' }} {{ 'a' in s }} {{ 'z' not in s }} {{ 2 in items }} {{ 'k' in d }} {{ n > 3 and n < 10 }}",
    "{{ (1, 2) }} {{ [1, 2] + [3] }} {{ not items }} {{ items or 'x' }} {{ none or 'fallback' }} {{ 0 and 1 }}",
    "  {% if x %}\n    indented\n  {% endif %}\n{%- if x -%}   tight   {%- endif %}\n{# comment #}\nend",
    "{% set block %}inner {{ x }}{% endset %}[{{ block }}] {{ d.get('a') }} {{ d.get('zz', 'none!') }} {{ d['b'] }}",
    "{{ raise_exception('custom failure: ' ~ x) }}",
    "{{ y.attr }}",
    "{{ 1 + 'a' }}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a * b }}{% endfor %} {{ range(3) | list }} {{ range(1, 7, 2) | list }}",
    "{% for m in items %}{{ loop.previtem | default('-') }}>{{ m }}>{{ loop.nextitem | default('-') }} {% endfor %}",
    "{{ items | length - 1 }} {{ -items | length }} {{ s.count('l') }} {{ s.find('o') }} {{ 'x,y'.split(',', 1) }}",
]
SNIPPET_VARS = {"x": "X", "items": [1, 2, 3, 4, 5], "d": {"b": 2, "a": [1, {"c": None}]}, "s": "Hello world",
                "n": 7}


def check_snippets(coda, env, work):
    failures = []
    for i, src in enumerate(SNIPPETS):
        path = os.path.join(work, f"snippet-{os.getpid()}.jinja")
        with open(path, "w", encoding="utf-8") as f:
            f.write(src)
        ref_kind, ref = render_reference(env, src, [{"role": "user", "content": "hi"}], False, SNIPPET_VARS)
        got_kind, got = render_coda(coda, path, [{"role": "user", "content": "hi"}], False, SNIPPET_VARS, work)
        os.remove(path)
        same = (ref_kind == "ok" and got_kind == "ok" and got == ref) or (
            ref_kind != "ok" and got_kind != "ok" and (ref_kind != "raise" or got.endswith(ref)))
        if not same:
            failures.append(("snippet", f"{i}: {src}", f"<{ref_kind}> {ref}", f"<{got_kind}> {got}"))
    print(f"{len(SNIPPETS) - len(failures)}/{len(SNIPPETS)} language snippets match")
    return failures


def main():
    coda, folder, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    env = hf_environment()
    failures = check_snippets(coda, env, work)
    templates = sorted(f for f in os.listdir(folder) if f.endswith(".jinja"))
    if not templates:
        sys.exit(f"no templates in {folder}")
    for name in templates:
        path = os.path.join(folder, name)
        with open(path, encoding="utf-8") as f:
            source = f.read()
        ok = raised = 0
        for case, messages, agp, extra in conversations():
            ref_kind, ref = render_reference(env, source, messages, agp, extra)
            got_kind, got = render_coda(coda, path, messages, agp, extra, work)
            if ref_kind == "ok":
                if got_kind != "ok" or got != ref:
                    failures.append((name, case, ref, got))
                else:
                    ok += 1
            else:
                if got_kind == "ok":
                    failures.append((name, case, f"<{ref_kind}> {ref}", got))
                elif ref_kind == "raise" and not got.endswith(ref):
                    failures.append((name, case, f"<raise> {ref}", got))
                else:
                    raised += 1
        print(f"{name}: {ok} conversations identical, {raised} rejected by both")
        if ok < 10:
            failures.append((name, "coverage", ">= 10 rendered conversations", str(ok)))
    for name, case, want, got in failures[:20]:
        print(f"\nMISMATCH {name} [{case}]\n--- jinja2:\n{want!r}\n--- coda:\n{got!r}")
    if failures:
        sys.exit(f"{len(failures)} template mismatches")
    print(f"all {len(templates)} templates match Jinja2")


if __name__ == "__main__":
    main()
