"""Installing and upgrading Konduktor's charts with the pinned helm, through pyhelm3.

Helm 4 installs with server-side apply. A release that fails midway (helm exits non-zero, the API server
goes away) is left as helm left it; running the same install again upgrades it to the wanted state, because
pyhelm3 proceeds from a failed or pending revision.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyhelm3 import Client
from pyhelm3.errors import ConnectionError as HelmConnectionError
from pyhelm3.errors import Error as HelmError
from pyhelm3.errors import ReleaseNotFoundError

from konduktor.errors import ClusterUnreachable, KonduktorError, PartialApply
from konduktor.paths import product_dir
from konduktor.tools.pinned import Toolbox
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


def client(kubeconfig: Path | None, toolbox: Toolbox | None = None, context: str | None = None) -> Client:
    """helm on one cluster: `kubeconfig` (None: $KUBECONFIG's files merged, else ~/.kube/config, as helm reads
    them) and its `context` (None: the current one)."""
    helm = (toolbox or Toolbox()).path("helm")
    return Client(
        executable=str(helm),
        kubeconfig=kubeconfig,
        kubecontext=context,
        default_timeout="10m",
        history_max_revisions=5,
    )


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
    async def run() -> Release | None:
        helm = client(kubeconfig, toolbox, context)
        try:
            revision = await helm.get_current_revision(release, namespace=namespace)
        except ReleaseNotFoundError:
            return None
        except HelmError as problem:
            raise helm_problem(problem) from problem
        chart = await revision.chart_metadata()
        return Release(release, namespace, revision.revision, str(revision.status.value), chart.name)

    return asyncio.run(run())


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
