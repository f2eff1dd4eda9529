"""Runs Ray 2.60's Azure bootstrap (`bootstrap_azure`, what `ray up` does before it
launches the head) for a cluster YAML and prints what it decided as JSON: the oracle of
crates/provider-azure/src/bootstrap.

Ray's bootstrap makes its resources through one ARM template deployment, which no fake
here evaluates; so its Resource Manager client is replaced by a recorder that answers as
an empty resource group does (nothing listed, nothing found) and gives the deployment's
outputs by the template's own `outputs` formulas. Everything Ray derives (the unique id,
the address range, the names, the role assignment's name, the SSH key and where it goes)
is Ray's code, run as it is. Ray writes a key it makes under `$HOME/.ssh`.

Usage: ray_azure_up.py --config cluster.yaml
Output (last line of stdout): {"parameters": {name: value}, "resource_group": {...},
"provider": {...}, "node_configs": {type: node_config}, "ssh_private_key": path, "head_launch_hash": ..., "launch_hashes": {type: hash}}; Ray's
error on stderr with exit status 1.
"""

import argparse
import json
import sys


class _NotFound(Exception):
    pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    args = ap.parse_args()

    import yaml
    from azure.core.exceptions import ResourceNotFoundError
    from ray.autoscaler._private._azure import config as azure_config
    from ray.autoscaler._private.util import fillout_defaults

    seen = {}

    class Poller:
        def __init__(self, outputs):
            self._outputs = outputs

        def result(self):
            props = type("P", (), {"outputs": self._outputs})
            return type("R", (), {"properties": props})

    class Groups:
        def create_or_update(self, resource_group_name, parameters):
            seen["resource_group"] = {"name": resource_group_name, **parameters}

    class Resources:
        def list_by_resource_group(self, *a, **kw):
            return []

        def get_by_id(self, *a, **kw):
            raise ResourceNotFoundError("not found (recorder)")

        def delete_by_id(self, *a, **kw):
            raise ResourceNotFoundError("not found (recorder)")

    class Deployments:
        def create_or_update(self, resource_group_name, deployment_name, parameters):
            p = {k: v["value"] for k, v in parameters["properties"]["parameters"].items()}
            seen["parameters"] = p
            sub = seen["subscription"]
            rg = f"/subscriptions/{sub}/resourceGroups/{resource_group_name}"
            cid = p["clusterId"]
            # The template's outputs, by its formulas (resourceId(...)).
            outputs = {
                "subnet": {"value": f"{rg}/providers/Microsoft.Network/virtualNetworks/ray-{cid}-vnet/subnets/ray-{cid}-subnet"},
                "nsg": {"value": f"{rg}/providers/Microsoft.Network/networkSecurityGroups/ray-{cid}-nsg"},
                "msi": {"value": f"/subscriptions/{sub}/resourceGroups/{p['msiResourceGroup']}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{p['msiName']}"},
            }
            return Poller(outputs)

    class Client:
        def __init__(self, credential, subscription_id):
            seen["subscription"] = subscription_id
            self.resource_groups = Groups()
            self.resources = Resources()
            self.deployments = Deployments()
            self.providers = None

    azure_config.ResourceManagementClient = Client
    azure_config.AzureCliCredential = lambda: None

    with open(args.config) as f:
        config = yaml.safe_load(f)
    try:
        config = fillout_defaults(config)
        done = azure_config.bootstrap_azure(config)
    except Exception as e:  # the oracle's failure is reported, not raised
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    out = {
        "parameters": seen.get("parameters"),
        "resource_group": seen.get("resource_group"),
        "provider": done["provider"],
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
