#!/usr/bin/env python3
"""Report every value the umbrella sets for an upstream chart that the chart does not have.

Helm ignores unknown keys in a subchart's values, so a misspelt or renamed key (a chart upgrade renamed
`SingleBinary`, a typo in `serviceMonitorSelectorNilUsesHelmValue`) silently does nothing. This compares the
keys of the umbrella's values files with the downloaded dependencies:

    helm dependency build charts/konduktor          # where the chart repositories are reachable
    .venv/bin/python charts/konduktor/hack/check-values.py charts/konduktor/charts

CHARTS is a directory of dependencies, as packages (`<name>-<version>.tgz`, what `helm dependency build`
writes) or unpacked directories. The values files default to the umbrella's values.yaml and every
overlays/*/values.yaml; `--chart` names another chart whose Chart.yaml pins the dependencies.

A key the umbrella sets under a dependency is known when:
- the chart's values.yaml has it;
- it lies under a map that is empty or null in the chart's values.yaml (a free-form map such as
  `additionalLabels: {}`);
- its first part names a subchart of that chart (by name or alias) and the subchart knows the rest;
- the chart's templates read exactly that path (`.Values.a.b`), for keys documented only in comments;
- the chart's values.schema.json declares a section below the top level open (`additionalProperties`).
Each dependency's `enabled` is the umbrella's condition, not a chart value, and is not checked.

Exit status: 0 when every key is known, 1 when some are not, 2 when the arguments are wrong.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

UMBRELLA = Path(__file__).resolve().parents[1]
REPO = UMBRELLA.parents[1]
VALUES_REFERENCE = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def load_yaml(text: str) -> Any:
    return YAML(typ="safe").load(text)


@dataclass
class Chart:
    """One chart's values, schema, template references and subcharts, whether packaged or unpacked."""

    name: str
    version: str
    values: Any
    schema: Any
    template_paths: set[tuple[str, ...]]
    subcharts: dict[str, Chart] = field(default_factory=dict)


def _files_of_directory(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}


def _files_of_package(data: bytes) -> dict[str, bytes]:
    """A chart package's files, relative to its top folder (`gpu-operator/values.yaml` -> `values.yaml`)."""
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            extracted = archive.extractfile(member) if member.isfile() else None
            if extracted is not None:
                files[member.name.split("/", 1)[-1]] = extracted.read()
    return files


def _chart_from_files(files: dict[str, bytes]) -> Chart:
    metadata = load_yaml(files["Chart.yaml"].decode())
    template_paths = {
        tuple(match.group(1).lstrip(".").split("."))
        for name, content in files.items()
        if name.startswith("templates/")
        for match in VALUES_REFERENCE.finditer(content.decode(errors="replace"))
    }
    schema = json.loads(files["values.schema.json"]) if "values.schema.json" in files else None
    chart = Chart(
        name=metadata["name"],
        version=str(metadata.get("version", "")),
        values=load_yaml(files["values.yaml"].decode()) if "values.yaml" in files else {},
        schema=schema,
        template_paths=template_paths,
    )
    for sub in _subcharts(files):
        chart.subcharts[sub.name] = sub
    # Subcharts are addressed by their alias where the chart gives one.
    for dependency in metadata.get("dependencies") or []:
        if dependency.get("alias") and dependency["name"] in chart.subcharts:
            chart.subcharts[dependency["alias"]] = chart.subcharts[dependency["name"]]
    return chart


def _subcharts(files: dict[str, bytes]) -> Iterator[Chart]:
    folders = {name.split("/")[1] for name in files if name.startswith("charts/") and name.count("/") >= 2}
    for folder in sorted(folders):
        prefix = f"charts/{folder}/"
        inner = {name.removeprefix(prefix): data for name, data in files.items() if name.startswith(prefix)}
        if "Chart.yaml" in inner:
            yield _chart_from_files(inner)
    for name, data in sorted(files.items()):
        if name.startswith("charts/") and name.count("/") == 1 and name.endswith(".tgz"):
            yield _chart_from_files(_files_of_package(data))


def load_charts(directory: Path) -> dict[str, Chart]:
    charts = {}
    for entry in sorted(directory.iterdir()):
        if entry.is_dir() and (entry / "Chart.yaml").is_file():
            chart = _chart_from_files(_files_of_directory(entry))
        elif entry.is_file() and entry.name.endswith(".tgz"):
            chart = _chart_from_files(_files_of_package(entry.read_bytes()))
        else:
            continue
        charts[chart.name] = chart
    return charts


def leaf_paths(values: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key path the values set; lists and scalars end a path, empty maps are paths themselves."""
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from leaf_paths(value, (*prefix, str(key)))
    elif prefix:
        yield prefix


def _schema_open(schema: Any, path: tuple[str, ...]) -> bool:
    """Whether the schema declares a section on the path, below the top level, open to any keys."""
    node = schema
    for depth, key in enumerate(path):
        if not isinstance(node, dict):
            return False
        if depth > 0 and node.get("additionalProperties") not in (None, False):
            return True
        properties = node.get("properties") or {}
        if key not in properties:
            return False
        node = properties[key]
    return False


def known(chart: Chart, path: tuple[str, ...]) -> bool:
    if path in chart.template_paths:
        return True
    if _schema_open(chart.schema, path):
        return True
    if path[0] in chart.subcharts and (len(path) == 1 or known(chart.subcharts[path[0]], path[1:])):
        return True
    node = chart.values
    for depth, key in enumerate(path):
        if depth > 0 and (node is None or node == {}):
            return True  # a free-form map: any key below it is the user's
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def unknown_keys(charts: dict[str, Chart], values: dict[str, Any], dependencies: dict[str, str]) -> list[str]:
    """`<dependency>.<key>` for each key the values set that the dependency's chart does not know."""
    problems = []
    for alias, chart_name in dependencies.items():
        chart = charts.get(chart_name)
        section = values.get(alias)
        if chart is None or not isinstance(section, dict):
            continue
        for path in leaf_paths({k: v for k, v in section.items() if k != "enabled"}):
            if not known(chart, path):
                problems.append(f"{alias}.{'.'.join(path)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Report umbrella values unknown to the pinned upstream charts.")
    parser.add_argument("charts", type=Path, help="directory of the downloaded dependencies (.tgz or unpacked)")
    parser.add_argument("--values", type=Path, nargs="+", help="values files (default: umbrella and overlays)")
    parser.add_argument("--chart", type=Path, default=UMBRELLA, help="the chart whose Chart.yaml pins the charts")
    args = parser.parse_args(argv)
    if not args.charts.is_dir():
        parser.error(f"{args.charts}: not a directory")
    overlays = sorted(REPO.glob("overlays/*/values.yaml")) if args.chart.resolve() == UMBRELLA else []
    values_files = args.values or [args.chart / "values.yaml", *overlays]
    metadata = load_yaml((args.chart / "Chart.yaml").read_text())
    # konduktor-core is ours (file://); its schema already refuses unknown keys.
    pinned = {
        d.get("alias") or d["name"]: d for d in metadata["dependencies"] if not d["repository"].startswith("file://")
    }
    charts = load_charts(args.charts)
    dependencies = {alias: d["name"] for alias, d in pinned.items()}

    status = 0
    for alias, dependency in pinned.items():
        chart = charts.get(dependency["name"])
        if chart is None:
            print(f"{alias}: not checked, no {dependency['name']} chart in {args.charts}")
        elif chart.version != str(dependency["version"]):
            print(f"{alias}: checked against {chart.version}, but Chart.yaml pins {dependency['version']}")
    for path in values_files:
        for problem in unknown_keys(charts, load_yaml(path.read_text()) or {}, dependencies):
            print(f"{path}: {problem}: not a value of the pinned chart")
            status = 1
    if status == 0:
        checked = sorted(alias for alias, d in pinned.items() if d["name"] in charts)
        print(f"every key is known to {', '.join(checked) or 'no chart'} ({len(values_files)} values files)")
    return status


if __name__ == "__main__":
    sys.exit(main())
