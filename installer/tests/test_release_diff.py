"""What an upgrade would change in a release, object by object, and the exit code `plan` gives for it (pure)."""

from __future__ import annotations

from typing import Any

from konduktor.errors import ExitCode
from konduktor.helm.diff import release_changes
from konduktor.helm.release import Release
from konduktor.kube.sync import Change, Ref
from konduktor.ops.plan import plan_code


def config_map(name: str, data: dict[str, str], namespace: str | None = "konduktor-system") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"app": "konduktor"}}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def secret(data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "receivers", "namespace": "ns"}, "data": data}


def test_the_same_objects_in_another_order_with_keys_reordered_change_nothing() -> None:
    first, second = config_map("a", {"x": "1", "y": "2"}), config_map("b", {"z": "3"})
    reordered = {"data": {"y": "2", "x": "1"}, "metadata": first["metadata"], "kind": "ConfigMap", "apiVersion": "v1"}
    assert release_changes([first, second], [second, reordered]) == []


def test_added_removed_and_changed_objects_each_with_a_diff() -> None:
    kept = config_map("kept", {"a": "1"})
    settings = config_map("settings", {"settings.yaml": "breaker:\n  max_nodes: 20\ndry_run: false\n"})
    edited = config_map("settings", {"settings.yaml": "breaker:\n  max_nodes: 7\ndry_run: false\n"})
    gone, new = config_map("gone", {}), config_map("cluster-wide", {}, namespace=None)
    changes = release_changes([kept, settings, gone], [edited, kept, new])
    assert [(c.action, c.kind, c.namespace, c.name) for c in changes] == [
        ("add", "ConfigMap", None, "cluster-wide"),
        ("remove", "ConfigMap", "konduktor-system", "gone"),
        ("change", "ConfigMap", "konduktor-system", "settings"),
    ]
    added, removed, changed = changes
    # A multi-line value is diffed line by line, so the one line that differs is what shows.
    assert [line for line in changed.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        "-      max_nodes: 20",
        "+      max_nodes: 7",
    ]
    assert "+name: cluster-wide" not in added.diff and "+  name: cluster-wide" in added.diff
    assert all(line.startswith(("-", "@@")) for line in removed.diff.splitlines()[2:])
    assert changed.describe() == "change    ConfigMap konduktor-system/settings"
    assert added.as_json() == {
        "action": "add",
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "namespace": None,
        "name": "cluster-wide",
        "diff": added.diff,
    }


def test_a_new_api_version_of_the_same_object_is_a_change() -> None:
    old = {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "p", "namespace": "n"}}
    new = {**old, "apiVersion": "policy/v1"}
    [change] = release_changes([old], [new])
    assert change.action == "change" and change.api_version == "policy/v1"
    assert "-apiVersion: policy/v1beta1" in change.diff and "+apiVersion: policy/v1" in change.diff


def test_secret_values_never_show_only_which_keys_change() -> None:
    before = secret({"slack": "c2VjcmV0LW9uZQ==", "pager": "a2VlcA==", "gone": "eA=="})
    after = secret({"slack": "c2VjcmV0LXR3bw==", "pager": "a2VlcA==", "new": "eQ=="})
    [change] = release_changes([before], [after])
    for value in ("c2VjcmV0LW9uZQ==", "c2VjcmV0LXR3bw==", "a2VlcA==", "eA==", "eQ=="):
        assert value not in change.diff
    lines = change.diff.splitlines()
    assert "-  slack: (hidden, 10 bytes)" in lines and "+  slack: (hidden, 10 bytes, changed)" in lines
    assert "-  gone: (hidden, 1 bytes)" in lines and "+  new: (hidden, 1 bytes, changed)" in lines
    assert "   pager: (hidden, 4 bytes)" in lines  # unchanged: context, neither removed nor added
    assert release_changes([before], [dict(before)]) == []
    [added] = release_changes([], [after])
    assert "c2VjcmV0LXR3bw==" not in added.diff and "+  slack: (hidden, 10 bytes)" in added.diff.splitlines()


def test_plan_exits_1_while_up_would_install_upgrade_or_finish_the_release_and_3_when_it_would_refuse() -> None:
    deployed = Release("konduktor", "konduktor-system", 3, "deployed", "konduktor-core")
    interrupted = Release("konduktor", "konduktor-system", 4, "pending-upgrade", "konduktor-core")
    [changed] = release_changes([config_map("a", {"x": "1"})], [config_map("a", {"x": "2"})])
    queue = Ref("kueue.x-k8s.io/v1beta2", "ClusterQueue", "team-a")
    assert plan_code(deployed, [], []) == ExitCode.OK
    assert plan_code(None, [], []) == ExitCode.NEGATIVE
    assert plan_code(interrupted, [], []) == ExitCode.NEGATIVE
    assert plan_code(deployed, [changed], []) == ExitCode.NEGATIVE
    assert plan_code(deployed, [], [Change("update", queue, ("spec",))]) == ExitCode.NEGATIVE
    assert plan_code(deployed, [changed], [Change("refuse", queue, note="owned by argocd")]) == ExitCode.CHECK_FAILED
