"""A cache of one kind kept current without listing it again: a list in pages, then a watch from the list's
resourceVersion, as client-go's reflector does (K:staging/src/k8s.io/client-go/tools/cache/reflector.go).

A watch the server ends (after `timeoutSeconds`) or the network drops resumes from the last resourceVersion seen,
bookmarks included; one whose resourceVersion has expired (410 Gone, as the response or as an ERROR event) starts
over with a list, delivered whole as a SYNC event, so no change is lost either way. Objects that stop matching the
selectors arrive as DELETED (K:staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from konduktor.kube.client import ApiError, Kube

KubeObject = dict[str, Any]
Slim = Callable[[KubeObject], KubeObject]


@dataclass(frozen=True)
class WatchEvent:
    """What a watch saw: SYNC carries the whole list (after a start or a 410 Gone); ADDED, MODIFIED and DELETED one
    object each. `source` names the ListWatch it comes from."""

    source: str
    type: str
    objects: tuple[KubeObject, ...]


def list_pages(
    kube: Kube,
    api_version: str,
    kind: str,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    slim: Slim | None = None,
    page: int = 500,
) -> tuple[list[KubeObject], str]:
    """Every object (each through `slim`) and the list's resourceVersion, from which a watch continues without a
    gap. In pages, from one snapshot: one answer with every object of a large cluster, decoded at once, would set
    the reader's peak memory."""
    path = kube.resource(api_version, kind).path()
    found: list[KubeObject] = []
    query = {"limit": str(page)}
    if label_selector:
        query["labelSelector"] = label_selector
    if field_selector:
        query["fieldSelector"] = field_selector
    while True:
        listing: Mapping[str, Any] = kube.request("GET", path, query=query)
        found += [slim(item) if slim else item for item in listing.get("items", [])]
        meta = listing.get("metadata", {})
        if not meta.get("continue"):
            return found, str(meta.get("resourceVersion", ""))
        query = {**query, "continue": meta["continue"]}


class ListWatch:
    """A thread that lists one kind, then watches it from the list's resourceVersion, and puts what it sees on
    `events` (shared by several ListWatches, so one consumer sees every kind in order of arrival).

    `healthy` says that the cache a consumer keeps from the events is current: the list arrived and the watch runs.
    A failure is reported to `on_error` and retried with a back-off (0.5 s doubling to 30 s). `relist()` asks for a
    list now: a consumer's safety net against a change the watch never delivered."""

    def __init__(
        self,
        kube: Kube,
        api_version: str,
        kind: str,
        events: queue.Queue[WatchEvent],
        *,
        source: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        slim: Slim | None = None,
        timeout_seconds: int = 300,
        on_error: Callable[[str, ApiError], None] | None = None,
    ) -> None:
        self.kube = kube
        self.api_version = api_version
        self.kind = kind
        self.source = source or kind
        self.events = events
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.slim = slim
        self.timeout_seconds = timeout_seconds
        self.on_error = on_error
        self.synced = False
        self.failing = False
        self.lists = 0  # lists made (one at the start, one after each 410 Gone or relist())
        self.watches = 0  # watch requests opened (one more each time the server ends one)
        self._stopping = threading.Event()
        self._relist = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.source}", daemon=True)

    @property
    def healthy(self) -> bool:
        return self.synced and not self.failing

    def start(self) -> None:
        self._thread.start()

    def relist(self) -> None:
        """List again (a SYNC event follows), then watch on from that list."""
        self._relist.set()
        if self._stream is not None:
            self._stream.close()

    def stop(self) -> None:
        self._stopping.set()
        if self._stream is not None:
            self._stream.close()
        self._thread.join(timeout=5)

    def _put(self, type_: str, objects: tuple[KubeObject, ...]) -> None:
        self.events.put(WatchEvent(self.source, type_, objects))

    def _run(self) -> None:
        version: str | None = None
        backoff = 0.5
        while not self._stopping.is_set():
            try:
                if version is None or self._relist.is_set():
                    self._relist.clear()
                    items, version = list_pages(
                        self.kube,
                        self.api_version,
                        self.kind,
                        label_selector=self.label_selector,
                        field_selector=self.field_selector,
                        slim=self.slim,
                    )
                    self._put("SYNC", tuple(items))
                    self.synced = True
                    self.lists += 1
                self._stream = self.kube.watch(
                    self.api_version,
                    self.kind,
                    version,
                    timeout_seconds=self.timeout_seconds,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                )
                if self._relist.is_set():  # asked while this watch was being opened
                    self._stream.close()
                self.failing = False
                self.watches += 1
                for event in self._stream:
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self._put(event["type"], (self.slim(obj) if self.slim else obj,))
                backoff = 0.5
            except ApiError as problem:
                if self._stopping.is_set():
                    return
                if self.on_error is not None:
                    self.on_error(self.source, problem)
                if problem.status == 410:
                    version = None  # expired: list again
                    continue
                self.failing = True
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 30)
