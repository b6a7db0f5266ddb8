"""Values files for `up` and `plan`, read and merged; `konduktor.helm.release.check_values` checks them against the
charts' schemas on this machine, before anything touches a cluster."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from konduktor.errors import UsageError
from konduktor.helm.schema import ValuesFile
from konduktor.helm.values import merge_values
from konduktor.kube.documents import load_documents


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
