"""Which GPU nodes `konduktor-install nodes` lists, for a fleet of any size: filtered by state and GPU type, at most
a limit of rows, and, on a large fleet, a summary by product and state with the nodes that need attention.

What on-call wants from 10,000 nodes is not 10,000 rows: how many of each GPU product are in each state, then the
few that are not healthy. So above `SUMMARY_ABOVE` GPU nodes the table leaves the healthy ones out unless asked
for (`--state healthy`), and lists at most `TABLE_LIMIT` rows unless told otherwise (`--limit 0`: all). A small
fleet is listed whole, as before. Pure: the caller passes the nodes as `health_view` judged them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from konduktor.health.health_view import Health, NodeHealth

# More GPU nodes than this and the table shows the summary and the nodes not healthy; a person reads ~50 rows.
SUMMARY_ABOVE = 50
TABLE_LIMIT = 50


@dataclass(frozen=True)
class NodeListing:
    """The nodes to print (`shown`), how many passed the filters (`matched`) and how many GPU nodes there are
    (`total`); `healthy_left_out` when the healthy nodes were left out because the fleet is large."""

    shown: list[NodeHealth]
    matched: int
    total: int
    healthy_left_out: bool = False

    def notes(self) -> list[str]:
        """What a reader must know about the rows they do not see, with the option that shows them."""
        found: list[str] = []
        if self.healthy_left_out:
            found.append("healthy nodes not listed (--state healthy lists them)")
        if len(self.shown) < self.matched:
            found.append(f"showing {len(self.shown)} of {self.matched} (--limit 0 lists all)")
        return found


def of_type(view: NodeHealth, gpu_type: str) -> bool:
    """Whether a node's GPU product is `gpu_type`, written as its product label or a part of it, in any case
    (`h100` selects NVIDIA-H100-80GB-HBM3)."""
    return gpu_type.lower() in (view.product or "").lower()


def select_nodes(
    views: Sequence[NodeHealth],
    *,
    states: Collection[Health] = (),
    gpu_type: str | None = None,
    limit: int | None = None,
    table: bool = True,
) -> NodeListing:
    """The nodes in `states` (all when empty) of `gpu_type` (any when None), at most `limit` (None: the table's
    default on a large fleet, else all; 0: all). For the `table`, a large fleet without `states` lists the nodes
    that are not healthy."""
    large = table and len(views) > SUMMARY_ABOVE
    chosen = set(states)
    healthy_left_out = large and not chosen
    if healthy_left_out:
        chosen = set(Health) - {Health.HEALTHY}
    matched = [v for v in views if (not chosen or v.state in chosen) and (gpu_type is None or of_type(v, gpu_type))]
    if limit is None:
        limit = TABLE_LIMIT if large else 0
    shown = matched[:limit] if limit > 0 else matched
    return NodeListing(shown, len(matched), len(views), healthy_left_out)


def state_summary(views: Sequence[NodeHealth]) -> list[str]:
    """Per GPU product: its nodes and how many are in each state, most common state first."""
    products: dict[str, dict[Health, int]] = {}
    for view in views:
        counts = products.setdefault(view.product or "unlabelled", {})
        counts[view.state] = counts.get(view.state, 0) + 1
    lines = []
    for product, counts in sorted(products.items()):
        states = sorted(counts.items(), key=lambda item: (-item[1], item[0].value))
        described = ", ".join(f"{count} {state.value}" for state, count in states)
        total = sum(counts.values())
        lines.append(f"{product}: {total} node{'s' if total != 1 else ''}: {described}")
    return lines
