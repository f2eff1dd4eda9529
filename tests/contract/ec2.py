"""EC2 requests judged by botocore's EC2 service model (`botocore/data/ec2/2016-11-15/
service-2.json`, the model AWS's SDKs are generated from), IAM requests (`rayscale
up`'s instance profile) by botocore's IAM model (`iam/2010-05-08`), and SSM requests
(`rayscale up`'s CloudWatch agent parameter) by botocore's SSM model (`ssm/2014-11-06`).

SSM speaks the "json" protocol (1.1): a POST to `/` whose `X-Amz-Target` header is
`AmazonSSM.<Operation>`, content type `application/x-amz-json-1.1`, and the input as a
JSON object whose keys are the members' names.

IAM speaks the plain "query" protocol, which differs from EC2's in two ways that matter
here: a member's key is its `locationName` else its name (no capitalising), and a list
that is not `flattened` is `Prefix.member.1`, ... .

EC2 speaks the "ec2" Query protocol: a form-encoded POST to `/` with `Action`, `Version`
and the input members flattened into keys, as botocore's `EC2Serializer` writes them:
a member's key is its `queryName`, else its `locationName` with the first letter
capitalised, else the member name; a structure's members are `Prefix.Member`; a list is
always flattened, `Prefix.1`, `Prefix.2`, ...; booleans are `true`/`false`.

This walks a captured form against the operation's input shape and reports unknown keys,
missing required members, values of the wrong type, outside an enum, a range or a length,
and list indices that are not 1..n.
"""

import base64
import json
import re
import urllib.parse

from common import Finding

MODEL_VERSION = "2016-11-15"
IAM_VERSION = "2010-05-08"


def load_model():
    import botocore.session

    return botocore.session.get_session().get_service_model("ec2")


def load_iam_model():
    import botocore.session

    return botocore.session.get_session().get_service_model("iam")


def model_error_codes(model):
    """Every error code an operation of `model` (botocore's IAM or SSM model) declares."""
    codes = set()
    for name in model.operation_names:
        for e in model.operation_model(name).error_shapes:
            codes.add(e.error_code)
    return codes


def serialized_name(shape, default, protocol="ec2"):
    s = shape.serialization
    if protocol == "query":
        return s.get("name", default)
    if "queryName" in s:
        return s["queryName"]
    if "name" in s:
        return s["name"][0].upper() + s["name"][1:]
    return default


# Java's Unicode classes, which IAM's patterns use (`[\p{L}\p{Z}\p{N}_.:/=+\-@]+`), as
# Python's `re` reads them inside a character class (letters: ASCII and everything past
# Latin-1's symbols, a superset; separators: whitespace; numbers: ASCII digits).
JAVA_CLASSES = {r"\p{L}": r"a-zA-Z\u00C0-\uFFFF", r"\p{Z}": r"\s", r"\p{N}": r"0-9"}


def python_pattern(p):
    for java, py in JAVA_CLASSES.items():
        p = p.replace(java, py)
    return p


def check_scalar(shape, value, path, out):
    t = shape.type_name
    meta = shape.metadata
    if t == "boolean":
        if value not in ("true", "false"):
            out.append((path, f"{value!r} is not a boolean (true/false)"))
        return
    if t in ("integer", "long"):
        if not re.fullmatch(r"-?[0-9]+", value):
            out.append((path, f"{value!r} is not an integer"))
            return
        n = int(value)
        if "min" in meta and n < meta["min"]:
            out.append((path, f"{n} is below the minimum {meta['min']}"))
        if "max" in meta and n > meta["max"]:
            out.append((path, f"{n} is above the maximum {meta['max']}"))
        return
    if t in ("double", "float"):
        try:
            float(value)
        except ValueError:
            out.append((path, f"{value!r} is not a number"))
        return
    if t == "timestamp":
        if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9:]+)?|[0-9]+(\.[0-9]+)?", value):
            out.append((path, f"{value!r} is not a timestamp"))
        return
    if t == "blob":
        try:
            base64.b64decode(value, validate=True)
        except Exception:
            out.append((path, "not base64"))
        return
    if t == "string":
        enum = shape.enum
        if enum and value not in enum:
            out.append((path, f"{value!r} is not one of the enum {shape.name} ({', '.join(enum[:12])}{', ...' if len(enum) > 12 else ''})"))
        if "pattern" in meta and not re.fullmatch(python_pattern(meta["pattern"]), value):
            out.append((path, f"{value!r} does not match the pattern {meta['pattern']!r}"))
        if "min" in meta and len(value) < meta["min"]:
            out.append((path, f"shorter than {meta['min']}"))
        if "max" in meta and len(value) > meta["max"]:
            out.append((path, f"longer than {meta['max']}"))
        return
    out.append((path, f"a value for a {t} shape"))


def by_head(keys):
    """{first key part: {rest: value}} of the keys under one prefix (the bare key aside)."""
    groups = {}
    for k, v in keys.items():
        if k:
            head, _, rest = k.partition(".")
            groups.setdefault(head, {})[rest] = v
    return groups


def walk(shape, keys, prefix, out, protocol="ec2"):
    """`keys`: {relative key: value} of every form key under `prefix` (already stripped)."""
    t = shape.type_name
    if t == "structure":
        if "" in keys:
            out.append((prefix or "(root)", f"a value {keys['']!r} where structure {shape.name} is expected"))
        by_name = {}
        for name, member in shape.members.items():
            by_name[serialized_name(member, name, protocol)] = (name, member)
        groups = by_head(keys)
        for head, sub in groups.items():
            path = f"{prefix}.{head}" if prefix else head
            if head not in by_name:
                out.append((path, f"unknown member of {shape.name}"))
                continue
            walk(by_name[head][1], sub, path, out, protocol)
        for name in shape.required_members:
            sname = serialized_name(shape.members[name], name, protocol)
            if sname not in groups:
                out.append((f"{prefix}.{sname}" if prefix else sname, f"required member of {shape.name} missing"))
        return
    if t == "list" and protocol == "query" and not shape.serialization.get("flattened"):
        # Prefix.member.N
        groups = by_head(keys)
        for head, sub in groups.items():
            if head != "member":
                out.append((f"{prefix}.{head}", f"list {shape.name} wants {prefix}.member.N"))
            else:
                walk_list(shape, sub, f"{prefix}.member", out, protocol)
        if keys.get("", "") != "":
            # An empty list is `Prefix=` in the query protocol.
            out.append((prefix, f"a bare value {keys['']!r} where list {shape.name} is expected"))
        return
    if t == "list":
        walk_list(shape, keys, prefix, out, protocol)
        return
    if t == "map":
        out.append((prefix, "a map member (rayscale sends none; not checked)"))
        return
    # Scalar: exactly one key, the member itself.
    for k, v in keys.items():
        if k != "":
            out.append((f"{prefix}.{k}", f"a sub-key under scalar {shape.name} ({t})"))
        else:
            check_scalar(shape, v, prefix, out)


def walk_list(shape, keys, prefix, out, protocol):
    """The items of list `shape` under `prefix`: `prefix.1`, `prefix.2`, ..."""
    if "" in keys:
        # An empty list is sent as nothing at all by the EC2 protocol.
        out.append((prefix, f"a bare value {keys['']!r} where list {shape.name} is expected"))
    groups = by_head(keys)
    idx = []
    for head in groups:
        if not re.fullmatch(r"[1-9][0-9]*", head):
            out.append((f"{prefix}.{head}", f"list {shape.name} wants indices 1..n, not {head!r}"))
        else:
            idx.append(int(head))
    if idx and sorted(idx) != list(range(1, len(idx) + 1)):
        out.append((prefix, f"list indices {sorted(idx)} are not 1..{len(idx)}"))
    meta = shape.metadata
    if "max" in meta and len(idx) > meta["max"]:
        out.append((prefix, f"{len(idx)} items, above the maximum {meta['max']}"))
    for head, sub in groups.items():
        if re.fullmatch(r"[1-9][0-9]*", head):
            walk(shape.member, sub, f"{prefix}.{head}", out, protocol)


def check_request(model, rec, version=MODEL_VERSION, protocol="ec2", service="EC2"):
    """Findings for one captured request (a dict from the capture file), against `model`
    (EC2's by default; IAM's with `IAM_VERSION`, "query", "IAM")."""
    where = f"{rec['method']} {rec['path']}"
    form = urllib.parse.parse_qsl(rec.get("body") or "", keep_blank_values=True)
    form += [tuple(kv) for kv in rec.get("query") or []]
    keys = {}
    dup = []
    for k, v in form:
        if k in keys:
            dup.append(k)
        keys[k] = v
    action = keys.pop("Action", None)
    version = keys.pop("Version", None)
    findings = []
    if action is None:
        return "?", [Finding("aws", where, "Action", f"no Action: not an {service} Query request")]
    where = action if service == "EC2" else f"{service}:{action}"
    if action not in model.operation_names:
        return where, [Finding("aws", where, "Action", f"{action!r} is not an {service} operation")]
    op = model.operation_model(action)
    if version != model.api_version:
        findings.append(Finding("aws", where, "Version", f"{version!r}, the model is {model.api_version}"))
    http = op.http
    if rec["method"] != http.get("method", "POST"):
        findings.append(Finding("aws", where, "(method)", f"{rec['method']}, the model says {http.get('method')}"))
    if rec["path"] != http.get("requestUri", "/"):
        findings.append(Finding("aws", where, "(path)", f"{rec['path']}, the model says {http.get('requestUri')}"))
    for k in dup:
        findings.append(Finding("aws", where, k, "sent twice"))
    out = []
    if op.input_shape is not None:
        walk(op.input_shape, keys, "", out, protocol)
    elif keys:
        out.append(("(root)", f"{action} takes no input"))
    findings += [Finding("aws", where, p, m) for p, m in out]
    return where, findings


# The JSON-protocol services rayscale calls, by `X-Amz-Target` prefix: botocore's name.
JSON_SERVICES = {"AmazonSSM": "ssm"}


def load_json_models():
    import botocore.session

    session = botocore.session.get_session()
    return {prefix: session.get_service_model(name) for prefix, name in JSON_SERVICES.items()}


def walk_json(shape, value, path, out):
    """Findings for `value` (decoded JSON) against `shape`, as the json protocol sends it."""
    t = shape.type_name
    where = path or "(root)"
    if t == "structure":
        if not isinstance(value, dict):
            out.append((where, f"{type(value).__name__} where structure {shape.name} is expected"))
            return
        for k, v in value.items():
            p = f"{path}.{k}" if path else k
            if k not in shape.members:
                out.append((p, f"unknown member of {shape.name}"))
            else:
                walk_json(shape.members[k], v, p, out)
        for name in shape.required_members:
            if name not in value:
                out.append((f"{path}.{name}" if path else name, f"required member of {shape.name} missing"))
    elif t == "list":
        if not isinstance(value, list):
            out.append((where, f"{type(value).__name__} where list {shape.name} is expected"))
            return
        meta = shape.metadata
        if "max" in meta and len(value) > meta["max"]:
            out.append((where, f"{len(value)} items, above the maximum {meta['max']}"))
        if "min" in meta and len(value) < meta["min"]:
            out.append((where, f"{len(value)} items, below the minimum {meta['min']}"))
        for i, v in enumerate(value):
            walk_json(shape.member, v, f"{path}[{i}]", out)
    elif t == "map":
        if not isinstance(value, dict):
            out.append((where, f"{type(value).__name__} where map {shape.name} is expected"))
            return
        for k, v in value.items():
            walk_json(shape.key, k, f"{path}{{key}}", out)
            walk_json(shape.value, v, f"{path}[{k!r}]", out)
    elif t == "boolean":
        if not isinstance(value, bool):
            out.append((where, f"{value!r} is not a JSON boolean"))
    elif t in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            out.append((where, f"{value!r} is not a JSON integer"))
        else:
            check_scalar(shape, str(value), path, out)
    elif t in ("double", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            out.append((where, f"{value!r} is not a JSON number"))
    elif t == "timestamp":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            out.append((where, f"{value!r} is not epoch seconds"))
    elif t in ("string", "blob"):
        if not isinstance(value, str):
            out.append((where, f"{value!r} is not a JSON string"))
        else:
            check_scalar(shape, value, path, out)
    else:
        out.append((where, f"a value for a {t} shape"))


def check_json_request(models, rec):
    """Findings for one captured JSON-protocol request (see the module's docs)."""
    headers = rec.get("headers") or {}
    target = headers.get("x-amz-target", "")
    prefix, _, action = target.partition(".")
    model = models.get(prefix)
    if model is None:
        return "?", [Finding("aws", "?", "X-Amz-Target", f"{target!r}: not a service the check knows")]
    service = model.metadata.get("serviceId", prefix)
    where = f"{service}:{action}"
    if action not in model.operation_names:
        return where, [Finding("aws", where, "X-Amz-Target", f"{action!r} is not an {service} operation")]
    findings = []
    want = f"application/x-amz-json-{model.metadata.get('jsonVersion', '1.0')}"
    if headers.get("content-type", "") != want:
        findings.append(Finding("aws", where, "(content-type)", f"{headers.get('content-type')!r}, the model says {want}"))
    if rec["method"] != "POST" or rec["path"] != "/":
        findings.append(Finding("aws", where, "(path)", f"{rec['method']} {rec['path']}, the protocol says POST /"))
    try:
        body = json.loads(rec.get("body") or "{}")
    except ValueError as e:
        return where, findings + [Finding("aws", where, "(body)", f"not JSON: {e}")]
    out = []
    op = model.operation_model(action)
    if op.input_shape is not None:
        walk_json(op.input_shape, body, "", out)
    findings += [Finding("aws", where, p, m) for p, m in out]
    return where, findings
