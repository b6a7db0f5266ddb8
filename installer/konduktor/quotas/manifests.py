"""Rendered objects as text: one YAML stream, a JSON `v1 List`, or one file per object."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ruamel.yaml import YAML

from konduktor.quotas.render import CONFIG_LABEL

ManifestFormat = Literal["yaml", "json"]
# `NNN-kind-[namespace-]name.ext`: the number keeps apply order when a directory is applied as a whole.
FILE_NAME = re.compile(r"^\d{3}-[a-z]+-[a-z0-9.-]+\.(yaml|json)$")


def _yaml() -> YAML:
    # Imported here: `validate` reaches this module through the CLI but never writes YAML.
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096  # long label values stay on one line, so diffs stay small
    yaml.indent(mapping=2, sequence=2, offset=0)
    return yaml


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    """A multi-document YAML stream, documents separated by `---`."""
    stream = io.StringIO()
    _yaml().dump_all(list(objects), stream)
    text = stream.getvalue()
    return text if text.startswith("---") or not text else "---\n" + text


def to_json(objects: Sequence[dict[str, Any]]) -> str:
    """A `v1 List` that `kubectl apply -f` accepts."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}, indent=2) + "\n"


def serialize(objects: Sequence[dict[str, Any]], output_format: ManifestFormat) -> str:
    return to_yaml(objects) if output_format == "yaml" else to_json(objects)


def serialize_one(obj: dict[str, Any], output_format: ManifestFormat) -> str:
    if output_format == "json":
        return json.dumps(obj, indent=2) + "\n"
    stream = io.StringIO()
    _yaml().dump(obj, stream)
    return stream.getvalue()


def file_name(index: int, obj: dict[str, Any], output_format: ManifestFormat) -> str:
    """`003-clusterqueue-team-a.yaml`, `010-localqueue-team-a-default.yaml`."""
    metadata = obj["metadata"]
    parts = [f"{index:03d}", obj["kind"].lower()]
    if metadata.get("namespace"):
        parts.append(metadata["namespace"])
    parts.append(metadata["name"])
    return "-".join(parts) + f".{output_format}"


def file_set(objects: Sequence[dict[str, Any]], output_format: ManifestFormat) -> dict[str, str]:
    """File name -> content for a rendered-manifests directory, in apply order."""
    return {
        file_name(index, obj, output_format): serialize_one(obj, output_format)
        for index, obj in enumerate(objects, start=1)
    }


@dataclass(frozen=True)
class WrittenDirectory:
    written: int
    removed: int


def write_directory(
    objects: Sequence[dict[str, Any]], output_format: ManifestFormat, directory: Path, cluster: str
) -> WrittenDirectory:
    """One file per object in `directory`, and the files an earlier render for the same cluster wrote that the config
    no longer has removed: an object dropped from the config must not stay in a GitOps directory. Files anyone else
    put there stay."""
    directory.mkdir(parents=True, exist_ok=True)
    files = file_set(objects, output_format)
    stale = [path for path in sorted(directory.iterdir()) if path.name not in files and _rendered_for(path, cluster)]
    for path in stale:
        path.unlink()
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return WrittenDirectory(written=len(files), removed=len(stale))


def _rendered_for(path: Path, cluster: str) -> bool:
    """A file a render for `cluster` wrote (never a file the user put there)."""
    if not path.is_file() or not FILE_NAME.match(path.name):
        return False
    text = path.read_text(encoding="utf-8", errors="replace")
    # The ownership label with this cluster's name, as YAML (`key: value`) or JSON (`"key": "value"`).
    label = rf'^\s*"?{re.escape(CONFIG_LABEL)}"?:\s*"?{re.escape(cluster)}"?,?\s*$'
    return re.search(label, text, re.MULTILINE) is not None
