"""Which GPU nodes `nodes` lists on a fleet of any size (`ops.node_listing`): filters, the row limit, and the
summary with the nodes that need attention above 50 nodes."""

from __future__ import annotations

from konduktor.health.health_view import Health, NodeHealth
from konduktor.ops.node_listing import SUMMARY_ABOVE, TABLE_LIMIT, select_nodes, state_summary

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def view(name: str, state: Health = Health.HEALTHY, product: str | None = H100) -> NodeHealth:
    return NodeHealth(
        node=name,
        state=state,
        reason=None,
        evidence=None,
        since=None,
        quarantine_owner=None,
        last_verdict=None,
        last_verdict_at=None,
        last_verdict_detail=None,
        product=product,
        gpus=8,
        gpus_allocatable=8,
        cordoned=state is Health.CORDONED,
        opted_out=False,
    )


def fleet(healthy: int, quarantined: int = 0, a100: int = 0) -> list[NodeHealth]:
    views = [view(f"gpu-h100-{i:05d}") for i in range(healthy)]
    views += [view(f"gpu-h100-q{i:04d}", Health.QUARANTINED) for i in range(quarantined)]
    views += [view(f"gpu-a100-{i:04d}", product=A100) for i in range(a100)]
    return sorted(views, key=lambda v: v.node)


def test_a_small_fleet_is_listed_whole_as_before() -> None:
    views = fleet(SUMMARY_ABOVE - 1, quarantined=1)
    listing = select_nodes(views)
    assert listing.shown == views
    assert listing.notes() == []


def test_a_large_fleet_lists_the_nodes_that_need_attention_and_says_the_healthy_ones_are_left_out() -> None:
    views = fleet(10_000, quarantined=3)
    listing = select_nodes(views)
    assert [v.node for v in listing.shown] == ["gpu-h100-q0000", "gpu-h100-q0001", "gpu-h100-q0002"]
    assert (listing.matched, listing.total) == (3, 10_003)
    assert listing.notes() == ["healthy nodes not listed (--state healthy lists them)"]


def test_a_large_fleet_lists_healthy_nodes_when_asked_at_most_the_limit_and_says_how_many_more() -> None:
    views = fleet(10_000, quarantined=3)
    listing = select_nodes(views, states=[Health.HEALTHY])
    assert len(listing.shown) == TABLE_LIMIT
    assert all(v.state is Health.HEALTHY for v in listing.shown)
    assert listing.notes() == [f"showing {TABLE_LIMIT} of 10000 (--limit 0 lists all)"]
    assert len(select_nodes(views, states=[Health.HEALTHY], limit=0).shown) == 10_000
    assert len(select_nodes(views, states=[Health.HEALTHY], limit=7).shown) == 7


def test_state_and_type_filter_every_output_and_json_is_not_cut_unless_asked() -> None:
    views = fleet(100, quarantined=2, a100=60)
    a100 = select_nodes(views, gpu_type="a100", table=False)
    assert a100.matched == 60 and len(a100.shown) == 60
    assert all(v.product == A100 for v in a100.shown)
    assert select_nodes(views, gpu_type="A100-SXM4", states=[Health.QUARANTINED], table=False).shown == []
    quarantined = select_nodes(views, states=[Health.QUARANTINED, Health.REQUALIFYING], table=False)
    assert [v.node for v in quarantined.shown] == ["gpu-h100-q0000", "gpu-h100-q0001"]
    assert len(select_nodes(views, table=False).shown) == 162
    assert len(select_nodes(views, table=False, limit=5).shown) == 5


def test_the_summary_counts_each_products_nodes_by_state_most_common_first() -> None:
    views = [*fleet(97, quarantined=3, a100=2), view("gpu-x-0000", Health.CORDONED, product=None)]
    assert state_summary(views) == [
        f"{A100}: 2 nodes: 2 healthy",
        f"{H100}: 100 nodes: 97 healthy, 3 quarantined",
        "unlabelled: 1 node: 1 cordoned",
    ]
