"""Converging a cluster on a set of objects Konduktor owns: plan (pure), then apply and prune.

Ownership is a label selector (for quotas: `app.kubernetes.io/managed-by=konduktor,konduktor.ai/config=<name>`).
Only objects carrying it are ever pruned, so objects created by hand or by other tools are left alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from konduktor.errors import PartialApply
from konduktor.kube.client import ApiError, Kube

T = TypeVar("T")
Action = Literal["create", "update", "unchanged", "prune", "keep"]
# Deleting these would take everything inside with them; when the config drops one it is reported, not deleted.
NEVER_PRUNE = {("v1", "Namespace")}
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


@dataclass(frozen=True)
class Change:
    action: Action
    ref: Ref
    fields: tuple[str, ...] = ()  # top-level paths that differ, for updates

    def describe(self) -> str:
        detail = f" ({', '.join(self.fields)})" if self.fields else ""
        return f"{self.action:<9} {self.ref}{detail}"


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


def plan(
    desired: Sequence[tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]],
    owned_live: Iterable[dict[str, Any]],
    prune: bool,
) -> list[Change]:
    """Changes from (desired, live, server's dry-run result) triples and the live objects we own.

    Comparing the server's own dry-run result with the live object means defaults and quantity
    normalisation ("16" vs 16, "1024Mi" vs "1Gi") never show up as changes.
    """
    changes = []
    wanted = set()
    for obj, live, would_be in desired:
        ref = Ref.of(obj)
        wanted.add(ref)
        if live is None:
            changes.append(Change("create", ref))
            continue
        fields = differing_fields(comparable(live), comparable(would_be or obj))
        changes.append(Change("update", ref, tuple(fields)) if fields else Change("unchanged", ref))
    for live in owned_live:
        ref = Ref.of(live)
        if ref in wanted:
            continue
        if (ref.api_version, ref.kind) in NEVER_PRUNE or not prune:
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


def owned_objects(kube: Kube, kinds: Iterable[tuple[str, str]], selector: str) -> list[dict[str, Any]]:
    found = []
    for api_version, kind in kinds:
        found += kube.list(api_version, kind, label_selector=selector)
    return found


def sync(
    kube: Kube,
    objects: Sequence[dict[str, Any]],
    kinds: Sequence[tuple[str, str]],
    selector: str,
    *,
    prune: bool = False,
    dry_run: bool = False,
    progress: Callable[[Change], None] = lambda _change: None,
) -> list[Change]:
    """Plans against the live cluster and, unless `dry_run`, applies in order and prunes in reverse order.

    On a failure midway raises PartialApply naming what was done; re-running converges.
    """
    desired = []
    for obj in objects:
        ref = Ref.of(obj)
        live = with_retries(kube.get, ref.api_version, ref.kind, ref.name, ref.namespace)
        # Only an existing object needs the server's view to tell an update from no change; a new one may
        # live in a namespace that this same sync creates, where a dry run would be refused.
        would_be = with_retries(kube.apply, obj, dry_run=True) if live is not None else None
        desired.append((obj, live, would_be))
    changes = plan(desired, owned_objects(kube, kinds, selector), prune)
    if dry_run:
        return changes
    by_ref = {Ref.of(obj): obj for obj in objects}
    done: list[Change] = []
    order = {kind: index for index, (_, kind) in enumerate(kinds)}
    prunes = sorted((c for c in changes if c.action == "prune"), key=lambda c: -order.get(c.ref.kind, 0))
    try:
        for change in changes:
            if change.action in ("create", "update"):
                with_retries(kube.apply, by_ref[change.ref])
                done.append(change)
                progress(change)
        for change in prunes:
            ref = change.ref
            with_retries(kube.delete, ref.api_version, ref.kind, ref.name, ref.namespace)
            done.append(change)
            progress(change)
    except ApiError as problem:
        if not done:
            raise  # nothing changed: the API's own answer (an outage is exit 5, not a partial change)
        raise PartialApply(
            f"stopped after {len(done)} of {sum(c.action in ('create', 'update', 'prune') for c in changes)} "
            f"changes: {problem.message}",
            detail="\n".join(c.describe() for c in done) or "(nothing was changed)",
            hint="fix the cause and re-run the same command; it continues from the cluster's current state",
        ) from problem
    return changes
