"""Runs what Ray 2.60's `ray up` computes for an AWS cluster YAML against an EC2 endpoint
(moto in the tests) and prints it as JSON: the oracle of rayscale's `up`.

- `--what fillout`: Ray's resource fill-in (`AWSNodeProvider.
  fillout_available_node_types_resources`): {<node type>: resources}, the oracle of
  crates/provider-aws/src/resources.rs.
- `--what bootstrap`: Ray's `bootstrap_aws` (subnets, security group, key pair, IAM
  role): {<node type>: node_config as bootstrapped}, the oracle of
  crates/provider-aws/src/bootstrap.rs. It makes what is missing in the endpoint's
  account, as `ray up` does.
- `--what iam`: Ray's `_configure_iam_role` alone: {"head_node": the head's extra
  node_config, "seconds": how long it took} (Ray sleeps 15 s after making anything), the
  oracle of crates/provider-aws/src/iam.rs.
- `--what cloudwatch_policies`: the policies Ray's `CloudwatchHelper.resolve_policy_arns`
  gives a role it makes for this config's `provider.cloudwatch` (it makes the account's
  `CloudwatchManagedPolicies` as Ray does): {"policies": [...], "profile": ..., "role":
  ...}, with Ray's profile and role names for the config.

Usage: ray_aws_up.py --endpoint http://127.0.0.1:PORT --config cluster.yaml [--what W]
Output: the JSON on stdout's last line (Ray may log before it), or Ray's error on stderr
with exit status 1.
"""

import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--what", choices=["fillout", "bootstrap", "iam", "cloudwatch_policies"], default="fillout")
    args = ap.parse_args()
    if not args.endpoint.startswith(("http://127.", "http://localhost")):
        sys.exit("only a loopback endpoint may be targeted")
    os.environ["AWS_ENDPOINT_URL"] = args.endpoint
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

    import yaml

    with open(args.config) as f:
        config = yaml.safe_load(f)
    try:
        if args.what == "fillout":
            from ray.autoscaler._private.aws.node_provider import AWSNodeProvider

            filled = AWSNodeProvider.fillout_available_node_types_resources(config)
            out = {t: v.get("resources", {}) for t, v in filled["available_node_types"].items()}
        elif args.what == "iam":
            import time

            from ray.autoscaler._private.aws.config import _configure_iam_role
            from ray.autoscaler._private.util import fillout_defaults

            os.environ.setdefault("AWS_DEFAULT_REGION", config["provider"]["region"])
            config = fillout_defaults(config)
            config["head_node"] = {}
            t0 = time.monotonic()
            done = _configure_iam_role(config)
            out = {"head_node": done["head_node"], "seconds": time.monotonic() - t0}
        elif args.what == "cloudwatch_policies":
            import boto3
            from ray.autoscaler._private.aws.cloudwatch.cloudwatch_helper import CloudwatchHelper as cwh
            from ray.autoscaler._private.aws.config import DEFAULT_RAY_IAM_ROLE, DEFAULT_RAY_INSTANCE_PROFILE

            os.environ.setdefault("AWS_DEFAULT_REGION", config["provider"]["region"])
            defaults = ["arn:aws:iam::aws:policy/AmazonEC2FullAccess", "arn:aws:iam::aws:policy/AmazonS3FullAccess"]
            provider = config["provider"]
            out = {
                "policies": cwh.resolve_policy_arns(provider, boto3.resource("iam"), defaults),
                "profile": cwh.resolve_instance_profile_name(provider, DEFAULT_RAY_INSTANCE_PROFILE),
                "role": cwh.resolve_iam_role_name(provider, DEFAULT_RAY_IAM_ROLE),
            }
        else:
            from ray.autoscaler._private.aws.config import bootstrap_aws
            from ray.autoscaler._private.util import fillout_defaults

            os.environ.setdefault("AWS_DEFAULT_REGION", config["provider"]["region"])
            done = bootstrap_aws(fillout_defaults(config))
            out = {t: v["node_config"] for t, v in done["available_node_types"].items()}
    except Exception as e:  # Ray's error is the expected answer for an unknown type
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(out, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
