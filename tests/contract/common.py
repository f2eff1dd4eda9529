"""What every cloud's check shares: a finding, and reading the capture files."""

import glob
import json
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    cloud: str
    where: str  # the operation (or method and path)
    member: str  # the member's path in the request or answer
    message: str
    side: str = "request"  # "request", "response" or "error code"

    def line(self):
        return f"{self.cloud} {self.side} {self.where}: {self.member}: {self.message}"


def read_capture(directory, cloud):
    """Every exchange recorded for `cloud` in `directory` (one JSON object each)."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, f"{cloud}-*.jsonl"))):
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise SystemExit(f"contract check: {path}:{n}: not JSON ({e})")
    return out


def read_error_list(path):
    """The codes of a documented error list (tests/contract/errors/*.txt): one code per
    line, then its source; `#` lines are comments, except the '# kept:' section whose
    codes are kept with their evidence (returned apart)."""
    documented, kept = {}, {}
    with open(path) as f:
        for raw in f:
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#"):
                body = line.lstrip("#").strip()
                parts = body.split()
                if len(parts) >= 2 and parts[1].startswith("http") and parts[0][:1].isalpha() and ":" not in parts[0]:
                    kept[parts[0]] = " ".join(parts[1:])
                continue
            code, _, src = line.partition(" ")
            documented[code] = src.strip()
    return documented, kept
