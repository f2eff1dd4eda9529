"""Canonical decision JSON shared by rayscale's Python scripts (no Ray import).

Integral floats become ints, containers are converted recursively, and `dumps` sorts keys
with no spaces: the form `rayscale plan` prints, so two decisions compare as strings.
"""

from __future__ import annotations

import json
import math
from typing import Any


def canonical(obj: Any) -> Any:
    """Canonical form of a JSON-able value."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj) and obj == int(obj):
            return int(obj)
        return obj
    if isinstance(obj, dict):
        return {str(k): canonical(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [canonical(v) for v in obj]
    raise TypeError(f"not JSON-able: {type(obj)}")


def dumps(obj: Any) -> str:
    """Canonical JSON text."""
    return json.dumps(canonical(obj), sort_keys=True, separators=(",", ":"))
