"""Azure Resource Manager requests and the fake's answers judged by the SDK Microsoft
generates from the REST specs: `azure-mgmt-compute` (its `v2024_07_01` package, the
api-version rayscale's provider speaks), `azure-mgmt-network` (NetworkInterface, and the
security group and virtual network `rayscale up` makes), and for `up`'s bootstrap
`azure-mgmt-resource` (resource groups, `v2024_11_01`), `azure-mgmt-msi` (user-assigned
identities, `v2024_11_30`) and `azure-mgmt-authorization` (role assignments,
`v2022_04_01`).

- Method and path: each operation's `build_*_request` function carries the REST path
  template and the HTTP method; a request must fit one of them, with `api-version` and only
  the query parameters that operation names.
- Bodies: walked against the model's `_attribute_map` (the REST names, with `properties.`
  flattening) and `_validation` (required, read-only, patterns, lengths, ranges): unknown
  members, wrong types, enum values not in the model's enum, read-only members sent,
  required members missing. The SDK's own serialiser (`Serializer.body`) is run too.
- Answers: the fake's JSON bodies walked the same way against the operation's response
  model (the one its generated code deserialises), without the request-only rules; the
  async operation status (ARM RPC, not modelled by the SDK) against the RPC contract's
  shape; every error code against the documented list.
"""

import enum
import functools
import inspect
import json
import os
import re

from common import Finding

COMPUTE_API = "2024-07-01"


def load_model():
    import azure.mgmt.authorization.v2022_04_01 as authorization
    import azure.mgmt.authorization.v2022_04_01.models as amodels
    import azure.mgmt.compute.v2024_07_01 as compute
    import azure.mgmt.compute.v2024_07_01.models as cmodels
    import azure.mgmt.msi.v2024_11_30 as msi
    import azure.mgmt.msi.v2024_11_30.models as mmodels
    import azure.mgmt.network as network
    import azure.mgmt.network.models as nmodels
    import azure.mgmt.resource.resources.v2024_11_01 as resources
    import azure.mgmt.resource.resources.v2024_11_01.models as rmodels

    ops = []
    # (package, models, the api-version its operations must be called with, if pinned)
    for pkg, models, api in (
        (compute, cmodels, COMPUTE_API),
        (network, nmodels, None),
        (resources, rmodels, "2024-11-01"),
        (msi, mmodels, "2024-11-30"),
        (authorization, amodels, "2022-04-01"),
    ):
        # Each generated file on its own: two may have builders of the same name.
        d = os.path.join(os.path.dirname(pkg.__file__), "operations")
        for f in sorted(os.listdir(d)):
            if f.startswith("_") and f.endswith(".py") and f not in ("__init__.py", "_patch.py"):
                src = open(os.path.join(d, f)).read()
                ops += [dict(op, pinned=api is not None) for op in operations(src, models, api)]
    return {"ops": ops, "compute": cmodels, "network": nmodels}


def operations(src, models, api):
    """Every operation of a generated `_operations.py`: name, HTTP method, path regex,
    query parameters, path parameter patterns, request and response model names (read
    from the operations class method that calls the operation's request builder)."""
    parts = re.split(r"\n(?=class \w+|def )", src)
    classes = [p for p in parts if p.startswith("class ")]
    builders = {}
    for c in parts:
        m = re.match(r"def (build_\w+_request)\(", c)
        if m:
            builders[m.group(1)] = c
    methods = []  # (class index, method source)
    for i, cls in enumerate(classes):
        for c in re.split(r"\n(?=    def |    @)", cls):
            methods.append((i, c))
    out = []
    for name, c in builders.items():
        url = re.search(r'"template_url",\s*"([^"]+)"', c)
        method = re.search(r'HttpRequest\(method="(\w+)"', c)
        if not url or not method:
            continue
        template = url.group(1)
        default_api = re.search(r'_params\.pop\("api-version", "([^"]+)"\)', c)
        patterns = dict(re.findall(r'"(\w+)": _SERIALIZER\.url\("\w+", \w+, "str", pattern=r"([^"]+)"', c))
        # A scope (`/{scope}/providers/...`) spans segments: a resource group's id.
        rx = "^" + re.sub(
            r"\\\{(\w+)\\\}",
            lambda m: f"(?P<{m.group(1)}>.+)" if m.group(1) == "scope" else f"(?P<{m.group(1)}>[^/]+)",
            re.escape(template),
        ) + "$"
        users = [(i, u) for i, u in methods if f"{name}(" in u]
        text = "".join(u for _, u in users)
        # A long-running operation: `begin_x` calls `self._x_initial(...)` (which calls
        # the builder) and deserialises the final answer: look in the same class.
        for i, u in users:
            d = re.search(r"def (_\w+_initial)\(", u)
            if d:
                text += "".join(v for j, v in methods if j == i and f"self.{d.group(1)}(" in v)
        body = re.search(r'_serialize\.body\(\w+, "(\w+)"\)', text)
        resp = re.search(r'_deserialize\("(\w+)"', text)
        out.append({
            "name": name[len("build_"):-len("_request")],
            "method": method.group(1),
            "rx": re.compile(rx),
            "query": set(re.findall(r'_params\["([^"]+)"\]', c)),
            "pageable": "next_link" in text,
            "patterns": patterns,
            "api": api or (default_api.group(1) if default_api else None),
            "body": body.group(1) if body else None,
            "response": resp.group(1) if resp else None,
            "models": models,
        })
    return out


def split_key(key):
    return [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", key)]


@functools.lru_cache(maxsize=None)
def enum_of(cls, attr, models):
    """The enum class the model's constructor names for `attr`, if any."""
    try:
        p = inspect.signature(cls.__init__).parameters.get(attr)
    except (TypeError, ValueError):
        return None
    if p is None:
        return None
    for n in re.findall(r"_models\.(\w+)", str(p.annotation)):
        e = getattr(models, n, None)
        if isinstance(e, type) and issubclass(e, enum.Enum):
            return e
    return None


@functools.lru_cache(maxsize=None)
def tree(cls):
    """{json name: node} where a node is ("attr", attr, spec) or ("obj", {…})."""
    root = {}
    for attr, spec in cls._attribute_map.items():
        parts = split_key(spec["key"])
        node = root
        for p in parts[:-1]:
            node = node.setdefault(p, ("obj", {}))[1]
        node[parts[-1]] = ("attr", attr, spec)
    return root


class Walker:
    def __init__(self, models, request):
        self.models = models
        self.request = request

    def model(self, name, v, path, out):
        cls = getattr(self.models, name, None)
        if cls is None:
            out.append((path, f"model {name} not in the SDK"))
            return
        sub = getattr(cls, "_subtype_map", None) or {}
        if sub and isinstance(v, dict):
            for disc_attr, kinds in sub.items():
                key = cls._attribute_map[disc_attr]["key"]
                if v.get(key) in kinds:
                    cls = getattr(self.models, kinds[v[key]])
        if not isinstance(v, dict):
            out.append((path, f"{json.dumps(v)[:60]} where {name} (an object) is expected"))
            return
        self.node(cls, tree(cls), v, path, out)
        if self.request:
            for attr, rules in cls._validation.items():
                if not rules.get("required"):
                    continue
                node = v
                for q in split_key(cls._attribute_map[attr]["key"]):
                    node = node.get(q) if isinstance(node, dict) else None
                if node is None:
                    key = cls._attribute_map[attr]["key"].replace("\\.", ".")
                    out.append((f"{path}.{key}" if path else key, f"required member of {cls.__name__} missing"))

    def node(self, cls, t, v, path, out):
        for k, sub in v.items():
            p = f"{path}.{k}" if path else k
            if k not in t:
                out.append((p, f"unknown member of {cls.__name__}"))
                continue
            kind = t[k]
            if kind[0] == "obj":
                if not isinstance(sub, dict):
                    out.append((p, f"{json.dumps(sub)[:60]} where an object is expected"))
                else:
                    self.node(cls, kind[1], sub, p, out)
                continue
            _, attr, spec = kind
            rules = cls._validation.get(attr, {})
            if self.request and rules.get("readonly"):
                out.append((p, f"read-only member of {cls.__name__} sent"))
            self.typed(spec["type"], sub, p, out, cls, attr, rules)

    def typed(self, t, v, p, out, cls, attr, rules):
        if v is None:
            return
        if t.startswith("[") and t.endswith("]"):
            if not isinstance(v, list):
                out.append((p, f"{json.dumps(v)[:60]} where a list of {t[1:-1]} is expected"))
                return
            for i, item in enumerate(v):
                self.typed(t[1:-1], item, f"{p}[{i}]", out, cls, attr, {})
            if "max_items" in rules and len(v) > rules["max_items"]:
                out.append((p, f"{len(v)} items, above {rules['max_items']}"))
            return
        if t.startswith("{") and t.endswith("}"):
            if not isinstance(v, dict):
                out.append((p, f"{json.dumps(v)[:60]} where a map of {t[1:-1]} is expected"))
                return
            for k, item in v.items():
                self.typed(t[1:-1], item, f"{p}.{k}", out, cls, attr, {})
            return
        if t in ("str", "iso-8601", "rfc-1123", "duration", "date", "base64", "bytearray", "time"):
            if not isinstance(v, str):
                out.append((p, f"{json.dumps(v)[:60]} where a string ({t}) is expected"))
                return
            e = enum_of(cls, attr, self.models)
            if e is not None and e.__name__ not in OPEN_ENUMS and v.lower() not in {x.value.lower() for x in e}:
                out.append((p, f"{v!r} is not one of {e.__name__} ({', '.join(x.value for x in e)})"))
            if "pattern" in rules and not re.search(rules["pattern"], v):
                out.append((p, f"{v!r} does not match {rules['pattern']!r}"))
            if "max_length" in rules and len(v) > rules["max_length"]:
                out.append((p, f"longer than {rules['max_length']}"))
            if "min_length" in rules and len(v) < rules["min_length"]:
                out.append((p, f"shorter than {rules['min_length']}"))
            return
        if t in ("int", "long"):
            if not isinstance(v, int) or isinstance(v, bool):
                out.append((p, f"{json.dumps(v)[:60]} where an integer is expected"))
                return
            if "maximum" in rules and v > rules["maximum"]:
                out.append((p, f"{v} above {rules['maximum']}"))
            if "minimum" in rules and v < rules["minimum"]:
                out.append((p, f"{v} below {rules['minimum']}"))
            return
        if t == "float":
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                out.append((p, f"{json.dumps(v)[:60]} where a number is expected"))
            return
        if t == "bool":
            if not isinstance(v, bool):
                out.append((p, f"{json.dumps(v)[:60]} where a boolean is expected"))
            return
        if t == "object":
            return
        self.model(t, v, p, out)


# Enums the model itself says are not the list of values (HardwareProfile.vm_size: "The
# enum data type is currently deprecated and will be removed by December 23rd 2023. The
# recommended way to get the list of available sizes is using these APIs: ..."): sizes
# newer than the enum (every T4 and H100 size) are valid.
OPEN_ENUMS = {"VirtualMachineSizeTypes"}

# The ARM RPC's operation status (async-api-reference.md, "Azure-AsyncOperation
# Resource Format"): what the status resource may carry.
OPERATION_STATUS = {
    "id": str, "name": str, "status": str, "startTime": str, "endTime": str,
    "percentComplete": (int, float), "properties": dict, "error": dict,
}
OPERATION_STATES = {"Succeeded", "Failed", "Canceled", "InProgress", "Accepted", "Running"}


class Checker:
    def __init__(self, model):
        self.ops = model["ops"]

    def find(self, method, path):
        for op in self.ops:
            if op["method"] == method and op["rx"].match(path):
                return op, op["rx"].match(path).groupdict()
        return None, {}

    def check(self, rec, codes):
        method, path = rec["method"], rec["path"]
        query = dict(rec.get("query") or [])
        if re.fullmatch(r"/subscriptions/[^/]+/providers/Microsoft\.(Compute|Network)/locations/[^/]+/operations/[^/]+", path) and method == "GET":
            return "(async operation status)", self.check_status(rec, query, codes)
        op, params = self.find(method, path)
        if op is None:
            return f"{method} {path}", [Finding("azure", f"{method} {path}", "(path)", "no operation of the SDK has this method and path")]
        where = op["name"]
        out = []
        for name, raw in params.items():
            if name in op["patterns"] and not re.search(op["patterns"][name], raw):
                out.append((f"(path).{name}", f"{raw!r} does not match {op['patterns'][name]!r}"))
        for k in query:
            # A pageable list is called again at the `nextLink` the previous page gave,
            # with whatever query the server put there (ARM RPC: `$skiptoken`).
            if k == "$skiptoken" and op["pageable"]:
                continue
            if k not in op["query"]:
                out.append((f"?{k}", f"not a query parameter of {where}"))
        if "api-version" not in query:
            out.append(("?api-version", "missing"))
        elif op["api"] and op["pinned"] and query["api-version"] != op["api"]:
            out.append(("?api-version", f"{query['api-version']}, the model judged is {op['api']}"))
        body = rec.get("body")
        if op["body"]:
            if body is None:
                out.append(("(body)", f"no body, {where} takes a {op['body']}"))
            else:
                Walker(op["models"], True).model(op["body"], body, "", out)
                out += self.sdk_validate(op["models"], op["body"], body)
        elif body not in (None, "", {}):
            out.append(("(body)", f"a body for {where}, which takes none"))
        findings = [Finding("azure", where, p, m) for p, m in out]
        findings += self.check_response(where, op, rec, codes)
        return where, findings

    def sdk_validate(self, models, name, body):
        """The SDK's own serialiser: the body read as the model and written again, as
        the generated client does for a request (types and formats it cannot take)."""
        from azure.mgmt.compute._serialization import Serializer

        deps = {k: v for k, v in vars(models).items() if isinstance(v, type)}
        try:
            Serializer(deps).body(body, name)
        except Exception as e:
            return [("(body)", f"the SDK cannot serialise it as {name}: {str(e).splitlines()[0]}")]
        return []

    def check_response(self, where, op, rec, codes):
        status, resp = rec.get("status", 0), rec.get("response")
        out = []
        if status >= 400:
            out += self.error_body(resp, codes, where)
        elif resp not in (None, {}) and not op["response"]:
            out.append(Finding("azure", where, "(body)", f"a body where {where} answers none", "response"))
        elif resp is not None and op["response"]:
            w = []
            Walker(op["models"], False).model(op["response"], resp, "", w)
            out += [Finding("azure", where, p, m, "response") for p, m in w]
        return out

    def error_body(self, resp, codes, where):
        out = []
        e = resp.get("error") if isinstance(resp, dict) else None
        if not isinstance(e, dict) or not isinstance(e.get("code"), str) or not isinstance(e.get("message"), str):
            return [Finding("azure", where, "error", "an error answer without error.code and error.message (ARM's error format)", "response")]
        for k in e:
            if k not in ("code", "message", "target", "details", "additionalInfo"):
                out.append(Finding("azure", where, f"error.{k}", "not a member of ARM's error format", "response"))
        for c in [e] + list(e.get("details") or []):
            if c.get("code") not in codes:
                out.append(Finding("azure", where, "error.code", f"{c.get('code')!r} is not in the documented error list", "error code"))
        return out

    def check_status(self, rec, query, codes):
        where = "(async operation status)"
        out = []
        if "api-version" not in query:
            out.append(Finding("azure", where, "?api-version", "missing"))
        resp = rec.get("response")
        if rec.get("status", 0) >= 400:
            return out + self.error_body(resp, codes, where)
        if not isinstance(resp, dict):
            return out + [Finding("azure", where, "(body)", "not an object", "response")]
        for k, v in resp.items():
            if k not in OPERATION_STATUS:
                out.append(Finding("azure", where, k, "not a member of the ARM RPC's operation status", "response"))
            elif not isinstance(v, OPERATION_STATUS[k]):
                out.append(Finding("azure", where, k, f"{json.dumps(v)[:60]} has the wrong type", "response"))
        if resp.get("status") not in OPERATION_STATES:
            out.append(Finding("azure", where, "status", f"{resp.get('status')!r} is not an ARM operation state", "response"))
        if "error" in resp:
            out += self.error_body({"error": resp["error"]}, codes, where)
        return out
