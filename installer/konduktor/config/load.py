"""Read `config.yaml` with ruamel.yaml, keeping the line of every key, and report all problems at once.

YAML syntax errors, schema errors (pydantic) and lint findings all come back as `Finding`s with a line;
errors are raised together as one `ConfigError` (exit code 2), warnings are returned.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from konduktor.config.findings import (
    ConfigError,
    Finding,
    YamlPath,
    did_you_mean,
    error,
    sort_by_line,
    with_lines,
)
from konduktor.config.lint import lint
from konduktor.config.model import Config
from konduktor.errors import UsageError

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class LoadedConfig:
    """A config without errors, its warnings, and where each key was in the file."""

    config: Config
    warnings: list[Finding]
    filename: str
    lines: Mapping[YamlPath, int]


def load_config(path: str | Path) -> LoadedConfig:
    """Read and check a config file; raises ConfigError (exit 2) listing every error."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(
            f"{path}: no such file", hint="start from examples/config.yaml in the Konduktor repository"
        ) from None
    except (IsADirectoryError, UnicodeDecodeError, PermissionError) as problem:
        raise UsageError(f"{path}: cannot read the config ({problem})") from None
    return parse_config(text, str(path))


def parse_config(text: str, filename: str = "config.yaml") -> LoadedConfig:
    """Check config text; raises ConfigError listing every error, returns the warnings."""
    data, lines = read_yaml(text, filename)
    config = validate_model(Config, data, lines, filename)
    findings = sort_by_line(with_lines(lint(config), lines))
    if any(f.is_error for f in findings):
        raise ConfigError(filename, findings)
    return LoadedConfig(config, [f for f in findings if not f.is_error], filename, lines)


def read_yaml(text: str, filename: str) -> tuple[dict[str, Any], dict[YamlPath, int]]:
    """A YAML mapping as plain data, and the line of every key and list item; ConfigError if it is not one."""
    lines: dict[YamlPath, int] = {(): 1}
    try:
        document = YAML(typ="rt").load(text)
    except YAMLError as problem:
        raise ConfigError(filename, [_yaml_finding(problem)]) from None
    if document is None:
        raise ConfigError(filename, [error("yaml", (), "the file is empty", hint="start from examples/config.yaml")])
    data = _plain(document, (), lines)
    if not isinstance(data, dict):
        raise ConfigError(
            filename, with_lines([error("schema", (), "the top level must be a mapping of settings")], lines)
        )
    return data, lines


def validate_model(model: type[M], data: dict[str, Any], lines: Mapping[YamlPath, int], filename: str) -> M:
    """`model` from `data`; every validation error as a located finding in one ConfigError."""
    try:
        return model.model_validate(data)
    except ValidationError as invalid:
        findings = [_schema_finding(model, item) for item in invalid.errors(include_url=False)]
        raise ConfigError(filename, sort_by_line(with_lines(findings, lines))) from None


def _yaml_finding(problem: YAMLError) -> Finding:
    if not isinstance(problem, MarkedYAMLError):
        return error("yaml", (), f"invalid YAML: {problem}")
    mark = problem.problem_mark or problem.context_mark
    # ruamel appends a long note (e.g. on allow_duplicate_keys) that speaks to programmers, not to users.
    message = " ".join(part for part in (problem.context, problem.problem) if part)
    return Finding("yaml", "error", (), f"invalid YAML: {message}", line=mark.line + 1 if mark else None)


def _plain(node: Any, path: YamlPath, lines: dict[YamlPath, int]) -> Any:
    """Plain dicts, lists and scalars for pydantic; records the line of every key and list item."""
    if isinstance(node, CommentedMap):
        mapping = {}
        for key in node:
            # ruamel's quoted-string and int subclasses become plain values; odd keys (bools, lists) text.
            part: str | int = int(key) if isinstance(key, int) and not isinstance(key, bool) else str(key)
            try:
                lines[(*path, part)] = node.lc.key(key)[0] + 1
            except (KeyError, TypeError):
                lines[(*path, part)] = node.lc.line + 1  # merged (<<) keys have no position of their own
            mapping[part] = _plain(node[key], (*path, part), lines)
        return mapping
    if isinstance(node, CommentedSeq):
        items = []
        for index, item in enumerate(node):
            lines[(*path, index)] = node.lc.item(index)[0] + 1
            items.append(_plain(item, (*path, index), lines))
        return items
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


_TYPE_NAMES = {
    "int_type": "a whole number",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
}


def _schema_finding(model: type[BaseModel], item: ErrorDetails) -> Finding:
    """A pydantic error in the words of the config file."""
    loc = tuple(item["loc"])
    kind = item["type"]
    context = item.get("ctx") or {}
    if loc and loc[-1] == "[key]":
        return error("schema", loc[:-1], "keys here must be strings")
    path: YamlPath = tuple(loc)
    if kind == "extra_forbidden":
        allowed = _keys_at(model, path[:-1])
        hint = did_you_mean(str(path[-1]), allowed) or ("valid keys here: " + ", ".join(allowed) if allowed else None)
        return error("schema", path, "unknown key", hint=hint)
    if kind == "missing":
        hint = "the first line of the file should be `version: 1`" if path == ("version",) else None
        return error("schema", path, "required but missing", hint=hint)
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(context.get("expected", ""))) or [str(context.get("expected", ""))]
        hint = did_you_mean(str(item["input"]), choices) if isinstance(item["input"], str) else None
        return error("schema", path, f"must be {context.get('expected')} (got {_describe(item['input'])})", hint=hint)
    if kind in _TYPE_NAMES:
        return error("schema", path, f"must be {_TYPE_NAMES[kind]} (got {_describe(item['input'])})")
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        limit = next(iter(context.values()))
        return error("schema", path, f"must be {bounds[kind]} {limit}")
    if kind == "too_short":
        count = context.get("min_length", 1)
        return error("schema", path, f"must have at least {count} {'entry' if count == 1 else 'entries'}")
    if kind == "value_error":
        return error("schema", path, str(context.get("error", item["msg"])))
    return error("schema", path, item["msg"])


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _keys_at(model: type[BaseModel], path: YamlPath) -> list[str]:
    """The keys `model` accepts at `path` (for "did you mean")."""
    current: Any = model
    for part in path:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            fields = {(info.alias or name): info.annotation for name, info in current.model_fields.items()}
            if part not in fields:
                return []
            current = fields[part]
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        elif get_origin(current) is list:
            current = get_args(current)[0]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [info.alias or name for name, info in current.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    """The model, dict or list inside Annotated[...] and `X | None`."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            arms = [arm for arm in get_args(annotation) if arm is not type(None)]
            if len(arms) != 1:
                return annotation
            annotation = arms[0]
        else:
            return annotation
