"""What an upgrade would change in a release, object by object (pure), as `helm diff` shows it.

Both sides are the objects of a release's manifest: the deployed revision's and the one a server-side dry run
of the upgrade renders. An object is known by its API group, kind, namespace and name (a new API version of
the same object is a change, not a removal and an addition). Each object is written as YAML with sorted keys,
so helm's ordering of objects and keys and the templates' whitespace make no difference. Secrets' values are
never shown: each one reads as its size, and as changed where it differs.
"""

from __future__ import annotations

import base64
import binascii
import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import yaml

ObjectAction = Literal["add", "remove", "change"]
ObjectKey = tuple[str, str, str, str]  # API group, kind, namespace ("" when the manifest names none), name


@dataclass(frozen=True)
class ObjectChange:
    """One object of the release that an upgrade adds, removes or changes; `diff` is a unified diff of its YAML
    (every line added or removed for an object added or removed)."""

    action: ObjectAction
    api_version: str
    kind: str
    namespace: str | None  # as the chart writes it; None: cluster-scoped, or the release's namespace
    name: str
    diff: str

    def as_json(self) -> dict[str, object]:
        return {
            "action": self.action,
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "diff": self.diff,
        }

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.action:<9} {self.kind} {where}"


def object_key(obj: Mapping[str, Any]) -> ObjectKey:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    meta = obj.get("metadata") or {}
    return group, str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", ""))


def release_changes(deployed: Iterable[Mapping[str, Any]], wanted: Iterable[Mapping[str, Any]]) -> list[ObjectChange]:
    """Every object added, removed or changed from `deployed` to `wanted`, ordered by kind, namespace and name."""
    before = {object_key(obj): obj for obj in deployed if obj}
    after = {object_key(obj): obj for obj in wanted if obj}
    changes = []
    for key in sorted(before.keys() | after.keys(), key=lambda k: (k[1], k[2], k[3], k[0])):
        old, new = masked(before.get(key), after.get(key))
        if old == new:
            continue
        action: ObjectAction = "add" if old is None else "remove" if new is None else "change"
        shown = new if new is not None else old
        assert shown is not None  # a key comes from one side at least
        label = f"{key[1]} {key[2]}/{key[3]}" if key[2] else f"{key[1]} {key[3]}"
        text = difflib.unified_diff(
            as_yaml(old).splitlines(keepends=True),
            as_yaml(new).splitlines(keepends=True),
            fromfile=f"deployed {label}" if old is not None else "/dev/null",
            tofile=f"wanted {label}" if new is not None else "/dev/null",
        )
        _, kind, namespace, name = key
        changes.append(
            ObjectChange(action, str(shown.get("apiVersion", "")), kind, namespace or None, name, "".join(text))
        )
    return changes


SECRET_FIELDS = ("data", "stringData")


def masked(
    old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """Both sides with each Secret value replaced by its size, and marked on the wanted side where it differs from
    the deployed one, so that a diff shows which keys change and never what they hold."""
    if not any(obj is not None and obj.get("kind") == "Secret" for obj in (old, new)):
        return old, new
    return _hidden(old, None), _hidden(new, old)


def _hidden(obj: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if obj is None:
        return None
    shown = dict(obj)
    for field in SECRET_FIELDS:
        values, previous = obj.get(field) or {}, (before or {}).get(field) or {}
        if field in obj:
            shown[field] = {
                key: f"(hidden, {secret_size(field, value)} bytes"
                + ("" if before is None or previous.get(key) == value else ", changed")
                + ")"
                for key, value in values.items()
            }
    return shown


def secret_size(field: str, value: object) -> int:
    """The size of a Secret's value: `data` holds base64, `stringData` the text itself."""
    text = str(value if value is not None else "")
    if field == "data":
        try:
            return len(base64.b64decode(text, validate=True))
        except binascii.Error:
            pass  # not base64: the API server would refuse it; its length is what there is to tell
    return len(text.encode())


class _ManifestDumper(yaml.SafeDumper):
    """Multi-line strings (dashboards, rules, scripts) as literal blocks, so a diff shows the lines that change."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_ManifestDumper.add_representer(str, _text)


def as_yaml(obj: Mapping[str, Any] | None) -> str:
    if obj is None:
        return ""
    return yaml.dump(dict(obj), Dumper=_ManifestDumper, sort_keys=True, default_flow_style=False, allow_unicode=True)
