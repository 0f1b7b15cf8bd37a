#!/usr/bin/env bash
# Builds the GGUF fuzz target with clang (libFuzzer + ASan + UBSan) and runs it for a bounded time.
# Usage: run_fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
out=${1:?build dir}
seconds=${2:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/corpus"
clangxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$clangxx" ]; then
  echo "clang++ not found: run scripts/bootstrap.sh" >&2
  exit 1
fi
bin="$out/fuzz_gguf"
# The build (tests/CMakeLists.txt, target fuzz_gguf) compiles the binary in parallel and keeps it
# fresh. Run by hand without it, this builds it once, serially, from the same sources.
if [ ! -x "$bin" ]; then
  srcs=($(cd "$root" && ls src/core/*.cpp src/gguf/*.cpp src/kernels/*.cpp src/model/*.cpp src/tokenizer/*.cpp | grep -v synth))
  (cd "$root" && "$clangxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined \
    -Isrc tests/fuzz/fuzz_gguf.cpp "${srcs[@]}" -o "$bin" -lpcre2-8 $(pkg-config --libs icu-uc))
fi
/usr/bin/python3 "$root/tests/fuzz/make_seeds.py" "$out/seeds"
# UBSan's checks are compiled recoverable (faster to build); halting on the first report makes each
# one a crash that libFuzzer records, as -fno-sanitize-recover would.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# -rss_limit_mb bounds memory; -max_len lets mutations grow past the seeds; artifacts land in $out.
"$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=131072 -print_final_stats=1 \
  -artifact_prefix="$out/" "$out/corpus" "$out/seeds" 2>&1 | tail -n 15
