"""The published capacity, the pure core: a size that does not grow with the nodes, the same answers as the list
of every node gave, content that changes only when the capacity does (so the publisher writes only then), the
fleet kept from watch events equal to a full list, and the heartbeat's verdict on a copy's age."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from konduktor.kube.watch import WatchEvent
from konduktor.queueing.capacity import (
    CAPACITY_KEY,
    QUARANTINES_PUBLISHED,
    REVISION_ANNOTATION,
    Capacity,
    Fleet,
    NodeCapacity,
    Quarantine,
    configmap,
    freshness,
    from_json,
    from_per_node_json,
    heartbeat,
    micro_time,
    node_capacity,
    revision,
    running_slices,
    slice_summary,
    slim_node,
    slim_pod,
    summarize,
    to_json,
)
from konduktor.queueing.explain import as_json, why, with_freshness
from konduktor.quotas.usage import TeamUsage

FLAVORS = [{"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": "H100"}}}]


def usage(team: int) -> TeamUsage:
    return TeamUsage(
        team=f"team-{team}",
        cluster_queue=f"team-{team}",
        cohort="lab",
        flavor="h100",
        resource="nvidia.com/gpu",
        nominal=Fraction(80),
        borrowing_limit=Fraction(40),
        lending_limit=None,
        used=Fraction(80),
        borrowed=Fraction(0),
        lent=Fraction(0),
        admitted_workloads=3,
        pending_workloads=1,
    )


def fleet_nodes(count: int, quarantined_every: int = 50) -> list[NodeCapacity]:
    return [
        NodeCapacity(
            f"gpu-h100-{i:05d}",
            "h100",
            8,
            i % 9,
            True,
            Quarantine("Xid 79: GPU has fallen off the bus", f"2026-11-23T19:{i % 60:02d}:00Z")
            if i % quarantined_every == 0
            else None,
        )
        for i in range(count)
    ]


def test_the_published_size_does_not_grow_with_the_nodes() -> None:
    teams = tuple(usage(t) for t in range(20))
    sizes = {count: len(to_json(summarize(fleet_nodes(count), teams))) for count in (1_000, 10_000, 100_000)}
    # Past the cap of quarantines listed, the node count only lengthens a few numbers.
    assert sizes[1_000] < sizes[10_000] and sizes[100_000] - sizes[10_000] < 100, sizes
    assert sizes[100_000] < 16 * 1024
    large = summarize(fleet_nodes(10_000), teams)
    assert len(large.quarantined) == QUARANTINES_PUBLISHED
    [h100] = large.flavors
    assert (h100.nodes, h100.quarantined_nodes, h100.quarantined_gpus) == (10_000, 200, 1_600)
    assert not large.all_quarantines_listed


def test_the_spread_of_free_gpus_answers_what_the_list_of_nodes_did() -> None:
    found = fleet_nodes(1_000, quarantined_every=7)
    [h100] = summarize(found, ()).flavors
    usable = [n for n in found if n.usable]
    assert h100.free == sum(n.free for n in usable)
    assert h100.in_service == sum(n.gpus for n in usable)
    assert h100.most_free == max(n.free for n in usable)
    for per_pod in range(1, 9):
        assert h100.placeable(per_pod) == sum(n.free // per_pod for n in usable)


def test_the_most_recent_quarantines_are_listed_first() -> None:
    found = summarize(fleet_nodes(200, quarantined_every=1), ())
    since = [q.since for q in found.quarantined]
    assert since == sorted(since, reverse=True) and since[0] == "2026-11-23T19:59:00Z"


def test_the_content_round_trips_and_an_earlier_publishers_list_still_reads() -> None:
    capacity = summarize(fleet_nodes(300, quarantined_every=3), (usage(0), usage(1)))
    assert from_json(to_json(capacity)) == capacity
    per_node = {
        "publishedAt": "2026-11-23T19:00:00+00:00",
        "nodes": [
            {**vars(n), "quarantine": vars(n.quarantine) if n.quarantine else None}
            for n in fleet_nodes(300, quarantined_every=3)
        ],
        "queues": [usage(0).row(), usage(1).row()],
    }
    assert from_per_node_json(json.dumps(per_node)) == replace(capacity, published_at="2026-11-23T19:00:00+00:00")


def node(name: str, free_label: str = "H100", **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": {"nvidia.com/gpu.product": free_label},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-23T19:00:00Z"},
                {"type": "MemoryPressure", "status": "False"},
            ],
            "images": [{"names": ["x"], "sizeBytes": 1}],
            **extra,
        },
    }


def pod(name: str, on: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-0", "labels": {"job-name": name}},
        "spec": {
            "nodeName": on,
            "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            "volumes": [{"name": "data"}],
        },
        "status": {"phase": phase},
    }


def test_the_fleet_from_watch_events_is_what_a_full_list_gives() -> None:
    nodes = [node(f"gpu-{i}") for i in range(4)]
    pods = [pod("a", "gpu-0", 8), pod("b", "gpu-1", 3), pod("c", "gpu-1", 2)]
    fleet = Fleet()
    fleet.apply(WatchEvent("Node", "SYNC", tuple(slim_node(n) for n in nodes)))
    fleet.apply(WatchEvent("Pod", "SYNC", tuple(slim_pod(p) for p in pods)))
    fleet.apply(WatchEvent("ResourceFlavor", "SYNC", tuple(FLAVORS)))
    fleet.apply(WatchEvent("ClusterQueue", "SYNC", ()))
    assert fleet.capacity() == summarize(node_capacity(nodes, pods, FLAVORS), ())
    before = revision(fleet.capacity())

    # What does not change the capacity changes no byte: a kubelet's heartbeat, a pod without GPUs, a pod that
    # is not bound yet.
    fleet.apply(WatchEvent("Node", "MODIFIED", (slim_node({**node("gpu-2"), "metadata": node("gpu-2")["metadata"]}),)))
    fleet.apply(WatchEvent("Pod", "ADDED", (slim_pod(pod("cpu-only", "gpu-3", 0)),)))
    fleet.apply(WatchEvent("Pod", "ADDED", (slim_pod(pod("waiting", "", 8, phase="Pending")),)))
    assert revision(fleet.capacity()) == before

    # What does: a pod that finishes (it leaves the watch's selector as DELETED), a node quarantined.
    fleet.apply(WatchEvent("Pod", "DELETED", (slim_pod(pod("a", "gpu-0", 8, phase="Succeeded")),)))
    assert revision(fleet.capacity()) != before
    [h100] = fleet.capacity().flavors
    assert dict(h100.free_nodes) == {3: 1, 8: 3}
    tainted = node("gpu-3")
    tainted["spec"]["taints"] = [{"key": "konduktor.ai/gpu-health", "effect": "NoSchedule"}]
    tainted["metadata"]["annotations"]["konduktor.ai/quarantine-reason"] = "Xid 79"
    fleet.apply(WatchEvent("Node", "MODIFIED", (slim_node(tainted),)))
    assert [q.name for q in fleet.capacity().quarantined] == ["gpu-3"]
    fleet.apply(WatchEvent("Node", "DELETED", (slim_node(tainted),)))
    assert fleet.capacity().nodes == 3 and fleet.capacity().quarantined == ()


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def copy_of(capacity: Capacity, changed_at: str) -> dict[str, Any]:
    return configmap(capacity, "team-0", micro_time(at(changed_at)))


def test_the_heartbeat_says_whether_a_copy_is_current() -> None:
    now, before, after = (summarize(fleet_nodes(n), (usage(0),)) for n in (10, 9, 11))
    lease = heartbeat(revision(now), at("2026-11-23T19:10:00Z"), period=60)
    renewed = at("2026-11-23T19:10:00Z").timestamp()
    assert lease["spec"]["leaseDurationSeconds"] == 180
    same = copy_of(now, "2026-11-23T19:00:00Z")
    assert freshness(same, lease, renewed + 10).state == "current"
    assert freshness(same, lease, renewed + 10).as_of == "2026-11-23T19:10:00Z"
    # Three heartbeats missed: the publisher stopped, or stopped seeing the cluster.
    old = freshness(same, lease, renewed + 181)
    assert old.state == "stale" and "last confirmed it at 2026-11-23T19:10:00Z, 3 min ago" in old.message
    # Another revision than a copy written before the heartbeat: this namespace missed the last change.
    missed = freshness(copy_of(before, "2026-11-23T19:00:00Z"), lease, renewed + 10)
    assert missed.state == "stale" and "not updated" in missed.message
    # A copy written after the last heartbeat (the publisher writes the copies, then renews): current, for one
    # heartbeat's duration at most.
    assert freshness(copy_of(after, "2026-11-23T19:10:01Z"), lease, renewed + 10).state == "current"
    assert freshness(copy_of(after, "2026-11-23T20:00:00Z"), lease, renewed + 10).state == "stale"
    # A copy changed by hand, its revision annotation kept: not the revision the heartbeat names.
    altered = copy_of(now, "2026-11-23T19:00:00Z")
    altered["data"][CAPACITY_KEY] = to_json(before)
    assert altered["metadata"]["annotations"][REVISION_ANNOTATION] == revision(now)
    assert freshness(altered, lease, renewed + 10).state == "stale"
    # No heartbeat to read: an earlier platform.
    assert freshness(same, None, renewed).state == "unknown"


def test_why_says_when_the_capacity_it_read_is_stale() -> None:
    nodes = fleet_nodes(8, quarantined_every=100)
    published = summarize(nodes, (usage(0),))
    lease = heartbeat(revision(published), at("2026-11-23T19:10:00Z"), period=60)
    current_copy = copy_of(published, "2026-11-23T19:00:00Z")
    admitted = {
        "metadata": {"name": "w", "namespace": "team-0", "ownerReferences": [{"kind": "Job", "name": "train"}]},
        "spec": {"queueName": "default", "podSets": []},
        "status": {
            "conditions": [{"type": "Admitted", "status": "True"}],
            "admission": {"clusterQueue": "team-0"},
        },
    }
    renewed = at("2026-11-23T19:10:00Z").timestamp()
    for now, stale in ((renewed + 60, False), (renewed + 600, True)):
        capacity = replace(summarize(nodes, (usage(0),)), freshness=freshness(current_copy, lease, now))
        answer = why(
            "train",
            "team-0",
            admitted,
            workloads=[admitted],
            local_queues={("team-0", "default"): "team-0"},
            capacity=capacity,
            pending=[],
        )
        told = as_json(with_freshness(answer, capacity))
        assert ("capacity-stale" in [r["kind"] for r in told["reasons"]]) is stale
        assert told["capacityFreshness"]["state"] == ("stale" if stale else "current")


# A GPU type with two sharing groups, as quotas/render.py writes their flavors and the GPU Operator's nodes advertise
# their slices (sim/sharing.py plays it): a MIG group's node 16 mig-1g.10gb and 8 mig-3g.40gb per 8 GPUs and no whole
# GPU, a time-sliced group's node 4 gpu.shared per GPU.
MIG_1G, MIG_3G, SHARED = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu.shared"
SHARING_FLAVORS = [
    *FLAVORS,
    {
        "metadata": {"name": "h100-mig"},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "H100", "nvidia.com/mig.config": "h100-mig"}},
    },
    {
        "metadata": {"name": "h100-shared"},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "H100", "nvidia.com/device-plugin.config": "h100-shared"}},
    },
]


def sliced_node(name: str, group: str, ready: bool = True) -> dict[str, Any]:
    found = node(name)
    if group == "h100-mig":
        found["metadata"]["labels"]["nvidia.com/mig.config"] = group
        found["status"]["allocatable"] = {"nvidia.com/gpu": "0", MIG_1G: "16", MIG_3G: "8", "cpu": "200"}
    else:
        found["metadata"]["labels"]["nvidia.com/device-plugin.config"] = group
        found["status"]["allocatable"] = {"nvidia.com/gpu": "0", SHARED: "32", "cpu": "200"}
    found["status"]["conditions"][0]["status"] = "True" if ready else "False"
    return found


def slice_pod(name: str, on: str, resource: str, count: int, phase: str = "Running", field: str = "limits") -> Any:
    found = pod(name, on, 0, phase)
    found["spec"]["containers"][0]["resources"] = {field: {resource: str(count), "cpu": "1"}}
    return found


def sharing_queue(team: str, used: dict[str, int]) -> dict[str, Any]:
    """A team's ClusterQueue as quotas/render.py writes it: one resource group, every flavor listing every resource."""
    quota = {("h100", "nvidia.com/gpu"): 8, ("h100-mig", MIG_1G): 8, ("h100-shared", SHARED): 16}
    resources = ["nvidia.com/gpu", MIG_1G, MIG_3G, SHARED]
    return {
        "metadata": {"name": team, "labels": {"konduktor.ai/team": team}},
        "spec": {
            "cohortName": "lab",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", *resources],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": r, "nominalQuota": str(quota.get((flavor, r), 0))} for r in resources
                            ],
                        }
                        for flavor in ("h100", "h100-mig", "h100-shared")
                    ],
                }
            ],
        },
        "status": {
            "flavorsUsage": [
                {"name": flavor, "resources": [{"name": r, "total": str(n)}]} for (flavor, r), n in used.items()
            ]
        },
    }


def sharing_fleet(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], queues: list[dict[str, Any]]) -> Fleet:
    fleet = Fleet()
    fleet.apply(WatchEvent("Node", "SYNC", tuple(slim_node(n) for n in nodes)))
    fleet.apply(WatchEvent("Pod", "SYNC", tuple(slim_pod(p) for p in pods)))
    fleet.apply(WatchEvent("ResourceFlavor", "SYNC", tuple(SHARING_FLAVORS)))
    fleet.apply(WatchEvent("ClusterQueue", "SYNC", tuple(queues)))
    return fleet


def test_slices_are_published_per_sharing_group_and_resource() -> None:
    nodes = [
        node("gpu-0"),
        sliced_node("mig-0", "h100-mig"),
        sliced_node("mig-1", "h100-mig"),
        sliced_node("mig-2", "h100-mig", ready=False),  # out of service: its slices count, none is free
        sliced_node("shared-0", "h100-shared"),
    ]
    pods = [
        slice_pod("a", "mig-0", MIG_1G, 3),
        slice_pod("b", "mig-0", MIG_1G, 2, field="requests"),
        slice_pod("c", "mig-1", MIG_3G, 8),
        slice_pod("d", "shared-0", SHARED, 5),
        slice_pod("done", "mig-1", MIG_1G, 16, phase="Succeeded"),  # holds nothing any more
        pod("whole", "gpu-0", 6),
    ]
    fleet = sharing_fleet(nodes, pods, [sharing_queue("team-a", {("h100-mig", MIG_1G): 5})])
    capacity = fleet.capacity()
    assert [(s.flavor, s.resource, s.nodes, s.total, s.free, s.most_free) for s in capacity.slices] == [
        ("h100-mig", MIG_1G, 3, 48, 11 + 16, 16),
        ("h100-mig", MIG_3G, 3, 24, 8, 8),
        ("h100-shared", SHARED, 1, 32, 27, 27),
    ]
    # The whole GPUs are as before; the queue's rows are its whole GPUs and each slice it has a quota of.
    assert capacity.flavor("h100") is not None and capacity.flavor("h100").free == 2  # type: ignore[union-attr]
    assert [(q.flavor, q.resource, q.nominal, q.used) for q in capacity.queues] == [
        ("h100", "nvidia.com/gpu", 8, 0),
        ("h100-mig", MIG_1G, 8, 5),
        ("h100-shared", SHARED, 16, 0),
    ]
    # A team member reads what the publisher wrote; a full list gives what the watches keep.
    assert from_json(to_json(capacity)) == capacity
    listed = summarize(
        node_capacity(nodes, pods, SHARING_FLAVORS),
        capacity.queues,
        slice_summary(nodes, [s for s in map(running_slices, pods) if s is not None], SHARING_FLAVORS),
    )
    assert listed == capacity

    # A slice pod that finishes changes the content (so the publisher writes); one still pending changes nothing.
    before = revision(capacity)
    fleet.apply(WatchEvent("Pod", "ADDED", (slim_pod(slice_pod("waiting", "", MIG_1G, 4, phase="Pending")),)))
    assert revision(fleet.capacity()) == before
    fleet.apply(WatchEvent("Pod", "DELETED", (slim_pod(slice_pod("a", "mig-0", MIG_1G, 3, phase="Succeeded")),)))
    assert fleet.capacity().slices[0].free == 11 + 3 + 16 and revision(fleet.capacity()) != before


def test_a_cluster_without_sharing_publishes_what_it_did_before() -> None:
    capacity = summarize(fleet_nodes(10), (usage(0),))
    assert capacity.slices == () and "slices" not in json.loads(to_json(capacity))


def test_the_published_slices_do_not_grow_with_the_nodes() -> None:
    def published(count: int) -> str:
        nodes = [sliced_node(f"mig-{i:05d}", "h100-mig") for i in range(count)]
        nodes += [sliced_node(f"shared-{i:05d}", "h100-shared") for i in range(count)]
        pods = [slice_pod(f"p{i}", f"mig-{i:05d}", MIG_1G, i % 17) for i in range(count)]
        queues = [sharing_queue(f"team-{t}", {("h100-mig", MIG_1G): t}) for t in range(20)]
        return to_json(sharing_fleet(nodes, pods, queues).capacity())

    small, large = published(100), published(2_000)
    assert len(json.loads(large)["slices"]) == len(json.loads(small)["slices"]) == 3
    # Twenty times the nodes only lengthens a few numbers.
    assert len(large) - len(small) < 100 and len(large) < 16 * 1024
