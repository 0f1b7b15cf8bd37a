#!/usr/bin/env bash
# The engine-core benchmark of the issue report: synthetic Llama-3.2-1B at Q8_0, Q4_0 and Q4_K,
# 2 threads, 128-token prefill and 32 decode steps, against the measured bandwidth roofline.
# Usage: bench/bench_models.sh [CODA] [OUT_DIR] [THREADS]
set -euo pipefail
coda=${1:-build/coda}
out=${2:-out}
threads=${3:-2}
mkdir -p "$out"
: >"$out/bench-models.jsonl"
for t in Q8_0 Q4_0 Q4_K; do
  model="$out/llama-3.2-1b-$t.gguf"
  [ -f "$model" ] || "$coda" synth --shape llama-3.2-1b --type "$t" -o "$model"
  "$coda" bench-model -m "$model" -t "$threads" -p 128 -n 32 -r 5 --json | tee -a "$out/bench-models.jsonl"
done
echo "results: $out/bench-models.jsonl"
