#!/usr/bin/env bash
# Installs the wheel (dist/rayscale-*.whl, scripts/build-wheel.sh) into a fresh venv with
# nothing else and runs rayscale from there: `--version` must print the workspace's
# version, and `plan` on an example must give that example's expected decision.
set -euo pipefail
cd "$(dirname "$0")/.."
wheel="$(ls dist/rayscale-*.whl 2>/dev/null)" || { echo "FATAL: no wheel in dist/ (scripts/build-wheel.sh)" >&2; exit 1; }
work="$(mktemp -d -t rayscale-wheel.XXXXXX)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
got="$("$work/venv/bin/rayscale" --version)"
[ "$got" = "rayscale $version" ] || { echo "FATAL: the wheel's rayscale --version says '$got', not 'rayscale $version'" >&2; exit 1; }
for s in availability basic; do
  "$work/venv/bin/rayscale" plan --scenario "examples/scenarios/$s.yaml" >"$work/$s.json"
  cmp -s <(tr -d '\n' <"$work/$s.json") <(tr -d '\n' <"examples/scenarios/$s.expected.json") \
    || { echo "FATAL: the wheel's rayscale plan on examples/scenarios/$s.yaml differs from $s.expected.json:" >&2; cat "$work/$s.json" >&2; exit 1; }
done
echo "check-wheel: $(basename "$wheel"): '$got', plan on 2 examples as expected (from a fresh venv)"
