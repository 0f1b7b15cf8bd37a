#!/usr/bin/env bash
# One alternating round of coda against llama.cpp or ik_llama.cpp on the same GGUF files: per file,
# coda's bench-model at pp128 and pp512 (each with tg32), then llama-bench as it ships (-rtr 0) and,
# for ik_llama.cpp, with run-time repacking (-rtr 1). Run it several times: a shared VM moves
# throughput between rounds, and only figures from the same round compare.
# Usage: bench/side_by_side.sh CODA LLAMA_BENCH THREADS FILE.gguf...
#   e.g. bench/side_by_side.sh build/coda /tmp/ik/build/bin/llama-bench 2 /tmp/m/1b-Q4_K_M.gguf
# Prints one line per measurement: engine, file, test, tokens/s.
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 CODA LLAMA_BENCH THREADS FILE.gguf..." >&2
  exit 2
fi
coda=$1 llama_bench=$2 threads=$3
shift 3
rtr_values="0 1"
"$llama_bench" --help 2>&1 | grep -q -- "-rtr" || rtr_values="none"  # llama.cpp has no -rtr
for f in "$@"; do
  name=$(basename "$f" .gguf)
  for p in 128 512; do
    out=$("$coda" bench-model -m "$f" -t "$threads" -p "$p" -n 32 -r 2)
    echo "coda $name pp$p $(echo "$out" | awk '/^prefill/{print $2}')"
    echo "coda $name tg32 $(echo "$out" | awk '/^decode +[0-9]/{print $2}') (after pp$p)"
  done
  for rtr in $rtr_values; do
    label=llama-bench
    args=()
    if [ "$rtr" != none ]; then
      label="llama-bench-rtr$rtr"
      args=(-rtr "$rtr")
    fi
    "$llama_bench" -m "$f" -t "$threads" -p 128,512 -n 32 -r 2 "${args[@]}" 2>/dev/null |
      awk -F'|' -v l="$label" -v n="$name" 'NF > 3 && $(NF-2) ~ /(pp|tg)[0-9]+/ {gsub(/ /, "", $(NF-2)); split($(NF-1), v, " "); print l, n, $(NF-2), v[1]}'
  done
done
