"""Planning a sync of owned objects: what is created, updated, left alone, pruned or kept."""

from __future__ import annotations

from typing import Any

from konduktor.kube.sync import Change, Ref, comparable, differing_fields, plan


def cq(name: str, gpus: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, **meta},
        "spec": {"resourceGroups": [{"flavors": [{"resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]},
    }


def test_server_fields_and_status_do_not_count_as_changes() -> None:
    live = cq("a", "16", resourceVersion="7", uid="x", managedFields=[{}])
    live["status"] = {"pendingWorkloads": 3}
    assert comparable(live) == comparable(cq("a", "16"))


def test_plan_classifies_every_object() -> None:
    desired = [
        (cq("new", "8"), None, cq("new", "8")),
        (cq("same", "8"), cq("same", "8", resourceVersion="1"), cq("same", "8", resourceVersion="1")),
        (cq("lowered", "4"), cq("lowered", "8"), cq("lowered", "4")),
    ]
    team_ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-gone"}}
    owned = [cq("same", "8"), cq("dropped", "2"), team_ns]
    changes = plan(desired, owned, prune=True)
    assert [(c.action, c.ref.name) for c in changes] == [
        ("create", "new"),
        ("unchanged", "same"),
        ("update", "lowered"),
        ("prune", "dropped"),
        ("keep", "team-gone"),  # namespaces are never deleted: they hold the team's workloads
    ]
    assert changes[2].fields == ("spec.resourceGroups",)


def test_without_prune_dropped_objects_are_kept() -> None:
    changes = plan([], [cq("dropped", "2")], prune=False)
    assert changes == [Change("keep", Ref("kueue.x-k8s.io/v1beta2", "ClusterQueue", "dropped"))]


def test_differing_fields_names_nested_keys() -> None:
    assert differing_fields({"spec": {"a": 1, "b": 2}, "kind": "X"}, {"spec": {"a": 1, "b": 3}, "kind": "X"}) == [
        "spec.b"
    ]
