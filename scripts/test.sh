#!/usr/bin/env bash
# rayscale's whole test suite: formatting, lints, unit/integration tests, the protocol
# compatibility checks against Ray's own protobufs, and the differential test against
# Ray 2.60's scheduler. Installs the Python side (Ray) itself; fails loudly if it cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "FATAL: cargo is not installed (https://rustup.rs)" >&2; exit 1; }
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy || { echo "FATAL: cannot add rustfmt and clippy" >&2; exit 1; }
fi
scripts/setup-system.sh
PY="$(scripts/setup-python.sh)"
export RAYSCALE_PYTHON="$PY"
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== rayscale-core module layers"
"$PY" scripts/check_module_layers.py
echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features --release -- -D warnings
echo "== proto compatibility with Ray's descriptors"
"$PY" scripts/check_proto_compat.py
"$PY" scripts/make_proto_fixtures.py --check
echo "== cargo test"
# Every cloud feature on, as clippy above, and the binaries built with the tests in one
# invocation: the tests' dev-dependencies add features (tokio's test-util, ...), and a
# build of the binaries alone would resolve other features and compile every crate that
# depends on tokio (the cloud SDKs among them) a second time.
cargo build --workspace --release --all-features --bins --tests
cargo test --workspace --release --all-features
echo "== differential test against Ray 2.60 (${DIFFTEST_COUNT:-500} scenarios)"
"$PY" scripts/difftest.py --rayscale "${CARGO_TARGET_DIR:-target}/release/rayscale" \
  --seed "${DIFFTEST_SEED:-2060}" --count "${DIFFTEST_COUNT:-500}" --valid-min-workers --python "$PY"
