"""Arguments several commands take, and how they are read: the config file (its warnings on stderr) and a
duration such as `--timeout 45m`. Light on purpose: `validate` and `render` start with it."""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Annotated

import typer

from konduktor.cli.console import warn
from konduktor.config.clusters import member_accesses
from konduktor.config.findings import Finding, format_path
from konduktor.config.load import LoadedConfig, load_config
from konduktor.config.model import duration_seconds
from konduktor.errors import UsageError

ConfigArgument = Annotated[Path, typer.Argument(help="The cluster's config.yaml.", show_default=False)]
_DURATION = re.compile(r"^(\d+(\.\d+)?(s|m|h))+$")


def load_checked(path: Path, *, several_clusters: bool = False) -> LoadedConfig:
    """The config at `path` with its warnings printed to stderr; ConfigError (exit 2) on any error. A config with
    `clusters:` is refused (exit 2) unless the command handles several clusters (`several_clusters`)."""
    loaded = load_config(path)
    if loaded.config.clusters is not None and not several_clusters:
        line = loaded.lines.get(("clusters",))
        where = f"{loaded.filename}:{line}" if line is not None else loaded.filename
        raise UsageError(
            f"{where}: clusters: this command works on one cluster, and the config names several",
            hint="`up`, `plan`, `status --config`, `nodes --config`, `validate` and `render` handle several "
            "clusters (docs/multicluster.md); give this command one cluster's config",
        )
    report_warnings(loaded.warnings, loaded.filename)
    return loaded


def report_warnings(findings: list[Finding], filename: str) -> None:
    """Warnings on stderr, each with its file:line and hint."""
    for finding in findings:
        warn(finding.located(filename), finding.hint)


def parse_timeout(text: str) -> float:
    """Seconds, or a duration such as 90s, 45m, 1h30m."""
    if text.isdigit():
        seconds = float(text)
    elif _DURATION.match(text):
        seconds = duration_seconds(text)
    else:
        raise UsageError(f"--timeout {text}: not a duration", hint="write seconds or e.g. 90s, 45m, 1h30m")
    if seconds <= 0:
        raise UsageError("--timeout must be more than zero")
    return seconds


def no_cluster_option(kubeconfig: Path | None, context: str | None, sim: str | None) -> None:
    """A config with `clusters:` names every cluster itself, so no option may name one (exit 2)."""
    if kubeconfig is not None or context is not None or sim is not None:
        raise UsageError(
            "the config names every cluster itself (clusters:): leave out --kubeconfig, --context and --sim"
        )


def load_fleet(path: Path, kubeconfig: Path | None, context: str | None, sim: str | None) -> LoadedConfig:
    """A `--config` that names several clusters, for a command that reads each (`status`, `nodes`): the config names
    every cluster itself, so no other option may name one (exit 2)."""
    no_cluster_option(kubeconfig, context, sim)
    loaded = load_checked(path, several_clusters=True)
    if loaded.config.clusters is None:
        raise UsageError(
            f"{path}: no clusters: section, so the config names one cluster", hint="leave out --config to read it"
        )
    return loaded


def check_kubeconfigs(loaded: LoadedConfig, path: Path, only: Collection[str] | None = None) -> None:
    """Every kubeconfig file a config with `clusters:` names for its members (or those of them `only` names) exists
    (exit 2 naming each missing one at its line), before any member is reached: a missing file is not an invalid
    one. A member that names a context and no file reads $KUBECONFIG's files, else ~/.kube/config, which must exist
    then."""
    missing = []
    for member in member_accesses(loaded.config):
        if only is not None and member.name not in only:
            continue
        file = member.kubeconfig_file(path.parent)
        if file is not None:
            key = (*member.path, "kubeconfig")
            named = member.access.kubeconfig
            said = f"{member.role} {member.name}'s kubeconfig {named}" + (f" ({file})" if str(file) != named else "")
        elif member.access.context is not None and not os.environ.get("KUBECONFIG"):
            file, key = Path("~/.kube/config").expanduser(), (*member.path, "context")
            said = f"{member.role} {member.name} names no kubeconfig and KUBECONFIG is not set, so kubectl's {file}"
        else:
            continue
        if file.exists():
            continue
        line = loaded.lines.get(key, loaded.lines.get(member.path))
        where = f"{loaded.filename}:{line}" if line is not None else loaded.filename
        missing.append(f"{where}: {format_path(key)}: {said}: no such file")
    if missing:
        raise UsageError(
            missing[0] if len(missing) == 1 else f"{len(missing)} kubeconfig files are missing",
            detail=None if len(missing) == 1 else "\n".join(missing),
            hint="give an existing file (~ expands, a relative path is taken from the config's directory); a member "
            "that names neither kubeconfig nor context is the simulated cluster of its name",
        )
