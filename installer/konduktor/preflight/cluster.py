"""Cluster checks: is this Kubernetes cluster fit for the config? Pure judges over what the API showed.

The caller reads the API (`konduktor.ops.preflight.read_cluster`) into `ClusterFacts`; nothing here talks to
the cluster, so every verdict can be tested from plain data. Node labels and allocatable GPUs are judged by
the config linter's own live-node rule (`konduktor.config.lint.check_nodes`), so `validate` and `preflight`
cannot disagree about what a GPU type needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from konduktor.config.findings import Finding, YamlPath, with_lines
from konduktor.config.lint import check_nodes
from konduktor.config.model import Config, GpuType, Toleration, selects
from konduktor.config.quantity import parse_quantity
from konduktor.kube.access import Permission
from konduktor.preflight.results import Check, Status, check
from konduktor.vocabulary import GPU_RESOURCE, HEALTH_TAINT_KEY, HELM_NAMESPACE, HELM_RELEASE, KUEUE_API, QUARANTINED_AT

# The oldest release Konduktor installs on: konduktor-core's ValidatingAdmissionPolicies (tenancy and the health
# controller's confinement) use admissionregistration.k8s.io/v1, served from 1.30 (the pinned Kueue alone would
# take 1.29). The charts' `kubeVersion` says the same (a test holds them together). Kueue and the simulated cluster
# are built against 1.36, the newest release this stack has been run on.
MIN_KUBERNETES = (1, 30)
NEWEST_TESTED_KUBERNETES = (1, 36)

KUEUE_GROUP, KUEUE_VERSION = KUEUE_API.split("/")
RDMA_PREFIX = "rdma/"
CONTROLLER_GEN = "controller-gen.kubebuilder.io/version"

# CRD groups of the other components of Konduktor's umbrella chart, by the chart that brings them.
COMPONENT_GROUPS = {
    "nvidia.com": "gpu-operator",
    "mellanox.com": "network-operator",
    "monitoring.coreos.com": "kube-prometheus-stack",
}


@dataclass(frozen=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    allocatable: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...]
    unschedulable: bool
    internal_ip: str | None = None  # where SSH reaches the host when the config lists no hosts

    @property
    def gpus(self) -> int:
        return _count(self.allocatable.get(GPU_RESOURCE))

    @property
    def rdma(self) -> dict[str, int]:
        """RDMA device-plugin resources the node advertises (`rdma/ib`, `rdma/rdma_shared_device_a`, ...)."""
        found = {name: _count(value) for name, value in self.allocatable.items() if name.startswith(RDMA_PREFIX)}
        return {name: count for name, count in found.items() if count > 0}

    def lint_view(self) -> dict[str, Any]:
        return {"name": self.name, "labels": dict(self.labels), "allocatable": dict(self.allocatable)}


@dataclass(frozen=True)
class CrdFacts:
    name: str
    group: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    served: tuple[str, ...]
    storage: str | None
    stored: tuple[str, ...]  # status.storedVersions: versions objects may still be persisted in


@dataclass(frozen=True)
class ClusterFacts:
    """What the API showed. `problems` says which reads failed (e.g. {"crds": "403 forbidden"}); `denied` the
    permissions this identity lacks, of those in CHECK_PERMISSIONS."""

    server: str
    version: Mapping[str, Any] | None = None
    unreachable: str | None = None  # why the API server did not answer at all
    nodes: tuple[NodeFacts, ...] = ()
    crds: tuple[CrdFacts, ...] = ()
    problems: Mapping[str, str] = field(default_factory=dict)
    denied: frozenset[Permission] = frozenset()


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    meta, spec = node.get("metadata", {}), node.get("spec", {})
    return NodeFacts(
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        allocatable={k: str(v) for k, v in (node.get("status", {}).get("allocatable") or {}).items()},
        taints=tuple(dict(t) for t in spec.get("taints") or ()),
        unschedulable=bool(spec.get("unschedulable")),
        internal_ip=next(
            (a.get("address") for a in node.get("status", {}).get("addresses") or () if a.get("type") == "InternalIP"),
            None,
        ),
    )


def crd_facts(crd: Mapping[str, Any]) -> CrdFacts:
    meta, spec = crd.get("metadata", {}), crd.get("spec", {})
    versions = spec.get("versions") or []
    return CrdFacts(
        name=meta.get("name", ""),
        group=spec.get("group", ""),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        served=tuple(v["name"] for v in versions if v.get("served")),
        storage=next((v["name"] for v in versions if v.get("storage")), None),
        stored=tuple(crd.get("status", {}).get("storedVersions") or ()),
    )


def _count(quantity: str | None) -> int:
    try:
        return int(parse_quantity(quantity)) if quantity else 0
    except ValueError:
        return 0


# --------------------------------------------------------------------------------------------
# The checks.


# Checks that need the Node list, and those that need the CRD list: SKIPPED together when that read fails.
_NODE_CHECKS = ("gpu-nodes", "gpu-node-taints", "rdma", "quota-capacity")
_CRD_CHECKS = ("kueue-crds", "component-crds")
LIST_NODES = Permission("list", "nodes")
LIST_CRDS = Permission("list", "customresourcedefinitions", "apiextensions.k8s.io")
# The rights each check needs to judge anything: without them it FAILs (a check that cannot look is no PASS).
CHECK_PERMISSIONS: Mapping[str, tuple[Permission, ...]] = {
    **dict.fromkeys(_NODE_CHECKS, (LIST_NODES,)),
    **dict.fromkeys(_CRD_CHECKS, (LIST_CRDS,)),
}


def missing_rights(name: str, denied: frozenset[Permission]) -> Check | None:
    """A FAIL naming the rights check `name` needs and this identity lacks; None when it has them all."""
    missing = [p for p in CHECK_PERMISSIONS.get(name, ()) if p in denied]
    if not missing:
        return None
    return check(
        name,
        Status.FAIL,
        f"no right to {', '.join(map(str, missing))}",
        evidence=[f"SelfSubjectAccessReview: {p} is not allowed" for p in missing],
        hint=f"grant this identity {', '.join(map(str, missing))}; "
        f"`kubectl auth can-i {missing[0].verb} {missing[0].qualified_resource}` shows whether it may",
    )


def judge_cluster(
    config: Config,
    facts: ClusterFacts,
    *,
    pinned: Mapping[str, str],
    release: tuple[str, str],
    lines: Mapping[YamlPath, int] | None = None,
    filename: str = "config.yaml",
) -> list[Check]:
    """Every cluster check, in the order an admin would fix them.

    `pinned` maps the umbrella chart's dependencies to their versions (kueue, gpu-operator, ...); `release` is
    Konduktor's Helm release (namespace, name), whose own objects are no conflict.
    """
    api = judge_api(facts)
    if api.status is Status.FAIL:
        names = ("server-version", *_NODE_CHECKS, *_CRD_CHECKS)
        return [api, *(check(n, Status.SKIPPED, "the API server did not answer") for n in names)]
    checks = [api, judge_server_version(facts.version)]
    node_rights = [c for n in _NODE_CHECKS if (c := missing_rights(n, facts.denied)) is not None]
    if node_rights:
        checks += node_rights
    elif "nodes" in facts.problems:
        why = f"cannot list nodes: {facts.problems['nodes']}"
        checks += [check(n, Status.SKIPPED, why) for n in _NODE_CHECKS]
    else:
        checks += judge_gpu_nodes(config, facts.nodes, lines or {}, filename)
        checks.append(judge_taints(config, facts.nodes))
        checks.append(judge_rdma(config, facts.nodes))
        checks += judge_capacity(config, facts.nodes)
    crd_rights = [c for n in _CRD_CHECKS if (c := missing_rights(n, facts.denied)) is not None]
    if crd_rights:
        checks += crd_rights
    elif "crds" in facts.problems:
        why = f"cannot list CustomResourceDefinitions: {facts.problems['crds']}"
        checks += [check(n, Status.SKIPPED, why) for n in _CRD_CHECKS]
    else:
        checks.append(judge_kueue_crds(facts.crds, pinned.get("kueue", "unknown"), release))
        checks.append(judge_component_crds(facts.crds, pinned, release))
    return checks


def judge_api(facts: ClusterFacts) -> Check:
    if facts.unreachable is not None:
        return check(
            "api-reachable",
            Status.FAIL,
            "the API server did not answer",
            evidence=[facts.unreachable],
            hint="check the kubeconfig (--kubeconfig, $KUBECONFIG), the network path and the credentials",
        )
    return check("api-reachable", Status.PASS, f"{facts.server} answered")


_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


def kubernetes_version(version: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(major, minor) from /version: gitVersion first; `minor` alone can read "29+" on managed clusters."""
    if not version:
        return None
    if match := _VERSION.match(str(version.get("gitVersion", ""))):
        return int(match.group(1)), int(match.group(2))
    major = re.match(r"\d+", str(version.get("major", "")))
    minor = re.match(r"\d+", str(version.get("minor", "")))
    return (int(major.group()), int(minor.group())) if major and minor else None


def judge_server_version(version: Mapping[str, Any] | None) -> Check:
    found = kubernetes_version(version)
    shown = str((version or {}).get("gitVersion") or version)
    supported = f"{MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]}-{NEWEST_TESTED_KUBERNETES[0]}.{NEWEST_TESTED_KUBERNETES[1]}"
    if found is None:
        return check(
            "server-version",
            Status.WARN,
            f"cannot read the server version ({shown})",
            hint=f"Konduktor supports Kubernetes {supported}",
        )
    text = f"{found[0]}.{found[1]}"
    if found < MIN_KUBERNETES:
        return check(
            "server-version",
            Status.FAIL,
            f"Kubernetes {text} is older than {MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]}",
            evidence=[f"gitVersion {shown}"],
            hint=f"upgrade the control plane: the admission policies need admissionregistration/v1 ({supported})",
        )
    if found > NEWEST_TESTED_KUBERNETES:
        return check(
            "server-version",
            Status.WARN,
            f"Kubernetes {text} is newer than any release Konduktor was tested on",
            evidence=[f"gitVersion {shown}"],
            hint=f"supported: {supported}; report problems with the version in the issue",
        )
    return check("server-version", Status.PASS, f"Kubernetes {shown} (supported: {supported})")


def nodes_of(gpu_type: GpuType, nodes: Iterable[NodeFacts]) -> list[NodeFacts]:
    return [n for n in nodes if selects(gpu_type.selector, n.labels)]


def judge_gpu_nodes(
    config: Config, nodes: Sequence[NodeFacts], lines: Mapping[YamlPath, int], filename: str
) -> list[Check]:
    """Per GPU type: its nodes exist with the selecting labels and allocatable GPUs, cpu and memory."""
    findings = with_lines(check_nodes(config, [n.lint_view() for n in nodes]), lines)
    checks = []
    for type_name, gpu_type in config.gpu_types.items():
        mine = [f for f in findings if f.path[:2] == ("gpuTypes", type_name)]
        matched = nodes_of(gpu_type, nodes)
        wanted = ", ".join(f"{k}={v}" for k, v in gpu_type.selector.items())
        if not mine:
            gpus = sorted({n.gpus for n in matched})
            checks.append(
                check(
                    "gpu-nodes",
                    Status.PASS,
                    f"{len(matched)} nodes with {'/'.join(map(str, gpus))} {GPU_RESOURCE} each ({wanted})",
                    type_name,
                    [f"{n.name}: {n.gpus} {GPU_RESOURCE}" for n in matched],
                )
            )
            continue
        checks.append(_from_findings("gpu-nodes", type_name, mine, filename))
    overlap = [f for f in findings if f.path == ("gpuTypes",)]
    if overlap:
        checks.append(_from_findings("gpu-nodes", "all GPU types", overlap, filename))
    if config.topology is not None:
        topology = [f for f in findings if f.path[:1] == ("topology",)]
        if topology:
            checks.append(_from_findings("topology-labels", config.topology.name, topology, filename))
        else:
            levels = ", ".join(config.topology.levels)
            checks.append(check("topology-labels", Status.PASS, f"every GPU node has {levels}", config.topology.name))
    return checks


def _from_findings(name: str, subject: str, findings: Sequence[Finding], filename: str) -> Check:
    errors = [f for f in findings if f.is_error]
    first = (errors or list(findings))[0]
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    return check(
        name,
        Status.FAIL if errors else Status.WARN,
        first.message + more,
        subject,
        [f.located(filename) for f in findings],
        first.hint,
    )


def _gpu_nodes(config: Config, nodes: Iterable[NodeFacts]) -> dict[str, str | None]:
    """GPU nodes by name -> their GPU type in the config (None: GPUs, but no configured type selects them)."""
    found: dict[str, str | None] = {}
    for node in nodes:
        types = [t for t, g in config.gpu_types.items() if selects(g.selector, node.labels)]
        if types or node.gpus > 0:
            found[node.name] = types[0] if types else None
    return found


def tolerates(toleration: Toleration, taint: Mapping[str, str]) -> bool:
    """The scheduler's rule: an empty key with Exists matches every taint; an unset effect matches all effects."""
    if toleration.effect is not None and toleration.effect != taint.get("effect"):
        return False
    if toleration.key is None:
        return toleration.operator == "Exists"
    if toleration.key != taint.get("key"):
        return False
    return toleration.operator == "Exists" or (toleration.value or "") == (taint.get("value") or "")


def taint_text(taint: Mapping[str, str]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def judge_taints(config: Config, nodes: Sequence[NodeFacts]) -> Check:
    """Taints on GPU nodes, named: each one keeps every pod off the node that does not tolerate it."""
    by_name = {n.name: n for n in nodes}
    gpu_nodes = _gpu_nodes(config, nodes)
    seen: dict[str, list[str]] = {}
    untolerated: set[str] = set()
    for name, type_name in sorted(gpu_nodes.items()):
        node = by_name[name]
        tolerations = config.gpu_types[type_name].tolerations if type_name else []
        for taint in node.taints:
            text = taint_text(taint)
            seen.setdefault(text, []).append(name)
            if taint.get("effect") != "PreferNoSchedule" and not any(tolerates(t, taint) for t in tolerations):
                untolerated.add(text)
    if not seen:
        return check("gpu-node-taints", Status.PASS, f"no taints on the {len(gpu_nodes)} GPU nodes")
    evidence = []
    for text, names in sorted(seen.items()):
        coverage = "not tolerated by the GPU type" if text in untolerated else "tolerated by the GPU type"
        evidence.append(f"{text} on {len(names)} node(s) ({coverage}): {', '.join(names)}")
    for name in sorted(n for n in gpu_nodes if any(t.get("key") == HEALTH_TAINT_KEY for t in by_name[n].taints)):
        since = by_name[name].annotations.get(QUARANTINED_AT)
        owner = f"quarantined by the health controller at {since}" if since else "not placed by the health controller"
        evidence.append(f"{name}: {HEALTH_TAINT_KEY} {owner}")
    hint = (
        "team jobs do not land on nodes with a taint their GPU type does not tolerate: add it to "
        "gpuTypes.<type>.tolerations, or remove the taint (kubectl taint node NODE KEY-)"
        if untolerated
        else "the GPU types' tolerations cover them; other workloads (DaemonSets, monitoring) need their own"
    )
    return check(
        "gpu-node-taints",
        Status.WARN,
        f"{len({n for names in seen.values() for n in names})} GPU node(s) carry taints: {', '.join(sorted(seen))}",
        evidence=evidence,
        hint=hint,
    )


def judge_rdma(config: Config, nodes: Sequence[NodeFacts]) -> Check:
    """RDMA device-plugin resources on the GPU nodes, once any node shows the cluster uses them.

    The config has no switch for the network operator yet; so RDMA is expected only where some node already
    advertises `rdma/` resources, and then on every GPU node (multi-node NCCL uses the slowest path).
    """
    if not any(node.rdma for node in nodes):
        return check(
            "rdma",
            Status.SKIPPED,
            "no node advertises rdma/ resources, and the config has no network-operator setting that needs them",
        )
    by_name = {n.name: n for n in nodes}
    gpu_nodes = sorted(_gpu_nodes(config, nodes))
    missing = [name for name in gpu_nodes if not by_name[name].rdma]
    evidence = [
        f"{name}: " + (", ".join(f"{k}={v}" for k, v in sorted(by_name[name].rdma.items())) or "no rdma/ resources")
        for name in gpu_nodes
    ]
    if missing:
        return check(
            "rdma",
            Status.WARN,
            f"{len(missing)} of {len(gpu_nodes)} GPU nodes advertise no rdma/ resources",
            evidence=evidence,
            hint="check the RDMA shared device plugin (network operator) on those nodes; multi-node jobs there "
            "fall back to TCP",
        )
    return check("rdma", Status.PASS, f"all {len(gpu_nodes)} GPU nodes advertise rdma/ resources", evidence=evidence)


def judge_capacity(config: Config, nodes: Sequence[NodeFacts]) -> list[Check]:
    """Per GPU type: the teams' quotas against the GPUs the usable nodes offer now.

    A cordoned node, or one whose NoSchedule/NoExecute taint the GPU type does not tolerate (a quarantine),
    admits no team job, so its GPUs do not count.
    """
    checks = []
    for type_name, gpu_type in config.gpu_types.items():
        quota = sum(team.gpus[type_name].quota for team in config.teams.values() if type_name in team.gpus)
        usable, excluded = 0, []
        for node in nodes_of(gpu_type, nodes):
            blocking = [
                taint_text(t)
                for t in node.taints
                if t.get("effect") in ("NoSchedule", "NoExecute")
                and not any(tolerates(tol, t) for tol in gpu_type.tolerations)
            ]
            if node.unschedulable or blocking:
                why = ", ".join((["cordoned"] if node.unschedulable else []) + blocking)
                excluded.append(f"{node.name}: {node.gpus} GPUs not usable ({why})")
            else:
                usable += node.gpus
        summary = f"quotas {quota} of {usable} usable {GPU_RESOURCE}"
        if quota > usable:
            checks.append(
                check(
                    "quota-capacity",
                    Status.FAIL,
                    f"{summary}: the teams are promised {quota - usable} GPUs that do not exist",
                    type_name,
                    excluded,
                    "add or repair nodes, or lower the teams' quotas of this GPU type",
                )
            )
        elif usable < gpu_type.capacity:
            checks.append(
                check(
                    "quota-capacity",
                    Status.WARN,
                    f"{summary}; the config counts {gpu_type.capacity}",
                    type_name,
                    excluded,
                    "quotas fit, but borrowing assumes GPUs that are missing now",
                )
            )
        else:
            checks.append(check("quota-capacity", Status.PASS, summary, type_name, excluded))
    return checks


def chart_of(crd: CrdFacts) -> tuple[str, str] | None:
    """(chart, version) from the `helm.sh/chart: <name>-<version>` label charts put on templated CRDs."""
    match = re.match(r"^(.+)-v?(\d+\.\d+\.\d+\S*)$", crd.labels.get("helm.sh/chart", ""))
    return (match.group(1), match.group(2)) if match else None


def _installed_version(crd: CrdFacts, chart: str) -> str | None:
    labelled = chart_of(crd)
    if labelled and labelled[0] == chart:
        return labelled[1]
    version = crd.labels.get("app.kubernetes.io/version")
    return version.lstrip("v") if version else None


def _owner(crd: CrdFacts) -> str:
    release = crd.annotations.get(HELM_RELEASE)
    if release:
        return f"Helm release {crd.annotations.get(HELM_NAMESPACE, '?')}/{release}"
    return "not managed by Helm"


def _describe_crds(crds: Sequence[CrdFacts], chart: str) -> list[str]:
    """One line per distinct state, naming the CRDs in it (a Kueue install has a dozen identical ones)."""
    states: dict[str, list[str]] = {}
    for crd in sorted(crds, key=lambda c: c.name):
        parts = [f"served {','.join(crd.served) or '-'}", f"stored {','.join(crd.stored) or '-'}"]
        if crd.annotations.get(CONTROLLER_GEN):
            parts.append(f"controller-gen {crd.annotations[CONTROLLER_GEN]}")
        if version := _installed_version(crd, chart):
            parts.append(f"{chart} {version}")
        parts.append(_owner(crd))
        states.setdefault(", ".join(parts), []).append(crd.name.split(".", 1)[0])
    return [f"{', '.join(names)}: {state}" for state, names in states.items()]


def _foreign_owners(crds: Sequence[CrdFacts], release: tuple[str, str]) -> list[str]:
    """Helm releases other than Konduktor's that own some of these CRDs."""
    ours = f"Helm release {release[0]}/{release[1]}"
    return sorted({owner for c in crds if (owner := _owner(c)).startswith("Helm release") and owner != ours})


def judge_kueue_crds(crds: Sequence[CrdFacts], kueue_version: str, release: tuple[str, str]) -> Check:
    """Kueue CRDs from an earlier install: usable when they serve the API version Konduktor renders.

    `kueue_version` is the Kueue chart Konduktor pins; `release` is Konduktor's Helm (namespace, name).
    """
    kueue = [c for c in crds if c.group == KUEUE_GROUP]
    pinned = kueue_version.lstrip("v")
    if not kueue:
        return check("kueue-crds", Status.PASS, f"no Kueue CRDs yet; Konduktor installs Kueue {pinned}")
    evidence = _describe_crds(kueue, "kueue")
    old = sorted(c.name for c in kueue if KUEUE_VERSION not in c.served)
    if old:
        return check(
            "kueue-crds",
            Status.FAIL,
            f"{len(old)} Kueue CRD(s) do not serve {KUEUE_API}: an older Kueue (before 0.15) is installed",
            evidence=evidence,
            hint=f"upgrade that Kueue to {pinned}, or uninstall it (with its CRDs) before installing Konduktor",
        )
    versions = sorted({v for c in kueue if (v := _installed_version(c, "kueue"))})
    foreign = _foreign_owners(kueue, release)
    if versions == [pinned] and not foreign:
        return check("kueue-crds", Status.PASS, f"Kueue {pinned} is installed", evidence=evidence)
    found = f"Kueue {', '.join(versions)}" if versions else "Kueue of unknown version"
    owners = f", owned by {', '.join(foreign)}" if foreign else ""
    return check(
        "kueue-crds",
        Status.WARN,
        f"{found} already installed ({len(kueue)} CRDs serve {KUEUE_VERSION}{owners}); Konduktor installs {pinned}",
        evidence=evidence,
        hint="one Kueue per cluster: uninstall the other one first, or install Konduktor with kueue.enabled=false "
        "(kubectl get deploy -A -l app.kubernetes.io/name=kueue shows where it runs)",
    )


def judge_component_crds(crds: Sequence[CrdFacts], pinned: Mapping[str, str], release: tuple[str, str]) -> Check:
    """CRDs of the other components Konduktor's chart installs (GPU and network operators, Prometheus
    Operator): a WARN when another Helm release owns them or their chart label names another version."""
    present: dict[str, list[CrdFacts]] = {}
    for crd in crds:
        if crd.group in COMPONENT_GROUPS:
            present.setdefault(COMPONENT_GROUPS[crd.group], []).append(crd)
    if not present:
        charts = ", ".join(sorted(set(COMPONENT_GROUPS.values())))
        return check("component-crds", Status.PASS, f"none of the CRDs of {charts}")
    evidence: list[str] = []
    conflicts: list[str] = []
    for chart, items in sorted(present.items()):
        evidence += [f"{chart}: {line}" for line in _describe_crds(items, chart)]
        wanted = pinned.get(chart, "").lstrip("v")
        others = sorted({v for c in items if (v := _installed_version(c, chart)) and wanted and v != wanted})
        if others:
            conflicts.append(f"{chart} {', '.join(others)} (Konduktor pins {wanted})")
        if foreign := _foreign_owners(items, release):
            conflicts.append(f"{chart} owned by {', '.join(foreign)}")
    if conflicts:
        return check(
            "component-crds",
            Status.WARN,
            "already installed: " + "; ".join(conflicts),
            evidence=evidence,
            hint="disable that component in Konduktor's chart (<name>.enabled=false) to keep the installed one, or "
            "uninstall it first",
        )
    return check("component-crds", Status.PASS, f"present: {', '.join(sorted(present))}", evidence=evidence)
