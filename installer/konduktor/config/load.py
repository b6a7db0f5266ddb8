"""Read `config.yaml` keeping the line of every key, and report all problems at once.

The YAML is parsed by libyaml (PyYAML's C parser) and its events are turned into plain data here: a 1,000-team
config reads in a fraction of a second, and a hostile file (deep nesting, a billion laughs, a number of
thousands of digits) is refused at the event that crosses a bound, with its line. Scalars are resolved by the
YAML 1.2 core schema, so `on`, `no` and `0777` stay what 1.2 says.

YAML syntax errors, schema errors (pydantic) and lint findings all come back as `Finding`s with a line;
errors are raised together as one `ConfigError` (exit code 2), warnings are returned.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from yaml.error import MarkedYAMLError, YAMLError
from yaml.events import (
    AliasEvent,
    Event,
    MappingEndEvent,
    NodeEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)

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
    text = read_text(Path(path), missing_hint="start from examples/config.yaml in the Konduktor repository")
    return parse_config(text, str(path))


def read_text(path: Path, *, missing_hint: str | None = None) -> str:
    """The text of a config file; UsageError (exit 2) when it is missing, unreadable or too large to be one."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:  # checked before reading: a huge file must not fill the memory first
            raise UsageError(
                f"{path}: {size:,} bytes, more than a config file can be ({MAX_FILE_BYTES // 2**20} MiB)",
                hint="is this the right file? A config of 1,000 teams takes about 0.3 MiB",
            )
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file", hint=missing_hint) from None
    except (OSError, UnicodeDecodeError) as problem:
        raise UsageError(f"{path}: cannot read the config ({problem})") from None


def parse_config(text: str, filename: str = "config.yaml") -> LoadedConfig:
    """Check config text; raises ConfigError listing every error, returns the warnings."""
    data, lines = read_yaml(text, filename)
    try:
        config = Config.model_validate(data)
    except ValidationError as invalid:
        problems = invalid.errors(include_url=False)
        findings = [_schema_finding(Config, item) for item in problems]
        unknown = [tuple(item["loc"]) for item in problems if item["type"] == "extra_forbidden"]
        if len(unknown) == len(problems):
            findings += _lint_errors_without(data, unknown)
        raise ConfigError(filename, sort_by_line(with_lines(findings, lines))) from None
    findings = sort_by_line(with_lines(lint(config), lines))
    if any(f.is_error for f in findings):
        raise ConfigError(filename, findings)
    return LoadedConfig(config, [f for f in findings if not f.is_error], filename, lines)


def _lint_errors_without(data: dict[str, Any], unknown_keys: list[YamlPath]) -> list[Finding]:
    """The lint errors of the config as it reads without its unknown keys (typos), so that a typo does not hide
    a quota beyond capacity. Only errors: a warning may come from the setting the typo left out."""
    for path in unknown_keys:
        data = _without(data, path)
    try:
        config = Config.model_validate(data)
    except ValidationError:
        return []
    return [finding for finding in lint(config) if finding.is_error]


def _without(node: Any, path: YamlPath) -> Any:
    """`node` without the key at `path`; copies along the path, as aliased values are shared."""
    head, rest = path[0], path[1:]
    if isinstance(node, dict) and head in node:
        changed = dict(node)
        if rest:
            changed[head] = _without(node[head], rest)
        else:
            del changed[head]
        return changed
    if isinstance(node, list) and isinstance(head, int) and 0 <= head < len(node) and rest:
        return [_without(item, rest) if index == head else item for index, item in enumerate(node)]
    return node


def read_yaml(text: str, filename: str) -> tuple[dict[str, Any], dict[YamlPath, int]]:
    """A YAML mapping as plain data, and the line of every key and list item; ConfigError if it is not one.

    Hostile files are refused with a line instead of running away: nesting deeper than MAX_DEPTH, aliases
    that expand past ALIAS_ALLOWANCE values more than the file holds (billion laughs), an alias inside its own
    anchor, and whole numbers beyond 64 bits. Values behind an alias are shared, never copied.
    """
    if len(text) > MAX_FILE_BYTES:
        raise UsageError(f"{filename}: more than a config file can be ({MAX_FILE_BYTES // 2**20} MiB)")
    reader = _DocumentReader(yaml.parse(text, Loader=_LOADER))
    try:
        data = reader.document()
    except YAMLError as problem:
        raise ConfigError(filename, [_yaml_finding(problem)]) from None
    except _Refused as refused:
        raise ConfigError(filename, [*reader.findings, refused.finding]) from None
    if reader.findings:
        raise ConfigError(filename, reader.findings)
    if data is None:
        raise ConfigError(filename, [error("yaml", (), "the file is empty", hint="start from examples/config.yaml")])
    if not isinstance(data, dict):
        raise ConfigError(
            filename, with_lines([error("schema", (), "the top level must be a mapping of settings")], reader.lines)
        )
    return data, reader.lines


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
# A config nests about 6 levels; libyaml's own composer recurses in C and crashes near 100,000.
MAX_DEPTH = 64
# Values that aliases may add beyond the number of YAML events in the file: room for `<<: *defaults` on every
# team, none for a billion laughs (nine levels of ten aliases are 10^9 values from a 1 KiB file).
ALIAS_ALLOWANCE = 100_000
MAX_FILE_BYTES = 4 * 2**20
INT_LIMIT = 2**63 - 1  # Kubernetes and Kueue hold counts and quantities in 64 bits
_INT_DIGITS = len(str(INT_LIMIT))
# The YAML 1.2 core schema for plain (unquoted) scalars; anything else is a string.
_NULL = re.compile(r"^(~|null|Null|NULL|)$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT = re.compile(r"^[-+]?[0-9]+$")
_OCT = re.compile(r"^0o[0-7]+$")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_SPECIAL_FLOAT = {".inf": float("inf"), "+.inf": float("inf"), "-.inf": float("-inf"), ".nan": float("nan")}
_MERGE = "tag:yaml.org,2002:merge"


class OutOfRange(ValueError):
    """A number too large for any setting: a whole number beyond 64 bits, or one that a float cannot hold."""

    def __init__(self, text: str, hint: str) -> None:
        digits = len(text.lstrip("+-"))
        shown = text if digits <= 24 else f"{text[:12]}...({digits:,} characters)"
        super().__init__(f"the number {shown} is too large")
        self.hint = hint


def _scalar(value: str, style: str | None) -> Any:
    if style:  # quoted or block scalars are always strings (plain ones have no style)
        return value
    if _NULL.match(value):
        return None
    if value in _BOOL:
        return _BOOL[value]
    if _INT.match(value):
        # Only significant digits reach int(): it refuses more than 4,300 digits, leading zeros included.
        significant = value.lstrip("+-").lstrip("0") or "0"
        number = int(significant) if len(significant) <= _INT_DIGITS else None
        return _in_range(None if number is None else -number if value.startswith("-") else number, value)
    if _OCT.match(value):
        return _in_range(int(value[2:], 8), value)
    if _HEX.match(value):
        return _in_range(int(value[2:], 16), value)
    if _FLOAT.match(value):
        fraction = float(value)
        if math.isinf(fraction):  # 1e999; an infinity written as .inf is left to the models, which refuse it
            raise OutOfRange(value, "numbers here are at most about 1.8e308, and no setting needs near that")
        return fraction
    return _SPECIAL_FLOAT.get(value.lower(), value)


def _in_range(number: int | None, text: str) -> int:
    if number is None or abs(number) > INT_LIMIT:
        raise OutOfRange(text, f"whole numbers here are at most {INT_LIMIT:,} (64 bits)")
    return number


class _Refused(Exception):
    """The file is beyond what the loader reads; `finding` says where and why."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


@dataclass(frozen=True)
class _Anchor:
    value: Any
    size: int  # values it stands for, nested ones included


class _DocumentReader:
    """Plain dicts, lists and scalars for pydantic, read from libyaml's events, with the line of every key and
    list item. Reading events instead of composing nodes lets it stop at the first event beyond a bound."""

    def __init__(self, events: Iterator[Event]) -> None:
        self.events = events
        self.lines: dict[YamlPath, int] = {(): 1}
        self.findings: list[Finding] = []
        self.anchors: dict[str, _Anchor] = {}
        self.open_anchors: set[str] = set()
        self.events_read = 0
        self.aliased_values = 0

    def next(self) -> Event:
        self.events_read += 1
        return next(self.events)

    def document(self) -> Any:
        self.next()  # StreamStartEvent
        if isinstance(self.next(), StreamEndEvent):
            return None
        value, _ = self.value(self.next(), (), 0, self.lines)
        self.next()  # DocumentEndEvent
        another = self.next()
        if not isinstance(another, StreamEndEvent):
            raise _Refused(
                Finding(
                    "yaml",
                    "error",
                    (),
                    "invalid YAML: expected a single document in the stream, but found another document",
                    hint="a config is one document: remove the `---` line and what follows, or merge them",
                    line=_line(another),
                )
            )
        return value

    def value(self, event: Event, path: YamlPath, depth: int, lines: dict[YamlPath, int]) -> tuple[Any, int]:
        """The value that starts with `event`, and how many values it stands for."""
        if isinstance(event, AliasEvent):
            return self.alias(event)
        assert isinstance(event, NodeEvent)
        if isinstance(event, ScalarEvent):
            try:
                result: tuple[Any, int] = (_scalar(event.value, event.style), 1)
            except OutOfRange as problem:
                self.findings.append(Finding("yaml", "error", path, str(problem), hint=problem.hint, line=_line(event)))
                result = (None, 1)
        else:
            if depth >= MAX_DEPTH:
                raise _Refused(
                    Finding(
                        "yaml",
                        "error",
                        path[:1],  # the setting it is under; the rest of the path is the runaway part
                        f"nested more than {MAX_DEPTH} levels deep",
                        hint="a config nests about 6 levels: look for an unclosed [ or { or a runaway indentation",
                        line=_line(event),
                    )
                )
            if event.anchor is not None:
                self.open_anchors.add(event.anchor)
            if isinstance(event, SequenceStartEvent):
                result = self.sequence(path, depth, lines)
            else:
                result = self.mapping(path, depth, lines)
            self.open_anchors.discard(event.anchor or "")
        if event.anchor is not None:
            self.anchors[event.anchor] = _Anchor(*result)
        return result

    def alias(self, event: AliasEvent) -> tuple[Any, int]:
        name = str(event.anchor)
        if name in self.open_anchors:
            raise _Refused(
                Finding(
                    "yaml",
                    "error",
                    (),
                    f"the alias *{name} is inside the value it refers to",
                    hint=f"an alias repeats a value written before it: move *{name} out of &{name}",
                    line=_line(event),
                )
            )
        anchor = self.anchors.get(name)
        if anchor is None:
            raise _Refused(
                Finding(
                    "yaml",
                    "error",
                    (),
                    f"invalid YAML: the alias *{name} has no anchor &{name} before it",
                    hint=f"write &{name} on the value to repeat, above this line",
                    line=_line(event),
                )
            )
        self.aliased_values += anchor.size
        if self.aliased_values > ALIAS_ALLOWANCE + self.events_read:
            raise _Refused(
                Finding(
                    "yaml",
                    "error",
                    (),
                    f"aliases expand to more than {ALIAS_ALLOWANCE:,} values beyond what the file holds "
                    f"(*{name} alone stands for {anchor.size:,})",
                    hint="aliases nested in aliases multiply: write the values out, or repeat fewer of them",
                    line=_line(event),
                )
            )
        return anchor.value, anchor.size

    def sequence(self, path: YamlPath, depth: int, lines: dict[YamlPath, int]) -> tuple[list[Any], int]:
        items: list[Any] = []
        size = 1
        while not isinstance(event := self.next(), SequenceEndEvent):
            index = len(items)
            lines[(*path, index)] = _line(event)
            item, item_size = self.value(event, (*path, index), depth + 1, lines)
            items.append(item)
            size += item_size
        return items, size

    def mapping(self, path: YamlPath, depth: int, lines: dict[YamlPath, int]) -> tuple[dict[str | int, Any], int]:
        mapping: dict[str | int, Any] = {}
        written: set[str | int] = set()
        size = 1
        while not isinstance(event := self.next(), MappingEndEvent):
            if isinstance(event, ScalarEvent) and (event.tag == _MERGE or (not event.style and event.value == "<<")):
                size += self.merge(mapping, _line(event), path, depth)
                continue
            # Key values are not settings: their own keys and items get no lines.
            raw, key_size = self.value(event, path, depth + 1, {})
            # odd keys (bools, lists) become text; whole numbers stay numbers, as list indexes do
            part: str | int = raw if isinstance(raw, int) and not isinstance(raw, bool) else str(raw)
            line = _line(event)
            if part in written:
                self.findings.append(
                    Finding("yaml", "error", (*path, part), "duplicate key", hint="keep one of them", line=line)
                )
            written.add(part)
            lines[(*path, part)] = line
            mapping[part], value_size = self.value(self.next(), (*path, part), depth + 1, lines)
            size += key_size + value_size
        return mapping, size

    def merge(self, mapping: dict[str | int, Any], line: int, path: YamlPath, depth: int) -> int:
        """`<<: *defaults`: the anchored keys, unless set here too (before or after)."""
        merged, size = self.value(self.next(), path, depth + 1, {})
        sources = merged if isinstance(merged, list) else [merged]
        if not all(isinstance(source, dict) for source in sources):
            self.findings.append(
                Finding(
                    "yaml",
                    "error",
                    path,
                    "a merge key << takes a mapping or a list of mappings",
                    hint="write `<<: *defaults` where &defaults is on a mapping",
                    line=line,
                )
            )
            return size
        for source in sources:
            for key, value in source.items():
                mapping.setdefault(key, value)
        return size


def _line(event: Event) -> int:
    mark = event.start_mark
    assert mark is not None  # the parser marks every event
    return int(mark.line) + 1


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
    if kind == "finite_number":
        hint = "YAML reads .inf and .nan as numbers that are not finite: write a number of a sensible size"
        return error("schema", path, f"must be a finite number (got {_describe(item['input'])})", hint=hint)
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
