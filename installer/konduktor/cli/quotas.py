"""`konduktor-install validate` and `render`: the team-quota config, checked and rendered to Kueue objects."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from konduktor.cli.console import err
from konduktor.config.findings import Finding
from konduktor.config.load import LoadedConfig, load_config
from konduktor.config.schema import config_schema_text
from konduktor.errors import UsageError
from konduktor.quotas.manifests import FILE_NAME, ManifestFormat, file_set, serialize
from konduktor.quotas.render import CONFIG_LABEL, render

ConfigArgument = Annotated[Path, typer.Argument(help="The cluster's config.yaml.", show_default=False)]


def register(app: typer.Typer) -> None:
    """Adds this module's commands to the top-level app."""
    app.command("validate")(validate)
    app.command("render")(render_manifests)
    app.command("schema")(schema)


def validate(config: ConfigArgument) -> None:
    """Check a config: every error at once with its line (exit 2); warnings alone exit 0."""
    loaded = load_checked(config)
    gpus = sum(t.capacity for t in loaded.config.gpu_types.values())
    counts = ", ".join(
        [
            _count(len(loaded.config.teams), "team"),
            _count(len(loaded.config.gpu_types), "GPU type"),
            _count(gpus, "GPU"),
            _count(len(loaded.warnings), "warning"),
        ]
    )
    err.print(f"{loaded.filename}: valid ({counts})", markup=False)


def render_manifests(
    config: ConfigArgument,
    output: Annotated[
        str, typer.Option("-o", "--output", help="A directory for one file per object, or - for stdout.")
    ] = "-",
    output_format: Annotated[ManifestFormat, typer.Option("--format", help="yaml or json.")] = "yaml",
) -> None:
    """Render the Kueue objects, namespaces and RBAC of a config (nothing touches the cluster)."""
    loaded = load_checked(config)
    objects = render(loaded.config)
    if output == "-":
        sys.stdout.write(serialize(objects, output_format))
        return
    directory = Path(output)
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{output}: not a directory", hint="give a directory, or - for stdout")
    directory.mkdir(parents=True, exist_ok=True)
    files = file_set(objects, output_format)
    stale = [
        path
        for path in sorted(directory.iterdir())
        if path.name not in files and _rendered_by_us(path, loaded.config.cluster.name)
    ]
    for path in stale:
        path.unlink()  # an object the config no longer has must not stay in a GitOps directory
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    err.print(
        f"wrote {len(files)} files to {directory}" + (f", removed {len(stale)} stale" if stale else ""), markup=False
    )


def schema() -> None:
    """Print the JSON Schema of config.yaml (for editors and CI)."""
    sys.stdout.write(config_schema_text())


def load_checked(path: Path) -> LoadedConfig:
    """The config at `path` with its warnings printed to stderr; ConfigError (exit 2) on any error."""
    loaded = load_config(path)
    for finding in loaded.warnings:
        _report_warning(finding, loaded.filename)
    return loaded


def _report_warning(finding: Finding, filename: str) -> None:
    # Paths such as nodeLabels[nvidia.com/gpu.product] would otherwise be read as rich markup tags.
    err.print(f"[bold yellow]warning:[/] {escape(finding.located(filename))}", markup=True, highlight=False)
    for line in (finding.hint or "").splitlines():
        err.print(f"  [yellow]hint:[/] {escape(line)}", markup=True, highlight=False)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _rendered_by_us(path: Path, cluster: str) -> bool:
    """A file this command wrote for the same cluster earlier (never a file the user put there)."""
    if not path.is_file() or not FILE_NAME.match(path.name):
        return False
    text = path.read_text(encoding="utf-8", errors="replace")
    # The ownership label with this cluster's name, as YAML (`key: value`) or JSON (`"key": "value"`).
    label = rf'^\s*"?{re.escape(CONFIG_LABEL)}"?:\s*"?{re.escape(cluster)}"?,?\s*$'
    return re.search(label, text, re.MULTILINE) is not None
