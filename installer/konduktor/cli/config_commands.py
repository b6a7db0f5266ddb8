"""`konduktor-install validate`, `render` and `schema`: config.yaml checked, rendered to Kueue objects, described."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, cast, get_args

import typer
import yaml

from konduktor.alerts.render import alertmanager_config
from konduktor.cli.arguments import ConfigArgument, load_checked, report_warnings
from konduktor.cli.console import err, print_document
from konduktor.config.clusters import member_accesses, simulated_members, worker_quotas
from konduktor.config.findings import ConfigError, Finding, with_lines
from konduktor.config.load import LoadedConfig, load_config
from konduktor.config.model import Config
from konduktor.config.schema import config_schema_text
from konduktor.errors import ExitCode, UsageError
from konduktor.gpu.sharing import resource_key
from konduktor.quotas.by_hand import BY_HAND_DIR, write_by_hand
from konduktor.quotas.manifests import ManifestFormat, serialize, write_directory
from konduktor.quotas.multikueue import manager_kueue_settings, manager_view, render_clusters, worker_config
from konduktor.quotas.render import render


def register(app: typer.Typer) -> None:
    """Adds this module's commands to the top-level app."""
    app.command("validate")(validate)
    app.command("render")(render_manifests)
    app.command("schema")(schema)


def validate(
    config: ConfigArgument,
    output: Annotated[
        str,
        typer.Option("-o", "--output", help="text (errors and warnings on stderr); json or yaml (a report on stdout)."),
    ] = "text",
) -> None:
    """Check a config: every error at once with its line (exit 2); warnings alone exit 0."""
    if output not in ("text", "json", "yaml"):
        raise UsageError(f"-o {output}: not an output format", hint="-o text, -o json or -o yaml")
    if output in ("json", "yaml"):
        report, code = validation_report(config)
        print_document(report, "json" if output == "json" else "yaml")
        raise typer.Exit(code)
    loaded = load_checked(config, several_clusters=True)
    fleet_warnings = _fleet_warnings(loaded)
    report_warnings(fleet_warnings, loaded.filename)
    err.print(f"{loaded.filename}: valid ({_summary(loaded, len(fleet_warnings))})", markup=False)
    if loaded.config.clusters is not None:
        for line in fleet_lines(fleet_summary(loaded.config)):
            err.print(f"  {line}", markup=False)


def _fleet_warnings(loaded: LoadedConfig) -> list[Finding]:
    """With `clusters:`: each member that names no cluster, which `up` takes as a simulated one."""
    return with_lines(simulated_members(loaded.config), loaded.lines)


def fleet_summary(config: Config) -> dict[str, Any]:
    """A config with `clusters:` at a glance (`validate -o json`'s `fleet`): the dispatch, the manager with the
    teams' whole quotas, and each worker in dispatch order with its GPUs and each team's share there; each member
    with how it is reached (`simulated`: neither kubeconfig nor context)."""
    assert config.clusters is not None
    quotas = worker_quotas(config)
    accesses = {member.name: member for member in member_accesses(config)}

    def reached(name: str) -> dict[str, Any]:
        access = accesses[name].access
        return {"kubeconfig": access.kubeconfig, "context": access.context, "simulated": accesses[name].unnamed}

    return {
        "dispatch": config.clusters.dispatch,
        "manager": {
            "name": config.cluster.name,
            **reached(config.cluster.name),
            "teams": {name: {t: q.quota for t, q in team.gpus.items()} for name, team in config.teams.items()},
        },
        "workers": [
            {
                "name": worker.name,
                **reached(worker.name),
                "gpus": {t: n * config.gpu_types[t].gpus_per_node for t, n in worker.gpu_types.items()},
                "teams": quotas[worker.name],
            }
            for worker in config.clusters.workers
        ],
    }


def fleet_lines(summary: dict[str, Any]) -> list[str]:
    """`validate`'s text for a fleet: one line for the manager, one per worker in dispatch order."""

    def reached(member: dict[str, Any]) -> str:
        if member["simulated"]:
            return "the simulated cluster of its name"
        named = [f"kubeconfig {member['kubeconfig']}"] if member["kubeconfig"] else []
        return ", ".join(named + ([f"context {member['context']}"] if member["context"] else ["its current context"]))

    def shares(teams: dict[str, dict[str, int]]) -> str:
        held = [f"{team} " + " + ".join(f"{n} {t}" for t, n in gpus.items()) for team, gpus in teams.items()]
        return ", ".join(held) or "no team"

    manager = summary["manager"]
    workers = summary["workers"]
    lines = [
        f"fleet: manager {manager['name']} and {_count(len(workers), 'worker')}, dispatch {summary['dispatch']} "
        f"({', '.join(w['name'] for w in workers)})",
        f"manager {manager['name']} ({reached(manager)}): the teams' whole quotas: {shares(manager['teams'])}",
    ]
    for worker in workers:
        gpus = " + ".join(f"{n} {t}" for t, n in worker["gpus"].items())
        lines.append(f"worker {worker['name']} ({reached(worker)}): {gpus} GPUs; shares: {shares(worker['teams'])}")
    return lines


def validation_report(path: Path) -> tuple[dict[str, object], int]:
    """`validate -o json`: the file, whether it is valid, its errors and warnings with their lines; exit code."""
    try:
        loaded = load_config(path)
    except ConfigError as problem:
        findings = [f.as_json() for f in problem.findings]
        report: dict[str, object] = {
            "file": str(path),
            "valid": False,
            "errors": [f for f in findings if f["severity"] == "error"],
            "warnings": [f for f in findings if f["severity"] == "warning"],
        }
        return report, ExitCode.BAD_INPUT
    config = loaded.config
    report = {
        "file": str(path),
        "valid": True,
        "errors": [],
        "warnings": [f.as_json() for f in [*loaded.warnings, *_fleet_warnings(loaded)]],
        "teams": len(config.teams),
        "gpuTypes": len(config.gpu_types),
        "gpus": sum(t.capacity for t in config.gpu_types.values()),
    }
    if config.clusters is not None:
        report["fleet"] = fleet_summary(config)
    return report, ExitCode.OK


def _summary(loaded: LoadedConfig, more_warnings: int = 0) -> str:
    """Teams, GPU types, whole GPUs, the sharing groups with the slices their nodes advertise, warnings."""
    config = loaded.config
    gpus = sum(t.capacity for t in config.gpu_types.values())
    slices: dict[str, int] = {}
    for _, _, gpu_type, group in config.sharing_groups():
        for resource, count in group.units(gpu_type.gpus_per_node).items():
            slices[resource_key(resource)] = slices.get(resource_key(resource), 0) + count * group.nodes
    groups = len(list(config.sharing_groups()))
    shared = [f"{_count(groups, 'sharing group')} ({', '.join(f'{n} {key}' for key, n in slices.items())})"]
    return ", ".join(
        [
            _count(len(config.teams), "team"),
            _count(len(config.gpu_types), "GPU type"),
            _count(gpus, "GPU"),
            *(shared if groups else []),
            _count(len(loaded.warnings) + more_warnings, "warning"),
        ]
    )


def render_manifests(
    config: ConfigArgument,
    output: Annotated[
        str, typer.Option("-o", "--output", help="yaml (a stream of documents) or json (a v1 List).")
    ] = "yaml",
    output_dir: Annotated[
        Path | None,
        typer.Option("--output-dir", help="Write one file per object here instead (for GitOps)."),
    ] = None,
    alertmanager: Annotated[
        bool,
        typer.Option(
            "--alertmanager",
            help="Print Alertmanager's configuration from `alerts:` instead (for `amtool check-config` and "
            "`amtool config routes test`).",
        ),
    ] = False,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="With `clusters:` in the config: print this cluster's objects (the manager's by cluster.name, or a "
            "worker's), or with --chart-values its chart values; --output-dir writes every cluster's, one directory "
            "each, and the manager's by-hand files (Kueue's Configuration, the workers' Secret templates).",
        ),
    ] = None,
    chart_values: Annotated[
        bool,
        typer.Option(
            "--chart-values",
            help="Print the umbrella chart's values the config implies instead, as `up` passes them: Kueue's "
            "Configuration, Alertmanager's routes and receivers, the health controller's settings (for `helm -f` "
            "or a GitOps values file).",
        ),
    ] = False,
) -> None:
    """Render the Kueue objects, namespaces and RBAC of a config (nothing touches the cluster)."""
    if alertmanager:
        sys.stdout.write(yaml.safe_dump(alertmanager_config(load_checked(config).config), sort_keys=False))
        return
    if chart_values:
        values = _chart_values(load_checked(config, several_clusters=True), cluster)
        sys.stdout.write(yaml.safe_dump(values, sort_keys=False))
        return
    if output not in get_args(ManifestFormat):
        raise UsageError(
            f"-o {output}: not an output format",
            hint="-o yaml or -o json; to write one file per object: --output-dir DIR",
        )
    output_format = cast(ManifestFormat, output)
    loaded = load_checked(config, several_clusters=True)
    if loaded.config.clusters is not None:
        _render_clusters(loaded, output_format, output_dir, cluster)
        return
    if cluster is not None:
        raise UsageError(f"--cluster {cluster}: the config names no clusters", hint="leave out --cluster")
    objects = render(loaded.config)
    if output_dir is None:
        sys.stdout.write(serialize(objects, output_format))
        return
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(
            f"{output_dir}: not a directory", hint="give a directory, or leave out --output-dir for stdout"
        )
    done = write_directory(objects, output_format, output_dir, loaded.config.cluster.name)
    removed = f", removed {done.removed} stale" if done.removed else ""
    err.print(f"wrote {done.written} files to {output_dir}{removed}", markup=False)


def _render_clusters(
    loaded: LoadedConfig, output_format: ManifestFormat, output_dir: Path | None, cluster: str | None
) -> None:
    """`render` of a multi-cluster config: one cluster's objects on stdout, or a directory per cluster."""
    # Imported here: only several clusters read the chart, and `render` starts without the helm package.
    from konduktor.helm.values import kueue_frameworks

    sets = render_clusters(loaded.config, kueue_frameworks())
    names = [one.name for one in sets]
    if output_dir is None:
        if cluster is None:
            raise UsageError(
                "the config names several clusters: say which one to print",
                hint=f"--cluster NAME (one of {', '.join(names)}), or --output-dir DIR for a directory per cluster",
            )
        chosen = [one for one in sets if one.name == cluster]
        if not chosen:
            raise UsageError(f"--cluster {cluster}: no such cluster", hint=f"clusters: {', '.join(names)}")
        sys.stdout.write(serialize(chosen[0].objects, output_format))
        return
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"{output_dir}: not a directory", hint="give a directory; each cluster gets a directory in it")
    for one in sets:
        if cluster is not None and one.name != cluster:
            continue
        done = write_directory(one.objects, output_format, output_dir / one.name, one.name)
        removed = f", removed {done.removed} stale" if done.removed else ""
        err.print(
            f"{one.name} ({one.role}): wrote {done.written} files to {output_dir / one.name}{removed}", markup=False
        )
        if one.role == "manager":
            by_hand = output_dir / one.name / BY_HAND_DIR
            written, stale = write_by_hand(loaded.config, by_hand)
            removed = f", removed {stale} stale" if stale else ""
            err.print(
                f"{one.name} ({one.role}): wrote {written} files to {by_hand}{removed}: Kueue's Configuration and "
                "the workers' kubeconfig Secret templates, for applying by hand (not for kubectl apply as they are)",
                markup=False,
            )


def _chart_values(loaded: LoadedConfig, cluster: str | None) -> dict[str, Any]:
    """`render --chart-values`: the values `up` passes over the umbrella chart's own, for a single cluster's config,
    or for the cluster `--cluster` names of a fleet's (as `up` takes it there: the manager without GPU nodes and with
    the dispatcher in Kueue's Configuration, a worker with its share)."""
    config = loaded.config
    if config.clusters is None:
        if cluster is not None:
            raise UsageError(f"--cluster {cluster}: the config names no clusters", hint="leave out --cluster")
        return umbrella_values_of(config)
    names = [config.cluster.name, *(worker.name for worker in config.clusters.workers)]
    if cluster not in names:
        said = "say which cluster's values to print" if cluster is None else f"--cluster {cluster}: no such cluster"
        raise UsageError(
            f"the config names several clusters: {said}", hint=f"--cluster NAME, one of {', '.join(names)}"
        )
    if cluster == config.cluster.name:
        return umbrella_values_of(manager_view(config), manager_kueue_settings(config))
    [worker] = [worker for worker in config.clusters.workers if worker.name == cluster]
    return umbrella_values_of(worker_config(config, worker))


def umbrella_values_of(config: Config, kueue_settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The values `up` passes over the umbrella chart's own, for a config."""
    # Imported here: only this output reads the chart, and `render` starts without the helm package.
    from konduktor.helm.values import umbrella_defaults, umbrella_values

    return umbrella_values(config, umbrella_defaults(), kueue_settings)


def schema() -> None:
    """Print the JSON Schema of config.yaml (for editors and CI)."""
    sys.stdout.write(config_schema_text())


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
