"""`konduktor-install preflight`: is the cluster (and are its GPU hosts) fit for this config? Reads only.

The cluster is read once through `konduktor.kube` and judged by `konduktor.preflight.cluster`; GPU hosts are
checked over SSH or on this machine by `konduktor.preflight.node`. Exit 3 when any check FAILs.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import testinfra
import typer

from konduktor.cli.console import err, progress
from konduktor.cli.quotas import ConfigArgument, load_checked
from konduktor.cli.target import KubeconfigOption, connect
from konduktor.config.load import LoadedConfig
from konduktor.errors import PreflightFailed, UsageError
from konduktor.helm.release import CHARTS, NAMESPACE, RELEASE
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.documents import load_documents
from konduktor.preflight.cluster import (
    ClusterFacts,
    CrdFacts,
    NodeFacts,
    crd_facts,
    judge_cluster,
    node_facts,
    nodes_of,
)
from konduktor.preflight.node import NodeExpectations, run_node_checks
from konduktor.preflight.results import (
    Check,
    PreflightReport,
    render_json,
    render_table,
    render_yaml,
    summary_line,
)
from konduktor.sim.tools import load_tools

ReportFormat = Literal["table", "json", "yaml"]
LOCAL = "local://"


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight)


def preflight(
    config: ConfigArgument,
    kubeconfig: KubeconfigOption = None,
    output: Annotated[ReportFormat, typer.Option("-o", "--output", help="table, json or yaml.")] = "table",
    ssh: Annotated[
        list[str] | None,
        typer.Option(
            "--ssh",
            help="GPU hosts to check over SSH, HOST[,HOST...] (repeatable). Name them as their Kubernetes nodes: "
            "each is then held to its GPU type.",
        ),
    ] = None,
    ssh_user: Annotated[str | None, typer.Option("--ssh-user", help="SSH user (default: ssh's own).")] = None,
    ssh_key: Annotated[
        Path | None, typer.Option("--ssh-key", help="SSH private key.", exists=True, dir_okay=False)
    ] = None,
    local: Annotated[bool, typer.Option("--local", help="Also check this machine as a GPU host.")] = False,
) -> None:
    """Check the cluster (API, version, GPU nodes, taints, RDMA, capacity, CRDs) and GPU hosts. Exit 3 on FAIL.

    Nothing is changed: the cluster is only read, and host checks run read-only commands.
    """
    loaded = load_checked(config)
    hosts = [name.strip() for item in ssh or [] for name in item.split(",") if name.strip()]
    if (ssh_user or ssh_key) and not hosts:
        raise UsageError("--ssh-user and --ssh-key need --ssh HOST")
    kube = connect(kubeconfig)
    try:
        with progress("preflight") as report:
            report("reading the cluster")
            facts = read_cluster(kube)
            checks = cluster_checks(loaded, facts, (NAMESPACE, RELEASE))
            for name, url in node_targets(hosts, ssh_user, local):
                report(f"checking host {name}")
                checks += run_node_checks(open_host(url, ssh_key), name, expectations_for(name, loaded, facts))
    finally:
        kube.close()
    result = PreflightReport(tuple(checks))
    render = {"json": render_json, "yaml": render_yaml, "table": render_table}[output]
    sys.stdout.write(render(result))
    err.print(summary_line(result), markup=False)
    if result.failed:
        failed = ", ".join(f"{c.name} ({c.subject})" for c in result.failed)
        raise PreflightFailed(
            f"{len(result.failed)} preflight check(s) failed: {failed}; nothing was changed",
            hint="fix what the report shows, then run preflight again",
        )


def read_cluster(kube: Kube) -> ClusterFacts:
    """Everything the cluster checks judge, in three reads; a read that is refused is noted, not fatal."""
    try:
        version = kube.version()
    except ApiError as problem:
        return ClusterFacts(server=kube.server, unreachable=problem.message)
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
    return ClusterFacts(kube.server, version, None, nodes, crds, problems)


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


def node_targets(hosts: Sequence[str], user: str | None, local: bool) -> list[tuple[str, str]]:
    """(name, testinfra host URL) per host to check."""
    targets = [(name, f"ssh://{user + '@' if user else ''}{name}") for name in hosts]
    if local:
        targets.append((socket.gethostname(), LOCAL))
    return targets


def open_host(url: str, key: Path | None) -> Any:
    """A testinfra host. BatchMode: a host that wants a password or a host-key answer fails instead of prompting."""
    if url == LOCAL:
        return testinfra.get_host(url)
    return testinfra.get_host(url, ssh_identity_file=str(key) if key else None, ssh_extra_args="-o BatchMode=yes")


def expectations_for(name: str, loaded: LoadedConfig, facts: ClusterFacts) -> NodeExpectations:
    """What the host's Node (same name, or same hostname label) and its GPU type say it must have."""
    node = next((n for n in facts.nodes if name in (n.name, n.labels.get("kubernetes.io/hostname"))), None)
    if node is None:
        return NodeExpectations()
    gpus = next((t.gpus_per_node for t in loaded.config.gpu_types.values() if nodes_of(t, [node])), None)
    return NodeExpectations(gpus=gpus, rdma=bool(node.rdma))
