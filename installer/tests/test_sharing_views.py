"""What the commands show of shared GPUs: `quotas explain`'s rows per team, group and slice, read from the rendered
ClusterQueues; and `validate`'s summary line counting the slices the groups' nodes advertise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import run

from konduktor.config.load import load_config
from konduktor.quotas.render import render
from konduktor.quotas.usage import gpu_usage, team_usage

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def queues_of(example: str, used: dict[tuple[str, str, str], int] | None = None) -> list[dict[str, Any]]:
    """The example's ClusterQueues as rendered, with `used` (queue, flavor, resource) -> amount as Kueue reports it."""
    queues = [o for o in render(load_config(EXAMPLES / example).config) if o["kind"] == "ClusterQueue"]
    for queue in queues:
        name = queue["metadata"]["name"]
        flavors: dict[str, list[dict[str, str]]] = {}
        for (cq, flavor, resource), amount in (used or {}).items():
            if cq == name:
                flavors.setdefault(flavor, []).append({"name": resource, "total": str(amount), "borrowed": "0"})
        queue["status"] = {"flavorsUsage": [{"name": f, "resources": r} for f, r in flavors.items()]}
    return queues


def test_explain_rows_are_each_teams_whole_gpus_and_slices_without_the_fillers() -> None:
    queues = queues_of("shared-gpus.yaml", {("apps", "h100-shared", "nvidia.com/gpu.shared"): 5})
    rows = [(u.team, u.flavor, u.resource, int(u.nominal), int(u.used)) for u in gpu_usage(queues)]
    assert rows == [
        ("apps", "h100", "nvidia.com/gpu", 0, 0),
        ("apps", "h100-mig", "nvidia.com/mig-1g.10gb", 16, 0),
        ("apps", "h100-mig", "nvidia.com/mig-2g.20gb", 4, 0),
        ("apps", "h100-shared", "nvidia.com/gpu.shared", 32, 5),
        ("research", "h100", "nvidia.com/gpu", 16, 0),
        ("research", "h100-mig", "nvidia.com/mig-2g.20gb", 4, 0),
        ("research", "h100-mig", "nvidia.com/mig-3g.40gb", 8, 0),
    ]


def test_explain_rows_without_sharing_are_the_whole_gpu_rows_as_before() -> None:
    queues = queues_of("config.yaml")
    assert gpu_usage(queues) == team_usage(queues)


def test_validate_counts_the_groups_and_their_slices(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "validate", str(EXAMPLES / "shared-gpus.yaml"))
    assert code == 0
    assert (
        "valid (2 teams, 1 GPU type, 16 GPUs, 2 sharing groups (16 mig-1g.10gb, 8 mig-2g.20gb, 8 mig-3g.40gb, "
        "32 gpu.shared), 0 warnings)"
    ) in " ".join(err.split())
    code, _, err = run(capsys, "validate", str(EXAMPLES / "config.yaml"))
    assert "valid (2 teams, 1 GPU type, 40 GPUs, 0 warnings)" in err
