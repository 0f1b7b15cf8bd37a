#!/bin/bash
# Checks the Prometheus rules with Debian's promtool (installed by scripts/bootstrap.sh test).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v promtool >/dev/null; then
  echo "promtool is missing: run scripts/bootstrap.sh test (Debian package prometheus)" >&2
  exit 1
fi
# The loop family in the rules is the guard's registry's (`coda scan --detectors`), not a copy that
# drifts: with a coda binary given (the test suite passes build/coda), the regex must list exactly it.
if [[ $# -ge 1 ]]; then
  family=$("$1" scan --detectors --json | /usr/bin/python3 -c '
import json, sys
print("|".join(d["name"] for d in json.load(sys.stdin) if d["family"] == "loop"))')
  rules=$(grep -o 'guard_events_total{type=~"[^"]*"}' coda-rules.yml | sed 's/.*=~"\(.*\)"}/\1/' | sort -u)
  if [[ "$rules" != "$family" ]]; then
    echo "coda-rules.yml counts loop events as type=~\"$rules\"; the guard's loop family is \"$family\"" >&2
    echo "(coda scan --detectors): update the rules" >&2
    exit 1
  fi
  echo "loop family matches the guard's registry: $family"
fi
promtool check rules coda-rules.yml
promtool test rules coda-rules.test.yml
