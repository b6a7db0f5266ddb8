"""Installing and upgrading Konduktor's charts with the pinned helm, through pyhelm3.

Helm 4 installs with server-side apply. A release that fails midway (helm exits non-zero, the API server
goes away) is left as helm left it; running the same install again upgrades it to the wanted state, because
pyhelm3 proceeds from a failed or pending revision.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pyhelm3 import Client, Command
from pyhelm3.command import SafeLoader
from pyhelm3.errors import ConnectionError as HelmConnectionError
from pyhelm3.errors import Error as HelmError
from pyhelm3.errors import ReleaseNotFoundError

from konduktor.errors import ClusterUnreachable, KonduktorError, PartialApply
from konduktor.helm.schema import ValuesFile, refusal, schema_problems
from konduktor.paths import product_dir
from konduktor.tools.toolbox import Toolbox
from konduktor.vocabulary import SYSTEM_NAMESPACE

CHARTS = product_dir("charts")
# pyhelm3 logs each helm command that exits non-zero as a warning, even the status probe that finds no release
# before a first install. Its failures reach this module as exceptions, which say what went wrong.
logging.getLogger("pyhelm3").addHandler(logging.NullHandler())
logging.getLogger("pyhelm3").propagate = False
# Konduktor's Helm release: where `up` installs it and what preflight recognises as ours.
NAMESPACE = SYSTEM_NAMESPACE
RELEASE = "konduktor"


def release_namespace(namespace: str = NAMESPACE) -> dict[str, Any]:
    """The release namespace, as `up` applies it before helm runs. Every subchart's hooks run in it before any
    template (the umbrella moves no chart elsewhere), and it holds privileged pods: the node exporter (host network
    and PID), the log collector (host paths) and the GPU Operator's operands."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}},
    }


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    revision: int
    status: str
    chart: str


# What helm prints when the cluster did not answer or refused its credentials or rights.
_OUTAGE_WORDS = (
    "cluster unreachable",
    "connection refused",
    "i/o timeout",
    "no such host",
    "forbidden",
    "unauthorized",
)


def helm_problem(problem: HelmError) -> KonduktorError:
    """A helm failure as the error a user acts on: an outage or missing rights is ClusterUnreachable."""
    said = str(problem).strip().splitlines()
    first = said[-1] if said else f"helm exited {problem.returncode}"
    if isinstance(problem, HelmConnectionError) or any(word in first.lower() for word in _OUTAGE_WORDS):
        return ClusterUnreachable(f"helm could not read the cluster: {first}")
    return KonduktorError(f"helm failed: {first}")


def command(kubeconfig: Path | None, executable: str, context: str | None = None) -> Command:
    """helm on one cluster: `kubeconfig` (None: $KUBECONFIG's files merged, else ~/.kube/config, as helm reads
    them) and its `context` (None: the current one)."""
    return Command(
        executable=executable,
        kubeconfig=kubeconfig,
        kubecontext=context,
        default_timeout="10m",
        history_max_revisions=5,
    )


def client(kubeconfig: Path | None, toolbox: Toolbox | None = None, context: str | None = None) -> Client:
    executable = str((toolbox or Toolbox()).path("helm"))
    return Client(command(kubeconfig, executable, context), executable=executable)


def install_or_upgrade(
    kubeconfig: Path | None,
    chart: Path,
    release: str,
    namespace: str,
    values: dict[str, Any],
    *,
    wait: bool = False,
    toolbox: Toolbox | None = None,
    context: str | None = None,
) -> Release:
    """`helm upgrade --install` with these values; safe to repeat (an unchanged release changes no object)."""

    async def run() -> Release:
        helm = client(kubeconfig, toolbox, context)
        loaded = await helm.get_chart(chart)
        try:
            await helm.get_current_revision(release, namespace=namespace)
            upgrade = True
        except ReleaseNotFoundError:
            upgrade = False
        except HelmError as problem:
            raise helm_problem(problem) from problem
        # force_conflicts: Helm 4 applies server-side; fields another manager touched (kubectl edit) are
        # taken back, as a re-run of the installer should. A failed upgrade rolls back to the working
        # revision; a failed first install stays (GPU components can be slow to become Ready), and the
        # next run upgrades it.
        revision = await helm.install_or_upgrade_release(
            release,
            loaded,
            values,
            namespace=namespace,
            create_namespace=True,
            wait=wait,
            force_conflicts=True,
            rollback_on_failure=upgrade and wait,
        )
        return Release(release, namespace, revision.revision, str(revision.status.value), loaded.metadata.name)

    try:
        return asyncio.run(run())
    except KonduktorError:
        raise
    except HelmError as problem:
        raise PartialApply(
            f"helm could not install {chart.name} as release {release!r} in {namespace}: {problem}",
            hint="fix the cause and run the same command again; it upgrades the release from where it stopped",
        ) from problem


def current(
    kubeconfig: Path | None, release: str, namespace: str, toolbox: Toolbox | None = None, context: str | None = None
) -> Release | None:
    return asyncio.run(_current(client(kubeconfig, toolbox, context), release, namespace))


async def _current(helm: Client, release: str, namespace: str) -> Release | None:
    try:
        revision = await helm.get_current_revision(release, namespace=namespace)
    except ReleaseNotFoundError:
        return None
    except HelmError as problem:
        raise helm_problem(problem) from problem
    chart = await revision.chart_metadata()
    return Release(release, namespace, revision.revision, str(revision.status.value), chart.name)


@dataclass(frozen=True)
class Rendered:
    """A release as deployed (None: not installed) and the objects of its manifest, beside the objects an upgrade
    with given values would make it hold."""

    installed: Release | None
    deployed: list[dict[str, Any]]
    wanted: list[dict[str, Any]]


def render_upgrade(
    kubeconfig: Path | None,
    chart: Path,
    release: str,
    namespace: str,
    values: dict[str, Any],
    *,
    toolbox: Toolbox | None = None,
    context: str | None = None,
) -> Rendered:
    """The deployed release's objects and those of `helm upgrade --install --dry-run=server` with these values.

    A server-side dry run, because templates read the cluster (`lookup`), which a client-side render sees as
    empty; it changes nothing. pyhelm3 has no option for it, so its command runner is given the arguments."""

    async def run() -> Rendered:
        executable = str((toolbox or Toolbox()).path("helm"))
        helm = command(kubeconfig, executable, context)
        installed = await _current(Client(helm, executable=executable), release, namespace)
        deployed = [obj for obj in await helm.get_resources(release, namespace=namespace) if obj] if installed else []
        arguments = ["upgrade", release, chart, "--install", "--dry-run=server", "--namespace", namespace]
        said = await helm.run([*arguments, "--output", "json", "--values", "-"], json.dumps(values).encode())
        # Helm may print lines (a pulled chart's digest) before the release's JSON.
        manifest = json.loads(said[said.index(b"{") :]).get("manifest", "")
        wanted = [dict(obj) for obj in yaml.load_all(manifest, Loader=SafeLoader) if obj]
        return Rendered(installed, deployed, wanted)

    try:
        return asyncio.run(run())
    except HelmError as problem:
        raise helm_problem(problem) from problem


def render_new(
    chart: Path, release: str, namespace: str, values: dict[str, Any], toolbox: Toolbox | None = None
) -> Rendered:
    """The objects a first install on a cluster that does not exist yet would make: a client-side render, whose
    `lookup` finds nothing, as it would find on the new cluster."""

    async def run() -> list[dict[str, Any]]:
        helm = command(None, str((toolbox or Toolbox()).path("helm")))
        rendered = await helm.template(release, chart, values, namespace=namespace, no_hooks=True)
        return [dict(obj) for obj in rendered if obj]

    try:
        return Rendered(None, [], asyncio.run(run()))
    except HelmError as problem:
        raise helm_problem(problem) from problem


def check_values(
    chart: Path, release: str, namespace: str, values: dict[str, Any], files: Sequence[ValuesFile], toolbox: Toolbox
) -> None:
    """Renders the chart with `values` on this machine (no cluster is read), for `up` and `plan` before anything
    touches a cluster: a refusal by a chart's schema is a UsageError naming the files and fields
    (`konduktor.helm.schema`); any other helm failure is reported as helm's."""

    async def run() -> None:
        helm = command(None, str(toolbox.path("helm")))
        await helm.template(release, chart, values, namespace=namespace, no_hooks=True)

    try:
        asyncio.run(run())
    except HelmError as problem:
        name = yaml.safe_load((chart / "Chart.yaml").read_text())["name"]
        found = schema_problems(str(problem), name)
        if found:
            raise refusal(found, files, chart) from problem
        raise helm_problem(problem) from problem


def uninstall(
    kubeconfig: Path | None, release: str, namespace: str, toolbox: Toolbox | None = None, context: str | None = None
) -> bool:
    """`helm uninstall`; False when there was no such release."""

    async def run() -> bool:
        helm = client(kubeconfig, toolbox, context)
        try:
            await helm.get_current_revision(release, namespace=namespace)
        except ReleaseNotFoundError:
            return False
        except HelmError as problem:
            raise helm_problem(problem) from problem
        await helm.uninstall_release(release, namespace=namespace, wait=True)
        return True

    return asyncio.run(run())
