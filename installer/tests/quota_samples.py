"""Config data for the tests: the seed cluster (4 nodes x 10 H100, two teams of 20), edits to it, a fleet of two
workers made from it (MultiKueue), and a config written as a file with the line a text is on."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from konduktor.config.model import Config
from konduktor.quotas.manifests import to_yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DELETE = object()


def seed() -> dict[str, Any]:
    """A lint-clean config: fair sharing, topology down to hosts, borrow and lend limits."""
    return {
        "version": 1,
        "cluster": {"name": "gpu-lab"},
        "kueue": {"sharing": "fair"},
        "capacityReserve": {"cpu": "8", "memory": "64Gi"},
        "topology": {"name": "gpu-topology", "levels": ["konduktor.ai/topology-rack", "kubernetes.io/hostname"]},
        "gpuTypes": {
            "h100": {
                "product": "NVIDIA-H100-80GB-HBM3",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "nodes": 4,
                "gpusPerNode": 10,
                "nodeAllocatable": {"cpu": "192", "memory": "1900Gi"},
            },
        },
        "teams": {
            "team-a": {
                "namespaces": ["team-a"],
                "groups": ["team-a"],
                "gpus": {"h100": {"quota": 20, "borrowLimit": 10, "lendLimit": 16}},
            },
            "team-b": {
                "namespaces": ["team-b"],
                "groups": ["team-b"],
                "gpus": {"h100": {"quota": 20, "borrowLimit": 10, "lendLimit": 16}},
            },
        },
        "alerts": {"receivers": {"platform": {"webhook": {"url": {"secret": "platform-webhook", "key": "url"}}}}},
    }


def edited(changes: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """`base` (the seed) with `changes` merged in; a value of DELETE removes the key."""
    result = copy.deepcopy(base if base is not None else seed())
    _merge(result, changes)
    return result


def _merge(target: dict[str, Any], changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if value is DELETE:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def config(changes: dict[str, Any] | None = None) -> Config:
    return Config.model_validate(edited(changes or {}))


def two_types() -> dict[str, Any]:
    """The seed plus an A100 type that only team-a uses."""
    return edited(
        {
            "gpuTypes": {
                "a100": {
                    "product": "NVIDIA-A100-SXM4-80GB",
                    "nodes": 2,
                    "gpusPerNode": 8,
                    "nodeAllocatable": {"cpu": "124", "memory": "1000Gi"},
                }
            },
            "teams": {"team-a": {"gpus": {"a100": {"quota": 16}}}},
        }
    )


def fleet(changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """The seed (4 nodes x 10 H100, two teams of 20) over two workers of 2 nodes each."""
    base = edited(
        {
            "clusters": {
                "manager": {"context": "hub"},
                "workers": [
                    {"name": "west", "context": "west", "gpuTypes": {"h100": 2}},
                    {"name": "east", "context": "east", "gpuTypes": {"h100": 2}},
                ],
            }
        }
    )
    return edited(changes or {}, base)


def write_config(directory: Path, data: dict[str, Any], name: str = "config.yaml") -> Path:
    """`data` as a config file in `directory`, as a user writes it."""
    path = directory / name
    path.write_text(to_yaml([data]).removeprefix("---\n"), encoding="utf-8")
    return path


def line_of(data: dict[str, Any], needle: str, after: str = "") -> int:
    """The 1-based line of the first line containing `needle` (after the first containing `after`)."""
    lines = to_yaml([data]).removeprefix("---\n").splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i, line in enumerate(lines) if i >= start and needle in line) + 1
