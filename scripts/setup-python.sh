#!/usr/bin/env bash
# Creates (once) the Python environment rayscale's tests and benchmarks use: Ray 2.60.0
# (the oracle and a real GCS), grpcio-tools (to check our .proto files against Ray's).
# Prints the venv's python path on stdout; fails loudly when anything cannot be installed.
set -euo pipefail
VENV="${RAYSCALE_VENV:-/opt/rayscale-venv}"
want_ray="2.60.0"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<PY >/dev/null 2>&1
import ray, grpc_tools, yaml, jsonschema
assert ray.__version__ == "$want_ray", ray.__version__
PY
then
  echo "$VENV/bin/python"
  exit 0
fi
echo "setup-python: installing ray==$want_ray into $VENV (one time)" >&2
python3 -m venv "$VENV" >&2
"$VENV/bin/pip" install --quiet --disable-pip-version-check \
  "ray[default]==$want_ray" "grpcio-tools==1.85.1" pyyaml jsonschema >&2
"$VENV/bin/python" - <<PY >&2
import ray, grpc_tools, yaml, jsonschema
assert ray.__version__ == "$want_ray", f"ray {ray.__version__} installed, {want_ray!r} wanted"
print("setup-python: ray", ray.__version__, "ready")
PY
echo "$VENV/bin/python"
