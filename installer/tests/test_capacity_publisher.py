"""konduktor-core's capacity publisher on the simulated cluster, as its service account: it publishes what team
members read (`konduktor why`) in every team namespace, writes a copy only when the capacity changes, renews one
heartbeat that team members read to tell a stale copy, and can change nothing else."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from admission import create_refusal, patch_refusal
from conftest import EXAMPLE, Sim
from sim_fixture import patch_node, release_nodes
from support import render

from konduktor.config.load import load_config
from konduktor.errors import KonduktorError
from konduktor.kube.client import ApiError, Identity, Kube
from konduktor.queueing.capacity import HEARTBEAT_LEASE, HEARTBEAT_NAMESPACE, REVISION_ANNOTATION
from konduktor.queueing.cluster import Publication, publish_capacity, published_capacity, read_capacity
from konduktor.queueing.publisher import serve
from konduktor.quotas.sync import sync_quotas
from konduktor.vocabulary import (
    CAPACITY_CONFIGMAP,
    CAPACITY_PUBLISHER,
    HEALTH_TAINT_KEY,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    SYSTEM_NAMESPACE,
    TEAM_LABEL,
)
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
PUBLISHER = Identity(f"system:serviceaccount:{SYSTEM_NAMESPACE}:{CAPACITY_PUBLISHER}")
MEMBER = Identity("alice", "team-a")
TEAMS = ("team-a", "team-b")
LEASE_API = "coordination.k8s.io/v1"
NODE = "gpu-h100-0002"


def configmap(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


@pytest.fixture(scope="module")
def publisher(sim: Sim) -> Iterator[Kube]:
    """The chart's account with its cluster-wide rights and its heartbeat's, and config.yaml's quotas with its
    rights in team namespaces."""
    sim.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
    ours = [
        o
        for o in render()
        if o["metadata"]["name"].endswith(("capacity-publisher", "capacity-heartbeat")) and o["kind"] != "Deployment"
    ]
    assert {o["kind"] for o in ours} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
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


@pytest.fixture
def member(sim: Sim) -> Iterator[Kube]:
    kube = Kube(sim.kubeconfig, impersonate=MEMBER)
    yield kube
    kube.close()


def versions(kube: Kube) -> dict[str, str]:
    """Each team namespace's copy's resourceVersion: it changes with every write."""
    found = {t: kube.get("v1", "ConfigMap", CAPACITY_CONFIGMAP, t) for t in TEAMS}
    return {t: c["metadata"]["resourceVersion"] for t, c in found.items() if c is not None}


def lease(kube: Kube) -> dict[str, Any]:
    return kube.get(LEASE_API, "Lease", HEARTBEAT_LEASE, HEARTBEAT_NAMESPACE) or {}


def test_the_publisher_publishes_to_every_team_namespace_and_writes_again_only_on_a_change(
    publisher: Kube, sim: Sim, member: Kube
) -> None:
    first = publish_capacity(publisher)
    assert set(TEAMS) <= set(first.written) and not set(TEAMS) & set(first.refused) and first.heartbeat is None
    assert first.capacity.nodes and first.capacity.queues
    read = published_capacity(member, "team-a")
    assert read == first.capacity and read.freshness is not None and read.freshness.state == "current"
    written = versions(sim.kube)
    # Nothing changed: no copy is written again; only the heartbeat is renewed.
    again = publish_capacity(publisher)
    assert set(TEAMS) <= set(again.unchanged) and not set(TEAMS) & set(again.written)
    assert versions(sim.kube) == written
    assert lease(sim.kube)["metadata"]["annotations"][REVISION_ANNOTATION] == first.revision


def test_a_stale_heartbeat_or_a_missed_change_is_told_to_the_member(publisher: Kube, sim: Sim, member: Kube) -> None:
    publish_capacity(publisher)
    # The publisher stopped an hour ago.
    sim.kube.patch(
        LEASE_API, "Lease", HEARTBEAT_LEASE, {"spec": {"renewTime": "2026-01-01T00:00:00.000000Z"}}, HEARTBEAT_NAMESPACE
    )
    read = published_capacity(member, "team-a")
    assert read is not None and read.stale and read.freshness is not None
    assert "last confirmed it at 2026-01-01T00:00:00Z" in read.freshness.message
    # Renewed again, but naming a revision this namespace's copy (written before) is not: its write failed.
    publish_capacity(publisher)
    sim.kube.patch(
        LEASE_API,
        "Lease",
        HEARTBEAT_LEASE,
        {"metadata": {"annotations": {REVISION_ANNOTATION: "0123456789abcdef"}}},
        HEARTBEAT_NAMESPACE,
    )
    read = published_capacity(member, "team-a")
    assert read is not None and read.stale and read.freshness is not None and "not updated" in read.freshness.message
    publish_capacity(publisher)
    read = published_capacity(member, "team-a")
    assert read is not None and not read.stale


def test_the_service_keeps_the_capacity_current_from_watches_and_writes_only_changes(
    publisher: Kube, sim: Sim, member: Kube
) -> None:
    stop = threading.Event()
    rounds: list[Publication] = []
    said: list[str] = []
    service = threading.Thread(
        target=serve,
        args=(publisher, stop),
        # No rereading of the copies during the test: what it writes, it writes from the watches' events.
        kwargs={"heartbeat": 1, "settle": 0.2, "say": said.append, "on_round": rounds.append, "resync": 10_000},
        daemon=True,
    )
    service.start()
    try:
        expected = read_capacity(sim.kube)
        wait_until(
            "the service's first round",
            lambda: bool(rounds),
            timeout=60,
            on_timeout=lambda: KonduktorError(f"the service said: {said}"),
        )
        assert rounds[0].capacity == expected
        written = versions(sim.kube)
        assert set(written) == set(TEAMS)
        # An unchanged fleet: heartbeats renewed, no copy written.
        renewals = []

        def renewed_twice() -> bool:
            renewals.append(lease(sim.kube).get("spec", {}).get("renewTime"))
            return len(set(renewals)) >= 3

        wait_until("two more heartbeats", renewed_twice, timeout=30)
        assert versions(sim.kube) == written
        # A node quarantined: seen by the Node watch, written to every team namespace.
        patch_node(
            sim.kube,
            NODE,
            lambda current: {
                "metadata": {
                    "annotations": {
                        QUARANTINE_REASON: "Xid 79: GPU fell off the bus",
                        QUARANTINED_AT: "2026-11-23T19:00:00Z",
                    }
                },
                "spec": {
                    "taints": [*current["spec"].get("taints", []), {"key": HEALTH_TAINT_KEY, "effect": "NoSchedule"}]
                },
            },
        )

        def listed() -> bool:
            read = published_capacity(member, "team-a")
            return read is not None and read.quarantine_of(NODE) is not None and not read.stale

        wait_until(
            "the quarantine in team-a's copy, current",
            listed,
            timeout=30,
            on_timeout=lambda: KonduktorError(f"the service said: {said}"),
        )
        assert all(versions(sim.kube)[t] != written[t] for t in TEAMS)
    finally:
        release_nodes(sim.kube, [NODE])
        stop.set()
        service.join(timeout=30)
    assert not service.is_alive()


def test_a_team_namespace_that_refuses_the_publisher_keeps_no_other_from_its_answer(publisher: Kube, sim: Sim) -> None:
    """A team label on a namespace the quotas granted the publisher nothing in (someone else's, or one still being
    set up): that one is named, every other team namespace still gets its summary."""
    stray = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "stray-team", "labels": {TEAM_LABEL: "x"}}}
    sim.kube.apply(stray)
    try:
        done = publish_capacity(publisher)
        assert set(done.refused) >= {"stray-team"} and "forbidden" in done.refused["stray-team"]
        assert set(TEAMS) <= set(done.namespaces)
        for team in TEAMS:
            assert published_capacity(sim.kube, team) == done.capacity
    finally:
        sim.kube.delete("v1", "Namespace", "stray-team")


def test_the_publisher_can_change_nothing_else(publisher: Kube) -> None:
    """Not another ConfigMap of a team (its create right aside), none outside team namespaces, no Node, no other
    Lease, no Secret to read."""
    refusals = [
        create_refusal(publisher, configmap("default", CAPACITY_CONFIGMAP)),
        create_refusal(publisher, configmap("kube-system", "coredns-override")),
        patch_refusal(publisher, "ConfigMap", "kube-root-ca.crt", {"data": {"x": "y"}}, "team-a"),
        patch_refusal(publisher, "Node", "gpu-h100-0000", {"metadata": {"labels": {"x": "y"}}}, None),
    ]
    assert [getattr(r, "status", None) for r in refusals] == [403] * 4
    for attempt in (
        lambda: publisher.list("v1", "Secret", "team-a"),
        lambda: publisher.patch(
            LEASE_API, "Lease", "konduktor-health", {"metadata": {"labels": {"x": "y"}}}, SYSTEM_NAMESPACE
        ),
    ):
        with pytest.raises(ApiError) as refused:
            attempt()
        assert refused.value.status == 403


def test_a_member_reads_the_heartbeat_and_no_other_lease(publisher: Kube, member: Kube) -> None:
    """The heartbeat names no team, node or job: every authenticated user may read it, and nothing else there."""
    publish_capacity(publisher)
    assert member.get(LEASE_API, "Lease", HEARTBEAT_LEASE, HEARTBEAT_NAMESPACE) is not None
    for attempt in (
        lambda: member.get(LEASE_API, "Lease", "konduktor-health", SYSTEM_NAMESPACE),
        lambda: member.list(LEASE_API, "Lease", SYSTEM_NAMESPACE),
        lambda: member.patch(
            LEASE_API, "Lease", HEARTBEAT_LEASE, {"metadata": {"labels": {"x": "y"}}}, HEARTBEAT_NAMESPACE
        ),
        lambda: member.get("v1", "ConfigMap", CAPACITY_CONFIGMAP, "team-b"),
    ):
        with pytest.raises(ApiError) as refused:
            attempt()
        assert refused.value.status == 403
