"""moto's EC2 server behind rayscale's fault switch, on a free loopback port.

moto (https://github.com/getmoto/moto, 5.2.5) is a real EC2 emulator: the Query API
(form-encoded `Action=...` requests, XML answers) with state. What it cannot do, this
WSGI layer in front of it does, each cited against EC2's documented behaviour:

- ClientToken idempotency (EC2 "Ensuring idempotency"): a RunInstances whose token was
  seen returns the first answer again when every other parameter is the same, and
  `IdempotentParameterMismatch` (HTTP 400) when one differs; moto would launch again.
- Eventual consistency (EC2 "Eventual consistency" in the API reference: DescribeInstances
  may not show an instance RunInstances just made): the last N instances launched can be
  hidden from DescribeInstances until shown again.
- MinCount/MaxCount (RunInstances reference): EC2 launches as many as it can up to
  MaxCount, failing only below MinCount; moto launches exactly MinCount. Here the call
  asks moto for min(MaxCount, capacity left) instances.
- Capacity per instance type: once a type's capacity is used up, RunInstances answers
  `InsufficientInstanceCapacity` (HTTP 500), as EC2 does.
- Throttling: the next N calls answer `RequestLimitExceeded` (HTTP 503).
- Any error for the next RunInstances (code, status, message).
- A lingering `pending` (EC2 "Instance lifecycle": an instance may stay `pending` while
  EC2 provisions it): instances launched of a listed type are answered as `pending`
  (code 0) by DescribeInstances until the type is released; moto runs them at once.

Control (JSON over HTTP on the same port, never forwarded to moto):
  POST /_rayscale/faults  {"capacity": {"m5.large": 2}, "uncap": ["m5.large"],
                           "throttle_next": 1, "throttle_action": "RunInstances",
                           "error_next": {"code": ..., "status": ...},
                           "linger": ["m5.large"], "release": ["m5.large"],
                           "hide_last": 2, "unhide": true}
  GET  /_rayscale/stats   {"calls": {"RunInstances": 3, ...}, "instances_launched": n,
                           "run_by_type": {"m5.large": 2, ...}}
  POST /moto-api/reset    moto's reset; the switch's state is reset too.

With `RAYSCALE_CONTRACT_DIR` set, every EC2, IAM or SSM request (its body, User-Agent,
X-Amz-Target, the status and error code answered) is written as a JSON line to `$RAYSCALE_CONTRACT_DIR/aws-<pid>.jsonl`
for the contract check (tests/contract/check.py), which judges it against botocore's EC2
model.

Prints `PORT <n>` on stdout once it listens; stops on SIGTERM or when stdin closes.
"""

import io
import json
import os
import re
import signal
import sys
import threading
import urllib.parse

# AWS's managed IAM policies (Ray's bootstrap attaches AmazonEC2FullAccess to its role).
os.environ.setdefault("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app  # noqa: E402
from werkzeug.serving import make_server


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.capacity = {}  # instance type -> instances it may still launch
        self.throttle_next = 0
        self.throttle_action = None  # only this action is throttled, when set
        self.error_next = None
        self.tokens = {}  # ClientToken -> (parameters, status, body)
        self.last_launched = []  # instance ids of the last RunInstances, in order
        self.hidden = set()  # instance ids DescribeInstances does not show
        self.calls = {}
        self.launched = 0
        self.run_by_type = {}  # instance type -> RunInstances calls naming it
        self.linger_types = set()  # types whose new instances stay pending
        self.lingering = {}  # instance id -> its type, answered as pending


INSTANCE_ID = re.compile(rb"<instanceId>(i-[0-9a-f]+)</instanceId>")


def as_pending(body, ids):
    """DescribeInstances XML with the instances `ids` in state pending (code 0)."""
    for i in ids:
        body = re.sub(
            rb"(<instanceId>" + re.escape(i.encode()) + rb"</instanceId>.*?<instanceState>\s*<code>)16(</code>\s*<name>)running(</name>)",
            rb"\g<1>0\g<2>pending\g<3>",
            body,
            count=1,
            flags=re.DOTALL,
        )
    return body


def without_instances(body, hidden):
    """DescribeInstances XML without the instances `hidden` (a reservation left empty goes)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(body)
    ns = root.tag[1:].split("}")[0] if root.tag.startswith("{") else ""
    ET.register_namespace("", ns)
    q = (lambda t: f"{{{ns}}}{t}") if ns else (lambda t: t)
    for rset in root.iter(q("reservationSet")):
        for res in list(rset):
            for iset in res.findall(q("instancesSet")):
                for item in list(iset):
                    if (item.findtext(q("instanceId")) or "") in hidden:
                        iset.remove(item)
                if len(iset) == 0:
                    rset.remove(res)
    return ET.tostring(root, encoding="UTF-8", xml_declaration=True)


def error_body(code, message):
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message>"
        "</Error></Errors><RequestID>rayscale-fault</RequestID></Response>"
    ).encode()


def make_app():
    moto = DomainDispatcherApplication(create_backend_app)
    faults = Faults()

    def respond(start_response, status, body, ctype="text/xml"):
        start_response(
            f"{status} {'OK' if status == 200 else 'Error'}",
            [("Content-Type", ctype), ("Content-Length", str(len(body)))],
        )
        return [body]

    def control(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/_rayscale/stats":
            with faults.lock:
                body = json.dumps(
                    {"calls": faults.calls, "instances_launched": faults.launched, "run_by_type": faults.run_by_type}
                )
            return respond(start_response, 200, body.encode(), "application/json")
        size = int(environ.get("CONTENT_LENGTH") or 0)
        req = json.loads(environ["wsgi.input"].read(size) or b"{}")
        with faults.lock:
            for t, n in (req.get("capacity") or {}).items():
                faults.capacity[t] = int(n)
            for t in req.get("uncap") or []:
                faults.capacity.pop(t, None)
            if "throttle_next" in req:
                faults.throttle_next = int(req["throttle_next"])
                faults.throttle_action = req.get("throttle_action")
            if "error_next" in req:
                faults.error_next = req["error_next"]
            faults.linger_types.update(req.get("linger") or [])
            if req.get("hide_last"):
                faults.hidden.update(faults.last_launched[-int(req["hide_last"]):])
            if req.get("unhide"):
                faults.hidden.clear()
            for t in req.get("release") or []:
                faults.linger_types.discard(t)
                faults.lingering = {i: it for i, it in faults.lingering.items() if it != t}
        return respond(start_response, 200, b"{}", "application/json")

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path.startswith("/_rayscale/"):
            return control(environ, start_response)
        if path == "/moto-api/reset":
            with faults.lock:
                faults.reset()
            return moto(environ, start_response)
        size = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(size) if size else b""
        form = urllib.parse.parse_qs(raw.decode(), keep_blank_values=True)
        action = (form.get("Action") or [""])[0]
        with faults.lock:
            faults.calls[action] = faults.calls.get(action, 0) + 1
            if action and faults.throttle_next > 0 and faults.throttle_action in (None, action):
                faults.throttle_next -= 1
                return respond(start_response, 503, error_body("RequestLimitExceeded", "Request limit exceeded."))
        if action == "RunInstances":
            token = (form.get("ClientToken") or [""])[0]
            params = sorted((k, tuple(v)) for k, v in form.items() if k != "ClientToken")
            with faults.lock:
                if token and token in faults.tokens:
                    first, status, body = faults.tokens[token]
                    if first != params:
                        return respond(
                            start_response,
                            400,
                            error_body(
                                "IdempotentParameterMismatch",
                                "Arguments on this idempotent request are inconsistent with arguments used in previous request(s).",
                            ),
                        )
                    return respond(start_response, status, body)
                if faults.error_next:
                    e, faults.error_next = faults.error_next, None
                    return respond(start_response, int(e.get("status", 400)), error_body(e["code"], e.get("message", e["code"])))
                itype = (form.get("InstanceType") or [""])[0]
                faults.run_by_type[itype] = faults.run_by_type.get(itype, 0) + 1
                want_max = int((form.get("MaxCount") or ["1"])[0])
                want_min = int((form.get("MinCount") or ["1"])[0])
                left = faults.capacity.get(itype)
                give = want_max if left is None else min(want_max, left)
                if give < max(want_min, 1):
                    return respond(
                        start_response,
                        500,
                        error_body(
                            "InsufficientInstanceCapacity",
                            f"We currently do not have sufficient {itype} capacity in the Availability Zone you requested.",
                        ),
                    )
                if left is not None:
                    faults.capacity[itype] = left - give
                faults.launched += give
            form["MinCount"] = [str(give)]
            form["MaxCount"] = [str(give)]
            raw = urllib.parse.urlencode(form, doseq=True).encode()
            captured = {}

            def capture(status, headers, exc_info=None):
                captured["status"] = int(status.split()[0])
                return start_response(status, headers, exc_info)

            environ["wsgi.input"] = io.BytesIO(raw)
            environ["CONTENT_LENGTH"] = str(len(raw))
            body = b"".join(moto(environ, capture))
            if captured.get("status") == 200:
                with faults.lock:
                    if token:
                        faults.tokens[token] = (params, 200, body)
                    faults.last_launched = [i.decode() for i in INSTANCE_ID.findall(body)]
            # (RunInstances answers `pending` anyway: only DescribeInstances is rewritten.)
            if captured.get("status") == 200 and itype in faults.linger_types:
                with faults.lock:
                    for i in INSTANCE_ID.findall(body):
                        faults.lingering[i.decode()] = itype
            return [body]
        if action == "DescribeInstances":
            with faults.lock:
                ids = list(faults.lingering)
                hidden = set(faults.hidden)
            if ids or hidden:
                environ["wsgi.input"] = io.BytesIO(raw)
                environ["CONTENT_LENGTH"] = str(len(raw))
                captured = {}

                def capture_headers(status, headers, exc_info=None):
                    captured["status"] = status
                    captured["headers"] = [(k, v) for k, v in headers if k.lower() != "content-length"]

                body = as_pending(b"".join(moto(environ, capture_headers)), ids)
                if hidden:
                    body = without_instances(body, hidden)
                start_response(captured["status"], captured["headers"] + [("Content-Length", str(len(body)))])
                return [body]
        environ["wsgi.input"] = io.BytesIO(raw)
        environ["CONTENT_LENGTH"] = str(len(raw))
        return moto(environ, start_response)

    return recorded(app)


ERROR_CODE = re.compile(rb"<Code>([^<]*)</Code>")


def recorded(app):
    """`app`, writing each EC2 exchange down for the contract check when asked to."""
    out_dir = os.environ.get("RAYSCALE_CONTRACT_DIR")
    if not out_dir:
        return app
    path = os.path.join(out_dir, f"aws-{os.getpid()}.jsonl")
    lock = threading.Lock()

    def wrapped(environ, start_response):
        if environ.get("PATH_INFO", "").startswith(("/_rayscale/", "/moto-api/")):
            return app(environ, start_response)
        size = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(size) if size else b""
        environ["wsgi.input"] = io.BytesIO(raw)
        seen = {}

        def capture(status, headers, exc_info=None):
            seen["status"] = int(status.split()[0])
            return start_response(status, headers, exc_info)

        body = b"".join(app(environ, capture))
        status = seen.get("status", 0)
        code = ERROR_CODE.search(body) if status >= 400 else None
        code = code.group(1).decode() if code else None
        if status >= 400 and code is None:
            # The JSON protocols (SSM): `{"__type": "[namespace#]Code", ...}`.
            try:
                code = str(json.loads(body).get("__type", "")).rpartition("#")[2] or None
            except (ValueError, AttributeError):
                code = None
        line = {
            "cloud": "aws",
            "test": os.environ.get("RAYSCALE_CONTRACT_TEST", "moto"),
            "method": environ.get("REQUEST_METHOD", ""),
            "path": environ.get("PATH_INFO", ""),
            "query": urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True),
            "headers": {
                "user-agent": environ.get("HTTP_USER_AGENT", ""),
                "content-type": environ.get("CONTENT_TYPE", ""),
                "x-amz-target": environ.get("HTTP_X_AMZ_TARGET", ""),
            },
            "body": raw.decode("utf-8", "replace"),
            "status": status,
            "response": {"error_code": code} if code else None,
        }
        with lock, open(path, "a") as f:
            f.write(json.dumps(line) + "\n")
        return [body]

    return wrapped


def main():
    server = make_server("127.0.0.1", 0, make_app(), threaded=True)
    print(f"PORT {server.server_port}", flush=True)

    def stop(*_):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    # The parent holds our stdin: when it goes (even killed), so do we.
    threading.Thread(target=lambda: (sys.stdin.read(), stop()), daemon=True).start()
    server.serve_forever()
    os._exit(0)


if __name__ == "__main__":
    main()
