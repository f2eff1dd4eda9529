#!/usr/bin/env bash
# rayscale's main job on a laptop: installs Ray 2.60 into a local venv if it is missing,
# builds rayscale, starts a local cluster (examples/local-cluster.yaml: a head with no CPUs
# and up to 4 two-CPU workers as local processes), runs a workload that needs a scale-up,
# watches nodes come and go (`rayscale status --watch`), and tears everything down.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${RAYSCALE_DEMO_PORT:-6390}"
CONFIG=examples/local-cluster.yaml
PY="$(scripts/setup-python.sh)"
RAY="$(dirname "$PY")/ray"
echo "== building rayscale"
cargo build --release -p rayscale
BIN="${CARGO_TARGET_DIR:-target}/release/rayscale"
LOG="$(mktemp -t rayscale-demo.XXXXXX.log)"

cleanup() {
  if [[ -n "${UP_PID:-}" ]] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -INT "$UP_PID" 2>/dev/null || true
    wait "$UP_PID" 2>/dev/null || true
  fi
  echo "== rayscale down"
  "$BIN" down "$CONFIG" --port "$PORT" --ray "$RAY" || true
}
trap cleanup EXIT

echo "== rayscale up $CONFIG (log: $LOG)"
"$BIN" up "$CONFIG" --port "$PORT" --ray "$RAY" 2>"$LOG" &
UP_PID=$!
for _ in $(seq 1 60); do
  if "$BIN" status --gcs "127.0.0.1:$PORT" >/dev/null 2>&1; then break; fi
  sleep 1
done
"$BIN" status --gcs "127.0.0.1:$PORT"

echo "== watching the cluster: rayscale status --watch (a line per change and per instance transition)"
"$BIN" status --watch --every 2 --gcs "127.0.0.1:$PORT" &
WATCH=$!

echo "== workload: 8 tasks of {CPU: 2} for 5 s each (the head has no CPUs)"
"$PY" tests/live/workload.py "127.0.0.1:$PORT" tasks 8 2 5

echo "== idle: workers are drained and terminated after 15 s idle"
for _ in $(seq 1 30); do
  sleep 2
  # The watch's summary line counts nodes by type: "nodes: head 1, worker 4 | ...".
  LINE="$("$BIN" status --watch --count 1 --gcs "127.0.0.1:$PORT" | tail -1)"
  if [[ "$LINE" != *"worker "* ]]; then break; fi
done
kill "$WATCH" 2>/dev/null || true
wait "$WATCH" 2>/dev/null || true
echo "== rayscale's log"
grep -E "launching|draining|terminating|Ray head" "$LOG" || true
