"""`konduktor-install status`: the release, the team queues and the health controller, of one cluster or of
every cluster of a config, as a table or a document (`-o json`). What it reads is `konduktor.ops.status`.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from konduktor.cli.arguments import load_fleet
from konduktor.cli.console import OutputFormat, print_document, print_rows
from konduktor.cli.target import ContextOption, KubeconfigOption, SimOption
from konduktor.errors import ExitCode
from konduktor.health.breaker import BreakerView, ControllerView
from konduktor.health.health_view import ProductCapacity, capacity
from konduktor.ops.multicluster import members
from konduktor.ops.status import (
    PlatformStatus,
    application_state,
    read_fleet_status,
    read_status,
    release_document,
)
from konduktor.ops.target import running_target


def status(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    sim: SimOption = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="A config with `clusters:`: the status of its manager and every worker, each reached as it names it.",
        ),
    ] = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output")] = "table",
) -> None:
    """The release, the team queues and the health controller. Exit 1 when Konduktor is not installed."""
    if config is not None:
        _fleet_status(config, kubeconfig, context, sim, output)
        return
    target = running_target(kubeconfig, context, sim, read_only=True)
    found = read_status(target)
    document = status_document(found)
    if output == "table":
        print_rows(status_rows(document), ["component", "state"], output)
    else:
        print_document(document, output)
    if found.release is None:
        raise typer.Exit(ExitCode.NEGATIVE)


def _fleet_status(
    path: Path, kubeconfig: Path | None, context: str | None, sim: str | None, output: OutputFormat
) -> None:
    """`status --config`: every cluster of the config; exit 1 when any lacks Konduktor or cannot be read."""
    loaded = load_fleet(path, kubeconfig, context, sim)
    found = read_fleet_status(members(loaded.config, path.parent))
    documents = [
        {
            "cluster": each.member.name,
            "role": each.member.role,
            **({"error": each.problem} if each.found is None else status_document(each.found[0])),
            **(
                {"workers": [asdict(w) for w in (each.found[1] if each.found else [])]}
                if each.member.role == "manager"
                else {}
            ),
        }
        for each in found
    ]
    if output == "table":
        rows = [
            {"cluster": f"{d['cluster']} ({d['role']})", **row}
            for d in documents
            for row in (
                [{"component": "cluster", "state": f"not read: {d['error']}"}] if "error" in d else status_rows(d)
            )
            + [
                {
                    "component": f"worker {w['name']}",
                    "state": "connected" if w["active"] else f"not connected: {w['reason']}",
                }
                for w in d.get("workers", [])
            ]
        ]
        print_rows(rows, ["cluster", "component", "state"], output)
    else:
        print_document({"clusters": documents}, output)
    if any(each.found is None or each.found[0].release is None for each in found):
        raise typer.Exit(ExitCode.NEGATIVE)


def status_document(found: PlatformStatus) -> dict[str, Any]:
    """One cluster's status as `status -o json` shows it."""
    health = found.health
    nodes = health.nodes
    return {
        "release": release_document(found.release),
        "health_controllers": [
            {
                "namespace": d["metadata"]["namespace"],
                "name": d["metadata"]["name"],
                "available": d.get("status", {}).get("availableReplicas", 0),
                "desired": d["spec"].get("replicas", 1),
            }
            for d in found.controllers
        ],
        # Its mode and leader (the Lease holder), and its fleet breaker: whether it quarantines at all.
        "health_controller": health.controller.row(),
        "breaker": health.breaker.row(),
        "queues": [q.row() for q in found.queues],
        # Quarantined and cordoned GPUs are capacity the queues' quotas still count on.
        "gpus": [asdict(c) for c in capacity(nodes)],
        "quarantined_nodes": [node.node for node in nodes if node.out_of_service],
        "argocd": [
            dict(zip(("namespace", "name", "sync", "health"), application_state(app), strict=True))
            for app in found.applications
        ],
    }


def status_rows(document: dict[str, Any]) -> list[dict[str, str]]:
    """`status`'s table: one line per component, in words."""
    release = document["release"]
    controller = ControllerView(**document["health_controller"])
    breaker = BreakerView.from_row(document["breaker"])
    gpus = [ProductCapacity(**c) for c in document["gpus"]]
    quarantined = document["quarantined_nodes"]
    return [
        {
            "component": "release",
            "state": f"{release['chart']} revision {release['revision']} {release['status']}"
            if release["installed"]
            else "not installed",
        },
        *[
            {
                "component": "health-controller",
                "state": f"{c['available']}/{c['desired']} available; {controller.describe()}",
            }
            for c in document["health_controllers"]
        ],
        *([{"component": "breaker", "state": breaker.describe()}] if controller.installed else []),
        *[
            {"component": f"queue {q['team']}", "state": f"{q['used']}/{q['nominal']} {q['flavor']} GPUs used"}
            for q in document["queues"]
        ],
        *[{"component": f"gpus {c.product}", "state": c.describe()} for c in gpus],
        *([{"component": "quarantined nodes", "state": ", ".join(quarantined)}] if quarantined else []),
        *[
            {"component": f"argocd {a['namespace']}/{a['name']}", "state": f"{a['sync']} {a['health']}"}
            for a in document["argocd"]
        ],
    ]
