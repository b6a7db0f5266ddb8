"""Per team and GPU type (and sharing group's slices): what the quota says, what is used, borrowed and lent, read
from ClusterQueues.

Kueue reports usage and borrowing per ClusterQueue, not lending. What a team lends is derived: the capacity
others in its cohort borrow, shared among the lenders in proportion to the idle quota each can lend.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from konduktor.config.quantity import parse_quantity
from konduktor.gpu.sharing import is_gpu_resource
from konduktor.vocabulary import GPU_RESOURCE, TEAM_LABEL


@dataclass(frozen=True)
class TeamUsage:
    team: str
    cluster_queue: str
    cohort: str
    flavor: str
    resource: str
    nominal: Fraction
    borrowing_limit: Fraction | None
    lending_limit: Fraction | None
    used: Fraction
    borrowed: Fraction
    lent: Fraction
    admitted_workloads: int
    pending_workloads: int

    def row(self) -> dict[str, Any]:
        """Numbers as plain ints or floats, limits as None when unlimited (for JSON and tables)."""

        def plain(value: Fraction | None) -> int | float | None:
            if value is None:
                return None
            return int(value) if value.denominator == 1 else float(value)

        return {k: plain(v) if isinstance(v, Fraction) or v is None else v for k, v in asdict(self).items()}


def _quantity(value: Any) -> Fraction | None:
    return None if value is None else parse_quantity(str(value))


def team_usage(cluster_queues: list[dict[str, Any]], resource: str = GPU_RESOURCE) -> list[TeamUsage]:
    """One row per ClusterQueue and flavor that covers `resource`."""
    base = []
    for queue in cluster_queues:
        spec, status = queue.get("spec", {}), queue.get("status", {})
        usage = {
            (flavor["name"], item["name"]): item
            for flavor in status.get("flavorsUsage", [])
            for item in flavor.get("resources", [])
        }
        name = queue["metadata"]["name"]
        for group in spec.get("resourceGroups", []):
            for flavor in group.get("flavors", []):
                for item in flavor.get("resources", []):
                    if item["name"] != resource:
                        continue
                    used = usage.get((flavor["name"], resource), {})
                    base.append(
                        {
                            "team": queue["metadata"].get("labels", {}).get(TEAM_LABEL, name),
                            "cluster_queue": name,
                            "cohort": spec.get("cohortName", ""),
                            "flavor": flavor["name"],
                            "resource": resource,
                            "nominal": parse_quantity(str(item["nominalQuota"])),
                            "borrowing_limit": _quantity(item.get("borrowingLimit")),
                            "lending_limit": _quantity(item.get("lendingLimit")),
                            "used": _quantity(used.get("total")) or Fraction(0),
                            "borrowed": _quantity(used.get("borrowed")) or Fraction(0),
                            "admitted_workloads": int(status.get("admittedWorkloads", 0)),
                            "pending_workloads": int(status.get("pendingWorkloads", 0)),
                        }
                    )
    return [TeamUsage(**row, lent=lent) for row, lent in zip(base, _lent(base), strict=True)]


def _lendable(row: dict[str, Any]) -> Fraction:
    idle: Fraction = max(Fraction(0), row["nominal"] - row["used"])
    limit: Fraction | None = row["lending_limit"]
    return idle if limit is None else min(idle, limit)


def _lent(rows: list[dict[str, Any]]) -> list[Fraction]:
    borrowed: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    lendable: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for row in rows:
        if row["cohort"]:
            key = (row["cohort"], row["flavor"])
            borrowed[key] += row["borrowed"]
            lendable[key] += _lendable(row)
    shares = []
    for row in rows:
        key = (row["cohort"], row["flavor"])
        if not row["cohort"] or not lendable[key]:
            shares.append(Fraction(0))
            continue
        others = borrowed[key] - row["borrowed"]
        shares.append(min(_lendable(row), others * _lendable(row) / lendable[key]))
    return shares


def _filler(usage: TeamUsage) -> bool:
    """A resource a flavor lists only because every flavor of the resource group must (0, no limits, unused): a
    whole GPU on a sharing group's flavor, a slice on a GPU type's or another group's."""
    quiet = usage.nominal == 0 and usage.used == 0 and usage.borrowed == 0
    return quiet and usage.borrowing_limit in (None, 0) and usage.lending_limit is None


def gpu_usage(cluster_queues: list[dict[str, Any]]) -> list[TeamUsage]:
    """`team_usage` of whole GPUs and of every slice the ClusterQueues cover (MIG instances, shared GPUs): one row
    per queue, flavor and resource, but the zeros a flavor lists only because Kueue requires every flavor to list
    every covered resource. Without sharing, exactly the whole-GPU rows."""
    covered = sorted(
        {
            resource
            for queue in cluster_queues
            for group in queue.get("spec", {}).get("resourceGroups", [])
            for resource in group.get("coveredResources", [])
            if is_gpu_resource(resource) and resource != GPU_RESOURCE
        }
    )
    whole = team_usage(cluster_queues)
    if not covered:
        return whole
    sliced = [u for resource in covered for u in team_usage(cluster_queues, resource) if not _filler(u)]
    # A sharing group's flavor gives no whole GPU: its nvidia.com/gpu 0 is filler too.
    flavors = {(u.cluster_queue, u.flavor) for u in sliced}
    whole = [u for u in whole if not ((u.cluster_queue, u.flavor) in flavors and _filler(u))]
    # In the queues' order, then their flavors' (a queue may list a flavor without nvidia.com/gpu).
    order = {
        (queue["metadata"]["name"], flavor["name"]): i
        for i, (queue, flavor) in enumerate(
            (queue, flavor)
            for queue in cluster_queues
            for group in queue.get("spec", {}).get("resourceGroups", [])
            for flavor in group.get("flavors", [])
        )
    }
    return sorted([*whole, *sliced], key=lambda u: (order[(u.cluster_queue, u.flavor)], u.resource))
