"""A Kubernetes object's status conditions (Workloads, Jobs, Nodes, Deployments): the one reading of them."""

from __future__ import annotations

from typing import Any


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """The object's condition of this type, as a copy; None when it has none (or there is no object)."""
    # A new object's status may say `conditions: null` (Kueue's CRD files do) until its controller sets some.
    for item in (obj or {}).get("status", {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def is_true(obj: dict[str, Any] | None, kind: str) -> bool:
    found = condition(obj, kind)
    return bool(found and found.get("status") == "True")
