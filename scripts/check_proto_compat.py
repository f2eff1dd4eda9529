#!/usr/bin/env python3
"""Check that rayscale's own .proto files are wire-compatible with Ray.

Compiles every .proto under crates/gcs-client/proto/ into a
FileDescriptorSet (with grpcio-tools' bundled protoc, or a `protoc` binary
given by $PROTOC / found on PATH), then compares every message, enum and
service that we define against the descriptor of the same full name that
the installed Ray wheel registers (ray.core.generated.*_pb2).

Compared, in both directions (nothing missing, nothing extra):
  * file: proto package and syntax of the Ray file holding the symbol
  * message: fields, oneof declarations, nested messages/enums, options
  * field: name, number, type, type_name (full name), label,
    proto3_optional, oneof membership (by oneof name), map-ness,
    json_name, default_value, options
  * enum: value names and numbers, options
  * service: RPC names, input/output types, client/server streaming

It also checks coverage: every top-level definition of Ray's autoscaler.proto
plus a few required symbols of other Ray files must be defined by us.

Our descriptors are only parsed as FileDescriptorSet messages, never loaded
into a descriptor pool, so they cannot clash with Ray's identically named
ones.

Usage (from the repo root):
    $(scripts/setup-python.sh) scripts/check_proto_compat.py [--verbose]

Exit status: 0 = all compatible, 1 = mismatches found, 2 = could not run.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "crates" / "gcs-client" / "proto"

# Ray modules whose descriptors we compare against (imported for their side
# effect of registering in the default descriptor pool).
RAY_MODULES = [
    "ray.core.generated.common_pb2",
    "ray.core.generated.gcs_pb2",
    "ray.core.generated.gcs_service_pb2",
    "ray.core.generated.autoscaler_pb2",
    "ray.core.generated.instance_manager_pb2",
]

# Ray files that we must mirror completely (every top-level definition).
FULLY_MIRRORED_RAY_FILES = ["ray.core.generated.autoscaler_pb2"]

# Further symbols that must exist in our files.
REQUIRED_SYMBOLS = [
    "ray.rpc.autoscaler.im.Instance",
    "ray.rpc.autoscaler.im.Instance.InstanceStatus",
    "ray.rpc.InternalKVGcsService",
    "ray.rpc.autoscaler.AutoscalerStateService",
]

# Services of which we declare only the RPCs we call.
PARTIAL_SERVICES = {"ray.rpc.NodeInfoGcsService"}

FDP = descriptor_pb2.FieldDescriptorProto
TYPE_NAMES = {v: k[len("TYPE_"):] for k, v in FDP.Type.items()}
LABEL_NAMES = {v: k[len("LABEL_"):] for k, v in FDP.Label.items()}


# ---------------------------------------------------------------------------
# Loading descriptors
# ---------------------------------------------------------------------------


def compile_ours() -> descriptor_pb2.FileDescriptorSet:
    if not PROTO_DIR.is_dir():
        raise SystemExit(f"error: proto directory {PROTO_DIR} does not exist")
    protos = sorted(p.relative_to(PROTO_DIR).as_posix() for p in PROTO_DIR.rglob("*.proto"))
    if not protos:
        raise SystemExit(f"error: no .proto files under {PROTO_DIR}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ours.pb")
        args = [f"-I{PROTO_DIR}", f"--descriptor_set_out={out}", "--include_imports", *protos]
        protoc = os.environ.get("PROTOC")
        if not protoc:
            try:
                from grpc_tools import protoc as grpc_protoc  # type: ignore
            except ImportError:
                grpc_protoc = None
            if grpc_protoc is not None:
                rc = grpc_protoc.main(["grpc_tools.protoc", *args])
                if rc != 0:
                    raise SystemExit(f"error: protoc (grpc_tools) failed with status {rc}")
            else:
                protoc = shutil.which("protoc")
                if not protoc:
                    raise SystemExit("error: need grpcio-tools in this Python, or $PROTOC / protoc on PATH")
        if protoc:
            res = subprocess.run([protoc, *args], cwd=PROTO_DIR)
            if res.returncode != 0:
                raise SystemExit(f"error: {protoc} failed with status {res.returncode}")
        with open(out, "rb") as fh:
            return descriptor_pb2.FileDescriptorSet.FromString(fh.read())


class Index:
    """Full name -> (kind, proto, FileDescriptorProto) for a set of files."""

    def __init__(self) -> None:
        self.symbols: dict[str, tuple[str, object, descriptor_pb2.FileDescriptorProto]] = {}

    def add_file(self, fdp: descriptor_pb2.FileDescriptorProto) -> None:
        prefix = "." + fdp.package if fdp.package else ""

        def add_msg(scope: str, m: descriptor_pb2.DescriptorProto) -> None:
            full = f"{scope}.{m.name}"
            self.symbols[full] = ("message", m, fdp)
            for n in m.nested_type:
                add_msg(full, n)
            for e in m.enum_type:
                self.symbols[f"{full}.{e.name}"] = ("enum", e, fdp)

        for m in fdp.message_type:
            add_msg(prefix, m)
        for e in fdp.enum_type:
            self.symbols[f"{prefix}.{e.name}"] = ("enum", e, fdp)
        for s in fdp.service:
            self.symbols[f"{prefix}.{s.name}"] = ("service", s, fdp)

    def get(self, full: str):
        return self.symbols.get(full)


class RayIndex(Index):
    """Lazily indexes the Ray files that hold the symbols we look up."""

    def __init__(self) -> None:
        super().__init__()
        for mod in RAY_MODULES:
            importlib.import_module(mod)
        self.pool = descriptor_pool.Default()
        self.loaded_files: set[str] = set()

    def load_file(self, fd) -> None:
        if fd.name in self.loaded_files:
            return
        fdp = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(fdp)
        self.loaded_files.add(fd.name)
        self.add_file(fdp)

    def get(self, full: str):
        hit = self.symbols.get(full)
        if hit is None:
            try:
                fd = self.pool.FindFileContainingSymbol(full.lstrip("."))
            except KeyError:
                return None
            self.load_file(fd)
            hit = self.symbols.get(full)
        return hit


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------


class Report:
    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.problems: list[str] = []
        self.counts = {"message": 0, "map_entry": 0, "enum": 0, "service": 0, "field": 0, "enum_value": 0, "rpc": 0}

    def bad(self, where: str, what: str) -> None:
        self.problems.append(f"MISMATCH {where}: {what}")
        print(f"  MISMATCH {where}: {what}")

    def ok(self, line: str) -> None:
        if self.verbose:
            print(f"  ok  {line}")


def opts_bytes(msg) -> bytes:
    return msg.SerializeToString(deterministic=True) if msg.ListFields() else b""


def field_is_map(field: FDP, index: Index) -> bool:
    if field.type != FDP.TYPE_MESSAGE:
        return False
    hit = index.get(field.type_name)
    return bool(hit and hit[0] == "message" and hit[1].options.map_entry)


def field_facts(m: descriptor_pb2.DescriptorProto, f: FDP, index: Index) -> dict:
    return {
        "number": f.number,
        "type": TYPE_NAMES.get(f.type, f.type),
        "type_name": f.type_name,
        "label": LABEL_NAMES.get(f.label, f.label),
        "proto3_optional": f.proto3_optional,
        "oneof": m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None,
        "map": field_is_map(f, index),
        "json_name": f.json_name if f.HasField("json_name") else None,
        "default_value": f.default_value if f.HasField("default_value") else None,
        "options": opts_bytes(f.options),
    }


def compare_message(full: str, ours, ray, our_idx: Index, ray_idx: Index, rep: Report) -> None:
    rep.counts["message"] += 1
    if ours.options.map_entry:
        rep.counts["map_entry"] += 1
    if opts_bytes(ours.options) != opts_bytes(ray.options):
        rep.bad(full, f"message options differ: ours={ours.options!r} ray={ray.options!r}")

    our_fields = {f.name: f for f in ours.field}
    ray_fields = {f.name: f for f in ray.field}
    for name in sorted(set(ray_fields) - set(our_fields)):
        rep.bad(f"{full}.{name}", f"field missing in ours (ray: #{ray_fields[name].number})")
    for name in sorted(set(our_fields) - set(ray_fields)):
        rep.bad(f"{full}.{name}", f"field not in Ray (ours: #{our_fields[name].number})")
    for name in [f.name for f in ours.field if f.name in ray_fields]:
        rep.counts["field"] += 1
        a = field_facts(ours, our_fields[name], our_idx)
        b = field_facts(ray, ray_fields[name], ray_idx)
        if a.get("json_name") is None or b.get("json_name") is None:
            a.pop("json_name"), b.pop("json_name")
        diffs = [f"{k}: ours={a[k]!r} ray={b[k]!r}" for k in a if a[k] != b[k]]
        if diffs:
            for d in diffs:
                rep.bad(f"{full}.{name}", d)
        else:
            extra = " map" if a["map"] else ""
            extra += f" oneof={a['oneof']}" if a["oneof"] else ""
            extra += " proto3_optional" if a["proto3_optional"] else ""
            rep.ok(f"{full}.{name} = {a['number']} {a['label']} {a['type']} {a['type_name']}{extra}")

    # Oneof declarations (real and synthetic), compared by name and members.
    def oneofs(m):
        res: dict[str, list[str]] = {o.name: [] for o in m.oneof_decl}
        for f in m.field:
            if f.HasField("oneof_index"):
                res[m.oneof_decl[f.oneof_index].name].append(f.name)
        return {k: sorted(v) for k, v in res.items()}

    if oneofs(ours) != oneofs(ray):
        rep.bad(full, f"oneofs differ: ours={oneofs(ours)} ray={oneofs(ray)}")

    # Nested definitions must match as sets; each is compared on its own.
    for kind, attr in (("message", "nested_type"), ("enum", "enum_type")):
        a = {x.name for x in getattr(ours, attr)}
        b = {x.name for x in getattr(ray, attr)}
        for n in sorted(b - a):
            rep.bad(full, f"nested {kind} {n} missing in ours")
        for n in sorted(a - b):
            rep.bad(full, f"nested {kind} {n} not in Ray")

    if ours.reserved_range or ray.reserved_range or ours.extension_range or ray.extension_range:
        if [(r.start, r.end) for r in ours.extension_range] != [(r.start, r.end) for r in ray.extension_range]:
            rep.bad(full, "extension ranges differ")


def compare_enum(full: str, ours, ray, rep: Report) -> None:
    rep.counts["enum"] += 1
    if opts_bytes(ours.options) != opts_bytes(ray.options):
        rep.bad(full, f"enum options differ: ours={ours.options!r} ray={ray.options!r}")
    a = {v.name: v for v in ours.value}
    b = {v.name: v for v in ray.value}
    for n in sorted(set(b) - set(a)):
        rep.bad(f"{full}.{n}", f"enum value missing in ours (ray: {b[n].number})")
    for n in sorted(set(a) - set(b)):
        rep.bad(f"{full}.{n}", f"enum value not in Ray (ours: {a[n].number})")
    for n in [v.name for v in ours.value if v.name in b]:
        rep.counts["enum_value"] += 1
        if a[n].number != b[n].number:
            rep.bad(f"{full}.{n}", f"number: ours={a[n].number} ray={b[n].number}")
        elif opts_bytes(a[n].options) != opts_bytes(b[n].options):
            rep.bad(f"{full}.{n}", "enum value options differ")
        else:
            rep.ok(f"{full}.{n} = {a[n].number}")


def compare_service(full: str, ours, ray, rep: Report) -> None:
    rep.counts["service"] += 1
    a = {m.name: m for m in ours.method}
    b = {m.name: m for m in ray.method}
    if full.lstrip(".") not in PARTIAL_SERVICES:
        for n in sorted(set(b) - set(a)):
            rep.bad(f"{full}/{n}", "RPC missing in ours")
    for n in sorted(set(a) - set(b)):
        rep.bad(f"{full}/{n}", "RPC not in Ray")
    for n in [m.name for m in ours.method if m.name in b]:
        rep.counts["rpc"] += 1
        x, y = a[n], b[n]
        diffs = []
        for attr in ("input_type", "output_type", "client_streaming", "server_streaming"):
            if getattr(x, attr) != getattr(y, attr):
                diffs.append(f"{attr}: ours={getattr(x, attr)!r} ray={getattr(y, attr)!r}")
        if opts_bytes(x.options) != opts_bytes(y.options):
            diffs.append("method options differ")
        for d in diffs:
            rep.bad(f"{full}/{n}", d)
        if not diffs:
            rep.ok(f"/{full.lstrip('.')}/{n} ({x.input_type}) -> ({x.output_type})")


def main() -> int:
    global PROTO_DIR
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="print every matching field/value/RPC too")
    ap.add_argument("--proto-dir", type=Path, default=None,
                    help=f"check this directory instead of {PROTO_DIR.relative_to(ROOT)}/ (for testing the checker)")
    args = ap.parse_args()
    if args.proto_dir is not None:
        PROTO_DIR = args.proto_dir.resolve()

    fds = compile_ours()
    ours_files = {f.name: f for f in fds.file}
    our_idx = Index()
    for f in fds.file:
        our_idx.add_file(f)
    try:
        ray_idx = RayIndex()
    except ImportError as exc:
        print(f"error: cannot import Ray's generated protobuf modules: {exc}", file=sys.stderr)
        return 2
    import ray  # noqa: E402  (only for the version banner)

    import google.protobuf

    print(f"rayscale proto compatibility check against Ray {ray.__version__} (protobuf {google.protobuf.__version__})")
    shown = PROTO_DIR.relative_to(ROOT) if PROTO_DIR.is_relative_to(ROOT) else PROTO_DIR
    print(f"our protos: {shown}/ ({', '.join(sorted(ours_files))})")
    rep = Report(args.verbose)

    for fname in sorted(ours_files):
        fdp = ours_files[fname]
        if fdp.package.startswith("rayscale."):
            # rayscale's own services (the gRPC expander): nothing in Ray to compare with;
            # the Ray types they embed are checked through their own files.
            print(f"\n== {fname} (package {fdp.package}): rayscale's own protocol, not in Ray")
            continue
        print(f"\n== {fname} (package {fdp.package}, {fdp.syntax or 'proto2'})")
        symbols = [(k, v) for k, v in our_idx.symbols.items() if v[2] is fdp]
        ray_files = set()
        for full, (kind, ours, _) in symbols:
            hit = ray_idx.get(full)
            if hit is None:
                rep.bad(full, f"{kind} does not exist in Ray")
                continue
            rkind, ray_def, ray_fdp = hit
            ray_files.add(ray_fdp.name)
            if rkind != kind:
                rep.bad(full, f"ours is a {kind}, Ray's is a {rkind}")
                continue
            if (fdp.syntax or "proto2") != (ray_fdp.syntax or "proto2"):
                rep.bad(full, f"syntax: ours={fdp.syntax or 'proto2'} ray={ray_fdp.syntax or 'proto2'} ({ray_fdp.name})")
            before = len(rep.problems)
            if kind == "message":
                compare_message(full, ours, ray_def, our_idx, ray_idx, rep)
            elif kind == "enum":
                compare_enum(full, ours, ray_def, rep)
            else:
                compare_service(full, ours, ray_def, rep)
            if len(rep.problems) == before:
                print(f"  OK  {kind:<8} {full.lstrip('.')}  [{ray_fdp.name}]")
        # Our file's package follows from its symbols' full names, which are
        # already checked; list the Ray files this one mirrors for the reader.
        print(f"  mirrors: {', '.join(sorted(ray_files)) or '-'}")

    print("\n== coverage")
    required = list(REQUIRED_SYMBOLS)
    for mod_name in FULLY_MIRRORED_RAY_FILES:
        mod = importlib.import_module(mod_name)
        fd = mod.DESCRIPTOR
        for group in (fd.message_types_by_name, fd.enum_types_by_name, fd.services_by_name):
            required.extend(d.full_name for d in group.values())
    missing = [s for s in required if our_idx.get("." + s) is None]
    for s in missing:
        rep.bad(s, "required symbol not defined in our protos")
    if not missing:
        print(f"  OK  all {len(required)} required top-level symbols defined "
              f"(all of {', '.join(FULLY_MIRRORED_RAY_FILES)} + {len(REQUIRED_SYMBOLS)} more)")

    c = rep.counts
    print()
    if rep.problems:
        print(f"FAILED: {len(rep.problems)} mismatch(es):")
        for p in rep.problems:
            print(f"  {p}")
        return 1
    print(f"details: {c['field']} fields, {c['enum_value']} enum values, {c['rpc']} RPCs; "
          f"messages include {c['map_entry']} map-entry types")
    print(f"PASS: {c['message']} messages, {c['enum']} enums, {c['service']} services checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
