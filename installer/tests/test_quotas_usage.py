"""Team usage read from ClusterQueue status: used, borrowed, and the derived lent share."""

from __future__ import annotations

from typing import Any

from konduktor.quotas.usage import team_usage


def cluster_queue(
    team: str, nominal: int, used: int, borrowed: int, lending_limit: int | None = None, pending: int = 0
) -> dict[str, Any]:
    gpu: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": str(nominal)}
    if lending_limit is not None:
        gpu["lendingLimit"] = str(lending_limit)
    return {
        "metadata": {"name": team, "labels": {"konduktor.ai/team": team}},
        "spec": {
            "cohortName": "gpu",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "resources": [{"name": "cpu", "nominalQuota": "10"}, gpu]}],
                }
            ],
        },
        "status": {
            "flavorsUsage": [
                {
                    "name": "h100",
                    "resources": [{"name": "nvidia.com/gpu", "total": str(used), "borrowed": str(borrowed)}],
                }
            ],
            "admittedWorkloads": 1,
            "pendingWorkloads": pending,
        },
    }


def test_borrowed_capacity_is_attributed_to_the_lender() -> None:
    rows = {
        u.team: u.row() for u in team_usage([cluster_queue("a", 20, 30, 10, pending=2), cluster_queue("b", 20, 4, 0)])
    }
    assert rows["a"]["used"] == 30 and rows["a"]["borrowed"] == 10 and rows["a"]["lent"] == 0
    assert rows["b"]["lent"] == 10
    assert rows["a"]["pending_workloads"] == 2
    assert rows["a"]["lending_limit"] is None


def test_lent_never_exceeds_what_a_team_can_lend() -> None:
    rows = {
        u.team: u.row()
        for u in team_usage(
            [
                cluster_queue("a", 10, 22, 12),
                cluster_queue("b", 10, 0, 0, lending_limit=4),
                cluster_queue("c", 10, 2, 0),
            ]
        )
    }
    assert rows["b"]["lent"] <= 4
    assert rows["c"]["lent"] <= 8
    assert rows["b"]["lent"] + rows["c"]["lent"] == 12
