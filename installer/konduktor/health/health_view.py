"""The GPU nodes as on-call sees them: health state, reason, evidence, since when, last burn-in verdict, and who
quarantined each one; and the GPUs that quarantines and cordons take out of the cluster's capacity.

Pure: the caller passes the Nodes, the Node Events and the burn-in Jobs as the API returned them. The Node is
read with the controller's own reading (`health.node_reading.node_state`) and judged with its own ownership rule
(`decide.quarantined_by_us`), so this view never disagrees with what the controller will do.

Who quarantined a node is told by the newest quarantine Event: the health controller records its own as
`konduktor-health`, `konduktor-install burnin --quarantine` as `konduktor-install`. The API server keeps Events
for an hour by default; after that the owner reads `konduktor` (a quarantine of ours, its author forgotten).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from konduktor.burnin.record import record_of
from konduktor.health.breaker import RESET_COMMAND, BreakerView
from konduktor.health.decide import CONDITION_TYPE, NodeState, quarantined_by_us
from konduktor.health.node_reading import gpu_node_state
from konduktor.health.requalification_runs import REQUALIFICATION_LABEL, Run, acted_on, run_of
from konduktor.health.settings import HealthSettings
from konduktor.kube.timestamps import format_time, parse_time
from konduktor.vocabulary import (
    GPU_RESOURCE,
    HEALTH_TAINT_KEY,
    PRODUCT_LABEL,
    QUARANTINE_REASON,
    QUARANTINED_AT,
    REQUALIFICATION_RESULT,
    REQUALIFIED_AT,
)

# The components that write quarantine Events (`controller.actuator`, `controller.quarantine`).
CONTROLLER = "konduktor-health"
INSTALLER = "konduktor-install"
OURS = "konduktor"  # ours by the annotation, its author's Event gone
SOMEONE_ELSE = "other"  # the gpu-health taint without our annotation: we never remove it
TABLE_WIDTH = 100
GAP = "  "  # between columns


class Health(StrEnum):
    HEALTHY = "healthy"
    # Quarantined, a burn-in Job running on it, or the controller's requalification finished and its verdict not yet
    # acted on: one state from the burn-in's start to its verdict.
    REQUALIFYING = "requalifying"
    QUARANTINED = "quarantined"  # the gpu-health taint: ours, or someone else's (owner says which)
    CORDONED = "cordoned"  # spec.unschedulable, set by someone else (Konduktor never cordons)
    UNHEALTHY = "unhealthy"  # GPUHealthy=False without a quarantine (breaker open, or opted out)
    OPTED_OUT = "opted-out"  # the controller acts on nothing here


@dataclass(frozen=True)
class NodeHealth:
    """One GPU node's health; the JSON shape of `konduktor-install nodes -o json` (one object per node)."""

    node: str
    state: Health
    reason: str | None
    evidence: str | None  # the GPUHealthy condition's message
    since: str | None  # RFC 3339, UTC
    quarantine_owner: str | None  # konduktor-health, konduktor-install, konduktor, other
    last_verdict: str | None  # PASS, WARN, FAIL, ERROR, SKIPPED, RELEASED (a manual release)
    last_verdict_at: str | None
    last_verdict_detail: str | None
    product: str | None
    gpus: int  # status.capacity nvidia.com/gpu
    gpus_allocatable: int
    cordoned: bool
    opted_out: bool
    next_step: str | None = None  # why a node out of service waits, and what happens next (`next_step`)

    @property
    def out_of_service(self) -> bool:
        return self.state in (Health.QUARANTINED, Health.REQUALIFYING)

    def row(self) -> dict[str, Any]:
        row = asdict(self)
        row["state"] = self.state.value
        return row


@dataclass(frozen=True)
class ProductCapacity:
    """GPUs of one product, and those a quarantine or a cordon keeps from new work."""

    product: str
    gpus: int
    quarantined: int
    cordoned: int  # on nodes cordoned and not quarantined

    def describe(self) -> str:
        lost = [f"{n} {what}" for n, what in ((self.quarantined, "quarantined"), (self.cordoned, "cordoned")) if n]
        return f"{self.gpus} {self.product} GPUs" + (f", {', '.join(lost)}" if lost else "")


def _count(node: Mapping[str, Any], field: str) -> int:
    value = str((node.get("status", {}).get(field) or {}).get(GPU_RESOURCE, "0"))
    return int(value) if value.isdigit() else 0


def _condition(node: Mapping[str, Any]) -> Mapping[str, Any]:
    conditions = node.get("status", {}).get("conditions") or ()
    found: Mapping[str, Any] = next((c for c in conditions if c.get("type") == CONDITION_TYPE), {})
    return found


def _stamp(when: float | None) -> str | None:
    return None if when is None else format_time(when)


def quarantine_authors(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node -> the component of its newest quarantine Event ("quarantined (NoSchedule): ...")."""
    newest: dict[str, tuple[float, str]] = {}
    for event in events:
        involved = event.get("involvedObject", {})
        if involved.get("kind") != "Node" or not str(event.get("message", "")).startswith("quarantined ("):
            continue
        at = parse_time(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")) or 0.0
        component = event.get("reportingComponent") or event.get("source", {}).get("component") or OURS
        name = involved.get("name", "")
        if name not in newest or at >= newest[name][0]:
            newest[name] = (at, component)
    return {name: component for name, (_, component) in newest.items()}


def gpu_pods(pods: Iterable[Mapping[str, Any]], skip_namespaces: Iterable[str] = ()) -> list[str]:
    """namespace/name of the unfinished pods that hold GPUs (a container requests or limits nvidia.com/gpu), but
    those in `skip_namespaces` (the burn-ins' own)."""
    skipped = set(skip_namespaces)
    found = []
    for pod in pods:
        meta, spec = pod.get("metadata", {}), pod.get("spec", {})
        if meta.get("namespace") in skipped or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        containers = [*spec.get("containers", []), *spec.get("initContainers", [])]
        resources = [c.get("resources") or {} for c in containers]
        wanted = [str((r.get(k) or {}).get(GPU_RESOURCE, "0")) for r in resources for k in ("requests", "limits")]
        if any(v.isdigit() and int(v) > 0 for v in wanted):
            found.append(f"{meta.get('namespace')}/{meta.get('name')}")
    return sorted(found)


def running_burnins(jobs: Iterable[Mapping[str, Any]]) -> set[str]:
    """Nodes with a burn-in or requalification Job that has not finished."""
    return {run.node for run in map(run_of, jobs) if run is not None and run.finished_at is None}


def finished_requalifications(jobs: Iterable[Mapping[str, Any]]) -> dict[str, Run]:
    """Per node, its newest finished requalification Job of the controller's (`konduktor.health.requalification`)."""
    newest: dict[str, Run] = {}
    for job in jobs:
        if (job.get("metadata", {}).get("labels") or {}).get(REQUALIFICATION_LABEL) != "true":
            continue
        run = run_of(job)
        if run is None or run.finished_at is None:
            continue
        if run.node not in newest or run.finished_at > (newest[run.node].finished_at or 0.0):
            newest[run.node] = run
    return newest


def awaiting_verdict(run: Run | None, state: NodeState) -> Run | None:
    """The node's requalification run when it has finished and the controller has not acted on its verdict yet (it
    does at its next poll, stamping the node: `requalification.acted_on`); None otherwise."""
    if run is None or not quarantined_by_us(state) or acted_on(run, state):
        return None
    return run


def _verdict(node: Mapping[str, Any], annotations: Mapping[str, str]) -> tuple[str | None, float | None, str | None]:
    """The newest verdict on the node: its requalification's (or a manual release), or the last burn-in's
    (`burnin.record`). (verdict, when, detail)."""
    found: list[tuple[float, str, str | None]] = []
    result = annotations.get(REQUALIFICATION_RESULT)
    if result:
        word, _, said = result.partition(":")
        found.append((parse_time(annotations.get(REQUALIFIED_AT)) or 0.0, word.strip(), said.strip() or None))
    record = record_of(node)
    if record is not None:
        found.append((parse_time(record.at) or 0.0, record.verdict, f"burn-in {record.run} at level {record.level}"))
    if not found:
        return None, None, None
    at, word, detail = max(found, key=lambda item: item[0])
    return word, at or None, detail


def node_health(
    node: Mapping[str, Any],
    state: NodeState,
    authors: Mapping[str, str],
    running: set[str],
    settings: HealthSettings,
) -> NodeHealth:
    annotations = state.annotations
    condition = _condition(node)
    opted_out = state.labels.get(settings.opt_out_label) == "true"
    foreign_taint = any(t.key == HEALTH_TAINT_KEY for t in state.taints) and not quarantined_by_us(state)
    since: float | None = parse_time(condition.get("lastTransitionTime"))
    owner: str | None = None
    reason: str | None = condition.get("reason") or None
    if quarantined_by_us(state):
        health = Health.REQUALIFYING if state.name in running else Health.QUARANTINED
        owner = authors.get(state.name, OURS)
        reason = annotations.get(QUARANTINE_REASON) or reason
        since = parse_time(annotations.get(QUARANTINED_AT)) or since
    elif foreign_taint:
        health, owner = Health.QUARANTINED, SOMEONE_ELSE
        value = next(t.value for t in state.taints if t.key == HEALTH_TAINT_KEY)
        reason = f"someone else's taint {HEALTH_TAINT_KEY}" + (f"={value}" if value else "")
    elif state.unschedulable:
        health, reason = Health.CORDONED, "cordoned by someone else (spec.unschedulable)"
    elif state.gpu_healthy is False:
        health = Health.UNHEALTHY
    elif opted_out:
        health, reason = Health.OPTED_OUT, f"{settings.opt_out_label}=true"
    else:
        health = Health.HEALTHY
    verdict, verdict_at, detail = _verdict(node, annotations)
    return NodeHealth(
        node=state.name,
        state=health,
        reason=reason,
        evidence=condition.get("message") or None,
        since=_stamp(since),
        quarantine_owner=owner,
        last_verdict=verdict,
        last_verdict_at=_stamp(verdict_at),
        last_verdict_detail=detail,
        product=state.labels.get(PRODUCT_LABEL),
        gpus=_count(node, "capacity") or _count(node, "allocatable"),
        gpus_allocatable=_count(node, "allocatable"),
        cordoned=state.unschedulable,
        opted_out=opted_out,
    )


def health_view(
    nodes: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]] = (),
    jobs: Iterable[Mapping[str, Any]] = (),
    settings: HealthSettings | None = None,
    *,
    breaker: BreakerView | None = None,
    busy: Mapping[str, Sequence[str]] | None = None,
    now: float | None = None,
) -> list[NodeHealth]:
    """Every GPU node's health, by name; with the clock (`now`), each node's next step (`next_step`), judged with the
    breaker's state and the GPU pods still running on the nodes out of service (`busy`)."""
    settings = settings or HealthSettings()
    jobs = list(jobs)
    authors, running, finished = quarantine_authors(events), running_burnins(jobs), finished_requalifications(jobs)
    views = []
    for node in nodes:
        state = gpu_node_state(dict(node), settings, node["metadata"]["name"] in running)
        if state is not None:
            awaiting = awaiting_verdict(finished.get(state.name), state)
            view = node_health(node, state, authors, running | ({state.name} if awaiting else set()), settings)
            if now is not None:
                pods = (busy or {}).get(state.name, ())
                step = next_step(view, state, settings, breaker, pods, now, awaiting=awaiting)
                view = replace(view, next_step=step)
            views.append(view)
    return sorted(views, key=lambda view: view.node)


def next_step(
    view: NodeHealth,
    state: NodeState,
    settings: HealthSettings,
    breaker: BreakerView | None,
    gpu_pods: Sequence[str],
    now: float,
    *,
    awaiting: Run | None = None,
) -> str | None:
    """Why a node out of service (or held back) waits, and what happens next; None for a node in service.

    The rules are the controller's (`decide._due`): a quarantined node is burned in once it has rested
    `cooldown_seconds` since its quarantine or its last attempt, has every expected GPU in allocatable, is not
    cordoned, and a requalification slot is free; its burn-in pod needs every GPU, so it starts once the GPU pods
    still on the node have finished. A requalification that has finished waits for the controller's next poll to act
    on its verdict (`awaiting`): the node stays requalifying until then."""
    name = view.node
    pods = f"{len(gpu_pods)} GPU pod{'s' if len(gpu_pods) != 1 else ''} still running ({', '.join(gpu_pods[:3])}" + (
        ", ...)" if len(gpu_pods) > 3 else ")"
    )
    if view.state is Health.REQUALIFYING:
        if awaiting is not None and awaiting.finished_at is not None:
            return (
                f"requalification burn-in finished at {format_time(awaiting.finished_at)}; the controller acts on "
                "its verdict at its next poll: PASS releases the node, anything else keeps it out"
            )
        if gpu_pods:
            return (
                f"requalification burn-in waits for the {pods} to finish (it needs every GPU; past its deadline it "
                "ends in ERROR and is tried again after the cooldown)"
            )
        return "requalification burn-in running: PASS releases the node, anything else keeps it out"
    if view.state is Health.UNHEALTHY and not view.opted_out:
        if breaker is not None and breaker.tripped:
            return f"breaker tripped: held back; quarantined within seconds of {RESET_COMMAND}"
        return None
    if view.state is not Health.QUARANTINED:
        return None
    if view.quarantine_owner == SOMEONE_ELSE:
        return f"someone else's taint: whoever placed it removes it (kubectl taint node {name} {HEALTH_TAINT_KEY}-)"
    release = f"konduktor-install nodes release {name} --reason '...'"
    if view.opted_out:
        return f"opted out ({settings.opt_out_label}=true): no burn-in; {release}"
    if settings.max_concurrent_requalifications == 0:
        return f"requalification is off: stays out until {release}"
    if settings.dry_run:
        return f"the controller runs dry and starts no burn-in: konduktor-install nodes requalify {name}, or {release}"
    if state.unschedulable:
        return f"waiting: cordoned by someone else; requalifies once uncordoned (kubectl uncordon {name})"
    expected, allocatable = state.gpu_expected, state.gpu_allocatable
    if expected is not None and allocatable is not None and allocatable < expected:
        return (
            f"waiting: {expected - allocatable} of {expected} GPUs missing from allocatable; requalifies when the "
            f"device plugin reports {expected}"
        )
    times = [parse_time(state.annotations.get(k)) for k in (QUARANTINED_AT, REQUALIFIED_AT)]
    rested = max((t for t in times if t is not None), default=0.0)
    due = rested + settings.cooldown_seconds
    after = f"; it cannot start before the {pods} finish (it needs every GPU)" if gpu_pods else ""
    if now < due:
        return f"requalification burn-in scheduled in {duration(due - now)} (after the cooldown){after}"
    slots = settings.max_concurrent_requalifications
    return f"requalification burn-in due: starts when a slot is free (at most {slots} at once){after}"


def capacity(views: Sequence[NodeHealth]) -> list[ProductCapacity]:
    """Per GPU product: GPUs, and those out of service (a cordoned node that is also quarantined counts once)."""
    products: dict[str, list[NodeHealth]] = {}
    for view in views:
        products.setdefault(view.product or "unlabelled", []).append(view)
    return [
        ProductCapacity(
            product,
            sum(v.gpus for v in members),
            sum(v.gpus for v in members if v.out_of_service),
            sum(v.gpus for v in members if v.cordoned and not v.out_of_service),
        )
        for product, members in sorted(products.items())
    ]


def age(stamp: str | None, now: float) -> str:
    """kubectl's age: 45s, 12m, 3h, 2d."""
    at = parse_time(stamp)
    return "-" if at is None else duration(now - at)


def duration(seconds: float) -> str:
    """45s, 12m, 3h, 2d, as kubectl shows an age."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _cells(view: NodeHealth, now: float, wide: bool) -> list[str]:
    verdict = f"{view.last_verdict} {age(view.last_verdict_at, now)} ago" if view.last_verdict else "-"
    cells = [
        view.node,
        view.state.value,
        f"{view.gpus_allocatable}/{view.gpus}",
        age(view.since, now),
        view.quarantine_owner or "-",
        verdict,
        view.reason or "-",
    ]
    if wide:
        cells += [view.product or "-", view.since or "-", view.evidence or "-"]
    return cells


def note(label: str, text: str, width: int = TABLE_WIDTH) -> str:
    """`label: text`, wrapped to the table's width, continued lines indented."""
    return textwrap.fill(f"{label}: {text}", width, subsequent_indent="    ", break_on_hyphens=False) + "\n"


def render_next(views: Sequence[NodeHealth]) -> str:
    """One `next:` note per node with a next step, under the table."""
    return "".join(note("next", f"{view.node}: {view.next_step}") for view in views if view.next_step)


def render_table(views: Sequence[NodeHealth], now: float, wide: bool = False) -> str:
    """Columns as kubectl aligns them. The default table fits TABLE_WIDTH columns: the reason, last, wraps within
    its column, never cut (it is what on-call reads first); `wide` adds the product, the timestamp and the
    evidence, each on one line."""
    headers = ["NODE", "STATE", "GPUS", "SINCE", "OWNER", "BURN-IN", "REASON"]
    if wide:
        headers += ["PRODUCT", "STATE-CHANGED-AT", "EVIDENCE"]
    rows = [headers, *(_cells(view, now, wide) for view in views)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    lines = []
    for row in rows:
        if wide:
            line = GAP.join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
        else:
            head = GAP.join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + GAP
            room = max(TABLE_WIDTH - len(head), 8)
            reason = textwrap.wrap(row[-1], room, break_on_hyphens=False) or [""]
            line = "\n".join([(head + reason[0]).rstrip(), *(" " * len(head) + more for more in reason[1:])])
        lines.append(line)
    return "\n".join(lines) + "\n"
