"""Planning a sync of owned objects: what is created, updated, left alone, pruned or kept."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Sim

from konduktor.errors import PartialApply
from konduktor.kube.sync import (
    ADOPTED_ANNOTATION,
    Change,
    Ref,
    ValueChange,
    comparable,
    differing_fields,
    plan,
    sync,
    value_changes,
)


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


def flavored(name: str, gpus: str, cpus: str = "64") -> dict[str, Any]:
    resources = [{"name": "cpu", "nominalQuota": cpus}, {"name": "nvidia.com/gpu", "nominalQuota": gpus}]
    queue = cq(name, gpus)
    queue["spec"]["resourceGroups"][0]["flavors"] = [{"name": "h100", "resources": resources}]
    return queue


def test_an_update_names_each_value_it_changes_old_and_new() -> None:
    """A quota change of 20 -> 24 shows the numbers, with list items named as Kueue names them."""
    [change] = plan([(flavored("team-a", "24"), flavored("team-a", "20"), flavored("team-a", "24"))], [], prune=True)
    path = "spec.resourceGroups[0].flavors[h100].resources[nvidia.com/gpu].nominalQuota"
    assert change.values == (ValueChange(path, "20", "24"),)
    assert change.describe().splitlines() == [
        "update    ClusterQueue team-a (spec.resourceGroups)",
        f"    {path}: 20 -> 24",
    ]
    assert change.as_json()["values"] == [{"path": path, "old": "20", "new": "24"}]


def test_value_changes_of_added_removed_and_reshaped_values() -> None:
    assert value_changes({"a": {"b": 1}}, {"a": {"c": 2}}) == [ValueChange("a.b", 1, None), ValueChange("a.c", None, 2)]
    # a flavor added: the new item is the value, under its name
    before, after = {"f": [{"name": "x", "q": 1}]}, {"f": [{"name": "x", "q": 1}, {"name": "y", "q": 2}]}
    assert value_changes(before, after) == [ValueChange("f[y]", None, {"name": "y", "q": 2})]
    # unnamed lists of another length change as a whole
    assert value_changes({"l": [1]}, {"l": [1, 2]}) == [ValueChange("l", [1], [1, 2])]
    assert ValueChange("l", [1], None).describe() == "l: [1] -> (absent)"
    assert value_changes({"a": 1}, {"a": 1}) == []


def test_without_prune_dropped_objects_are_kept() -> None:
    changes = plan([], [cq("dropped", "2")], prune=False)
    assert changes == [Change("keep", Ref("kueue.x-k8s.io/v1beta2", "ClusterQueue", "dropped"))]


def test_differing_fields_names_nested_keys() -> None:
    assert differing_fields({"spec": {"a": 1, "b": 2}, "kind": "X"}, {"spec": {"a": 1, "b": 3}, "kind": "X"}) == [
        "spec.b"
    ]


OURS = {"app.kubernetes.io/managed-by": "konduktor", "konduktor.ai/config": "prod"}


def namespace(name: str, labels: dict[str, str] | None = None, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def test_an_object_of_another_manager_or_config_is_refused_and_names_its_owner() -> None:
    argo = namespace("team-c", {"app.kubernetes.io/managed-by": "argocd", "konduktor.ai/config": "other-cluster"})
    other_config = namespace("team-d", {**OURS, "konduktor.ai/config": "staging"})
    by_hand = namespace("team-e")
    desired = [
        (namespace(n, OURS), live, None)
        for n, live in (("team-c", argo), ("team-d", other_config), ("team-e", by_hand))
    ]
    changes = plan(desired, [], prune=True, owner=OURS)
    assert [(c.action, c.ref.name) for c in changes] == [
        ("refuse", "team-c"),
        ("refuse", "team-d"),
        ("refuse", "team-e"),
    ]
    assert "app.kubernetes.io/managed-by=argocd, konduktor.ai/config=other-cluster" in changes[0].note
    assert "konduktor.ai/config=staging" in changes[1].note
    assert "no owner labels" in changes[2].note
    assert "--adopt Namespace/team-c" in changes[0].describe()


def test_only_the_named_object_is_adopted() -> None:
    argo = namespace("team-c", {"app.kubernetes.io/managed-by": "argocd"})
    desired = [(namespace("team-c", OURS), argo, None), (namespace("team-e", OURS), namespace("team-e"), None)]
    changes = plan(desired, [], prune=True, owner=OURS, adopt=["namespace/team-c"])
    assert [(c.action, c.ref.name) for c in changes] == [("adopt", "team-c"), ("refuse", "team-e")]
    assert changes[0].note == "taken over from app.kubernetes.io/managed-by=argocd"


def test_an_adopted_object_is_ours_to_update_but_never_pruned() -> None:
    was_adopted = namespace("team-c", OURS, **{ADOPTED_ANNOTATION: "app.kubernetes.io/managed-by=argocd"})
    desired = [(was_adopted, was_adopted, was_adopted)]
    assert [c.action for c in plan(desired, [was_adopted], prune=True, owner=OURS)] == ["unchanged"]
    adopted_queue = cq("old", "2", labels=OURS, annotations={ADOPTED_ANNOTATION: "no owner labels"})
    changes = plan([], [adopted_queue, cq("ours", "2", labels=OURS)], prune=True, owner=OURS)
    assert [(c.action, c.ref.name) for c in changes] == [("keep", "old"), ("prune", "ours")]
    assert "never deleted" in changes[0].note


@pytest.mark.sim
def test_a_sync_writes_one_kind_after_the_other_and_names_what_it_did_when_a_write_fails(sim: Sim) -> None:
    """Objects of one kind are written together, and a kind only once the kinds before it are written: the
    namespaces exist when the objects in them are applied. A refused write stops the sync after its kind, and
    PartialApply names every change that was made."""
    kube, kinds = sim.kube, [("v1", "Namespace"), ("v1", "ConfigMap")]
    names = [f"konduktor-sync-order-{i}" for i in range(12)]
    maps = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "namespace": n, "labels": OURS}}
        for n in names
    ]
    try:
        changes = sync(kube, [*(namespace(n, OURS) for n in names), *maps], kinds, OURS)
        assert [c.action for c in changes] == ["create"] * 24
        assert all(kube.get("v1", "ConfigMap", "m", n) is not None for n in names)

        stray = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "namespace": "no-such-ns"}}
        extra = namespace("konduktor-sync-order-extra", OURS)
        with pytest.raises(PartialApply, match="stopped after 1 of 2 changes") as stopped:
            sync(kube, [*(namespace(n, OURS) for n in names), extra, *maps, stray], kinds, OURS)
        assert stopped.value.detail == "create    Namespace konduktor-sync-order-extra"
        assert kube.get("v1", "Namespace", "konduktor-sync-order-extra") is not None
    finally:
        for name in [*names, "konduktor-sync-order-extra"]:
            if kube.get("v1", "Namespace", name) is not None:
                kube.delete("v1", "Namespace", name)
