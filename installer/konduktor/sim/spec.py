"""What a simulated cluster was asked to be, kept in its `sim.json`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from konduktor.sim.nodes import DEFAULT_TOPOLOGY, NodePool


@dataclass
class SimSpec:
    """What a simulated cluster was asked to be; kept in sim.json so status and re-runs know it."""

    pools: list[NodePool]
    levels: tuple[str, ...] = DEFAULT_TOPOLOGY
    job_seconds: float = 5.0
    # Parts of Kueue's Configuration a config implies (fair sharing, waitForPodsReady, ...).
    kueue_settings: dict[str, Any] = field(default_factory=dict)
    kueue_ports: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> SimSpec:
        data = json.loads(text)
        return cls(
            pools=[NodePool(**pool) for pool in data["pools"]],
            levels=tuple(data["levels"]),
            job_seconds=float(data["job_seconds"]),
            kueue_settings=dict(data.get("kueue_settings", {})),
            kueue_ports=dict(data.get("kueue_ports", {})),
        )
