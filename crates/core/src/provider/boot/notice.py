# rayscale's notice helper, run by the notice watcher of a worker's boot script with the
# Python that runs Ray (no new binary on the node).
#   parse KIND [VM_NAME]   the body of a notice endpoint on stdin -> one line
#                          "SOURCE DEADLINE_S MESSAGE" (DEADLINE_S 0: none), or exit 1
#   record GCS KEY LINE    stores the notice in the GCS KV (rayscale reads it), prints
#                          this node's Ray node id (hex)
import calendar
import json
import sys
import time
from email.utils import parsedate_to_datetime

NAMESPACE = b"__rayscale"


def parse(kind, me):
    body = sys.stdin.read()
    now = int(time.time())
    if kind == "aws-action":
        # {"action": "terminate", "time": "2017-09-18T08:22:00Z"}
        d = json.loads(body)
        t = d["time"]
        deadline = calendar.timegm(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ"))
        return "aws-spot-interruption", deadline, "AWS spot interruption: %s at %s" % (d.get("action", "terminate"), t)
    if kind == "aws-rebalance":
        # {"noticeTime": "2020-10-27T08:22:00Z"}
        d = json.loads(body)
        return "aws-rebalance", 0, "AWS rebalance recommendation at %s" % d.get("noticeTime", "?")
    if kind == "gce-preempted":
        # TRUE once the instance is being preempted; about 30 s are left.
        if body.strip() != "TRUE":
            return None
        return "gce-preempted", now + 30, "GCE preempted the instance"
    if kind == "gce-maintenance":
        # TERMINATE_ON_HOST_MAINTENANCE: the host goes; Compute Engine gives 60 s.
        if not body.strip().startswith("TERMINATE"):
            return None
        return "gce-maintenance", now + 60, "GCE host maintenance: %s" % body.strip()
    if kind == "azure":
        # Scheduled Events: {"DocumentIncarnation": n, "Events": [{"EventType": "Preempt",
        # "Resources": ["vm"], "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", ...}]}
        d = json.loads(body)
        for e in d.get("Events") or []:
            t = e.get("EventType")
            if t not in ("Preempt", "Terminate"):
                continue
            if e.get("Resources") and me not in e["Resources"]:
                continue
            nb = e.get("NotBefore") or ""
            deadline = int(parsedate_to_datetime(nb).timestamp()) if nb else now + 30
            source = "azure-preempt" if t == "Preempt" else "azure-terminate"
            return source, deadline, "Azure %s event %s, not before %s" % (t, e.get("EventId", "?"), nb or "now")
        return None
    raise SystemExit("unknown notice kind %r" % kind)


def record(gcs, key, line):
    source, deadline, message = line.split(" ", 2)
    import os
    import ray._raylet as raylet

    client = raylet.GcsClient(address=gcs)
    value = json.dumps({"source": source, "deadline_s": int(deadline), "message": message})
    client.internal_kv_put(key.encode(), value.encode(), True, NAMESPACE)
    me = os.environ.get("RAY_CLOUD_INSTANCE_ID", "")
    for node_id, info in client.get_all_node_info().items():
        if info.instance_id == me and info.state == 0:
            print(node_id.hex())
            return
    raise SystemExit("no live ray node runs on instance %r" % me)


if __name__ == "__main__":
    if sys.argv[1] == "parse":
        try:
            got = parse(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            print("rayscale notice: cannot read the %s notice: %s" % (sys.argv[2], e), file=sys.stderr)
            sys.exit(1)
        if got is None:
            sys.exit(1)
        print("%s %d %s" % (got[0], got[1], " ".join(got[2].split())))
    elif sys.argv[1] == "record":
        record(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        raise SystemExit("usage: notice.py parse KIND [VM] | record GCS KEY LINE")
