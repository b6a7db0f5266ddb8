"""`why` for a job that asks for slices (pure): Kueue's messages in a team member's words, and which slice of the
team's queue would fit now where its ClusterQueue is known. The messages are Kueue v0.19.2's
(pkg/scheduler/flavorassigner/flavorassigner.go), one per flavor tried, joined as its Status.Message joins them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from konduktor.queueing.capacity import Capacity, from_json, summarize, to_json
from konduktor.queueing.explain import Explanation, Reason
from konduktor.queueing.slices import published_slice_usage, slice_usage, slices_asked, with_slice_reasons
from konduktor.quotas.usage import gpu_usage

MIG_1G, MIG_3G, SHARED = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu.shared"


def workload(resource: str, count: int, pods: int = 1, message: str = "", admitted: bool = False) -> dict[str, Any]:
    container = {"name": "eval", "resources": {"limits": {resource: str(count), "cpu": "1"}}}
    reserved = {"type": "QuotaReserved", "status": "True" if admitted else "False", "reason": "Pending"}
    return {
        "metadata": {"name": "job-eval", "namespace": "team-a"},
        "spec": {"podSets": [{"name": "main", "count": pods, "template": {"spec": {"containers": [container]}}}]},
        "status": {"conditions": [{**reserved, "message": message}]},
    }


def pending(message: str) -> Explanation:
    return Explanation("eval", "team-a", "pending", cluster_queue="team-a", reasons=[Reason("kueue", message)])


def beyond(resource: str, flavor: str, asked: int, most: int) -> str:
    return (
        f"insufficient quota for {resource} in flavor {flavor}, previously considered podsets requests (0) + "
        f"current podset request ({asked}) > maximum capacity ({most})"
    )


def couldnt(*reasons: str) -> str:
    return "couldn't assign flavors to pod set main: " + ", ".join(sorted(reasons))


def cluster_queue(used: dict[str, int]) -> dict[str, Any]:
    quota = {MIG_1G: 2, MIG_3G: 0, SHARED: 0}
    return {
        "metadata": {"name": "team-a"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu", *quota],
                    "flavors": [
                        {"name": "h100", "resources": [{"name": r, "nominalQuota": "0"} for r in quota]},
                        {
                            "name": "h100-mig",
                            "resources": [{"name": r, "nominalQuota": str(q)} for r, q in quota.items()],
                        },
                    ],
                }
            ]
        },
        "status": {
            "flavorsUsage": [
                {"name": "h100-mig", "resources": [{"name": r, "total": str(n)} for r, n in used.items()]},
            ]
        },
    }


def test_the_slices_a_workload_asks_for() -> None:
    assert slices_asked(workload(MIG_1G, 2, pods=3)) == {MIG_1G: 6}
    assert slices_asked(workload("nvidia.com/gpu", 8)) == {}


def test_a_profile_no_group_offers_is_no_node_laid_out_for_it() -> None:
    message = couldnt("resource nvidia.com/mig-7g.80gb unavailable in ClusterQueue")
    explained = with_slice_reasons(pending(message), workload("nvidia.com/mig-7g.80gb", 1, message=message))
    assert explained.state == "never-fit"
    assert [r.kind for r in explained.reasons] == ["slice-no-layout"]  # Kueue's raw words are its message's
    assert "no node of the cluster is laid out for mig-7g.80gb" in explained.reasons[0].message


def test_a_profile_the_team_has_no_quota_of_never_fits_and_a_slice_that_fits_now_is_named() -> None:
    message = couldnt(beyond(MIG_3G, "h100", 1, 0), beyond(MIG_3G, "h100-mig", 1, 0))
    usage = slice_usage(cluster_queue({MIG_1G: 1}))
    explained = with_slice_reasons(pending(message), workload(MIG_3G, 1, message=message), usage)
    assert explained.state == "never-fit"
    assert [r.message for r in explained.reasons] == ["your team's queue has no quota of mig-3g.40gb"]
    assert explained.remedies[-1] == (
        "mig-1g.10gb would fit now: 1 free of your team's quota in h100-mig (`konduktor submit --slice mig-1g.10gb`)"
    )
    # Once the team's 1g slices are all in use, none fits now, and none is named.
    busy = with_slice_reasons(
        pending(message), workload(MIG_3G, 1, message=message), slice_usage(cluster_queue({MIG_1G: 2}))
    )
    assert not any("would fit now" in r for r in busy.remedies)
    # A member reads no ClusterQueue: the reason stays, the suggestion needs the quota.
    member = with_slice_reasons(pending(message), workload(MIG_3G, 1, message=message), slice_usage(None))
    assert [r.kind for r in member.reasons] == ["slice-no-quota"] and not any("fit now" in r for r in member.remedies)


def test_more_slices_than_the_team_may_ever_hold() -> None:
    message = couldnt(beyond(MIG_1G, "h100", 4, 0), beyond(MIG_1G, "h100-mig", 4, 3))
    explained = with_slice_reasons(pending(message), workload(MIG_1G, 4, message=message))
    assert explained.state == "never-fit"
    assert explained.reasons == [
        Reason(
            "slice-over-quota",
            "the job asks 4 mig-1g.10gb, more than your team may ever hold in h100-mig (3, quota and borrowing "
            "together)",
        )
    ]


def test_every_slice_in_use_waits() -> None:
    message = couldnt(
        beyond(SHARED, "h100", 1, 0),
        "insufficient unused quota for nvidia.com/gpu.shared in flavor h100-shared, 1 more needed",
    )
    explained = with_slice_reasons(pending(message), workload(SHARED, 1, message=message))
    assert explained.state == "pending"
    assert [r.message for r in explained.reasons] == [
        "every gpu.shared your team may use in h100-shared is taken: 1 more needed"
    ]
    assert explained.remedies == ["wait for your team's jobs on gpu.shared to finish (`konduktor queue`)"]


def test_an_admitted_slice_no_node_has_room_for() -> None:
    pod = {
        "metadata": {"name": "eval-0"},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/6 nodes are available: 1 Insufficient nvidia.com/mig-1g.10gb, 5 node(s) didn't match "
                    "Pod's node affinity/selector.",
                }
            ]
        },
    }
    admitted = Explanation("eval", "team-a", "admitted", cluster_queue="team-a")
    explained = with_slice_reasons(admitted, workload(MIG_1G, 1, admitted=True), pods=[pod])
    assert [r.kind for r in explained.reasons] == ["slice-no-node"]
    assert explained.reasons[0].message.startswith("admitted, but no node has a free mig-1g.10gb now")
    # A whole-GPU job, or a finished one, is left as it was.
    whole = Explanation("train", "team-a", "pending", reasons=[Reason("kueue", "x")])
    assert with_slice_reasons(whole, workload("nvidia.com/gpu", 8, message="x")).reasons == [Reason("kueue", "x")]


def test_a_node_selector_that_rules_out_the_teams_group_is_named() -> None:
    message = couldnt(
        beyond(SHARED, "h100", 1, 0), beyond(SHARED, "h100-mig", 1, 0), "flavor h100-shared doesn't match node affinity"
    )
    explained = with_slice_reasons(pending(message), workload(SHARED, 1, message=message))
    assert explained.state == "never-fit"
    assert [r.message for r in explained.reasons] == [
        "the job's node selector or affinity rules out h100-shared, and no other flavor of your team's queue holds "
        "gpu.shared"
    ]
    assert explained.remedies[-1].startswith("drop the node selector or affinity on sharing labels")


def test_a_member_reads_the_queues_slices_from_the_published_capacity_where_it_has_them() -> None:
    rows = slice_usage(cluster_queue({MIG_1G: 1}))
    other = [replace(row, cluster_queue="team-b", team="team-b") for row in rows]
    whole = replace(rows[0], resource="nvidia.com/gpu")
    capacity = Capacity(flavors=(), quarantined=(), queues=(*rows, *other, whole))
    assert published_slice_usage(capacity, "team-a") == rows
    assert published_slice_usage(capacity, None) == [] and published_slice_usage(None, "team-a") == []


def test_a_member_is_told_which_slice_fits_now_from_what_the_publisher_publishes() -> None:
    # The publisher's rows of the queue (whole GPUs and slices, read with its rights), as a member reads its copy.
    published = from_json(to_json(summarize((), gpu_usage([cluster_queue({MIG_1G: 1})]))))
    rows = published_slice_usage(published, "team-a")
    assert [(r.flavor, r.resource, r.nominal, r.used) for r in rows] == [("h100-mig", MIG_1G, 2, 1)]
    message = couldnt(beyond(MIG_3G, "h100", 1, 0), beyond(MIG_3G, "h100-mig", 1, 0))
    member = with_slice_reasons(pending(message), workload(MIG_3G, 1, message=message), rows)
    administrator = with_slice_reasons(
        pending(message), workload(MIG_3G, 1, message=message), slice_usage(cluster_queue({MIG_1G: 1}))
    )
    assert member.remedies == administrator.remedies
    assert member.remedies[-1].startswith("mig-1g.10gb would fit now: 1 free of your team's quota in h100-mig")
