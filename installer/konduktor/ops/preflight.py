"""Preflight on a cluster, for `preflight` and `up`: the cluster is read once through `konduktor.kube` and judged by
`konduktor.preflight.cluster`; GPU hosts are checked by `konduktor.preflight.node` over SSH
(`konduktor.preflight.inventory` says which), on this machine, or from a pod on each GPU node
(`konduktor.ops.preflight_pods`). Only the pods write: their Jobs.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from pathlib import Path
from typing import Any

from konduktor.config.load import LoadedConfig
from konduktor.errors import ClusterUnreachable, PreflightFailed, UsageError
from konduktor.helm.release import CHARTS, NAMESPACE, RELEASE
from konduktor.kube.access import may
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.documents import load_documents
from konduktor.ops.preflight_pods import pod_checks
from konduktor.preflight.cluster import (
    CHECK_PERMISSIONS,
    ClusterFacts,
    CrdFacts,
    NodeFacts,
    crd_facts,
    judge_cluster,
    node_facts,
)
from konduktor.preflight.hosts import LOCAL, open_host
from konduktor.preflight.inventory import HostTarget, SshHosts, config_inventory, expectations_of, no_hosts
from konduktor.preflight.node import NodeExpectations, run_node_checks
from konduktor.preflight.results import Check, Status
from konduktor.tools.catalog import load_tools
from konduktor.vocabulary import HOSTNAME_LABEL

HOST_WORKERS = 32
Report = Callable[[str], None]


def check_all(
    kube: Kube, loaded: LoadedConfig, inventory: SshHosts | None, local: bool, report: Report
) -> tuple[ClusterFacts, list[Check]]:
    """What the cluster showed, and every check of it and of the GPU hosts, as `preflight` runs them."""
    facts = read_cluster(kube)
    checks = cluster_checks(loaded, facts, (NAMESPACE, RELEASE))
    checks += node_checks(kube, loaded, facts, inventory, local, report)
    return facts, checks


def require_preflight(
    kube: Kube, loaded: LoadedConfig, inventory: SshHosts | None, force: bool, report: Report, say: Report
) -> None:
    """The same checks as `konduktor-install preflight`: the cluster's, then the GPU hosts' when the config has
    `preflight.nodes` (over SSH, or from a pod on each GPU node). A FAIL stops `up` before anything else
    changes (the pods' Jobs are all it writes); each FAIL is told with its evidence."""
    facts = read_cluster(kube)
    require_reachable(facts)
    checks = cluster_checks(loaded, facts, (NAMESPACE, RELEASE))
    checks += node_checks(kube, loaded, facts, inventory, False, report)
    failed = [c for c in checks if c.status is Status.FAIL]
    for check in failed:
        say(f"preflight FAIL {check.name} ({check.subject}): {check.summary}")
        for fact in check.evidence:
            say(f"  {fact}")
    if failed and not force:
        raise PreflightFailed(
            f"{len(failed)} preflight check(s) failed; nothing was changed",
            hint="fix them or pass --force; `konduktor-install preflight CONFIG` runs the checks again (with "
            "preflight.nodes.pod, a pod on each GPU node)",
        )


def read_cluster(kube: Kube) -> ClusterFacts:
    """Everything the cluster checks judge: the version, one SelfSubjectAccessReview per permission the checks
    need, the Nodes and the CRDs; a read that is refused is noted, not fatal."""
    try:
        version = kube.version()
    except ApiError as problem:
        return ClusterFacts(server=kube.server, unreachable=problem.message)
    denied = frozenset(needed for needed in set(chain(*CHECK_PERMISSIONS.values())) if not may(kube, needed))
    problems: dict[str, str] = {}
    nodes: tuple[NodeFacts, ...] = ()
    crds: tuple[CrdFacts, ...] = ()
    try:
        nodes = tuple(node_facts(n) for n in kube.list("v1", "Node"))
    except ApiError as problem:
        problems["nodes"] = problem.message
    try:
        crds = tuple(crd_facts(c) for c in kube.list("apiextensions.k8s.io/v1", "CustomResourceDefinition"))
    except ApiError as problem:
        problems["crds"] = problem.message
    return ClusterFacts(kube.server, version, None, nodes, crds, problems, denied)


def require_reachable(facts: ClusterFacts) -> None:
    """An API server that did not answer (or refused the credentials) is an outage, not a failed check."""
    if facts.unreachable is not None:
        raise ClusterUnreachable(
            f"the API server at {facts.server} did not answer: {facts.unreachable}",
            hint="check the kubeconfig (--kubeconfig, $KUBECONFIG), the network path and the credentials",
        )


def cluster_checks(loaded: LoadedConfig, facts: ClusterFacts, release: tuple[str, str]) -> list[Check]:
    """The cluster checks for a loaded config and Konduktor's Helm release (namespace, name); `up` can run the
    same before it changes anything."""
    return judge_cluster(
        loaded.config,
        facts,
        pinned=pinned_versions(),
        release=release,
        lines=loaded.lines,
        filename=loaded.filename,
    )


def pinned_versions(chart: Path = CHARTS / "konduktor" / "Chart.yaml") -> dict[str, str]:
    """The umbrella chart's dependencies and their exact versions; without the chart (an installed package),
    the Kueue the simulated cluster runs, which the chart pins too."""
    if chart.is_file():
        documents = load_documents(chart)
        if documents:
            return {d["name"]: str(d["version"]) for d in documents[0].get("dependencies") or ()}
    return {"kueue": load_tools()["kueue"].version}


def ssh_inventory(loaded: LoadedConfig, hosts: Sequence[str], user: str | None, key: Path | None) -> SshHosts | None:
    """The config's SSH inventory with the command line over it: --ssh replaces its hosts, --ssh-user and
    --ssh-key its user and key. None: no host is checked over SSH."""
    configured = config_inventory(loaded)
    if configured is None and not hosts:
        if user or key:
            raise UsageError("--ssh-user and --ssh-key need --ssh HOST (or preflight.nodes.ssh in the config)")
        return None
    base = configured or SshHosts()
    return SshHosts(tuple(hosts) if hosts else base.hosts, user or base.user, key or base.key, base.port)


def node_checks(
    kube: Kube,
    loaded: LoadedConfig,
    facts: ClusterFacts,
    inventory: SshHosts | None,
    local: bool,
    report: Callable[[str], None],
) -> list[Check]:
    """The GPU hosts' checks: over SSH (and here with `local`), else from pods when the config has
    preflight.nodes.pod. An SSH inventory from the command line replaces the pods."""
    checks = host_checks(loaded, facts, inventory, local, report)
    pods = loaded.config.preflight.nodes.pod if loaded.config.preflight.nodes else None
    if pods is not None and inventory is None:
        checks += pod_checks(kube, loaded.config, facts, pods, report)
    return checks


def host_checks(
    loaded: LoadedConfig,
    facts: ClusterFacts,
    inventory: SshHosts | None,
    local: bool,
    report: Callable[[str], None],
) -> list[Check]:
    """The node checks of every host of the inventory (and of this machine with `local`), in inventory order.

    Hosts are checked side by side: a check is a dozen short commands, and an unreachable host waits out
    ssh's connect timeout, so one at a time would take hours on a thousand nodes.
    """
    targets = inventory.targets(loaded.config, facts.nodes) if inventory is not None else []
    checks = [no_hosts(facts)] if inventory is not None and not targets else []
    if local:
        targets.append(HostTarget(socket.gethostname(), LOCAL))
    if not targets:
        return checks
    key = inventory.key if inventory is not None else None
    hosts = [open_host(target.url, key) for target in targets]

    def check_host(target: HostTarget, host: Any) -> list[Check]:
        return run_node_checks(host, target.subject, expectations_for(target.subject, loaded, facts))

    report(f"checking {len(targets)} GPU host(s)")
    with ThreadPoolExecutor(max_workers=min(HOST_WORKERS, len(targets))) as pool:
        results = pool.map(check_host, targets, hosts)
        for index, (target, found) in enumerate(zip(targets, results, strict=True), 1):
            report(f"checked host {target.subject} ({index}/{len(targets)})")
            checks += found
    return checks


def expectations_for(name: str, loaded: LoadedConfig, facts: ClusterFacts) -> NodeExpectations:
    """What the host's Node (same name, hostname label or InternalIP) and its GPU type say it must have."""
    node = next((n for n in facts.nodes if name in (n.name, n.labels.get(HOSTNAME_LABEL), n.internal_ip)), None)
    return expectations_of(loaded.config, node) if node is not None else NodeExpectations()
