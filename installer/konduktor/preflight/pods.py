"""Node checks from a pod on each GPU node (config `preflight.nodes.pod`): the Job, and reading what it printed.

The pod runs `konduktor-install preflight-node --in-host-namespaces`: the same node checks as over SSH, run in
the node's namespaces (`konduktor.preflight.host_namespaces`), printed as the JSON report. It needs no SSH
account or key and no GPU; it needs root, privileged and hostPID to enter the node's namespaces. Pure: the
caller (`konduktor.ops.preflight_pods`) creates the Jobs and reads the logs through `konduktor.kube`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from konduktor.burnin.manifests import (
    MANAGED_BY_LABEL,
    NODE_ANNOTATION,
    NODE_LABEL,
    PRIVILEGES_ANNOTATION,
    Manifest,
    dns_name,
    label_value,
    pin_to_hostnames,
    taint_tolerations,
)
from konduktor.preflight.node import NodeExpectations, unreachable
from konduktor.preflight.results import Check, Status
from konduktor.vocabulary import GPU_RESOURCE, HEALTH_TAINT_KEY

NAME = "konduktor-preflight"  # app.kubernetes.io/name of the Jobs and their pods
SERVICE_ACCOUNT = "konduktor-preflight"  # installed by konduktor-core; may tolerate the health taint
RUN_LABEL = "konduktor.ai/preflight-run"
CONTAINER = "node-checks"
HOST_ROOT = "/host"
# Pulling the konduktor image on a node that does not have it, then a dozen commands of a few seconds each.
DEADLINE_S = 300
TTL_AFTER_FINISHED_S = 3600  # an hour to read a pod's log by hand
PRIVILEGES = (
    "runs the node checks (driver, nvidia-smi, ECC, IB ports, time sync, disk) in the node's own namespaces with "
    "nsenter into PID 1, which needs root, privileged and hostPID; it only reads, requests no GPU, and has no "
    "API token"
)


@dataclass(frozen=True)
class PodTarget:
    """One GPU node to check from a pod."""

    node: str
    hostname: str | None  # kubernetes.io/hostname, which the Job's node affinity matches
    taints: tuple[Mapping[str, str], ...]
    expect: NodeExpectations


def privileges_note() -> str:
    """Why the pod is privileged, in the annotation burn-in pods carry too."""
    return json.dumps({CONTAINER: PRIVILEGES})


def job_name(run_id: str, node: str) -> str:
    return dns_name("kp", run_id, node, unique=f"{run_id}/{node}")


def node_check_command(node: str, expect: NodeExpectations) -> list[str]:
    command = ["konduktor-install", "preflight-node", "--in-host-namespaces", "--node", node, "-o", "json"]
    if expect.gpus is not None:
        command += ["--gpus", str(expect.gpus)]
    return command + (["--rdma"] if expect.rdma else [])


def node_check_tolerations(taints: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """The node's own taints, the GPU taint, and the health taint only where the node carries it: the admission
    policy lets only konduktor's own service accounts tolerate that taint, so a preflight from another namespace
    still runs on every healthy node."""
    quarantined = any(t.get("key") == HEALTH_TAINT_KEY for t in taints)
    health = [{"key": HEALTH_TAINT_KEY, "operator": "Exists"}] if quarantined else []
    return [{"key": GPU_RESOURCE, "operator": "Exists"}, *health, *taint_tolerations(taints)]


def node_check_job(
    run_id: str, target: PodTarget, image: str, namespace: str, service_account: str | None = None
) -> Manifest:
    """The Job that checks one node: pinned to it, tolerating its taints, privileged with hostPID."""
    labels = {
        MANAGED_BY_LABEL: "konduktor",
        "app.kubernetes.io/name": NAME,
        "app.kubernetes.io/component": "node-preflight",
        RUN_LABEL: run_id,
        NODE_LABEL: label_value(target.node),
    }
    container = {
        "name": CONTAINER,
        "image": image,
        "command": node_check_command(target.node, target.expect),
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {
            "privileged": True,
            "allowPrivilegeEscalation": True,  # the API refuses false with privileged
            "runAsUser": 0,
            "readOnlyRootFilesystem": True,
        },
        "volumeMounts": [
            {"name": "host", "mountPath": HOST_ROOT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostPID": True,  # PID 1 is then the node's init, whose namespaces the checks enter
        "automountServiceAccountToken": False,  # the checks never talk to the API server
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 10,
        "tolerations": node_check_tolerations(target.taints),
        "affinity": {"nodeAffinity": pin_to_hostnames([target.hostname or target.node])},
        "containers": [container],
        "volumes": [
            # The node's root, read-only, as node-debug pods mount it: the checks read through nsenter, and this
            # is where an operator looks at the node's files from the pod without entering its namespaces.
            {"name": "host", "hostPath": {"path": "/", "type": "Directory"}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if service_account:
        pod["serviceAccountName"] = service_account
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(run_id, target.node),
            "namespace": namespace,
            "labels": labels,
            "annotations": {NODE_ANNOTATION: target.node},
        },
        "spec": {
            "backoffLimit": 0,  # the checks only read: a second attempt would say the same
            "activeDeadlineSeconds": DEADLINE_S,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "template": {
                "metadata": {"labels": labels, "annotations": {PRIVILEGES_ANNOTATION: privileges_note()}},
                "spec": pod,
            },
        },
    }


# --------------------------------------------------------------------------------------------
# What the pod printed.


class UnreadableReport(ValueError):
    """The pod's log holds no node report that can be read."""


def read_node_report(log: str, node: str) -> list[Check]:
    """The checks of the report a preflight pod printed (`preflight-node -o json`), as checks of `node`.

    Kubernetes serves stdout and stderr as one log, so the report is found as the first JSON object in it that
    has a list of checks; a warning printed before or after it does not hide it.
    """
    decoder = json.JSONDecoder()
    for start in [i for i, char in enumerate(log) if char == "{" and (i == 0 or log[i - 1] == "\n")]:
        try:
            report, _ = decoder.raw_decode(log, start)
        except json.JSONDecodeError:
            continue
        if isinstance(report, dict) and isinstance(report.get("checks"), list):
            if not report["checks"]:
                raise UnreadableReport("the pod's report lists no checks")
            return [_check(item, node) for item in report["checks"]]
    first = log.strip().splitlines()[0][:200] if log.strip() else ""
    raise UnreadableReport(f"no node report in the pod's log, which starts: {first}")


def _check(item: Any, node: str) -> Check:
    try:
        evidence = item.get("evidence") or []
        hint = item.get("hint")
        if not all(isinstance(e, str) for e in evidence) or not isinstance(hint, str | None):
            raise TypeError("evidence and hint must be text")
        return Check(str(item["name"]), Status(item["status"]), str(item["summary"]), node, tuple(evidence), hint)
    except (AttributeError, KeyError, TypeError, ValueError) as problem:
        raise UnreadableReport(f"a check in the pod's report cannot be read ({problem}): {item!r:.200}") from None


def no_result(node: str, reasons: Sequence[str], namespace: str, job: str) -> list[Check]:
    """A node whose pod gave no readable report: `host-reachable` FAILs with why, the other checks are SKIPPED."""
    summary = "no result from the preflight pod"
    hint = f"kubectl -n {namespace} describe job {job}; kubectl -n {namespace} logs job/{job}"
    return unreachable(node, summary, reasons, hint, skipped=summary)
