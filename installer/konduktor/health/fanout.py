"""Calls that wait on the API server, made for many nodes at once."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")
Key = TypeVar("Key", bound=Hashable)


def at_once(work: Callable[[Item], Result], items: Sequence[Item], concurrency: int) -> list[Result]:
    """`work(item)` for every item, up to `concurrency` at a time; the results in the items' order. A failure
    raises from here, as a plain loop would."""
    if concurrency <= 1 or len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(items)), thread_name_prefix="nodes") as pool:
        return list(pool.map(work, items))


def in_waves(work: Callable[[Key, Item], bool], queues: Mapping[Key, Sequence[Item]], concurrency: int) -> set[Key]:
    """Every queue's items in its order, the queues side by side in waves: each queue's first item (up to
    `concurrency` at a time), then each one's second, and so on. A queue whose item failed (`work` returned False)
    takes no part in the later waves. Returns the queues that failed.

    Waves put the first item of every queue ahead of any queue's second: in a burst, every node's taint is written
    before any node's condition or Event, so the last node is quarantined after a third of the writes, not all."""
    failed: set[Key] = set()
    for wave in range(max((len(items) for items in queues.values()), default=0)):
        due = [(key, items[wave]) for key, items in queues.items() if wave < len(items) and key not in failed]
        done = at_once(lambda pair: work(*pair), due, concurrency)
        failed.update(key for (key, _), ok in zip(due, done, strict=True) if not ok)
    return failed
