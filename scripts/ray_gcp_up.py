"""Runs Ray 2.60's GCP bootstrap (`bootstrap_gcp`, what `ray up` does before it launches
the head) for a cluster YAML against a loopback fake of Compute, IAM and Resource Manager
(tests/fakes/gce.rs), and prints what it set as JSON: the oracle of
crates/provider-gcp/src/bootstrap.rs.

Ray builds its clients with googleapiclient's discovery documents (bundled in
google-api-python-client) and Application Default Credentials; here each client is built
the same way but pointed at the fake (`client_options.api_endpoint`) with anonymous
credentials. Ray writes a key it makes under `$HOME/.ssh`.

Usage: ray_gcp_up.py --endpoint http://127.0.0.1:PORT --config cluster.yaml
Output (last line of stdout): {"head_node": ..., "node_configs": {type: node_config},
"ssh_private_key": path, "head_launch_hash": ..., "launch_hashes": {type: hash}}; Ray's error on stderr with exit status 1.
"""

import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--config", required=True)
    args = ap.parse_args()
    if not args.endpoint.startswith(("http://127.", "http://localhost")):
        sys.exit("only a loopback endpoint may be targeted")

    import google.auth.credentials
    import yaml
    from googleapiclient import discovery

    real_build = discovery.build

    def build(service, version, *a, **kw):
        kw["credentials"] = google.auth.credentials.AnonymousCredentials()
        # Ray asks the TPU API's live discovery service for "v2alpha"; the bundled
        # document of that version is "v2alpha1".
        if service == "tpu":
            version = "v2alpha1"
            kw.pop("discoveryServiceUrl", None)
        # The endpoint replaces the document's base URL, its service path included.
        path = "compute/v1/" if service == "compute" else ""
        kw["client_options"] = {"api_endpoint": args.endpoint.rstrip("/") + "/" + path}
        kw["static_discovery"] = True
        return real_build(service, version, *a, **kw)

    discovery.build = build
    from ray.autoscaler._private.gcp import config as gcp_config
    from ray.autoscaler._private.util import fillout_defaults

    # Ray's polling sleeps between tries; the fake's operations end within a second.
    gcp_config.POLL_INTERVAL = 0.2

    with open(args.config) as f:
        config = yaml.safe_load(f)
    try:
        config = fillout_defaults(config)
        done = gcp_config.bootstrap_gcp(config)
    except Exception as e:  # the oracle's failure is reported, not raised
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    out = {
        "head_node": done.get("head_node", {}),
        "node_configs": {t: v["node_config"] for t, v in done["available_node_types"].items()},
        "ssh_private_key": done["auth"].get("ssh_private_key"),
    }
    # The `ray-launch-config` tags `ray up` gives: the head's over its `head_node`, each
    # type's own (Ray's `hash_launch_conf`, with the keys' text).
    from ray.autoscaler._private.util import hash_launch_conf

    head_nc = dict(done.get("head_node", {}))
    head_nc.update(done["available_node_types"][done["head_node_type"]]["node_config"])
    out["head_launch_hash"] = hash_launch_conf(head_nc, done["auth"])
    out["launch_hashes"] = {
        t: hash_launch_conf(v["node_config"], done["auth"])
        for t, v in done["available_node_types"].items()
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
