#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the benchmarks need.
# Idempotent: packages already present are skipped by apt-get; nothing is downloaded at run time.
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libpcre2-dev libicu-dev libcpp-httplib-dev
  clang libclang-rt-14-dev clang-format
  python3-numpy python3-jinja2 libopenblas0-pthread prometheus
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} Debian packages present"
else
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || true
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Node test dependencies (real tokenizer vocabularies), pinned by tests/node/package-lock.json.
root=$(cd "$(dirname "$0")/.." && pwd)
lock="$root/tests/node/package-lock.json"
stamp="$root/tests/node/node_modules/.coda-lock"
if [ ! -f "$stamp" ] || ! cmp -s "$lock" "$stamp"; then
  echo "bootstrap: npm ci in tests/node"
  (cd "$root/tests/node" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$lock" "$stamp"
fi
