"""Compute Engine requests and the fake's answers judged by Compute's v1 discovery
document (`googleapiclient/discovery_cache/documents/compute.v1.json` in
google-api-python-client: the document Google's client libraries are generated from);
`rayscale up`'s bootstrap calls to IAM and Cloud Resource Manager by theirs (`iam.v1.json`,
`cloudresourcemanager.v1.json`, the versions Ray's bootstrap uses), and the provider's Cloud
TPU calls by the TPU API's (`tpu.v2alpha1.json`, the version Ray's GCP provider calls): a
request is judged by the first document with a method for its HTTP method and path.
The TPU API reports errors as AIP-193 `google.rpc.Status` (`error.code` = the HTTP status,
`error.status` a canonical code name, no `errors[]`), and a failed operation's
`error.code` as a `google.rpc.Code` number.

A request is matched to the method whose `httpMethod` and `path` template it fits (under
the document's `servicePath`); its path parameters are checked against their patterns, its
query parameters against the method's and the document's common parameters (type, enum,
pattern), and its body against the method's request schema: unknown members, types (int64
and uint64 are JSON strings), enums, `readOnly` members sent, and members the schema
annotates as required for this method. An answer is checked against the response schema
(unknown members, types, enums); an error answer's `error.errors[].reason`, and an
Operation's `error.errors[].code`, against the documented error lists.
"""

import json
import os
import re
import uuid

from common import Finding

# Google's system parameters (cloud.google.com/apis/docs/system-parameters): accepted by
# every Google REST API beside a method's own parameters; the client libraries send
# `$alt` and the version a method was generated at as `$apiVersion` (the method's
# `apiVersion` in the document).
SYSTEM_PARAMETERS = {"$alt", "$apiVersion", "$.xgafv", "$callback", "$ct", "$fields", "$prettyPrint", "$userProject"}


def load_model(name="compute.v1"):
    import googleapiclient

    path = os.path.join(
        os.path.dirname(googleapiclient.__file__), "discovery_cache", "documents", f"{name}.json"
    )
    with open(path) as f:
        return json.load(f)


class Checkers:
    """Compute's checker, then IAM's and Resource Manager's, for the bootstrap's calls."""

    def __init__(self):
        self.all = [Checker(load_model(n)) for n in ("compute.v1", "iam.v1", "cloudresourcemanager.v1")]
        self.all.append(Checker(load_model("tpu.v2alpha1"), rpc_status=True))

    @property
    def notes(self):
        return set().union(*(c.notes for c in self.all))

    def check(self, rec, codes):
        for c in self.all:
            if c.find(rec["method"], rec["path"])[0] is not None:
                return c.check(rec, codes)
        return self.all[0].check(rec, codes)


def methods(doc):
    """(httpMethod, compiled path regex, method) for every method of the document."""
    out = []

    def visit(res):
        for m in (res.get("methods") or {}).values():
            for p in {m["path"], m.get("flatPath", m["path"])}:
                rx = "^" + re.sub(r"\\\{(?:\\\+)?([A-Za-z_]+)\\\}", r"(?P<\1>[^/]+)", re.escape(p)) + "$"
                out.append((m["httpMethod"], re.compile(rx), m))
        for r in (res.get("resources") or {}).values():
            visit(r)

    visit(doc)
    return out


# google.rpc.Code names (googleapis/google/rpc/code.proto), by number.
RPC_CODES = {
    1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
    6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
    10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
    15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}


class Checker:
    def __init__(self, doc, rpc_status=False):
        self.rpc_status = rpc_status
        self.doc = doc
        self.schemas = doc["schemas"]
        self.methods = methods(doc)
        self.prefix = "/" + doc["servicePath"]
        self.notes = set()

    def find(self, method, path):
        if not path.startswith(self.prefix):
            return None, {}
        rest = path[len(self.prefix):]
        hits = []
        for hm, rx, m in self.methods:
            if hm != method:
                continue
            mt = rx.match(rest)
            if mt:
                hits.append((m, mt.groupdict()))
        # A literal segment beats a parameter: prefer the template with fewest parameters.
        hits.sort(key=lambda h: len(h[1]))
        return hits[0] if hits else (None, {})

    # -- values --------------------------------------------------------------------------

    def value(self, schema, v, path, out, request, method_id):
        if "$ref" in schema:
            schema = self.schemas[schema["$ref"]]
        t = schema.get("type")
        fmt = schema.get("format")
        if request and schema.get("readOnly"):
            out.append((path, "read-only (output only) member sent"))
        if t == "object":
            if not isinstance(v, dict):
                out.append((path, f"{json.dumps(v)[:60]} where an object is expected"))
                return
            props = schema.get("properties")
            addl = schema.get("additionalProperties")
            for k, sub in v.items():
                p = f"{path}.{k}" if path else k
                if props and k in props:
                    self.value(props[k], sub, p, out, request, method_id)
                elif addl is not None:
                    self.value(addl, sub, p, out, request, method_id)
                else:
                    out.append((p, f"unknown member of {schema.get('id', 'object')}"))
            if request and props:
                for k, ps in props.items():
                    req = (ps.get("annotations") or {}).get("required") or []
                    if method_id in req and k not in v:
                        out.append((f"{path}.{k}" if path else k, f"required for {method_id}, missing"))
            return
        if t == "array":
            if not isinstance(v, list):
                out.append((path, f"{json.dumps(v)[:60]} where an array is expected"))
                return
            for i, item in enumerate(v):
                self.value(schema.get("items", {}), item, f"{path}[{i}]", out, request, method_id)
            return
        if t == "string":
            if request and fmt in ("int64", "uint64") and isinstance(v, int) and not isinstance(v, bool):
                # Proto3's JSON mapping (which the API's REST surface follows) accepts a
                # 64-bit integer as a number or a string; the server answers strings.
                v = str(v)
            if not isinstance(v, str):
                out.append((path, f"{json.dumps(v)[:60]} where a string ({fmt or 'string'}) is expected"))
                return
            if fmt in ("int64", "uint64") and not re.fullmatch(r"-?[0-9]+", v):
                out.append((path, f"{v!r} is not a {fmt}"))
            if fmt == "uint64" and v.startswith("-"):
                out.append((path, f"{v!r} is negative"))
            if "enum" in schema and v not in schema["enum"]:
                out.append((path, f"{v!r} is not one of {', '.join(schema['enum'][:10])}{', ...' if len(schema['enum']) > 10 else ''}"))
            if "pattern" in schema and not re.fullmatch(schema["pattern"], v):
                out.append((path, f"{v!r} does not match {schema['pattern']!r}"))
            return
        if t == "integer":
            if not isinstance(v, int) or isinstance(v, bool):
                out.append((path, f"{json.dumps(v)[:60]} where an integer ({fmt}) is expected"))
            elif fmt == "uint32" and not 0 <= v < 2**32:
                out.append((path, f"{v} is not a uint32"))
            elif fmt == "int32" and not -(2**31) <= v < 2**31:
                out.append((path, f"{v} is not an int32"))
            return
        if t == "number":
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                out.append((path, f"{json.dumps(v)[:60]} where a number is expected"))
            return
        if t == "boolean":
            if not isinstance(v, bool):
                out.append((path, f"{json.dumps(v)[:60]} where a boolean is expected"))
            return
        if t == "any" or t is None:
            return
        out.append((path, f"schema type {t} not understood by the checker"))

    def param(self, name, spec, raw, path, out):
        t = spec.get("type")
        if t == "integer":
            if not re.fullmatch(r"-?[0-9]+", raw):
                out.append((path, f"{raw!r} is not an integer"))
                return
            n = int(raw)
            if "minimum" in spec and n < int(spec["minimum"]):
                out.append((path, f"{n} is below {spec['minimum']}"))
            if "maximum" in spec and n > int(spec["maximum"]):
                out.append((path, f"{n} is above {spec['maximum']}"))
        elif t == "boolean":
            if raw not in ("true", "false"):
                out.append((path, f"{raw!r} is not a boolean"))
        if "enum" in spec and raw not in spec["enum"]:
            out.append((path, f"{raw!r} is not one of {', '.join(spec['enum'])}"))
        if "pattern" in spec and not re.fullmatch(spec["pattern"], raw):
            out.append((path, f"{raw!r} does not match {spec['pattern']!r}"))
        if name == "requestId":
            # The document: "The request ID must be a valid UUID with the exception that
            # zero UUID is not supported".
            try:
                if uuid.UUID(raw).int == 0:
                    out.append((path, "the zero UUID is not supported"))
            except ValueError:
                out.append((path, f"{raw!r} is not a UUID, which the document requires"))

    def system_param(self, name, raw, m, out):
        if name in ("$alt", "alt") and raw.split(";")[0] != "json":
            out.append((f"?{name}", f"{raw!r}: rayscale reads JSON answers only"))
        if name == "$apiVersion":
            latest = m.get("apiVersion")
            if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", raw):
                out.append((f"?{name}", f"{raw!r} is not an API version date"))
            elif latest and raw > latest:
                out.append((f"?{name}", f"{raw} is newer than the document's {latest}"))
            elif latest and raw != latest:
                self.notes.add(f"the SDK pins $apiVersion {raw}; the document's newest is {latest} (older versions stay served)")

    # -- one exchange --------------------------------------------------------------------

    def check(self, rec, codes):
        method, path = rec["method"], rec["path"]
        m, params = self.find(method, path)
        if m is None:
            return f"{method} {path}", [Finding("gcp", f"{method} {path}", "(path)", "no method of the document has this HTTP method and path")]
        where = m["id"]
        out = []
        for name, raw in params.items():
            spec = m["parameters"].get(name, {})
            self.param(name, spec, raw, f"(path).{name}", out)
        seen = set()
        for name, raw in rec.get("query") or []:
            if name in SYSTEM_PARAMETERS:
                self.system_param(name, raw, m, out)
                continue
            spec = m["parameters"].get(name) or self.doc["parameters"].get(name)
            if spec is None or spec.get("location") not in ("query", None):
                out.append((f"?{name}", "unknown query parameter"))
                continue
            if name in seen and not spec.get("repeated"):
                out.append((f"?{name}", "sent twice"))
            seen.add(name)
            self.param(name, spec, raw, f"?{name}", out)
        for name, spec in m["parameters"].items():
            if spec.get("required") and spec.get("location") == "query" and name not in seen:
                out.append((f"?{name}", "required query parameter missing"))
        body = rec.get("body")
        if "request" in m:
            if body is None:
                out.append(("(body)", f"no body, the method takes a {m['request']['$ref']}"))
            else:
                self.value(m["request"], body, "", out, True, m["id"])
        elif body not in (None, "", {}):
            out.append(("(body)", "a body for a method that takes none"))
        findings = [Finding("gcp", where, p, msg) for p, msg in out]
        findings += self.check_response(where, m, rec, codes)
        return where, findings

    def check_response(self, where, m, rec, codes):
        status, resp = rec.get("status", 0), rec.get("response")
        out = []
        errs = []
        if status >= 400 and self.rpc_status:
            e = (resp or {}).get("error") if isinstance(resp, dict) else None
            if not isinstance(e, dict) or e.get("code") != status:
                out.append(("error.code", f"an error answer whose error.code is not the HTTP status {status}"))
            elif e.get("status") not in RPC_CODES.values():
                out.append(("error.status", f"{e.get('status')!r} is not a google.rpc.Code name"))
        elif self.rpc_status and "response" in m and resp is not None:
            self.value(m["response"], resp, "", out, False, m["id"])
            err = resp.get("error") if isinstance(resp, dict) else None
            if err is not None and (not isinstance(err, dict) or err.get("code") not in RPC_CODES):
                out.append(("error.code", f"{err!r}: an operation's error.code is a google.rpc.Code number"))
        elif status >= 400:
            e = (resp or {}).get("error") if isinstance(resp, dict) else None
            if not isinstance(e, dict) or not isinstance(e.get("errors"), list) or not e["errors"]:
                out.append(("error", "an error answer without error.errors[] (Google's JSON error format)"))
            else:
                if e.get("code") != status:
                    out.append(("error.code", f"{e.get('code')!r}, the HTTP status is {status}"))
                for i, item in enumerate(e["errors"]):
                    errs.append((f"error.errors[{i}].reason", item.get("reason")))
        elif "response" in m and resp is not None:
            self.value(m["response"], resp, "", out, False, m["id"])
            if isinstance(resp, dict) and resp.get("kind") == "compute#operation":
                for i, item in enumerate(((resp.get("error") or {}).get("errors")) or []):
                    errs.append((f"error.errors[{i}].code", item.get("code")))
        findings = [Finding("gcp", where, p, msg, "response") for p, msg in out]
        for p, code in errs:
            if code not in codes:
                findings.append(Finding("gcp", where, p, f"{code!r} is not in the documented error list", "error code"))
        return findings
