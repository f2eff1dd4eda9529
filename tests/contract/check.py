"""The contract check: every request rayscale's AWS, GCP and Azure providers sent in the
test suite, and every answer the GCE and ARM fakes gave, judged by the cloud's own
published API model (botocore's EC2 and IAM models; Compute's v1 discovery document; the
azure-mgmt-compute/-network SDK models), and every error code the fakes answer or the
providers' error tables name checked against the cloud's documented error list
(tests/contract/errors/*.txt, each code with its source).

    check.py --capture DIR [--min aws=N,gcp=N,azure=N]   judge what the tests recorded
    check.py --self-test                                  the checker refuses bad requests

The capture is written by the fakes (tests/fakes/record.rs) and by moto's fault switch
(tests/fakes/moto_ec2.py) when RAYSCALE_CONTRACT_DIR is set; scripts/test.sh sets it for
`cargo test`. Exit 1 on any finding, each printed with the member's path.
"""

import argparse
import collections
import copy
import json
import os
import re
import sys
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(os.path.dirname(HERE))

from common import Finding, read_capture, read_error_list  # noqa: E402

ERROR_LISTS = {"aws": "ec2.txt", "gcp": "gce.txt", "azure": "arm.txt"}
TABLES = {
    "aws": "crates/provider-aws/src/errors.rs",
    "gcp": "crates/provider-gcp/src/errors.rs",
    "azure": "crates/provider-azure/src/errors.rs",
}


def table_codes(cloud):
    """The error codes a provider's error table names (its `TABLE` constant), and the
    codes its classifier matches by name outside the table."""
    src = open(os.path.join(ROOT, TABLES[cloud])).read()
    m = re.search(r"const TABLE: &\[\(&str, Class\)\] = &\[(.*?)\n\];", src, re.S)
    if not m:
        raise SystemExit(f"contract check: no TABLE in {TABLES[cloud]}")
    codes = set(re.findall(r'\(\s*"([^"]+)",\s*Class::', m.group(1)))
    codes |= set(re.findall(r'code == Some\("([^"]+)"\)', src))
    return codes


def checkers():
    import arm
    import ec2
    import gce

    return {
        "aws": ec2.load_model(),
        "iam": ec2.load_iam_model(),
        "aws-json": ec2.load_json_models(),
        "gcp": gce.Checkers(),
        "azure": arm.Checker(arm.load_model()),
    }


def check_one(cloud, models, rec, codes):
    if cloud == "aws":
        import ec2

        if (rec.get("headers") or {}).get("x-amz-target"):
            # `rayscale up`'s CloudWatch agent parameter: SSM's model, and its codes.
            where, findings = ec2.check_json_request(models["aws-json"], rec)
            codes = codes | {c for m in models["aws-json"].values() for c in ec2.model_error_codes(m)}
        elif version_of(rec) == ec2.IAM_VERSION:
            # `rayscale up`'s instance profile: IAM's model, and the codes it declares.
            where, findings = ec2.check_request(models["iam"], rec, ec2.IAM_VERSION, "query", "IAM")
            codes = codes | ec2.model_error_codes(models["iam"])
        else:
            where, findings = ec2.check_request(models["aws"], rec)
        code = (rec.get("response") or {}).get("error_code")
        if code and code not in codes:
            findings.append(Finding("aws", where, "Errors.Error.Code", f"{code!r} is not in the documented error list", "error code"))
        return where, findings
    return models[cloud].check(rec, codes)


def version_of(rec):
    form = dict(urllib.parse.parse_qsl(rec.get("body") or "", keep_blank_values=True))
    return form.get("Version")


def is_ec2(rec):
    return version_of(rec) == "2016-11-15"


def sender(cloud, rec):
    ua = (rec.get("headers") or {}).get("user-agent", "")
    if cloud == "aws" and "aws-sdk-rust" not in ua:
        return "other: " + (ua.split(" ")[0] or "no user-agent")
    # Ray's GCP bootstrap, the oracle of rayscale's (googleapiclient: "gdcl/<version>").
    if cloud == "gcp" and "gdcl/" in (rec.get("headers") or {}).get("x-goog-api-client", ""):
        return "other: google-api-python-client"
    return "rayscale"


def run_capture(directory, minimum):
    models = checkers()
    failures = []
    for cloud in ("aws", "gcp", "azure"):
        documented, kept = read_error_list(os.path.join(HERE, "errors", ERROR_LISTS[cloud]))
        codes = set(documented) | set(kept)
        recs = read_capture(directory, cloud)
        by_sender = collections.Counter()
        ops = collections.Counter()
        responses = 0
        findings = collections.OrderedDict()
        skipped = collections.Counter()
        for rec in recs:
            who = sender(cloud, rec)
            if who != "rayscale" and (cloud == "gcp" or not is_ec2(rec)):
                # Ray's own AWS provider (run through moto as the reference for the
                # first launches) also bootstraps IAM on the same endpoint; Ray's GCP
                # bootstrap (the oracle of rayscale's) sends Compute's output-only
                # `kind` back, which Compute ignores.
                skipped[who] += 1
                continue
            by_sender[who] += 1
            where, fs = check_one(cloud, models, rec, codes)
            ops[where] += 1
            if cloud != "aws" and rec.get("response") is not None:
                responses += 1
            for f in fs:
                key = f.line() + ("" if who == "rayscale" else f"  [sent by {who}]")
                findings.setdefault(key, [0, rec.get("test", "?")])[0] += 1
        table = table_codes(cloud)
        for code in sorted(table - codes):
            findings[Finding(cloud, TABLES[cloud], code, "named by the error table, not in the documented error list", "error code").line()] = [1, "-"]
        kept_used = sorted((table | {c for c in codes if c in kept}) & set(kept))
        print(f"== {cloud}: {len(recs)} exchanges ({', '.join(f'{n} from {w}' for w, n in by_sender.most_common())}), "
              f"{len(ops)} distinct operations, {responses} fake answers checked, "
              f"{len(table)} error-table codes ({len(table & set(documented))} documented, {len(table & set(kept))} kept with evidence)")
        for op, n in sorted(ops.items()):
            print(f"   {n:6d}  {op}")
        for who, n in skipped.items():
            print(f"   skipped: {n} requests from {who} (Ray's bootstrap, the oracle)")
        for note in sorted(getattr(models[cloud], "notes", ())):
            print(f"   note: {note}")
        for c in kept_used:
            print(f"   kept, not in a documented list: {c}  ({kept[c]})")
        for line, (n, test) in findings.items():
            print(f"FINDING ({n}x, e.g. test {test}): {line}")
            failures.append(line)
        want = minimum.get(cloud, 0)
        if by_sender["rayscale"] < want:
            print(f"FAIL: {cloud}: only {by_sender['rayscale']} requests from rayscale recorded, at least {want} expected "
                  f"(was the test suite run with RAYSCALE_CONTRACT_DIR={directory}?)")
            failures.append(f"{cloud}: too few requests")
    return 1 if failures else 0


# -- the checker's self-test -------------------------------------------------------------

DROP = object()


class Rename:
    def __init__(self, to):
        self.to = to


def edited(body, path, value):
    """A copy of `body` with the member at `path` set to `value`, removed (`DROP`) or
    renamed (`Rename`)."""
    out = copy.deepcopy(body)
    parent = out
    for k in path[:-1]:
        parent = parent[k]
    last = path[-1]
    if value is DROP:
        del parent[last]
    elif isinstance(value, Rename):
        parent[value.to] = parent.pop(last)
    else:
        parent[last] = value
    return out


def ssm_json(action, body):
    return {"method": "POST", "path": "/", "query": [],
            "headers": {"user-agent": "aws-sdk-rust/self-test", "content-type": "application/x-amz-json-1.1",
                        "x-amz-target": f"AmazonSSM.{action}"},
            "body": json.dumps(body), "status": 200, "response": None}


def ec2_form(pairs):
    return {"method": "POST", "path": "/", "query": [], "headers": {"user-agent": "aws-sdk-rust/self-test"},
            "body": urllib.parse.urlencode(pairs), "status": 200, "response": None}


def self_test():
    models = checkers()
    problems = []

    def expect(cloud, name, rec, member, words):
        _, fs = check_one(cloud, models, rec, set())
        fs = [f for f in fs if f.side != "error code"]
        if member is None:
            if fs:
                problems.append(f"{cloud} {name}: a good request refused: {[f.line() for f in fs]}")
            return
        hit = [f for f in fs if f.member == member and words in f.message]
        if not hit:
            problems.append(f"{cloud} {name}: no finding at {member!r} containing {words!r}; got {[f.line() for f in fs]}")
        else:
            print(f"   {cloud} {name}: refused: {hit[0].line()}")

    run = [("Action", "RunInstances"), ("Version", "2016-11-15"), ("ImageId", "ami-12c6146b"),
           ("InstanceType", "m5.large"), ("MinCount", "1"), ("MaxCount", "2"),
           ("TagSpecification.1.ResourceType", "instance"), ("TagSpecification.1.Tag.1.Key", "ray-node-type"),
           ("TagSpecification.1.Tag.1.Value", "worker"), ("ClientToken", "abc")]
    role = [("Action", "CreateRole"), ("Version", "2010-05-08"), ("RoleName", "ray-autoscaler-v1"),
            ("AssumeRolePolicyDocument", '{"Statement": []}')]
    expect("aws", "good IAM CreateRole", ec2_form(role), None, "")
    expect("aws", "IAM member spelled as EC2 would", ec2_form(role + [("Path", "/")] + [("tags.member.1.Key", "k")]), "tags", "unknown member")
    expect("aws", "IAM list as EC2 flattens it", ec2_form(role + [("Tags.1.Key", "k"), ("Tags.1.Value", "v")]), "Tags.1", "wants Tags.member.N")
    expect("aws", "good IAM list", ec2_form(role + [("Tags.member.1.Key", "k"), ("Tags.member.1.Value", "v")]), None, "")
    expect("aws", "IAM required member missing", ec2_form(role[:3]), "AssumeRolePolicyDocument", "required member")
    put = {"Name": "AmazonCloudWatch-ray_agent_config_c", "Type": "String", "Value": "{}", "Overwrite": True, "Tier": "Intelligent-Tiering"}
    expect("aws", "good SSM PutParameter", ssm_json("PutParameter", put), None, "")
    expect("aws", "SSM tier outside the enum", ssm_json("PutParameter", {**put, "Tier": "Smart"}), "Tier", "not one of the enum")
    expect("aws", "SSM boolean as a string", ssm_json("PutParameter", {**put, "Overwrite": "true"}), "Overwrite", "not a JSON boolean")
    expect("aws", "SSM required member missing", ssm_json("PutParameter", {k: v for k, v in put.items() if k != "Value"}), "Value", "required member")
    expect("aws", "good RunInstances", ec2_form(run), None, "")
    expect("aws", "misspelled member", ec2_form(run + [("InstanceTyp", "m5.large")]), "InstanceTyp", "unknown member")
    expect("aws", "misspelled nested member", ec2_form(run + [("TagSpecification.1.Tag.1.Vaule", "x")]), "TagSpecification.1.Tag.1.Vaule", "unknown member")
    expect("aws", "wrong enum", ec2_form([(k, "m5.huge" if k == "InstanceType" else v) for k, v in run]), "InstanceType", "not one of the enum")
    expect("aws", "missing required", ec2_form([(k, v) for k, v in run if k != "MinCount"]), "MinCount", "required member")
    expect("aws", "wrong type", ec2_form([(k, "two" if k == "MaxCount" else v) for k, v in run]), "MaxCount", "not an integer")

    gbody = {"name": "ray-w-1", "machineType": "zones/us-central1-a/machineTypes/n1-standard-2",
             "labels": {"ray-node-type": "worker"},
             "scheduling": {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"},
             "disks": [{"boot": True, "autoDelete": True, "initializeParams": {"diskSizeGb": "50", "sourceImage": "projects/debian-cloud/global/images/family/debian-12"}}],
             "networkInterfaces": [{"network": "global/networks/default"}]}

    def gce_rec(body, query=(("requestId", "5f0c2f7e-3a0b-4c1e-9a43-1b2c3d4e5f60"),)):
        return {"method": "POST", "path": "/compute/v1/projects/p1/zones/us-central1-a/instances", "query": list(query),
                "headers": {}, "body": body, "status": 200, "response": None}

    expect("gcp", "good instances.insert", gce_rec(gbody), None, "")
    for name, path, value, member, words in [
        ("misspelled member", ["machineType"], Rename("machineTyp"), "machineTyp", "unknown member"),
        ("wrong enum", ["scheduling", "provisioningModel"], "SPOTTY", "scheduling.provisioningModel", "is not one of"),
        ("missing required", ["name"], DROP, "name", "required"),
        ("wrong type", ["scheduling", "automaticRestart"], "yes", "scheduling.automaticRestart", "where a boolean"),
        ("not an int64", ["disks", 0, "initializeParams", "diskSizeGb"], "fifty", "disks[0].initializeParams.diskSizeGb", "is not a int64"),
        ("read-only member", ["id"], "123", "id", "read-only"),
    ]:
        expect("gcp", name, gce_rec(edited(gbody, path, value)), member, words)
    expect("gcp", "bad query", gce_rec(gbody, (("requestId", "not-a-uuid"),)), "?requestId", "not a UUID")

    tbody = {"acceleratorType": "v4-8", "runtimeVersion": "tpu-ubuntu2204-base",
             "labels": {"ray-node-type": "worker"}, "metadata": {"startup-script": "echo"},
             "networkConfig": {"enableExternalIps": True}, "schedulingConfig": {"preemptible": True}}

    def tpu_rec(body, status=200, response=None):
        return {"method": "POST", "path": "/v2alpha1/projects/p1/locations/us-central2-b/nodes",
                "query": [("nodeId", "ray-c-worker-0a1b2c3d-tpu"), ("requestId", "5f0c2f7e-3a0b-4c1e-9a43-1b2c3d4e5f61")],
                "headers": {}, "body": body, "status": status, "response": response}

    expect("gcp", "good TPU nodes.create", tpu_rec(tbody), None, "")
    expect("gcp", "TPU node member spelled as Compute's", tpu_rec(edited(tbody, ["serviceAccounts"], [{"email": "e"}])),
           "serviceAccounts", "unknown member")
    expect("gcp", "TPU error without google.rpc status", tpu_rec(tbody, 409, {"error": {"code": 409, "message": "m", "status": "EXISTS"}}),
           "error.status", "not a google.rpc.Code")
    expect("gcp", "TPU operation error code", tpu_rec(tbody, 200, {"name": "projects/p1/locations/z/operations/o", "done": True,
                                                                   "error": {"code": "RESOURCE_EXHAUSTED", "message": "m"}}),
           "error.code", "google.rpc.Code number")

    abody = {"location": "westus2", "tags": {"ray-node-type": "worker"},
             "properties": {"hardwareProfile": {"vmSize": "Standard_D2s_v3"}, "priority": "Spot",
                            "evictionPolicy": "Delete",
                            "storageProfile": {"imageReference": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "latest"},
                                               "osDisk": {"createOption": "FromImage"}},
                            "osProfile": {"computerName": "w1", "adminUsername": "ray", "linuxConfiguration": {"disablePasswordAuthentication": True}}}}

    def arm_rec(body):
        return {"method": "PUT", "path": "/subscriptions/s1/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/w1",
                "query": [["api-version", "2024-07-01"]], "headers": {}, "body": body, "status": 200, "response": None}

    expect("azure", "good VM create", arm_rec(abody), None, "")
    hw = ["properties", "hardwareProfile"]
    for name, path, value, member, words in [
        ("misspelled member", hw + ["vmSize"], Rename("vmSze"), "properties.hardwareProfile.vmSze", "unknown member"),
        ("wrong enum", ["properties", "priority"], "Cheap", "properties.priority", "is not one of"),
        ("missing required", ["location"], DROP, "location", "required"),
        ("read-only member", ["properties", "provisioningState"], "Succeeded", "properties.provisioningState", "read-only"),
        ("wrong type", ["properties", "storageProfile", "osDisk", "diskSizeGB"], "30", "properties.storageProfile.osDisk.diskSizeGB", "integer"),
    ]:
        expect("azure", name, arm_rec(edited(abody, path, value)), member, words)
    r = arm_rec(abody)
    r["query"] = []
    expect("azure", "no api-version", r, "?api-version", "missing")
    r = arm_rec(abody)
    r["path"] = r["path"].replace("virtualMachines", "virtualMachine")
    expect("azure", "wrong path", r, "(path)", "no operation")

    for p in problems:
        print("SELF-TEST FAIL:", p)
    print("contract check self-test:", "FAILED" if problems else "ok")
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--capture", help="the directory RAYSCALE_CONTRACT_DIR pointed at")
    ap.add_argument("--min", default="", help="least requests from rayscale per cloud, e.g. aws=100,gcp=100,azure=100")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.capture:
        ap.error("--capture DIR or --self-test")
    minimum = {}
    for part in filter(None, a.min.split(",")):
        k, _, v = part.partition("=")
        minimum[k] = int(v)
    return run_capture(a.capture, minimum)


if __name__ == "__main__":
    sys.exit(main())
