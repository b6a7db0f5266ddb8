"""Read `config.yaml` keeping the line of every key, and report all problems at once.

The YAML is composed by libyaml (PyYAML's C composer: a 1,000-team config reads in a fraction of a second)
and its scalars are resolved by the YAML 1.2 core schema, so `on`, `no` and `0777` stay what 1.2 says.

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

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from yaml.error import MarkedYAMLError, YAMLError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

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
        document = yaml.compose(text, Loader=_LOADER)
    except YAMLError as problem:
        raise ConfigError(filename, [_yaml_finding(problem)]) from None
    if document is None:
        raise ConfigError(filename, [error("yaml", (), "the file is empty", hint="start from examples/config.yaml")])
    duplicates: list[Finding] = []
    data = _plain(document, (), lines, duplicates)
    if duplicates:
        raise ConfigError(filename, duplicates)
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


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# The YAML 1.2 core schema for plain (unquoted) scalars; anything else is a string.
_NULL = re.compile(r"^(~|null|Null|NULL|)$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT = re.compile(r"^[-+]?[0-9]+$")
_OCT = re.compile(r"^0o[0-7]+$")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_SPECIAL_FLOAT = {".inf": float("inf"), "+.inf": float("inf"), "-.inf": float("-inf"), ".nan": float("nan")}
_MERGE = "tag:yaml.org,2002:merge"


def _scalar(node: ScalarNode) -> Any:
    value = str(node.value)
    if node.style:  # quoted or block scalars are always strings (plain ones have no style)
        return value
    if _NULL.match(value):
        return None
    if value in _BOOL:
        return _BOOL[value]
    if _INT.match(value):
        return int(value)
    if _OCT.match(value):
        return int(value[2:], 8)
    if _HEX.match(value):
        return int(value[2:], 16)
    if _FLOAT.match(value):
        return float(value)
    return _SPECIAL_FLOAT.get(value.lower(), value)


def _plain(node: Node, path: YamlPath, lines: dict[YamlPath, int], duplicates: list[Finding]) -> Any:
    """Plain dicts, lists and scalars for pydantic; records the line of every key and list item."""
    if isinstance(node, MappingNode):
        mapping: dict[str | int, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:  # `<<: *defaults`: the anchored keys, unless set here too
                merged = _plain(value_node, path, {}, duplicates)
                for source in merged if isinstance(merged, list) else [merged]:
                    for key, value in (source or {}).items():
                        mapping.setdefault(key, value)
                continue
            raw = _plain(key_node, path, {}, duplicates)
            # odd keys (bools, lists) become text; whole numbers stay numbers, as list indexes do
            part: str | int = raw if isinstance(raw, int) and not isinstance(raw, bool) else str(raw)
            line = key_node.start_mark.line + 1
            if part in mapping and (*path, part) in lines:
                duplicates.append(
                    Finding("yaml", "error", (*path, part), "duplicate key", hint="keep one of them", line=line)
                )
            lines[(*path, part)] = line
            mapping[part] = _plain(value_node, (*path, part), lines, duplicates)
        return mapping
    if isinstance(node, SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            items.append(_plain(item, (*path, index), lines, duplicates))
        return items
    assert isinstance(node, ScalarNode)
    return _scalar(node)


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
