"""The result line of allreduce.py, the torchrun benchmark used for node pairs."""

from __future__ import annotations

from konduktor.burnin.parsers.collective import CollectiveResult, CollectiveRow, Placement
from konduktor.burnin.parsers.common import OutputError, schema_lines

ALLREDUCE_SCHEMA = "konduktor.burnin.allreduce/1"


def parse_allreduce_bench(text: str) -> CollectiveResult:
    """Result line of allreduce.py, the torchrun benchmark used for node pairs."""
    records = list(schema_lines(text, ALLREDUCE_SCHEMA))
    errors = tuple(str(r.get("error")) for r in records if r.get("kind") == "error")
    result = next((r for r in records if r.get("kind") == "result"), None)
    if result is None:
        if errors:
            return CollectiveResult(rows=(), errors=errors)
        raise OutputError("no allreduce result line (the run did not finish)")
    placement = Placement(
        "in-place",
        float(result["time_us"]),
        float(result["algbw_gb_s"]),
        float(result["busbw_gb_s"]),
        int(result["wrong"]) if result.get("wrong") is not None else None,
    )
    return CollectiveResult(
        rows=(CollectiveRow(int(result["bytes"]), (placement,)),),
        ranks=int(result["world_size"]),
        hosts=tuple(str(h) for h in result.get("hosts") or ()),
        errors=errors,
    )
