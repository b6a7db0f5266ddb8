"""The Kueue workloads on a node, and the writes that requeue them and tell their owners.

Requeueing uses the lever `kubectl kueue stop/resume workload` uses (docs/design/kueue.md#requeue-by-deactivation):
spec.active=false makes Kueue evict the Workload (reason Deactivated: the job is suspended, its pods deleted, its
quota released), and spec.active=true once that is done sets Requeued=True (Reactivated). The queue order of a
reactivated Workload is its creation time, so it keeps its place; the quota it is charged to does not change. This
works for every workload, unlike Kueue's own node replacement, which only covers TAS workloads and waits for the
pods on a NoSchedule-tainted node to stop by themselves (docs/design/kueue.md#node-failures), which a hung job on a
dead GPU never does.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from konduktor.gpu.pod import pod_gpus
from konduktor.health.affected import AffectedWorkload, ObjectRef, RequeuingWorkload
from konduktor.health.decide import DeactivateWorkload, ReactivateWorkload, TellOwner
from konduktor.health.fanout import at_once
from konduktor.health.health_view import gpu_pods
from konduktor.health.node_writes import FIELD_MANAGER, object_event
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.conditions import is_true
from konduktor.vocabulary import KUEUE_API, REQUEUE_LABEL, REQUEUE_REASON

_FINISHED = ("Succeeded", "Failed")


def workloads_on(kube: Kube, nodes: Iterable[str], concurrency: int = 1) -> dict[str, list[AffectedWorkload]]:
    """The Workloads with unfinished pods on each node, with the labels their opt-out is read from.

    Each node's pods are one list request; a burst of quarantines reads `concurrency` nodes at once rather than
    waiting on one round trip after another."""
    names = sorted(set(nodes))

    def unfinished_pods(node: str) -> list[dict[str, Any]]:
        listed = kube.list("v1", "Pod", field_selector=f"spec.nodeName={node}")
        return [p for p in listed if p.get("status", {}).get("phase") not in _FINISHED]

    pods_by_node = dict(zip(names, at_once(unfinished_pods, names, concurrency), strict=True))
    found: dict[str, list[AffectedWorkload]] = {}
    workloads: dict[str, list[dict[str, Any]]] = {}  # per namespace, read once
    for node in names:
        pods = pods_by_node[node]
        by_workload: dict[tuple[str, str], list[str]] = {}
        gpus: dict[tuple[str, str], int] = {}
        objects: dict[tuple[str, str], dict[str, Any]] = {}
        for pod in pods:
            namespace = pod["metadata"]["namespace"]
            if namespace not in workloads:
                workloads[namespace] = kube.list(KUEUE_API, "Workload", namespace)
            workload = _workload_of(kube, pod, workloads[namespace])
            if workload is not None:
                key = (namespace, workload["metadata"]["name"])
                by_workload.setdefault(key, []).append(pod["metadata"]["name"])
                gpus[key] = gpus.get(key, 0) + pod_gpus(pod.get("spec", {}))
                objects[key] = workload
        found[node] = [
            _affected(kube, node, objects[key], sorted(names), gpus[key]) for key, names in sorted(by_workload.items())
        ]
    return found


def gpu_pods_on(kube: Kube, node: str, skip_namespaces: Iterable[str] = ()) -> list[str]:
    """namespace/name of the unfinished pods on the node that hold GPUs (`health_view.gpu_pods`)."""
    return gpu_pods(kube.list("v1", "Pod", field_selector=f"spec.nodeName={node}"), skip_namespaces)


def requeuing(kube: Kube) -> list[RequeuingWorkload]:
    """The Workloads this controller deactivated and has not reactivated yet."""
    return [
        RequeuingWorkload(
            namespace=w["metadata"]["namespace"],
            name=w["metadata"]["name"],
            node=(w["metadata"].get("annotations", {}).get(REQUEUE_REASON) or "").partition(" on ")[2].split(" ")[0],
            active=w.get("spec", {}).get("active", True) is not False,
            quota_reserved=is_true(w, "QuotaReserved"),
        )
        for w in kube.list(KUEUE_API, "Workload", label_selector=f"{REQUEUE_LABEL}=true")
    ]


def deactivate(kube: Kube, action: DeactivateWorkload) -> None:
    patch = {
        "metadata": {"labels": {REQUEUE_LABEL: "true"}, "annotations": {REQUEUE_REASON: action.reason}},
        "spec": {"active": False},
    }
    kube.patch(KUEUE_API, "Workload", action.name, patch, action.namespace, field_manager=FIELD_MANAGER)


def reactivate(kube: Kube, action: ReactivateWorkload) -> None:
    patch = {
        "metadata": {"labels": {REQUEUE_LABEL: None}, "annotations": {REQUEUE_REASON: None}},
        "spec": {"active": True},
    }
    kube.patch(KUEUE_API, "Workload", action.name, patch, action.namespace, field_manager=FIELD_MANAGER)


def tell_owner(kube: Kube, action: TellOwner, component: str, instance: str, now: float | None = None) -> None:
    for obj in action.objects:
        when = time.time() if now is None else now
        kube.create(owner_event(action, obj, component, instance, when), field_manager=FIELD_MANAGER)


def owner_event(action: TellOwner, obj: ObjectRef, component: str, instance: str, now: float) -> dict[str, Any]:
    involved = {"apiVersion": obj.api_version, "kind": obj.kind, "name": obj.name, "namespace": action.namespace}
    if obj.uid:
        involved["uid"] = obj.uid
    return object_event(
        involved, action.namespace, action.event_type, action.reason, action.message, component, instance, now
    )


def _workload_of(kube: Kube, pod: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The Workload owning the pod's owner, or its owner's owner (a JobSet's Jobs, a PyTorchJob's pods)."""
    owners = {w_owner["uid"]: w for w in candidates for w_owner in w["metadata"].get("ownerReferences", [])}
    owner = _controller(pod)
    for _ in range(2):
        if owner is None:
            return None
        if owner["uid"] in owners:
            return owners[owner["uid"]]
        parent = _get(kube, owner["apiVersion"], owner["kind"], owner["name"], pod["metadata"]["namespace"])
        owner = _controller(parent) if parent else None
    return None


def _affected(kube: Kube, node: str, workload: dict[str, Any], pods: list[str], gpus: int) -> AffectedWorkload:
    meta = workload["metadata"]
    namespace = meta["namespace"]
    owner_ref = _controller(workload) or next(iter(meta.get("ownerReferences", [])), None)
    owner = None
    if owner_ref is not None:
        owner = ObjectRef(owner_ref["apiVersion"], owner_ref["kind"], owner_ref["name"], owner_ref["uid"])
    owner_obj = _get(kube, owner.api_version, owner.kind, owner.name, namespace) if owner else None
    namespace_obj = _get(kube, "v1", "Namespace", namespace, None)
    return AffectedWorkload(
        namespace=namespace,
        name=meta["name"],
        node=node,
        pods=tuple(pods),
        uid=meta.get("uid", ""),
        owner=owner,
        owner_labels=(owner_obj or {}).get("metadata", {}).get("labels", {}),
        namespace_labels=(namespace_obj or {}).get("metadata", {}).get("labels", {}),
        active=workload.get("spec", {}).get("active", True) is not False,
        gpus=gpus,
    )


def _controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((o for o in obj["metadata"].get("ownerReferences", []) if o.get("controller")), None)


def _get(kube: Kube, api_version: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
    try:
        return kube.get(api_version, kind, name, namespace)
    except ApiError:
        # A kind the controller may not read: the opt-out on that owner cannot be seen; its namespace's still can.
        return None
