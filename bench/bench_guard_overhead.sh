#!/usr/bin/env bash
# The guard's cost inside real decoding: synthetic Llama-3.2-1B Q4_K (128,256-token vocabulary),
# 2 threads, 256 decode steps, guard in observe mode (every detector on, nothing acted on).
# Prints the guard's ms per token against the decode step.
# Usage: bench/bench_guard_overhead.sh [CODA] [OUT_DIR] [THREADS]
set -euo pipefail
coda=${1:-build/coda}
out=${2:-out}
threads=${3:-2}
mkdir -p "$out"
model="$out/llama-3.2-1b-Q4_K.gguf"
[ -f "$model" ] || "$coda" synth --shape llama-3.2-1b --type Q4_K -o "$model"
for cfg in "--temp 0" "--temp 1"; do
  "$coda" run -m "$model" -t "$threads" -n 256 --ignore-eos -p "The quick brown fox" --guard observe --json $cfg \
    2>/dev/null | /usr/bin/python3 -c "
import json, sys
r = json.load(sys.stdin)
t = r['timings']
n = r['usage']['completion_tokens']
per = t['observer_ms'] / n
print(f\"guard ($cfg): {per:.3f} ms/token, decode step {t['ms_per_token']:.2f} ms -> {100 * per / t['ms_per_token']:.2f}%\")"
done
