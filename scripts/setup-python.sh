#!/usr/bin/env bash
# Creates (once) the Python environment rayscale's tests and benchmarks use: Ray 2.60.0
# (the oracle and a real GCS), grpcio-tools (to check our .proto files against Ray's), and
# moto's EC2 server with boto3 (the AWS emulator; boto3 also runs Ray's own AWS provider
# to capture the RunInstances calls it makes).
# Prints the venv's python path on stdout; fails loudly when anything cannot be installed.
set -euo pipefail
VENV="${RAYSCALE_VENV:-/opt/rayscale-venv}"
want_ray="2.60.0"
want_moto="5.2.5"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<PY >/dev/null 2>&1
import ray, grpc_tools, yaml, jsonschema, moto, boto3, flask
assert ray.__version__ == "$want_ray", ray.__version__
assert moto.__version__ == "$want_moto", moto.__version__
PY
then
  echo "$VENV/bin/python"
  exit 0
fi
echo "setup-python: installing ray==$want_ray and moto==$want_moto into $VENV (one time)" >&2
python3 -m venv "$VENV" >&2
"$VENV/bin/pip" install --quiet --disable-pip-version-check \
  "ray[default]==$want_ray" "grpcio-tools==1.85.1" pyyaml jsonschema "moto[server]==$want_moto" >&2
"$VENV/bin/python" - <<PY >&2
import ray, grpc_tools, yaml, jsonschema, moto, boto3, flask
assert ray.__version__ == "$want_ray", f"ray {ray.__version__} installed, {want_ray!r} wanted"
assert moto.__version__ == "$want_moto", f"moto {moto.__version__} installed, {want_moto!r} wanted"
print("setup-python: ray", ray.__version__, "and moto", moto.__version__, "ready")
PY
echo "$VENV/bin/python"
