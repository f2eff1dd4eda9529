#!/usr/bin/env bash
# Creates (once) the Python environment rayscale's tests and benchmarks use: Ray 2.60.0
# (the oracle and a real GCS), grpcio-tools (to check our .proto files against Ray's), and
# moto's EC2 server with boto3 (the AWS emulator; boto3 also runs Ray's own AWS provider
# to capture the RunInstances calls it makes); and the clouds' published API models the
# contract check judges rayscale's requests by (tests/contract): botocore's EC2 model (with
# boto3), Compute Engine's v1 discovery document (google-api-python-client) and Azure's
# generated compute, network, resource, identity and authorization models
# (azure-mgmt-compute, -network, -resource, -msi, -authorization); and what Ray's own
# Azure bootstrap imports (azure-identity, azure-common, msrest, msrestazure), run as the
# oracle of rayscale's (scripts/ray_azure_up.py).
# Prints the venv's python path on stdout; fails loudly when anything cannot be installed.
set -euo pipefail
VENV="${RAYSCALE_VENV:-/opt/rayscale-venv}"
want_ray="2.60.0"
want_moto="5.2.5"
want_gapi="2.202.0"
want_azc="33.0.0"
want_azn="27.0.0"
# Resource groups, identities, role assignments; and Ray's Azure bootstrap's own imports
# (the versions Ray's Azure defaults.yaml pins on its head, where it pins one).
want_az_more=("azure-mgmt-resource==24.0.0" "azure-mgmt-msi==7.1.0" "azure-mgmt-authorization==4.0.0" \
  "azure-identity==1.23.1" "azure-common==1.1.28" "msrest==0.7.1" "msrestazure==0.6.4.post1")
# botocore's EC2 model is the contract check's judge and the source of the AWS
# node_config passthrough table (scripts/gen_ec2_passthrough.py): one version everywhere.
want_boto="1.44.18"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<PY >/dev/null 2>&1
import ray, grpc_tools, yaml, jsonschema, moto, boto3, flask
import googleapiclient, azure.mgmt.compute.v2024_07_01.models, azure.mgmt.network.models
import azure.mgmt.resource.resources.v2024_11_01, azure.mgmt.msi.v2024_11_30, azure.mgmt.authorization.v2022_04_01
import ray.autoscaler._private._azure.config
from importlib.metadata import version
for spec in "${want_az_more[*]}".split():
    name, want = spec.split("==")
    assert version(name) == want, (name, version(name), want)
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
  "boto3==$want_boto" "botocore==$want_boto" "${want_az_more[@]}" >&2
"$VENV/bin/python" - <<PY >&2
import ray, grpc_tools, yaml, jsonschema, moto, boto3, flask
assert ray.__version__ == "$want_ray", f"ray {ray.__version__} installed, {want_ray!r} wanted"
assert moto.__version__ == "$want_moto", f"moto {moto.__version__} installed, {want_moto!r} wanted"
import botocore
assert botocore.__version__ == "$want_boto", f"botocore {botocore.__version__} installed, {want_boto!r} wanted"
import googleapiclient, azure.mgmt.compute.v2024_07_01.models, azure.mgmt.network.models
import azure.mgmt.resource.resources.v2024_11_01, azure.mgmt.msi.v2024_11_30, azure.mgmt.authorization.v2022_04_01
import ray.autoscaler._private._azure.config
print("setup-python: ray", ray.__version__, "and moto", moto.__version__, "ready")
PY
echo "$VENV/bin/python"
