"""Calls that wait on the API server, made for many nodes at once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def at_once(work: Callable[[Item], Result], items: Sequence[Item], concurrency: int) -> list[Result]:
    """`work(item)` for every item, up to `concurrency` at a time; the results in the items' order. A failure
    raises from here, as a plain loop would."""
    if concurrency <= 1 or len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(items)), thread_name_prefix="nodes") as pool:
        return list(pool.map(work, items))
