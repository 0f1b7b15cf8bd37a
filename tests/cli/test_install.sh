#!/usr/bin/env bash
# `cmake --install` into a temporary prefix: the installed `coda` runs from another directory and
# finds the bundled model in PREFIX/share/coda (not in the source tree it was built from).
# Usage: test_install.sh BUILD_DIR WORK_DIR
set -uo pipefail
build=${1:?build dir}
work=${2:?work dir}
rm -rf "$work"
mkdir -p "$work/elsewhere"
prefix="$work/prefix"
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || fail "cmake --install: $(cat "$work/install.log")"
[ -x "$prefix/bin/coda" ] || fail "no $prefix/bin/coda"
[ -f "$prefix/share/coda/coda-tiny-en-it-f16.gguf" ] || fail "no bundled model in $prefix/share/coda"

cd "$work/elsewhere" || exit 1
unset CODA_MODEL
# The default model is the installed copy: `coda info` names the file it opened.
first=$("$prefix/bin/coda" info 2>&1 | head -n 1)
[[ "$first" == "$prefix/share/coda/coda-tiny-en-it-f16.gguf:"* ]] || fail "default model is not the installed one: $first"
# Greedy on the reference prompt gives the reference continuation (tests/reference checks it against
# the NumPy model and llama.cpp).
out=$("$prefix/bin/coda" run -p "In the beginning God" -n 12 --temp 0 2>"$work/err")
[[ "$out" == "In the beginning God of Israel, and the LORD God"* ]] || fail "installed coda run printed: $out / $(cat "$work/err")"
grep -Eq 'generation 12 tokens' "$work/err" || fail "no timing line: $(cat "$work/err")"
echo "installed coda: $out"
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
