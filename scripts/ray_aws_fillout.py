"""Runs Ray 2.60's own resource fill-in for AWS (`AWSNodeProvider.
fillout_available_node_types_resources`, what `ray up` runs) against an EC2 endpoint
(moto in the tests) and prints each node type's resources as JSON: the oracle of
rayscale's fill-in (crates/provider-aws/src/resources.rs).

Usage: ray_aws_fillout.py --endpoint http://127.0.0.1:PORT --config cluster.yaml
Output: {<node type>: resources} on stdout, or Ray's error on stderr with exit status 1.
"""

import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--config", required=True)
    args = ap.parse_args()
    if not args.endpoint.startswith(("http://127.", "http://localhost")):
        sys.exit("only a loopback endpoint may be targeted")
    os.environ["AWS_ENDPOINT_URL"] = args.endpoint
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

    import yaml
    from ray.autoscaler._private.aws.node_provider import AWSNodeProvider

    with open(args.config) as f:
        config = yaml.safe_load(f)
    try:
        filled = AWSNodeProvider.fillout_available_node_types_resources(config)
    except Exception as e:  # Ray's error is the expected answer for an unknown type
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    out = {t: v.get("resources", {}) for t, v in filled["available_node_types"].items()}
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
