"""A GPU lost under running work: which workload on the node held it, and what becomes of each one there.

The NVIDIA device plugin withdraws a GPU from the node's allocatable when NVML reports a critical Xid on it (every
Xid but the application ones it skips, `DEVICE_PLUGIN_SKIPPED_XIDS`). The workload whose pod held that GPU has
usually crashed or hangs; the others on the node run on GPUs that are still fine. The DCGM exporter, with its
Kubernetes pod mapping on, labels each GPU's series with the pod, namespace and container that hold the GPU (it reads
the kubelet's pod-resources API), so its Xid series names the holder of the GPU that took the Xid
(docs/design/gpu-loss.md has the upstream sources).

Pure: the watch loop reads the series (health/prometheus.py) and the workloads (health/workloads.py);
`judge_lost_gpu` decides, per workload, which affected-work policy applies and why, in words for its owner:

| what is known | the workload | policy |
|---|---|---|
| DCGM names the pods that held the lost GPUs | holds one of them | `unusable` (requeue) |
| | holds none | `degraded` (drain) |
| DCGM shows the lost GPUs held by no pod | any | `degraded` |
| not known (no Prometheus, no pod labels, fewer GPUs shown than lost) | the only one holding GPUs there | `unusable` |
| | one of several holding GPUs there | `lost_gpu_unattributed` (requeue) |
| any | holds no GPU there | `degraded` |
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from konduktor.gpu.catalog import APPLICATION_XIDS
from konduktor.health.affected import AffectedWorkload
from konduktor.health.settings import AffectedWorkSettings, WorkPolicy

# k8s-device-plugin's hard-coded list of Xids that leave a GPU healthy (internal/rm/health.go): the application
# Xids, and 109 (context switch timeout) in its current releases. Operators can skip more (DP_DISABLE_HEALTHCHECKS);
# an Xid they skipped that DCGM reports still names a GPU as lost here, which errs towards requeueing its holder.
DEVICE_PLUGIN_SKIPPED_XIDS = APPLICATION_XIDS | {109}

Basis = Literal["holder", "elsewhere", "idle", "sole", "unattributed", "no-gpu"]


@dataclass(frozen=True)
class LostGpu:
    """A GPU of the node on which DCGM showed an Xid the device plugin withdraws GPUs for, and the pods that DCGM's
    series of it named (namespace, pod) in the window read."""

    gpu: str
    code: int
    holders: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Attribution:
    """What the DCGM exporter's series of one node say around a GPU loss."""

    lost: tuple[LostGpu, ...]
    mapped: bool  # some series of the node names a pod: the exporter's Kubernetes pod mapping is on


@dataclass(frozen=True)
class Judgement:
    """The policy for one workload on a node that lost GPUs, the rule that chose it, and why, in plain words."""

    policy: WorkPolicy
    basis: Basis
    why: str


WorkloadKey = tuple[str, str]  # namespace, name


def is_device_plugin_xid(code: int) -> bool:
    """Whether the device plugin marks a GPU unhealthy (withdraws it from allocatable) for this Xid."""
    return code > 0 and code not in DEVICE_PLUGIN_SKIPPED_XIDS


def known(attribution: Attribution | None, missing: int) -> bool:
    """Whether DCGM's series say which GPUs were lost and who held them: the pod mapping is on and at least as many
    GPUs show a device-plugin Xid as are missing from allocatable."""
    return attribution is not None and attribution.mapped and len(attribution.lost) >= max(missing, 1)


def judge_lost_gpu(
    work: Sequence[AffectedWorkload], missing: int, attribution: Attribution | None, settings: AffectedWorkSettings
) -> dict[WorkloadKey, Judgement]:
    """Each workload's policy on a node that is `missing` GPUs from its allocatable. `attribution` is None where no
    Prometheus is configured or it could not be read."""
    judged: dict[WorkloadKey, Judgement] = {}
    holding = [w for w in work if w.gpus > 0 and w.active]
    for workload in work:
        key = (workload.namespace, workload.name)
        if workload.gpus <= 0:
            judged[key] = Judgement(settings.degraded, "no-gpu", "It holds no GPU on that node.")
        elif attribution is not None and known(attribution, missing):
            judged[key] = _attributed(workload, attribution, settings)
        elif len(holding) == 1:
            judged[key] = Judgement(
                settings.unusable,
                "sole",
                f"Which pod held the lost GPU is not known ({_unknown_because(attribution)}); this is the only "
                "workload holding GPUs on that node, so it is taken to be the one.",
            )
        else:
            judged[key] = Judgement(
                settings.lost_gpu_unattributed,
                "unattributed",
                f"Which pod held the lost GPU is not known ({_unknown_because(attribution)}); {len(holding)} "
                "workloads hold GPUs on that node and any of them may have. A job on a lost GPU has usually crashed "
                "or hangs." + _unattributed_advice(settings.lost_gpu_unattributed),
            )
    return judged


def _attributed(workload: AffectedWorkload, attribution: Attribution, settings: AffectedWorkSettings) -> Judgement:
    pods = {(workload.namespace, pod) for pod in workload.pods}
    for lost in attribution.lost:
        held = sorted(pods & set(lost.holders))
        if held:
            return Judgement(
                settings.unusable,
                "holder",
                f"DCGM names its pod {held[0][1]} as the holder of GPU {lost.gpu}, which the device plugin withdrew "
                f"after Xid {lost.code}.",
            )
    others = sorted({holder for lost in attribution.lost for holder in lost.holders})
    gpus = ", ".join(lost.gpu for lost in attribution.lost)
    if others:
        named = ", ".join(f"{namespace}/{pod}" for namespace, pod in others)
        return Judgement(
            settings.degraded,
            "elsewhere",
            f"DCGM names {named} as the holder of the lost GPU {gpus}; this workload's GPUs are not affected.",
        )
    return Judgement(
        settings.degraded,
        "idle",
        f"DCGM shows the lost GPU {gpus} held by no pod; this workload's GPUs are not affected.",
    )


def _unknown_because(attribution: Attribution | None) -> str:
    if attribution is None:
        return "no DCGM series to tell: no Prometheus configured, or it could not be read"
    if not attribution.mapped:
        return "DCGM's series of the node name no pod: the exporter's Kubernetes pod mapping is off"
    return "DCGM shows no Xid on the GPUs that went missing"


def _unattributed_advice(policy: WorkPolicy) -> str:
    if policy == "requeue":
        return (
            " Each of them is requeued: a requeue costs a healthy job its progress since its last checkpoint, where a "
            "hung job left running would hold its GPUs and quota until someone noticed."
        )
    return (
        " If this job has stopped making progress, requeue it yourself (kubectl kueue stop workload, then resume): "
        "it keeps its place in the queue."
    )
