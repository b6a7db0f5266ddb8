"""Converging a cluster on a set of objects Konduktor owns: plan (pure), then apply and prune.

Ownership is a set of labels (for quotas: `app.kubernetes.io/managed-by=konduktor,konduktor.ai/config=<name>`).
An existing object without them, or with another manager's or another config's, is someone else's: the sync
refuses to touch it unless told to adopt it by name, and then records the adoption on the object (annotation
`konduktor.ai/adopted-from`, the previous owner). Only objects carrying our labels are ever pruned, and never
an adopted one: Konduktor deletes only what it created.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from konduktor.errors import ChangeRefused, PartialApply
from konduktor.kube.client import ApiError, Kube

T = TypeVar("T")
Action = Literal["create", "update", "unchanged", "prune", "keep", "adopt", "refuse"]
WRITES = ("create", "update", "adopt")  # actions that apply the desired object
ADOPTED_ANNOTATION = "konduktor.ai/adopted-from"  # on an object Konduktor was told to adopt: its previous owner
# Deleting these would take everything inside with them; when the config drops one it is reported, not deleted.
NEVER_PRUNE = {("v1", "Namespace")}
# Requests a sync keeps in flight: reads of the objects, then the writes of one kind.
SYNC_CONCURRENCY = 8
# Metadata the server writes; equal objects differ in these.
SERVER_FIELDS = ("managedFields", "resourceVersion", "uid", "generation", "creationTimestamp", "selfLink")


@dataclass(frozen=True)
class Ref:
    api_version: str
    kind: str
    name: str
    namespace: str | None = None

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Ref:
        meta = obj["metadata"]
        return cls(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"

    @property
    def key(self) -> str:
        """How a user names the object to adopt: Kind/name, or Kind/namespace/name."""
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class ValueChange:
    """One value an update changes: its path down to the leaf (list items by their `name`, else their index), the
    value before and after (None: absent)."""

    path: str
    old: Any
    new: Any

    def as_json(self) -> dict[str, object]:
        return {"path": self.path, "old": self.old, "new": self.new}

    def describe(self) -> str:
        return f"{self.path}: {_shown(self.old)} -> {_shown(self.new)}"


def _shown(value: Any) -> str:
    if value is None:
        return "(absent)"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


@dataclass(frozen=True)
class Change:
    action: Action
    ref: Ref
    fields: tuple[str, ...] = ()  # top-level paths that differ, for updates
    note: str = ""  # why: whose object is refused or adopted, why one is kept
    values: tuple[ValueChange, ...] = ()  # for updates and adoptions: each value that changes, old -> new

    def as_json(self) -> dict[str, object]:
        return {
            "action": self.action,
            "apiVersion": self.ref.api_version,
            "kind": self.ref.kind,
            "namespace": self.ref.namespace,
            "name": self.ref.name,
            "fields": list(self.fields),
            "values": [value.as_json() for value in self.values],
            "note": self.note,
        }

    def describe(self) -> str:
        """One line for the object, then one indented line per value it changes (`path: old -> new`)."""
        detail = f" ({', '.join(self.fields)})" if self.fields else ""
        note = f": {self.note}" if self.note else ""
        return "\n".join([f"{self.action:<9} {self.ref}{detail}{note}", *(f"    {v.describe()}" for v in self.values)])


def owner_of(live: Mapping[str, Any], owner: Mapping[str, str]) -> str | None:
    """None when `live` carries our ownership labels (or was adopted); else who owns it, in words."""
    meta = live.get("metadata", {})
    labels: Mapping[str, str] = meta.get("labels") or {}
    if all(labels.get(key) == value for key, value in owner.items()):
        return None
    marks = [f"{key}={labels[key]}" for key in owner if key in labels]
    return ", ".join(marks) if marks else "no owner labels (made by hand or by another tool)"


def adopted(obj: dict[str, Any], previous_owner: str) -> dict[str, Any]:
    """`obj` with the record of its adoption, which keeps it from ever being deleted by Konduktor."""
    meta = dict(obj["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), ADOPTED_ANNOTATION: previous_owner}
    return {**obj, "metadata": meta}


def adoption_of(live: Mapping[str, Any] | None) -> str | None:
    """The previous owner recorded on an adopted object; None for objects Konduktor created."""
    if live is None:
        return None
    annotations: Mapping[str, str] = live.get("metadata", {}).get("annotations") or {}
    return annotations.get(ADOPTED_ANNOTATION)


def comparable(obj: dict[str, Any] | None) -> dict[str, Any]:
    """The parts of an object a user sets: no status, no server-written metadata."""
    if obj is None:
        return {}
    result = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in SERVER_FIELDS}
    result["metadata"] = meta
    return result


def differing_fields(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths (two levels deep) where the objects differ."""
    paths = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        path = f"{prefix}{key}"
        if isinstance(old, dict) and isinstance(new, dict) and not prefix:
            paths += differing_fields(old, new, f"{path}.")
        else:
            paths.append(path)
    return paths


def value_changes(before: Any, after: Any, path: str = "") -> list[ValueChange]:
    """Every leaf value that differs between two objects, with its full path: `spec.resourceGroups[0].flavors[h100]
    .resources[nvidia.com/gpu].nominalQuota: 20 -> 24`. List items are matched by their `name` when every item
    has one (Kueue's flavors and resources), else by position when the lists are as long; otherwise the whole
    list is the value that changed."""
    if before == after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after), key=str):
            found += value_changes(before.get(key), after.get(key), f"{path}.{key}" if path else str(key))
        return found
    if isinstance(before, list) and isinstance(after, list):
        named = _by_name(before), _by_name(after)
        if named[0] is not None and named[1] is not None:
            old, new = named[0], named[1]
            return [
                c
                for name in dict.fromkeys([*old, *new])
                for c in value_changes(old.get(name), new.get(name), f"{path}[{name}]")
            ]
        if len(before) == len(after):
            return [
                c
                for i, (o, n) in enumerate(zip(before, after, strict=True))
                for c in value_changes(o, n, f"{path}[{i}]")
            ]
    return [ValueChange(path, before, after)]


def _by_name(items: list[Any]) -> dict[str, Any] | None:
    """The items by name, when each is an object with a distinct `name`."""
    names = [item.get("name") if isinstance(item, dict) else None for item in items]
    named = [name for name in names if isinstance(name, str)]
    if len(named) != len(items) or len(set(named)) != len(named):
        return None
    return dict(zip(named, items, strict=True))


def plan(
    desired: Sequence[tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]],
    owned_live: Iterable[dict[str, Any]],
    prune: bool,
    owner: Mapping[str, str] | None = None,
    adopt: Collection[str] = (),
) -> list[Change]:
    """Changes from (desired, live, server's dry-run result) triples and the live objects we own.

    Comparing the server's own dry-run result with the live object means defaults and quantity
    normalisation ("16" vs 16, "1024Mi" vs "1Gi") never show up as changes. A live object that lacks the
    `owner` labels is refused, or adopted when its key (`Ref.key`) is in `adopt`.
    """
    changes = []
    wanted = set()
    adopt_keys = {key.lower() for key in adopt}
    for obj, live, would_be in desired:
        ref = Ref.of(obj)
        wanted.add(ref)
        if live is None:
            changes.append(Change("create", ref))
            continue
        before, after = comparable(live), comparable(would_be or obj)
        fields = tuple(differing_fields(before, after))
        values = tuple(value_changes(before, after))
        someone = owner_of(live, owner or {})
        if someone is not None and ref.key.lower() in adopt_keys:
            changes.append(Change("adopt", ref, fields, f"taken over from {someone}", values))
        elif someone is not None:
            changes.append(Change("refuse", ref, (), f"owned by {someone}; adopt it with --adopt {ref.key}"))
        else:
            changes.append(Change("update", ref, fields, values=values) if fields else Change("unchanged", ref))
    for live in owned_live:
        ref = Ref.of(live)
        if ref in wanted:
            continue
        if adoption_of(live) is not None:
            changes.append(Change("keep", ref, (), f"adopted from {adoption_of(live)}; never deleted"))
        elif (ref.api_version, ref.kind) in NEVER_PRUNE or not prune:
            changes.append(Change("keep", ref))
        else:
            changes.append(Change("prune", ref))
    return changes


def with_retries(call: Callable[..., T], *args: Any, attempts: int = 8, first_delay: float = 0.5, **kwargs: Any) -> T:
    """Retries what a starting cluster answers with 5xx or no connection (webhooks not ready yet)."""
    delay = first_delay
    for attempt in range(attempts):
        try:
            return call(*args, **kwargs)
        except ApiError as problem:
            transient = problem.status is None or problem.status >= 500 or problem.status == 429
            if not transient or attempt == attempts - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 8)
    raise AssertionError("unreachable")


def _runs_of_one_kind(changes: Sequence[Change]) -> list[list[Change]]:
    """The changes cut where the kind changes, in their order."""
    runs: list[list[Change]] = []
    for change in changes:
        if runs and runs[-1][0].ref.kind == change.ref.kind:
            runs[-1].append(change)
        else:
            runs.append([change])
    return runs


def owned_objects(kube: Kube, kinds: Iterable[tuple[str, str]], selector: str) -> list[dict[str, Any]]:
    found = []
    for api_version, kind in kinds:
        found += kube.list(api_version, kind, label_selector=selector)
    return found


def refuse_if_any(changes: Sequence[Change]) -> None:
    """Raises ChangeRefused naming every refused change, before anything is applied."""
    refused = [c for c in changes if c.action == "refuse"]
    if refused:
        raise ChangeRefused(
            f"{len(refused)} change(s) refused; nothing was changed",
            detail="\n".join(c.describe() for c in refused),
            hint="Konduktor changes only what it created (to take an object over, name it with --adopt; it is then "
            "marked konduktor.ai/adopted-from and never deleted by Konduktor), and removes a team only once its "
            "work is drained (--drain-removed-teams wait|stop)",
        )


def selector_of(owner: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in owner.items())


def sync(
    kube: Kube,
    objects: Sequence[dict[str, Any]],
    kinds: Sequence[tuple[str, str]],
    owner: Mapping[str, str],
    *,
    prune: bool = False,
    dry_run: bool = False,
    adopt: Collection[str] = (),
    review: Callable[[list[Change]], list[Change]] = lambda changes: changes,
    progress: Callable[[Change], None] = lambda _change: None,
) -> list[Change]:
    """Plans against the live cluster and, unless `dry_run`, applies in order and prunes in reverse order.

    Objects of someone else (without the `owner` labels) are refused, and then nothing is changed (ChangeRefused),
    unless their keys are in `adopt`. `review` may turn planned changes into refusals (e.g. a prune of something
    still in use) before anything is applied. On a failure midway raises PartialApply naming what was done; re-running
    converges.
    """
    desired = _read_all(kube, objects, owner)
    changes = review(plan(desired, owned_objects(kube, kinds, selector_of(owner)), prune, owner, adopt))
    if dry_run:
        return changes
    refuse_if_any(changes)
    order = {kind: index for index, (_, kind) in enumerate(kinds)}
    writes = [c for c in changes if c.action in WRITES]
    prunes = sorted((c for c in changes if c.action == "prune"), key=lambda c: -order.get(c.ref.kind, 0))
    _write_all(kube, writes, prunes, {Ref.of(obj): obj for obj, _, _ in desired}, progress)
    return changes


Desired = tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]  # wanted, live, the server's dry run


def _read_all(kube: Kube, objects: Sequence[dict[str, Any]], owner: Mapping[str, str]) -> list[Desired]:
    """(wanted, live, the server's dry run of wanted) per object, in order. Two reads per object, independent of
    the other objects', so several are in flight at once: 100 teams are ~700 objects, which one after another
    took `plan` 10-20 s on a busy API server (bench/README.md#fleet-scale)."""

    def read(obj: dict[str, Any]) -> Desired:
        ref = Ref.of(obj)
        live = with_retries(kube.get, ref.api_version, ref.kind, ref.name, ref.namespace)
        # An adopted object keeps the record of its adoption: our apply would otherwise remove it.
        previous = adoption_of(live) or (owner_of(live, owner) if live is not None else None)
        wanted = adopted(obj, previous) if previous is not None else obj
        # Only an existing object needs the server's view to tell an update from no change; a new one may
        # live in a namespace that this same sync creates, where a dry run would be refused.
        would_be = with_retries(kube.apply, wanted, dry_run=True) if live is not None else None
        return wanted, live, would_be

    with ThreadPoolExecutor(max_workers=SYNC_CONCURRENCY) as pool:
        return list(pool.map(read, objects))


def _write_all(
    kube: Kube,
    writes: Sequence[Change],
    prunes: Sequence[Change],
    by_ref: Mapping[Ref, dict[str, Any]],
    progress: Callable[[Change], None],
) -> None:
    """Applies `writes`, then deletes `prunes`, each in its order from one kind to the next (a namespace before
    what lives in it; prunes in reverse), the objects of one kind together. On a failure midway raises PartialApply
    naming what was done."""

    def write(change: Change) -> None:
        ref = change.ref
        if change.action == "prune":
            with_retries(kube.delete, ref.api_version, ref.kind, ref.name, ref.namespace)
        else:
            with_retries(kube.apply, by_ref[ref])

    done: list[Change] = []
    try:
        with ThreadPoolExecutor(max_workers=SYNC_CONCURRENCY) as pool:
            for batch in (*_runs_of_one_kind(writes), *_runs_of_one_kind(prunes)):
                failed: ApiError | None = None
                for change, future in [(change, pool.submit(write, change)) for change in batch]:
                    try:
                        future.result()
                    except ApiError as problem:
                        failed = failed or problem
                        continue
                    done.append(change)
                    progress(change)
                if failed is not None:
                    raise failed
    except ApiError as problem:
        if not done:
            raise  # nothing changed: the API's own answer (an outage is exit 5, not a partial change)
        raise PartialApply(
            f"stopped after {len(done)} of {len(writes) + len(prunes)} changes: {problem.message}",
            detail="\n".join(c.describe() for c in done) or "(nothing was changed)",
            hint="fix the cause and re-run the same command; it continues from the cluster's current state",
        ) from problem
