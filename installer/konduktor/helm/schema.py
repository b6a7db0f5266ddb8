"""Values files checked against the charts' values.schema.json before anything touches a cluster: helm's refusal
read, and each refused field traced to the values file and line that set it (pure but for reading those files;
`konduktor.helm.release.check_values` runs helm).

Helm checks the values it is given against the chart's `values.schema.json` and each subchart's (its section)
whenever it renders; `up` would find out only when its install fails, after it started changing the cluster. So
`up` and `plan` first render the chart on this machine (`helm template`, which reads no cluster) with the same
values: a refusal is bad input, reported with the values file and the line that set the refused field.

Helm 4 words a refusal as `values don't meet the specifications of the schema(s) in the following chart(s):`,
then per chart `NAME:` and one `- at '/json/pointer': reason` line per problem (helm 3, which a real cluster's
workstation may run: `- dotted.path: reason`, `- (root): Additional property x is not allowed`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from konduktor.errors import UsageError

SCHEMA_REFUSAL = "don't meet the specifications of the schema"
_CHART_LINE = re.compile(r"^(?P<chart>[A-Za-z0-9][-A-Za-z0-9_.]*):\s*$")
_POINTER = re.compile(r"at '(?P<pointer>[^']*)'")
_NAMED_KEY = re.compile(r"(?:additional propert(?:y|ies)|missing propert(?:y|ies)) '(?P<key>[^']+)'")
_HELM3_KEY = re.compile(r"Additional property (?P<key>\S+) is not allowed")


@dataclass(frozen=True)
class ValuesFile:
    """A values file as given (`-f`), with its first document."""

    path: Path
    values: dict[str, Any]


@dataclass(frozen=True)
class SchemaProblem:
    """One field a chart's schema refused: the chart, the field's keys from the top of the values, the reason."""

    chart: str | None
    keys: tuple[str, ...]
    reason: str

    @property
    def field(self) -> str:
        return ".".join(self.keys) or "(the values as a whole)"


def schema_problems(said: str, top_chart: str) -> list[SchemaProblem]:
    """The refused fields in helm's words; none when helm refused for another reason. A subchart's field is given
    under the subchart's key, as the values file sets it."""
    if SCHEMA_REFUSAL not in said:
        return []
    problems, chart = [], None
    for line in said.splitlines():
        text = line.strip()
        if (heading := _CHART_LINE.match(text)) is not None:
            chart = heading["chart"]
            continue
        if not text.startswith("- "):
            continue
        pointer = _POINTER.search(text)
        if pointer is not None:  # helm 4: - at '/a/b': reason
            keys = [k.replace("~1", "/").replace("~0", "~") for k in pointer["pointer"].split("/") if k]
            reason = text.split("': ", 1)[1] if "': " in text else text[2:]
        else:  # helm 3: - a.b: reason, or - (root): reason
            where, _, reason = text[2:].partition(": ")
            keys = [] if where == "(root)" else where.split(".")
        named = _NAMED_KEY.search(text) or _HELM3_KEY.search(text)
        if named is not None:
            keys.append(named["key"].split("', '")[0])
        if chart is not None and chart != top_chart:
            keys.insert(0, chart)
        problems.append(SchemaProblem(chart, tuple(keys), reason))
    return problems


def blame(problem: SchemaProblem, files: Sequence[ValuesFile]) -> tuple[Path, int | None] | None:
    """The file that set the refused field (the last one that sets the most of its keys: later files win) and the
    line of the deepest key it sets; None when no file sets any of them (the chart's or the config's value)."""
    best: tuple[int, ValuesFile] | None = None
    for file in files:
        depth = _depth(file.values, problem.keys)
        if depth and (best is None or depth >= best[0]):
            best = (depth, file)
    if best is None:
        return None
    depth, file = best
    return file.path, _line(file.path, problem.keys[:depth])


def _depth(values: Mapping[str, Any], keys: Sequence[str]) -> int:
    """How many of `keys`, from the top, the values set."""
    depth, node = 0, values
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            break
        depth, node = depth + 1, node[key]
    return depth


def _line(path: Path, keys: Sequence[str]) -> int | None:
    """The 1-based line of the last of `keys` in the YAML file."""
    try:
        node: Any = YAML(typ="rt").load(path.read_text())
        line = None
        for key in keys:
            line = node.lc.key(key)[0] + 1
            node = node[key]
        return line
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def refusal(problems: Sequence[SchemaProblem], files: Sequence[ValuesFile], chart: Path) -> UsageError:
    """The error `up` and `plan` stop with: each refused field with the file and line that set it."""
    lines = []
    for problem in problems:
        where = blame(problem, files)
        if where is None:
            lines.append(f"{problem.field}: {problem.reason} (not set by a values file: the chart's or the config's)")
        else:
            path, line = where
            lines.append(f"{path}{f':{line}' if line else ''}: {problem.field}: {problem.reason}")
    first = lines[0] if len(lines) == 1 else f"{len(lines)} values the chart {chart.name} refuses"
    return UsageError(
        f"{first}; nothing was changed",
        detail="\n".join(lines) if len(lines) > 1 else None,
        hint=f"the allowed values are in {chart / 'values.schema.json'} (and each subchart's)",
    )
