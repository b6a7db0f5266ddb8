"""The `sim` pytest fixture: one running simulated cluster per test session, for every suite that needs one.

Clusters started by tests live in their own state directory, apart from the user's (`konduktor-install sim
up`); tool builds are shared through the cache. The fixture is never skipped: when the cluster cannot start,
every test that needs it fails with the reason.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from konduktor.cli.sim import spec_from
from konduktor.kube.client import Kube
from konduktor.sim.cluster import SimCluster

# The session's cluster is the one examples/config.yaml describes: 4 nodes x 10 H100, fair sharing.
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "config.yaml"


@dataclass
class Sim:
    cluster: SimCluster
    kube: Kube

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig


@pytest.fixture(scope="session")
def sim() -> Iterator[Sim]:
    os.environ.setdefault("KONDUKTOR_STATE", tempfile.mkdtemp(prefix="konduktor-test-state-"))
    cluster = SimCluster("konduktor-test")
    cluster.up(spec_from(EXAMPLE, None, job_seconds=2))
    kube = Kube(cluster.kubeconfig)
    try:
        yield Sim(cluster, kube)
    finally:
        kube.close()
        cluster.down()
