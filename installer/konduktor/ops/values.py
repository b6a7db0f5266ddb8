"""Values files for `up` and `plan`, read and checked against the charts' schemas on this machine, before anything
touches a cluster (`konduktor.helm.schema`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyhelm3.errors import Error as HelmError

from konduktor.errors import UsageError
from konduktor.helm.release import command, helm_problem
from konduktor.helm.schema import ValuesFile, refusal, schema_problems
from konduktor.helm.values import merge_values
from konduktor.kube.documents import load_documents
from konduktor.tools.toolbox import Toolbox


def read_values_files(paths: Sequence[Path]) -> list[ValuesFile]:
    """Each file's first document; a file without one is bad input."""
    files = []
    for path in paths:
        documents = load_documents(path)
        if not documents:
            raise UsageError(f"{path}: no values in it")
        files.append(ValuesFile(path, documents[0]))
    return files


def merged(files: Sequence[ValuesFile]) -> dict[str, Any]:
    """The files' values, each over those before it (e.g. overlays/<environment>/values.yaml)."""
    extra: dict[str, Any] = {}
    for file in files:
        extra = merge_values(extra, file.values)
    return extra


def check_values(
    chart: Path, release: str, namespace: str, values: dict[str, Any], files: Sequence[ValuesFile], toolbox: Toolbox
) -> None:
    """Renders the chart with `values` on this machine (no cluster is read): a refusal by a chart's schema is a
    UsageError naming the files and fields; any other helm failure is reported as helm's."""

    async def run() -> None:
        helm = command(None, str(toolbox.path("helm")))
        await helm.template(release, chart, values, namespace=namespace, no_hooks=True)

    try:
        asyncio.run(run())
    except HelmError as problem:
        name = load_documents(chart / "Chart.yaml")[0]["name"]
        found = schema_problems(str(problem), name)
        if found:
            raise refusal(found, files, chart) from problem
        raise helm_problem(problem) from problem
