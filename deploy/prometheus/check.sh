#!/bin/bash
# Checks the Prometheus rules with Debian's promtool (installed by scripts/bootstrap.sh test).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v promtool >/dev/null; then
  echo "promtool is missing: run scripts/bootstrap.sh test (Debian package prometheus)" >&2
  exit 1
fi
promtool check rules coda-rules.yml
promtool test rules coda-rules.test.yml
