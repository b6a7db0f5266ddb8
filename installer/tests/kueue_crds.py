"""Rendered Kueue objects against the pinned Kueue's own CRD schemas (config/components/crd/bases), without a cluster.

Each object is checked with its kind's openAPIV3Schema of the version it names: types, enums, required fields,
lengths, patterns, and fields the schema does not have (which the API server would drop without a word). CEL rules
(x-kubernetes-validations) are not run here; kueue_rules.py states the ones the renderer must keep.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import jsonschema

from konduktor.sim.kueue import crds
from konduktor.tools.gobuild import module_dir
from konduktor.tools.toolbox import Toolbox


@functools.cache
def schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the strict openAPIV3Schema of every Kueue CRD version."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for crd in crds(module_dir(Toolbox().tools["kueue"])):
        spec = crd["spec"]
        for version in spec["versions"]:
            api_version = f"{spec['group']}/{version['name']}"
            found[(api_version, spec["names"]["kind"])] = _strict(version["schema"]["openAPIV3Schema"])
    return found


def _strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever the API server would prune them."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _strict(value) for key, value in schema.items() if key != "x-kubernetes-validations"}
    if isinstance(schema.get("pattern"), str):
        strict["pattern"] = _python_pattern(schema["pattern"])
    if (
        schema.get("type") == "object"
        and "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        strict["additionalProperties"] = False
    return strict


def _python_pattern(pattern: str) -> str:
    """A Go (RE2) pattern in Python's words: Go takes a flag group such as `(?i)` anywhere, Python only first."""
    for flags in re.findall(r"\(\?[a-z]+\)", pattern):
        pattern = flags + pattern.replace(flags, "", 1)
    return pattern


def schema_problems(objects: Sequence[dict[str, Any]]) -> list[str]:
    """Every schema violation of the Kueue objects among `objects`; other kinds are passed over."""
    problems = []
    for obj in objects:
        schema = schemas().get((obj["apiVersion"], obj["kind"]))
        if schema is None:
            if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
                problems.append(f"{obj['kind']} {obj['apiVersion']}: no such kind in the pinned Kueue")
            continue
        # metadata is checked by the API server, not the CRD: only its shape matters here.
        body = {key: value for key, value in obj.items() if key != "metadata"}
        metadata_free = {**schema, "properties": {**schema.get("properties", {}), "metadata": {}}}
        validator = jsonschema.Draft7Validator(metadata_free)
        for error in validator.iter_errors(body):
            where = "/".join(str(part) for part in error.absolute_path)
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {where}: {error.message}")
    return problems
