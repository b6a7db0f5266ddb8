"""The reads and writes of giving back the quota of a workload whose pods are refused (konduktor.health.refused
decides): the jobs' FailedCreate Events matched to their Workloads, and the deactivation with its Events."""

from __future__ import annotations

import time
from typing import Any

from konduktor.health.node_writes import FIELD_MANAGER, object_event
from konduktor.health.refused import (
    FAILED_CREATE,
    PODS_REFUSED_EVENT,
    GiveBack,
    RefusedCreate,
    admission_refusal,
    event_count,
    event_time,
)
from konduktor.kube.client import ApiError, Kube
from konduktor.vocabulary import KUEUE_API, PODS_REFUSED_LABEL, PODS_REFUSED_REASON

ANNOTATION_LIMIT = 1024  # a refusal names every broken field; the annotation keeps its start


def refused_creates(kube: Kube) -> tuple[list[dict[str, Any]], list[RefusedCreate]]:
    """Every FailedCreate Event that admission caused, matched to the Workload of its job (the job is the Workload's
    owner, a Job or a training job, or owned by it, a JobSet's Jobs), and the Workloads of the namespaces where such
    Events are. Only those namespaces' Workloads are read: a busy fleet has thousands, and this runs on every poll."""
    refusals = [
        (event, reason)
        for event in kube.list("v1", "Event", field_selector=f"reason={FAILED_CREATE},type=Warning")
        if (reason := admission_refusal(str(event.get("message", "")))) is not None
        and (event.get("involvedObject") or {}).get("uid")
    ]
    namespaces = sorted({event["metadata"].get("namespace", "") for event, _ in refusals})
    workloads = [workload for namespace in namespaces for workload in kube.list(KUEUE_API, "Workload", namespace)]
    by_owner = {
        owner["uid"]: workload for workload in workloads for owner in workload["metadata"].get("ownerReferences", [])
    }
    found = []
    parents: dict[str, str | None] = {}
    for event, reason in refusals:
        involved = event["involvedObject"]
        workload = by_owner.get(involved["uid"])
        if workload is None:
            if involved["uid"] not in parents:
                parents[involved["uid"]] = _controller_uid(kube, involved, event["metadata"].get("namespace"))
            workload = by_owner.get(parents[involved["uid"]] or "")
        if workload is None:
            continue
        meta = workload["metadata"]
        found.append(
            RefusedCreate(meta.get("namespace", ""), meta["name"], reason, event_count(event), event_time(event))
        )
    return workloads, found


def _controller_uid(kube: Kube, involved: dict[str, Any], namespace: str | None) -> str | None:
    try:
        obj = kube.get(involved.get("apiVersion", ""), involved.get("kind", ""), involved.get("name", ""), namespace)
    except ApiError:
        return None  # a kind the controller may not read
    owners = (obj or {}).get("metadata", {}).get("ownerReferences", [])
    return next((str(o["uid"]) for o in owners if o.get("controller")), None)


def give_back(kube: Kube, action: GiveBack, component: str, instance: str, now: float | None = None) -> None:
    """Deactivate the Workload with the refusal on it, and tell the job's owner in an Event."""
    patch = {
        "metadata": {
            "labels": {PODS_REFUSED_LABEL: "true"},
            "annotations": {PODS_REFUSED_REASON: action.reason[:ANNOTATION_LIMIT]},
        },
        "spec": {"active": False},
    }
    kube.patch(KUEUE_API, "Workload", action.name, patch, action.namespace, field_manager=FIELD_MANAGER)
    when = time.time() if now is None else now
    involved = [{"apiVersion": KUEUE_API, "kind": "Workload", "name": action.name, "namespace": action.namespace}]
    if action.owner is not None:
        involved.insert(0, {**action.owner, "namespace": action.namespace})
    for obj in involved:
        kube.create(
            object_event(
                obj, action.namespace, "Warning", PODS_REFUSED_EVENT, action.message, component, instance, when
            ),
            field_manager=FIELD_MANAGER,
        )
