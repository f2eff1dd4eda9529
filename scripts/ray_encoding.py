"""How Ray 2.60's GCS encodes placement groups for the autoscaler (no Ray import).

A placement group's bundles carry a constraint on the label `_PG_<group id in hex>` with
the value "": affinity for STRICT_PACK, anti-affinity for STRICT_SPREAD, none for PACK and
SPREAD. Shared by the scenario generators so the fact lives in one place.
"""

from __future__ import annotations

from typing import Optional


def pg_label(pg_hex: str) -> str:
    """The node label Ray uses for placement group `pg_hex`."""
    return f"_PG_{pg_hex}"


def pg_placement_constraint(strategy: str, pg_hex: str) -> Optional[dict]:
    """The proto3-JSON placement constraint of a bundle of a group with `strategy`."""
    label = pg_label(pg_hex)
    if strategy == "STRICT_PACK":
        return {"affinity": {"label_name": label, "label_value": ""}}
    if strategy == "STRICT_SPREAD":
        return {"anti_affinity": {"label_name": label, "label_value": ""}}
    return None
