"""Runs Ray 2.60's own AWS provider against an EC2 endpoint (moto in the tests) and
prints, as JSON, the RunInstances parameters it sends for the first launch of each worker
type of a cluster YAML: the oracle of rayscale's AWS mapping.

As `ray up` and Ray's autoscaler v2 do: the YAML is filled with the AWS defaults and
bootstrapped (`bootstrap_aws`: default AMI, subnets, security group, key pair, IAM role,
created in the emulator), then each type's first launch goes through
`AWSNodeProvider.create_node_with_resources_and_labels` with the tags Ray's v2
`NodeProviderAdapter` sets. A botocore hook records the parameters of every RunInstances.

Usage: ray_aws_capture.py --endpoint http://127.0.0.1:PORT --config cluster.yaml --out F
Output (in F): {"bootstrapped": {<type>: node_config}, "calls": {<type>: RunInstances params},
"forms": {<type>: the same call as botocore's EC2 serializer writes its body, {key: value}}}
"""

import argparse
import copy
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--count", type=int, default=2)
    ap.add_argument("--out", required=True, help="where the JSON goes (Ray logs to stdout)")
    args = ap.parse_args()
    if not args.endpoint.startswith(("http://127.", "http://localhost")):
        sys.exit("only a loopback endpoint may be targeted")
    os.environ["AWS_ENDPOINT_URL"] = args.endpoint
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

    import yaml
    from ray.autoscaler._private.aws.config import bootstrap_aws
    from ray.autoscaler._private.aws.node_provider import AWSNodeProvider
    from ray.autoscaler._private.util import fillout_defaults, hash_launch_conf
    from ray.autoscaler.tags import (
        NODE_KIND_WORKER,
        STATUS_UNINITIALIZED,
        TAG_RAY_LAUNCH_CONFIG,
        TAG_RAY_LAUNCH_REQUEST,
        TAG_RAY_NODE_KIND,
        TAG_RAY_NODE_NAME,
        TAG_RAY_NODE_STATUS,
        TAG_RAY_USER_NODE_TYPE,
    )

    with open(args.config) as f:
        config = yaml.safe_load(f)
    config = fillout_defaults(config)
    region = config["provider"]["region"]
    os.environ.setdefault("AWS_DEFAULT_REGION", region)

    calls = []

    def record(params, **_):
        calls.append(copy.deepcopy(params))

    # Ray makes its clients through boto3's default session: the hook on it sees every
    # RunInstances, whichever client sends it.
    import boto3

    boto3.setup_default_session()
    boto3.DEFAULT_SESSION.events.register("provide-client-params.ec2.RunInstances", record)

    config = bootstrap_aws(config)
    provider = AWSNodeProvider(config["provider"], config["cluster_name"])
    out = {"bootstrapped": {}, "calls": {}}
    for name, t in config["available_node_types"].items():
        if name == config.get("head_node_type"):
            continue
        node_config = t["node_config"]
        out["bootstrapped"][name] = node_config
        tags = {
            TAG_RAY_NODE_NAME: "ray-{}-worker".format(config["cluster_name"]),
            TAG_RAY_NODE_KIND: NODE_KIND_WORKER,
            TAG_RAY_NODE_STATUS: STATUS_UNINITIALIZED,
            TAG_RAY_LAUNCH_CONFIG: hash_launch_conf(node_config, config.get("auth", {})),
            TAG_RAY_LAUNCH_REQUEST: "capture-" + name,
            TAG_RAY_USER_NODE_TYPE: name,
        }
        before = len(calls)
        provider.create_node_with_resources_and_labels(
            copy.deepcopy(node_config), tags, args.count, t.get("resources", {}), t.get("labels", {})
        )
        if len(calls) == before:
            sys.exit(f"no RunInstances recorded for {name}")
        out["calls"][name] = calls[before]
    # The body each call is sent with: botocore's own serializer, the oracle of the keys
    # rayscale passes through (crates/provider-aws/src/passthrough).
    import botocore.serialize

    op = boto3.DEFAULT_SESSION._session.get_service_model("ec2").operation_model("RunInstances")
    serializer = botocore.serialize.create_serializer("ec2")
    out["forms"] = {
        name: serializer.serialize_to_request(params, op)["body"] for name, params in out["calls"].items()
    }
    with open(args.out, "w") as f:
        json.dump(out, f, default=str, sort_keys=True)


if __name__ == "__main__":
    main()
