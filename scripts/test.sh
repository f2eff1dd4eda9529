#!/usr/bin/env bash
# rayscale's whole test suite: formatting, lints, unit/integration tests, the protocol
# compatibility checks against Ray's own protobufs, the contract check of every cloud
# request against the clouds' published API models, the wheel (built with maturin,
# installed into a fresh venv and run; installed by a head's boot in the end-to-end
# tests), the docs (the book built with mdBook; its examples, links and command-line
# reference checked by tests/tests/docs.rs), and the differential test against Ray
# 2.60's scheduler. Installs the Python side (Ray, maturin) and mdBook itself; fails
# loudly if it cannot.
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
echo "== the book (docs/): mdbook build"
# mdBook from PATH, else installed once beside the build cache (about 2 min cold).
MDBOOK="$(command -v mdbook || true)"
if [[ -z "$MDBOOK" ]]; then
  TOOLS="${CARGO_TARGET_DIR:-target}/tools"
  if [[ ! -x "$TOOLS/bin/mdbook" ]]; then
    cargo install mdbook --version 0.5.4 --locked --no-default-features --features search \
      --root "$TOOLS" || { echo "FATAL: cannot install mdbook" >&2; exit 1; }
  fi
  MDBOOK="$TOOLS/bin/mdbook"
fi
"$MDBOOK" build docs
echo "== proto compatibility with Ray's descriptors"
"$PY" scripts/check_proto_compat.py
"$PY" scripts/make_proto_fixtures.py --check
echo "== cargo test"
# Every cloud feature on, as clippy above, and the binaries built with the tests in one
# invocation.
cargo build --workspace --release --all-features --bins --tests
echo "== the wheel: built (maturin), installed into a fresh venv, run from there"
# The workspace turns on, for every build, the features the tests' dependencies turn on
# (Cargo.toml, tokio), so maturin's `-p rayscale` build reuses the crates just compiled.
WHEEL="$(scripts/build-wheel.sh)"
scripts/check-wheel.sh
# The end-to-end tests where a head installs that wheel (rayscale.install, ray up's
# head_setup_commands) and the KubeRay image's layout read it from here.
export RAYSCALE_WHEEL_DIR="$(dirname "$WHEEL")"
# Every request the cloud fakes and moto see, and every answer the fakes give, is written
# down for the contract check below (tests/fakes/record.rs, tests/fakes/moto_ec2.py).
CONTRACT_DIR="$(mktemp -d -t rayscale-contract.XXXXXX)"
RAYSCALE_CONTRACT_DIR="$CONTRACT_DIR" cargo test --workspace --release --all-features
echo "== contract check: rayscale's cloud requests and the fakes' answers against the clouds' published API models"
"$PY" tests/contract/check.py --self-test
"$PY" tests/contract/check.py --capture "$CONTRACT_DIR" --min aws=200,gcp=200,azure=500
rm -rf "$CONTRACT_DIR"
echo "== differential test against Ray 2.60 (${DIFFTEST_COUNT:-500} scenarios)"
"$PY" scripts/difftest.py --rayscale "${CARGO_TARGET_DIR:-target}/release/rayscale" \
  --seed "${DIFFTEST_SEED:-2060}" --count "${DIFFTEST_COUNT:-500}" --valid-min-workers --python "$PY"
