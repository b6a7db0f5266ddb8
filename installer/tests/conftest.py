"""Shared fixtures. `sim` gives tests one running simulated cluster per session; it is never skipped."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from konduktor.kube.client import Kube

# Clusters started by tests live apart from the user's own (`konduktor-install sim up`); tool builds are shared.
os.environ.setdefault("KONDUKTOR_STATE", tempfile.mkdtemp(prefix="konduktor-test-state-"))

from konduktor.cli.sim import spec_from
from konduktor.sim.cluster import SimCluster

# The session's cluster is the one examples/config.yaml describes: 4 nodes x 10 H100, fair sharing.
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "config.yaml"


@dataclass
class Sim:
    cluster: SimCluster
    kube: Kube

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig


@pytest.fixture(scope="session")
def sim() -> Iterator[Sim]:
    cluster = SimCluster("konduktor-test")
    cluster.up(spec_from(EXAMPLE, None, job_seconds=2))
    kube = Kube(cluster.kubeconfig)
    try:
        yield Sim(cluster, kube)
    finally:
        kube.close()
        cluster.down()
