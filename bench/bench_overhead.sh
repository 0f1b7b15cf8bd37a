#!/usr/bin/env bash
# The sampler's and the guard's cost inside real decoding: synthetic Llama-3.2-1B Q4_K
# (128,256-token vocabulary), 2 threads. Each line gives the component's ms per token against the
# decode step, from `coda run --json` timings (sample_ms, observer_ms, ms_per_token).
# Usage: bench/bench_overhead.sh [CODA] [OUT_DIR] [THREADS]
set -euo pipefail
coda=${1:-build/coda}
out=${2:-out}
threads=${3:-2}
mkdir -p "$out"
model="$out/llama-3.2-1b-Q4_K.gguf"
[ -f "$model" ] || "$coda" synth --shape llama-3.2-1b --type Q4_K -o "$model"
# run NAME FIELD TOKENS ARGS...: FIELD is sample_ms (sampler) or observer_ms (guard).
run() {
  local name=$1 field=$2 n=$3
  shift 3
  "$coda" run -m "$model" -t "$threads" -n "$n" --ignore-eos -p "The quick brown fox" --json "$@" 2>/dev/null |
    /usr/bin/python3 -c "
import json, sys
r = json.load(sys.stdin)
t = r['timings']
per = t['$field'] / r['usage']['completion_tokens']
print(f\"$name: {per:.3f} ms/token, decode step {t['ms_per_token']:.2f} ms -> {100 * per / t['ms_per_token']:.2f}%\")"
}
run "sampler, server default (temperature 1)" sample_ms 64 --guard off --temp 1
run "sampler, full chain (rep 1.1/64, freq 0.1, temp 0.8, top-k 40, top-p 0.95, min-p 0.05)" sample_ms 64 --guard off \
  --temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05 --repeat-penalty 1.1 --repeat-last-n 64 --frequency-penalty 0.1
run "sampler, every processor" sample_ms 64 --guard off --temp 0.8 --dynatemp-range 0.3 --top-k 40 --top-p 0.95 \
  --min-p 0.05 --typical 0.95 --top-nsigma 2 --repeat-penalty 1.1 --repeat-last-n 64 --frequency-penalty 0.1 \
  --presence-penalty 0.1 --dry-multiplier 0.8 --xtc-probability 0.5 --no-repeat-ngram-size 4 --min-tokens 4
run "guard (observe, every detector), greedy" observer_ms 256 --guard observe --temp 0
run "guard (observe, every detector), temperature 1" observer_ms 256 --guard observe --temp 1
