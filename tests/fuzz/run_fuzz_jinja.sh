#!/usr/bin/env bash
# Runs the chat-template fuzz target (libFuzzer + ASan + UBSan) for a bounded time, starting from
# the real templates of tests/data/templates.
# Usage: run_fuzz_jinja.sh BUILD_DIR SECONDS
set -euo pipefail
out=${1:?build dir}
seconds=${2:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$out/fuzz_jinja"
if [ ! -x "$bin" ]; then
  clangxx=$(command -v clang++ || command -v clang++-14 || true)
  if [ -z "$clangxx" ]; then
    echo "clang++ not found: run scripts/bootstrap.sh" >&2
    exit 1
  fi
  # Built by the build (target fuzz_jinja); by hand, once, from the same sources.
  (cd "$root" && "$clangxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Isrc tests/fuzz/fuzz_jinja.cpp \
    src/chat/jinja_value.cpp src/chat/jinja_parser.cpp src/chat/jinja_builtins.cpp src/chat/jinja_eval.cpp -o "$bin")
fi
mkdir -p "$out/jinja-corpus" "$out/jinja-seeds"
cp "$root"/tests/data/templates/*.jinja "$out/jinja-seeds/"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# -timeout: one input may not run for 20 s (the render budget ends loops well before that).
"$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -timeout=20 -print_final_stats=1 \
  -artifact_prefix="$out/jinja-" "$out/jinja-corpus" "$out/jinja-seeds" 2>&1 | tail -n 15
