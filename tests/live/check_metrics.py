"""Scrapes an autoscaler's /metrics with a real HTTP client (urllib) and checks it against
Ray 2.60's own definitions of its autoscaler metrics: `AutoscalerPrometheusMetrics`
(ray/autoscaler/_private/prom_metrics.py) is built in a registry of its own, its
exposition is parsed with the Prometheus project's Python parser, and every family Ray
defines must be served with Ray's type, and, where the scraped family has series, Ray's
sample names and label names. So Ray's Grafana dashboards, which query these names and
labels, read the scraped autoscaler unchanged.

Usage: check_metrics.py check URL SESSION_NAME
  prints one JSON object: {"problems": [...], "families": N,
  "samples": {"<name>{k=v,...}": value, ...}} (samples of the scraped text, `_created` and
  `_bucket` left out, SessionName left out of the keys);
check_metrics.py get URL
  prints {"status": HTTP status or null, "body": text or the connection error}.
"""

import json
import sys
import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text
from ray.autoscaler._private.prom_metrics import AutoscalerPrometheusMetrics


def ray_families(session):
    registry = CollectorRegistry(auto_describe=True)
    m = AutoscalerPrometheusMetrics(session_name=session, registry=registry)
    # The labelled families have no series until set: give each one, as Ray's reporter does.
    for g in (m.pending_nodes, m.active_nodes, m.recently_failed_nodes):
        g.labels(NodeType="worker", SessionName=session).set(0)
    for g in (m.cluster_resources, m.pending_resources):
        g.labels(resource="CPU", SessionName=session).set(0)
    text = generate_latest(registry).decode()
    return {f.name: f for f in parse_text(text)}


def shape(family):
    """{sample name: sorted label names}, `_created` (optional in OpenMetrics) left out."""
    out = {}
    for s in family.samples:
        if s.name.endswith("_created"):
            continue
        out[s.name] = sorted(k for k in s.labels if k != "le")
    return out


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return {"status": r.status, "body": r.read().decode()}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode()}
    except OSError as e:
        return {"status": None, "body": str(e)}


def main():
    if sys.argv[1] == "get":
        print(json.dumps(get(sys.argv[2])))
        return
    url, session = sys.argv[2], sys.argv[3]
    with urllib.request.urlopen(url, timeout=10) as r:
        content_type = r.headers.get("Content-Type", "")
        text = r.read().decode()
    ours = {f.name: f for f in parse_om(text)}
    problems = []
    if not content_type.startswith("application/openmetrics-text"):
        problems.append(f"content type {content_type!r}")
    ray = ray_families(session)
    for name, rf in sorted(ray.items()):
        if name.endswith("_created"):
            # The text format's creation-time families (optional in OpenMetrics).
            continue
        of = ours.get(name)
        if of is None:
            problems.append(f"{name}: missing")
            continue
        if of.type != rf.type:
            problems.append(f"{name}: type {of.type}, Ray's is {rf.type}")
            continue
        if not of.samples:
            continue
        want, got = shape(rf), shape(of)
        for sample, labels in want.items():
            if sample not in got:
                problems.append(f"{name}: no sample {sample} (has {sorted(got)})")
            elif got[sample] != labels:
                problems.append(f"{sample}: labels {got[sample]}, Ray's are {labels}")
        for s in of.samples:
            if s.labels.get("SessionName", session) != session:
                problems.append(f"{s.name}: SessionName {s.labels.get('SessionName')!r}")
    samples = {}
    for f in ours.values():
        for s in f.samples:
            if s.name.endswith(("_created", "_bucket")):
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "SessionName")
            samples[f"{s.name}{{{labels}}}"] = s.value
    families = sum(1 for n in ray if not n.endswith("_created"))
    print(json.dumps({"problems": problems, "families": families, "samples": samples}))


if __name__ == "__main__":
    main()
