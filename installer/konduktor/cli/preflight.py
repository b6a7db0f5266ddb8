"""`konduktor-install preflight`: is the cluster (and are its GPU hosts) fit for this config?

The checks run in `konduktor.ops.preflight`: the cluster read once and judged, GPU hosts over SSH, on this machine,
or from a pod on each GPU node (`konduktor.ops.preflight_pods`; the pod runs the hidden `preflight-node` command
below). Only the pods write: their Jobs. Exit 3 when any check FAILs.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from konduktor.cli.arguments import ConfigArgument, load_checked
from konduktor.cli.console import err, progress
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption, connect
from konduktor.config.model import Config
from konduktor.errors import PreflightFailed
from konduktor.ops.preflight import check_all, require_reachable, ssh_inventory
from konduktor.preflight.host_namespaces import UNREACHABLE_HINT, HostNamespaces
from konduktor.preflight.hosts import local_host
from konduktor.preflight.node import NodeExpectations, run_node_checks
from konduktor.preflight.results import PreflightReport, render_json, render_table, render_yaml, summary_line

ReportFormat = Literal["table", "json", "yaml"]


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight)
    app.command("preflight-node", hidden=True)(preflight_node)


def preflight(
    config: ConfigArgument,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    output: Annotated[ReportFormat, typer.Option("-o", "--output", help="table, json or yaml.")] = "table",
    ssh: Annotated[
        list[str] | None,
        typer.Option(
            "--ssh",
            help="GPU hosts to check over SSH, HOST[,HOST...] (repeatable), instead of preflight.nodes.ssh.hosts "
            "(or of the pods of preflight.nodes.pod). Name them as their Kubernetes nodes: each is then held to its "
            "GPU type.",
        ),
    ] = None,
    ssh_user: Annotated[
        str | None, typer.Option("--ssh-user", help="SSH user (default: the config's, else ssh's own).")
    ] = None,
    ssh_key: Annotated[
        Path | None,
        typer.Option("--ssh-key", help="SSH private key (default: the config's).", exists=True, dir_okay=False),
    ] = None,
    local: Annotated[bool, typer.Option("--local", help="Also check this machine as a GPU host.")] = False,
) -> None:
    """Check the cluster (API, version, GPU nodes, taints, RDMA, capacity, CRDs) and GPU hosts. Exit 3 on FAIL.

    GPU hosts are checked when the config has preflight.nodes (ssh, or pod: a privileged pod on each GPU node),
    or --ssh or --local is given. Host checks run read-only commands; the cluster is only read, except for the
    pods' Jobs (and their namespace when missing).
    """
    loaded = load_checked(config)
    hosts = [name.strip() for item in ssh or [] for name in item.split(",") if name.strip()]
    inventory = ssh_inventory(loaded, hosts, ssh_user, ssh_key)
    with connect(kubeconfig, context, sim) as kube, progress("preflight") as report:
        report("reading the cluster")
        facts, checks = check_all(kube, loaded, inventory, local, report)
    result = PreflightReport(tuple(checks))
    err.print(image_line(loaded.config), markup=False)
    render = {"json": render_json, "yaml": render_yaml, "table": render_table}[output]
    sys.stdout.write(render(result))
    err.print(summary_line(result), markup=False)
    require_reachable(facts)
    if result.failed:
        failed = ", ".join(f"{c.name} ({c.subject})" for c in result.failed)
        raise PreflightFailed(
            f"{len(result.failed)} preflight check(s) failed: {failed}; nothing was changed",
            hint="fix what the report shows, then run preflight again",
        )


def image_line(config: Config) -> str:
    """The images Konduktor runs for this config: the chart's (config.yaml's `image:`) and the preflight pods'."""
    line = f"konduktor image: {config.image.reference} (health controller, capacity publisher)"
    if config.preflight.nodes and config.preflight.nodes.pod:
        line += f"; preflight pods: {config.preflight_pod_image}"
    return line


def preflight_node(
    node: Annotated[
        str | None, typer.Option("--node", help="The node's name, as the report's subject (default: hostname).")
    ] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", min=1, help="GPUs the node must have.")] = None,
    rdma: Annotated[bool, typer.Option("--rdma", help="InfiniBand/RoCE ports must be up.")] = False,
    in_host_namespaces: Annotated[
        bool,
        typer.Option(
            "--in-host-namespaces",
            help="Run the commands in PID 1's namespaces (nsenter): from a privileged hostPID pod, the node's.",
        ),
    ] = False,
    output: Annotated[ReportFormat, typer.Option("-o", "--output", help="table, json or yaml.")] = "table",
) -> None:
    """The node checks of this machine (what a preflight pod runs on its node). Exit 0 once the report is
    printed: its checks are the answer, read by `preflight` from the pod's log."""
    subject = node or socket.gethostname()
    expect = NodeExpectations(gpus=gpus, rdma=rdma)
    if in_host_namespaces:
        checks = run_node_checks(HostNamespaces(), subject, expect, UNREACHABLE_HINT)
    else:
        checks = run_node_checks(local_host(), subject, expect)
    render = {"json": render_json, "yaml": render_yaml, "table": render_table}[output]
    sys.stdout.write(render(PreflightReport(tuple(checks))))
