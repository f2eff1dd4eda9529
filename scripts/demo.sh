#!/usr/bin/env bash
# rayscale's main job on a laptop: installs Ray 2.60 into a local venv if it is missing,
# builds rayscale, starts a local cluster (examples/local-cluster.yaml: a head with no CPUs
# and up to 4 two-CPU workers as local processes), runs a workload that needs a scale-up,
# shows nodes coming and going, and tears everything down.
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

echo "== workload: 8 tasks of {CPU: 2} for 5 s each (the head has no CPUs)"
"$PY" tests/live/workload.py "127.0.0.1:$PORT" tasks 8 2 5 &
WL=$!
while kill -0 "$WL" 2>/dev/null; do
  sleep 3
  echo "-- $(date +%T)"; "$BIN" status --gcs "127.0.0.1:$PORT" | sed -n '/^Nodes:/,/^Recent/p' | grep -v '^Recent'
done
wait "$WL"

echo "== idle: workers are drained and terminated after 15 s idle"
for _ in $(seq 1 20); do
  sleep 3
  NODES="$("$BIN" status --gcs "127.0.0.1:$PORT" | sed -n '/^Nodes:/,/^Pending/p' | grep -c ' worker RUNNING\| worker IDLE' || true)"
  echo "-- $(date +%T): $NODES worker(s) up"
  if [[ "$NODES" == "0" ]]; then break; fi
done
echo "== rayscale's log"
grep -E "launching|draining|terminating|Ray head" "$LOG" || true
