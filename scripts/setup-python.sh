#!/usr/bin/env bash
# Creates (once) the Python environment rayscale's tests and benchmarks use: Ray 2.60.0
# (the oracle and a real GCS), grpcio-tools (to check our .proto files against Ray's), and
# moto's EC2 server with boto3 (the AWS emulator; boto3 also runs Ray's own AWS provider
# to capture the RunInstances calls it makes); and the clouds' published API models the
# contract check judges rayscale's requests by (tests/contract): botocore's EC2 model (with
# boto3), Compute Engine's v1 discovery document (google-api-python-client) and Azure's
# generated compute and network models (azure-mgmt-compute, azure-mgmt-network).
# Prints the venv's python path on stdout; fails loudly when anything cannot be installed.
set -euo pipefail
VENV="${RAYSCALE_VENV:-/opt/rayscale-venv}"
want_ray="2.60.0"
want_moto="5.2.5"
want_gapi="2.202.0"
want_azc="33.0.0"
want_azn="27.0.0"
# botocore's EC2 model is the contract check's judge and the source of the AWS
# node_config passthrough table (scripts/gen_ec2_passthrough.py): one version everywhere.
want_boto="1.44.18"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<PY >/dev/null 2>&1
import ray, grpc_tools, yaml, jsonschema, moto, boto3, flask
import googleapiclient, azure.mgmt.compute.v2024_07_01.models, azure.mgmt.network.models
from importlib.metadata import version
assert ray.__version__ == "$want_ray", ray.__version__
assert moto.__version__ == "$want_moto", moto.__version__
assert version("google-api-python-client") == "$want_gapi"
assert version("azure-mgmt-compute") == "$want_azc" and version("azure-mgmt-network") == "$want_azn"
assert version("botocore") == "$want_boto" and version("boto3") == "$want_boto"
PY
then
  echo "$VENV/bin/python"
  exit 0
fi
echo "setup-python: installing ray==$want_ray, moto==$want_moto and the clouds' API models into $VENV (one time)" >&2
python3 -m venv "$VENV" >&2
"$VENV/bin/pip" install --quiet --disable-pip-version-check \
  "ray[default]==$want_ray" "grpcio-tools==1.85.1" pyyaml jsonschema "moto[server]==$want_moto" \
  "google-api-python-client==$want_gapi" "azure-mgmt-compute==$want_azc" "azure-mgmt-network==$want_azn" \
  "boto3==$want_boto" "botocore==$want_boto" >&2
"$VENV/bin/python" - <<PY >&2
import ray, grpc_tools, yaml, jsonschema, moto, boto3, flask
assert ray.__version__ == "$want_ray", f"ray {ray.__version__} installed, {want_ray!r} wanted"
assert moto.__version__ == "$want_moto", f"moto {moto.__version__} installed, {want_moto!r} wanted"
import botocore
assert botocore.__version__ == "$want_boto", f"botocore {botocore.__version__} installed, {want_boto!r} wanted"
import googleapiclient, azure.mgmt.compute.v2024_07_01.models, azure.mgmt.network.models
print("setup-python: ray", ray.__version__, "and moto", moto.__version__, "ready")
PY
echo "$VENV/bin/python"
