"""Taking one worker out of a fleet's dispatch (`down --config --cluster WORKER` does it first): on the manager, the
worker leaves the config's MultiKueueConfigs, and its MultiKueueCluster and kubeconfig Secret go; nothing another
config or a person made is touched. Against the session cluster's API server, which serves Kueue's MultiKueue kinds
(the whole path on a simulated fleet is in test_multikueue_sim.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Sim
from quota_samples import fleet

from konduktor.config.model import Config
from konduktor.kube.client import Kube
from konduktor.ops.multicluster import detach_worker
from konduktor.quotas.multikueue import kubeconfig_secret, manager_objects
from konduktor.vocabulary import KUEUE_API, KUEUE_NAMESPACE

pytestmark = pytest.mark.sim

# team-a goes to both workers; team-b only to west.
CONFIG = Config.model_validate(fleet({"teams": {"team-b": {"clusters": {"west": {"h100": 20}}}}}))
FOREIGN = {
    "apiVersion": KUEUE_API,
    "kind": "MultiKueueConfig",
    "metadata": {"name": "made-by-hand"},
    "spec": {"clusters": ["west", "east"]},
}


def dispatch_lists(kube: Kube) -> dict[str, list[str]]:
    return {
        name: (kube.get(KUEUE_API, "MultiKueueConfig", name) or {}).get("spec", {}).get("clusters", [])
        for name in ("multikueue-team-a", "multikueue-team-b", "made-by-hand")
    }


@pytest.fixture
def manager(sim: Sim) -> Iterator[Kube]:
    """The session cluster holding a manager's MultiKueue objects as `up` applies them, and one made by hand."""
    kube = sim.kube
    objects: list[dict[str, Any]] = [
        o for o in manager_objects(CONFIG) if o["kind"] in ("MultiKueueCluster", "MultiKueueConfig")
    ]
    objects += [kubeconfig_secret(CONFIG, "west", "{}"), FOREIGN]
    for obj in objects:
        kube.apply(obj)
    try:
        yield kube
    finally:
        for obj in objects:
            kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))


def test_a_worker_leaves_the_managers_dispatch_and_nothing_else_changes(manager: Kube) -> None:
    before = dispatch_lists(manager)
    planned = detach_worker(manager, CONFIG, "west", dry_run=True)
    assert planned == [
        "change MultiKueueConfig multikueue-team-a: its workers east",
        "keep MultiKueueConfig multikueue-team-b: west is its only worker",
        "delete MultiKueueCluster west",
        f"delete Secret {KUEUE_NAMESPACE}/multikueue-west",
    ]
    assert dispatch_lists(manager) == before  # a dry run changes nothing

    assert detach_worker(manager, CONFIG, "west") == planned
    assert dispatch_lists(manager) == {
        "multikueue-team-a": ["east"],
        "multikueue-team-b": ["west"],  # Kueue refuses an empty list
        "made-by-hand": ["west", "east"],  # not this config's
    }
    assert manager.get(KUEUE_API, "MultiKueueCluster", "west") is None
    assert manager.get(KUEUE_API, "MultiKueueCluster", "east") is not None
    assert manager.get("v1", "Secret", "multikueue-west", KUEUE_NAMESPACE) is None
    # Run again, it finds nothing left to change.
    assert detach_worker(manager, CONFIG, "west") == [
        "keep MultiKueueConfig multikueue-team-b: west is its only worker"
    ]
