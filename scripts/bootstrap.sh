#!/usr/bin/env bash
# Installs the Debian packages (and npm test packages) coda needs, in two sets:
#   bootstrap.sh run    what building and running the `coda` executable needs (make run, make install)
#   bootstrap.sh test   that, plus what the tests and benchmarks need (make test, make bench); the default
# Idempotent: packages already present are skipped; nothing is downloaded at run time.
set -euo pipefail

set_name=${1:-test}
run_packages=(
  cmake ninja-build g++ make pkg-config
  nlohmann-json3-dev libcli11-dev libpcre2-dev libicu-dev libcpp-httplib-dev
)
# Tests: GoogleTest/Benchmark; clang for libFuzzer; Debian's Python with NumPy and Jinja2 for the
# independent references, jsonschema to validate structured output; Optuna for the tuner's anchor;
# promtool (prometheus) for /metrics; Chromium (headless) to render the lab's HTML reports.
# The guard's languages: Hunspell dictionaries (the invented-words detector; at run time they are
# optional, read from /usr/share/hunspell), and real text in six languages plus Chinese and Japanese
# for its multilingual corpus and word lists (manual pages, the Debian Reference).
test_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev clang-format
  python3-numpy python3-jinja2 python3-jsonschema python3-optuna libopenblas0-pthread prometheus chromium
  hunspell-en-us hunspell-it hunspell-fr hunspell-de-de hunspell-es hunspell-pt-pt
  man-db manpages-fr manpages-it manpages-de manpages-es manpages-pt-br
  debian-reference-en debian-reference-it debian-reference-fr debian-reference-de debian-reference-es
  debian-reference-pt debian-reference-zh-cn debian-reference-ja
)
case "$set_name" in
  run) packages=("${run_packages[@]}") ;;
  test) packages=("${run_packages[@]}" "${test_packages[@]}") ;;
  *)
    echo "bootstrap: unknown set '$set_name'; use 'run' (build and run coda) or 'test' (also tests and benchmarks)" >&2
    exit 2
    ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "$set_name" = test ]; then
  command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} Debian packages of the '$set_name' set present"
else
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || true
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "$set_name" = test ] || exit 0

# Node test dependencies (real tokenizer vocabularies, the openai SDK), pinned by
# tests/node/package-lock.json.
root=$(cd "$(dirname "$0")/.." && pwd)
lock="$root/tests/node/package-lock.json"
stamp="$root/tests/node/node_modules/.coda-lock"
if [ ! -f "$stamp" ] || ! cmp -s "$lock" "$stamp"; then
  echo "bootstrap: npm ci in tests/node"
  (cd "$root/tests/node" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$lock" "$stamp"
fi
