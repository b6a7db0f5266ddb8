"""Every number a config model reads, found from its fields, so that a new numeric setting is tested too."""

from __future__ import annotations

import copy
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

# A dict key or list index in a pattern path: any key, the first item.
ANY_KEY = "*"
Pattern = tuple[str | int, ...]


def numeric_paths(model: type[BaseModel], path: Pattern = ()) -> set[Pattern]:
    """The paths (YAML keys; ANY_KEY for a dict key, 0 for list items) of every int and float field of `model`."""
    found: set[Pattern] = set()
    for name, info in model.model_fields.items():
        found |= _numeric(info.annotation, (*path, info.alias or name))
    return found


def _numeric(annotation: Any, path: Pattern) -> set[Pattern]:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _numeric(get_args(annotation)[0], path)
    if origin in (Union, types.UnionType):
        return set().union(*(_numeric(arm, path) for arm in get_args(annotation)))
    if origin is dict:
        return _numeric(get_args(annotation)[1], (*path, ANY_KEY))
    if origin is list:
        return _numeric(get_args(annotation)[0], (*path, 0))
    if annotation in (int, float):
        return {path}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return numeric_paths(annotation, path)
    return set()


def concrete(pattern: Pattern, document: dict[str, Any]) -> tuple[str | int, ...]:
    """`pattern` with each ANY_KEY replaced by the first key `document` has there."""
    path: list[str | int] = []
    node: Any = document
    for part in pattern:
        key = next(iter(node)) if part == ANY_KEY else part
        assert isinstance(node, dict | list) and key in (node if isinstance(node, dict) else range(len(node))), (
            f"a new numeric setting: give {'.'.join(map(str, pattern))} a value in the test's document"
        )
        path.append(key)
        node = node[key]
    return tuple(path)


def replaced(document: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    node: Any = changed
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return changed
