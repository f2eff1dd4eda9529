#!/usr/bin/env bash
# Builds rayscale's wheel into dist/: maturin (bindings = "bin", bin/pyproject.toml) with
# every cloud built in, tagged manylinux_2_34 (glibc 2.34 or newer: Ubuntu 22.04, Debian
# 12, Amazon Linux 2023, RHEL 9, and Ray's own images). maturin is installed, once, into
# .wheel-venv (or $RAYSCALE_WHEEL_VENV). Prints the wheel's path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RAYSCALE_WHEEL_VENV:-$PWD/.wheel-venv}"
want_maturin="1.16.0"
if ! "$VENV/bin/maturin" --version 2>/dev/null | grep -qx "maturin $want_maturin"; then
  echo "build-wheel: installing maturin $want_maturin into $VENV (one time)" >&2
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "maturin==$want_maturin" >&2 \
    || { echo "FATAL: cannot install maturin $want_maturin" >&2; exit 1; }
fi
rm -f dist/rayscale-*.whl
# --compatibility: fail rather than tag a wheel that needs a newer glibc than it says.
"$VENV/bin/maturin" build --release --manifest-path bin/Cargo.toml --out dist \
  --compatibility manylinux_2_34 >&2
wheel="$(ls dist/rayscale-*.whl)"
echo "build-wheel: $wheel" >&2
echo "$PWD/$wheel"
