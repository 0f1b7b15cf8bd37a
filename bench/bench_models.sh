#!/usr/bin/env bash
# The engine-core benchmark of the issue reports: synthetic Llama-3.2-1B at Q8_0, Q4_0 and Q4_K,
# 2 threads, prefill of 128 and 512 tokens and 32 decode steps (after DEPTH tokens of context,
# llama-bench's -d), against the measured bandwidth roofline. bench-model warms up once before it
# times, as llama-bench does.
# Usage: bench/bench_models.sh [CODA] [OUT_DIR] [THREADS] [DEPTH] [REPS]
set -euo pipefail
coda=${1:-build/coda}
out=${2:-out}
threads=${3:-2}
depth=${4:-0}
reps=${5:-2}
mkdir -p "$out"
: >"$out/bench-models.jsonl"
for t in Q8_0 Q4_0 Q4_K; do
  model="$out/llama-3.2-1b-$t.gguf"
  [ -f "$model" ] || "$coda" synth --shape llama-3.2-1b --type "$t" -o "$model"
  for p in 128 512; do
    "$coda" bench-model -m "$model" -t "$threads" -p "$p" -n 32 -d "$depth" -r "$reps" --json |
      tee -a "$out/bench-models.jsonl"
  done
done
echo "results: $out/bench-models.jsonl"
