"""konduktor-core's capacity publisher on the simulated cluster, as its service account: it publishes what team
members read (`konduktor why`) in every team namespace, and can change nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from admission import create_refusal, patch_refusal
from conftest import EXAMPLE, Sim
from support import render

from konduktor.config.load import load_config
from konduktor.kube.client import ApiError, Identity, Kube
from konduktor.queueing.cluster import publish_capacity, published_capacity
from konduktor.quotas.sync import sync_quotas
from konduktor.vocabulary import CAPACITY_CONFIGMAP, CAPACITY_PUBLISHER, SYSTEM_NAMESPACE, TEAM_LABEL

pytestmark = pytest.mark.sim
PUBLISHER = Identity(f"system:serviceaccount:{SYSTEM_NAMESPACE}:{CAPACITY_PUBLISHER}")
TEAMS = ("team-a", "team-b")


def configmap(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


@pytest.fixture(scope="module")
def publisher(sim: Sim) -> Iterator[Kube]:
    """The chart's account and cluster-wide rights, and config.yaml's quotas with its rights in team namespaces."""
    sim.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
    ours = [o for o in render() if o["metadata"]["name"].endswith("capacity-publisher") and o["kind"] != "Deployment"]
    assert {o["kind"] for o in ours} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    for obj in ours:
        sim.kube.apply(obj)
    sync_quotas(sim.kube, load_config(EXAMPLE).config, prune=False, dry_run=False)
    for team in TEAMS:
        sim.kube.delete("v1", "ConfigMap", CAPACITY_CONFIGMAP, team)
    as_publisher = Kube(sim.kubeconfig, impersonate=PUBLISHER)
    yield as_publisher
    as_publisher.close()
    for obj in ours:
        sim.kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))


def test_the_publisher_publishes_to_every_team_namespace(publisher: Kube, sim: Sim) -> None:
    capacity, namespaces, refused = publish_capacity(publisher, "2026-11-26T12:00:00Z")
    assert set(TEAMS) <= set(namespaces) and not set(TEAMS) & set(refused)
    assert capacity.nodes and capacity.queues
    for team in TEAMS:
        assert published_capacity(sim.kube, team) == capacity
    assert publish_capacity(publisher, "2026-11-26T12:00:30Z")[1] == namespaces  # and again: an update


def test_a_team_namespace_that_refuses_the_publisher_keeps_no_other_from_its_answer(publisher: Kube, sim: Sim) -> None:
    """A team label on a namespace the quotas granted the publisher nothing in (someone else's, or one still being
    set up): that one is named, every other team namespace still gets its summary."""
    stray = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "stray-team", "labels": {TEAM_LABEL: "x"}}}
    sim.kube.apply(stray)
    try:
        capacity, namespaces, refused = publish_capacity(publisher, "2026-11-26T12:01:00Z")
        assert set(refused) >= {"stray-team"} and "forbidden" in refused["stray-team"]
        assert set(TEAMS) <= set(namespaces)
        for team in TEAMS:
            assert published_capacity(sim.kube, team) == capacity
    finally:
        sim.kube.delete("v1", "Namespace", "stray-team")


def test_the_publisher_can_change_nothing_else(publisher: Kube) -> None:
    """Not another ConfigMap of a team (its create right aside), none outside team namespaces, no Node, no
    Secret to read."""
    refusals = [
        create_refusal(publisher, configmap("default", CAPACITY_CONFIGMAP)),
        create_refusal(publisher, configmap("kube-system", "coredns-override")),
        patch_refusal(publisher, "ConfigMap", "kube-root-ca.crt", {"data": {"x": "y"}}, "team-a"),
        patch_refusal(publisher, "Node", "gpu-h100-0000", {"metadata": {"labels": {"x": "y"}}}, None),
    ]
    assert [getattr(r, "status", None) for r in refusals] == [403] * 4
    with pytest.raises(ApiError) as secrets:
        publisher.list("v1", "Secret", "team-a")
    assert secrets.value.status == 403
