#!/usr/bin/env bash
# The coda command line: the main job works, bad input exits non-zero with an actionable message.
# Usage: test_cli.sh CODA WORK_DIR
set -uo pipefail
coda=${1:?coda binary}
work=${2:?work dir}
mkdir -p "$work"
failures=0

expect_fail() {  # expect_fail "message substring" args...
  local want=$1
  shift
  local err
  if "$coda" "$@" >"$work/out" 2>"$work/err"; then
    echo "FAIL: coda $* succeeded"
    failures=$((failures + 1))
    return
  fi
  err=$(cat "$work/err")
  if [[ "$err" != *"$want"* ]]; then
    echo "FAIL: coda $*: stderr lacks '$want': $err"
    failures=$((failures + 1))
  else
    echo "ok: coda $* -> $(head -c 160 "$work/err" | tr '\n' ' ')"
  fi
}

# `coda` alone lists what it can do (exit 0), as `git` does, instead of a parse error.
if ! "$coda" >"$work/out" 2>"$work/err" || ! grep -q "Subcommands:" "$work/out" || ! grep -q "serve" "$work/out"; then
  echo "FAIL: coda without arguments: $(cat "$work/out" "$work/err")"
  failures=$((failures + 1))
fi

# The main job on the bundled model: prompt then continuation on stdout, timing on stderr.
out=$("$coda" run -p "In the beginning God" -n 16 --temp 0 --ignore-eos 2>"$work/err")
if [[ "$out" != "In the beginning God of Israel, and the LORD God"* ]]; then
  echo "FAIL: unexpected run output: $out"
  failures=$((failures + 1))
fi
if ! tail -n 1 "$work/err" | grep -Eq 'prompt [0-9]+ tokens.*tokens/s.*generation 16 tokens.*ms/token'; then
  echo "FAIL: no timing line on stderr: $(cat "$work/err")"
  failures=$((failures + 1))
fi

printf 'not a gguf file at all, but long enough to have a header' >"$work/bad.gguf"
expect_fail "magic" run -m "$work/bad.gguf"
expect_fail "cannot open" run -m "$work/missing.gguf"
expect_fail "temperature: 5 is out of range; allowed [0, 2]" run --temp 5
expect_fail "top_p: 0 is out of range; allowed (0, 1]" run --top-p 0
expect_fail "repetition_penalty" run --repeat-penalty 0
expect_fail "-n" run -n -3
expect_fail "The following argument was not expected" run --no-such-flag
expect_fail "maximum context length is" run -n 100000
# -f reads the prompt from a file, as llama.cpp's does: the same continuation as -p.
printf 'In the beginning God' >"$work/prompt.txt"
f_out=$("$coda" run -f "$work/prompt.txt" -n 16 --temp 0 --ignore-eos 2>/dev/null)
[[ "$f_out" == "$out" ]] || { echo "FAIL: run -f differs from -p: $f_out"; failures=$((failures + 1)); }
expect_fail "not both" run -f "$work/prompt.txt" -p "x"
# coda embed: what it refuses (its vectors are checked against NumPy in tests/reference/test_perplexity.py).
expect_fail "nothing to embed" embed
expect_fail "use mean" embed -p "x" --pooling max
expect_fail "maximum context length is 64 tokens" embed -c 64 -p "$(printf 'word %.0s' $(seq 100))"
expect_fail "cannot open" embed -f "$work/missing.txt"
expect_fail "cannot read" run -f "$work/no-such-prompt.txt"
: >"$work/empty.txt"
expect_fail "is empty" run -f "$work/empty.txt"
expect_fail "unknown shape 'gpt5'" synth --shape gpt5 -o "$work/x.gguf"
expect_fail "unknown weight type 'Q3_XX'" synth --type Q3_XX -o "$work/x.gguf"
head -c 3000 "$("$coda" info 2>/dev/null | head -1 | cut -d: -f1)" >"$work/truncated.gguf" 2>/dev/null
expect_fail "invalid GGUF" run -m "$work/truncated.gguf"

# llama-cli's command line runs as written: -ngl and -fa (old style without a value, and on/off) are
# accepted and noted, -ctk/-ctv reach the cache, and the greedy text is the same as without them.
g=$("$coda" run -p "In the beginning God" -n 16 --temp 0 --ignore-eos -ngl 99 -fa -ctk q8_0 -ctv q8_0 2>"$work/err")
[[ "$g" == "In the beginning God"* ]] || { echo "FAIL: run with llama.cpp flags: $g $(cat "$work/err")"; failures=$((failures + 1)); }
grep -q "n-gpu-layers 99 ignored: coda runs every layer on the CPU" "$work/err" ||
  { echo "FAIL: -ngl 99 not noted: $(cat "$work/err")"; failures=$((failures + 1)); }
"$coda" run -n 2 -fa off 2>"$work/err" >/dev/null && grep -q "flash-attn off ignored" "$work/err" ||
  { echo "FAIL: -fa off not noted: $(cat "$work/err")"; failures=$((failures + 1)); }
expect_fail "--flash-attn: maybe not in {on,off,auto" run -n 2 -fa maybe
expect_fail "'x' is not a layer count (or auto, all)" run -n 2 -ngl x
"$coda" run -n 2 -ngl all >/dev/null 2>&1 || { echo "FAIL: -ngl all"; failures=$((failures + 1)); }
# llama-cli's --no-display-prompt (and -no-cnv, accepted): the continuation alone on stdout.
nd=$("$coda" run -p "In the beginning God" -n 16 --temp 0 --ignore-eos --no-display-prompt -no-cnv 2>/dev/null)
[[ -n "$nd" && "In the beginning God$nd" == "$out" ]] ||
  { echo "FAIL: --no-display-prompt: '$nd' is not the continuation of '$out'"; failures=$((failures + 1)); }
"$coda" run -c 0 -n 2 >/dev/null 2>"$work/err" ||
  { echo "FAIL: -c 0 (llama.cpp's 'the model's context'): $(cat "$work/err")"; failures=$((failures + 1)); }
expect_fail "--max-num-seqs: Value 0 not in range 1 to 256" serve -np 0
expect_fail "--n-predict: 0 tokens" serve -n 0

# Seeded sampling is reproducible.
a=$("$coda" run -n 24 --temp 0.9 --top-k 40 --top-p 0.95 --seed 7 --ignore-eos 2>/dev/null)
b=$("$coda" run -n 24 --temp 0.9 --top-k 40 --top-p 0.95 --seed 7 --ignore-eos 2>/dev/null)
c=$("$coda" run -n 24 --temp 0.9 --top-k 40 --top-p 0.95 --seed 8 --ignore-eos 2>/dev/null)
if [ "$a" != "$b" ]; then echo "FAIL: same seed, different output"; failures=$((failures + 1)); fi
if [ "$a" = "$c" ]; then echo "FAIL: different seeds, same 24 sampled tokens"; failures=$((failures + 1)); fi
# A repetition penalty breaks the bundled model's greedy loop.
d=$("$coda" run -n 48 --repeat-penalty 1.3 --ignore-eos 2>/dev/null)
if [[ "$d" == *"of Israel, and the LORD God of Israel, and the LORD God of Israel"* ]]; then
  echo "FAIL: --repeat-penalty had no effect: $d"; failures=$((failures + 1))
fi

# synth -> run round trip on a random-weight model with the placeholder vocabulary.
"$coda" synth --shape tiny-qwen2 --type Q4_K --layers 1 -o "$work/q.gguf" >/dev/null || { echo "FAIL: synth"; failures=$((failures + 1)); }
"$coda" run -m "$work/q.gguf" -p "hello" -n 8 --ignore-eos >/dev/null 2>&1 || { echo "FAIL: run on synth model"; failures=$((failures + 1)); }

# Stop strings: cut before the stop string, across token boundaries.
e=$("$coda" run -n 24 --stop "LORD" --stop "never" 2>/dev/null)
if [ "$e" != "In the beginning God of Israel, and the " ]; then
  echo "FAIL: --stop: '$e'"; failures=$((failures + 1))
fi
"$coda" run -n 5 --json --logprobs 2 >"$work/run.json" 2>/dev/null &&
  /usr/bin/python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert r['finish_reason'] == 'length' and r['usage']['completion_tokens'] == 5, r
assert len(r['logprobs']) == 5 and len(r['logprobs'][0]['top_logprobs']) == 2, r
" "$work/run.json" || { echo "FAIL: run --json"; failures=$((failures + 1)); }
expect_fail "stop[0]: an empty stop string is not allowed" run --stop ""
expect_fail "dry_multiplier: -1 is out of range" run --dry-multiplier -1
expect_fail "min_tokens: 9 is greater than max_tokens (4)" run -n 4 --min-tokens 9

# coda template: the rendered prompt, byte for byte, and nothing else.
printf '[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]' >"$work/msgs.json"
"$coda" template --builtin chatml --messages "$work/msgs.json" --add-generation-prompt >"$work/prompt.txt" 2>"$work/err"
printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n' >"$work/want.txt"
cmp -s "$work/prompt.txt" "$work/want.txt" || { echo "FAIL: coda template output differs"; failures=$((failures + 1)); }
[ -s "$work/err" ] && { echo "FAIL: coda template wrote to stderr"; failures=$((failures + 1)); }
expect_fail "System role not supported" template --template "$(dirname "$0")/../data/templates/google-gemma-2-2b-it.jinja" --messages "$work/msgs.json"
expect_fail "give exactly one of" template --messages "$work/msgs.json"
printf '{not json' >"$work/bad.json"
expect_fail "not valid JSON" template --builtin chatml --messages "$work/bad.json"
printf '{{ x' >"$work/bad.jinja"
expect_fail "template syntax error at line 1" template --template "$work/bad.jinja" --messages "$work/msgs.json"
printf '[]' >"$work/empty.json"
expect_fail "the conversation is empty" template --builtin chatml --messages "$work/empty.json"

# coda chat reads one message per line and answers each through the template.
printf 'Hello there\n/reset\nAgain\n/exit\n' | "$coda" chat -n 4 --temp 0 >"$work/chat.out" 2>"$work/chat.err" ||
  { echo "FAIL: coda chat"; failures=$((failures + 1)); }
grep -q "conversation cleared" "$work/chat.out" || { echo "FAIL: coda chat /reset"; failures=$((failures + 1)); }

# The guard: a greedy loop is stopped with finish_reason "repetition"; report, trace and analyze.
"$coda" run -n 300 --guard stop --report "$work/report.json" --trace "$work/trace.jsonl" >/dev/null 2>&1 &&
  /usr/bin/python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert r['finish_reason'] == 'repetition', r['finish_reason']
assert r['coda']['events'][0]['type'] == 'loop', r['coda']
lines = [json.loads(l) for l in open(sys.argv[2])]
assert len(lines) == r['usage']['completion_tokens'], (len(lines), r['usage'])
" "$work/report.json" "$work/trace.jsonl" || { echo "FAIL: --guard stop report/trace"; failures=$((failures + 1)); }
"$coda" analyze --trace "$work/trace.jsonl" --block 8 -o "$work/analysis" >/dev/null 2>&1 &&
  [ -s "$work/analysis/report.html" ] && [ -s "$work/analysis/blocks.csv" ] ||
  { echo "FAIL: coda analyze"; failures=$((failures + 1)); }
expect_fail "guard policy: 'fix' is not one of observe, stop, repair" run --guard fix
expect_fail "drop --guard off" run --guard off --report "$work/r.json"
expect_fail "give prompts to generate from" analyze -o "$work/analysis"
# bench-model times batched decode of several sequences (llama-batched-bench's -npl).
"$coda" bench-model -p 8 -n 4 -r 1 --streams 1,3 --json >"$work/bm.json" 2>"$work/err" &&
  /usr/bin/python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert [b['streams'] for b in r['batched']] == [1, 3], r
assert all(b['aggregate_tps'] > 0 for b in r['batched']), r
# Without -t the threads follow the weights per token: one per MiB, up to the usable cores (nproc).
cores = min(int(sys.argv[2]), 16)
assert r['threads'] == min(cores, max(1, r['bytes_per_token'] // 2**20)), (r['threads'], r['bytes_per_token'], cores)
" "$work/bm.json" "$(nproc)" || { echo "FAIL: bench-model --streams: $(cat "$work/err")"; failures=$((failures + 1)); }
expect_fail "--streams" bench-model -n 2 -r 1 --streams 0
# --threads-sweep times every thread count from 1 to -t, and names the fastest decode among them.
"$coda" bench-model -p 8 -n 4 -r 1 -t 3 --threads-sweep --json >"$work/sweep.json" 2>"$work/err" &&
  /usr/bin/python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert [s['threads'] for s in r['sweep']] == [1, 2, 3], r
assert all(s['decode_tps'] > 0 and s['prefill_tps'] > 0 for s in r['sweep']), r
best = max(r['sweep'], key=lambda s: s['decode_tps'])['threads']
assert r['best_decode_threads'] == best, r
assert r['default_threads'] == 3, r  # the bundled model's 11 MiB per token are worth 3 of these 3 threads
" "$work/sweep.json" || { echo "FAIL: bench-model --threads-sweep: $(cat "$work/err")"; failures=$((failures + 1)); }
# coda serve refuses a context its KV budget cannot hold, and says what would fit.
expect_fail "the largest context that fits is" serve --kv-budget 0.001 --port 0

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
