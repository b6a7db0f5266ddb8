"""From what happened to each job of a replay (its events) to the answer: per team and for the whole cluster.

Pure: the replay records events, this module only counts. Times are trace seconds (replayed wall time x the
speedup). A job holds its GPUs from each admission until it finishes or is evicted; a job evicted and admitted
again starts over (the work of the evicted run is lost), as a Job without checkpoints does.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from konduktor.whatif.trace import TraceJob

EventKind = Literal["submitted", "pending", "admitted", "evicted", "finished"]
# Why a job waits, from Kueue's own message when it tried to admit it.
Cause = Literal["quota", "fragmentation", "other"]
CLUSTER = "(cluster)"


@dataclass(frozen=True)
class Event:
    """Something that happened to a job, at a trace time. `detail`: the pending cause, or the eviction's reason."""

    time: float
    job: str
    kind: EventKind
    detail: str = ""


def cause_of(message: str) -> Cause:
    """Kueue's QuotaReserved=False message -> why the job waits. Kueue says "insufficient unused quota" (or
    "insufficient quota") when the team's quota and what it may borrow are used; "doesn't allow to fit" (or a
    topology/node message) when the quota is there but no node, or no topology domain, has room for a pod."""
    text = message.lower()
    if "insufficient unused quota" in text or "insufficient quota" in text or "exceeds" in text:
        return "quota"
    if "doesn't allow to fit" in text or "topology" in text or "couldn't assign" in text:
        return "fragmentation"
    return "other"


@dataclass
class Answer:
    """The figures of one team (or of the whole cluster)."""

    jobs: int = 0
    finished: int = 0
    unfinished: int = 0
    never_admitted: int = 0
    gpu_hours: float = 0.0  # held: every admitted run, finished or evicted or still running at the end
    useful_gpu_hours: float = 0.0  # the runs that finished
    trace_gpu_hours: float = 0.0  # what the trace's jobs ask for (pods x GPUs x duration)
    wait_p50: float | None = None  # seconds from submission to first admission (never admitted: to the end)
    wait_p95: float | None = None
    wait_max: float | None = None
    preemptions: int = 0
    lost_gpu_hours: float = 0.0  # held by runs that were evicted
    borrowed_gpu_hours: float = 0.0
    lent_gpu_hours: float = 0.0
    quota_gpus: float = 0  # a slice quota counts as its part of a GPU
    utilisation: float | None = None  # held GPU-hours / (GPUs or quota x span)
    wait_hours: dict[str, float] = field(default_factory=lambda: {"quota": 0.0, "fragmentation": 0.0, "other": 0.0})


@dataclass
class Result:
    span: float  # trace seconds replayed
    teams: dict[str, Answer]
    cluster: Answer
    usage: dict[str, list[tuple[float, float]]]  # per team: (time, GPUs held from then on; a slice its part)
    waits: dict[str, list[float]]  # per team: each admitted job's wait in seconds

    def as_json(self) -> dict[str, Any]:
        return {
            "span_seconds": self.span,
            "teams": {name: asdict(answer) for name, answer in sorted(self.teams.items())},
            "cluster": asdict(self.cluster),
        }


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = fraction * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def measure(
    jobs: Iterable[TraceJob],
    events: Iterable[Event],
    end: float,
    quotas: Mapping[str, float],
    lendable: Mapping[str, float] | None = None,
    cluster_gpus: int | None = None,
) -> Result:
    """The answer for a replay that ran to trace time `end`.

    `quotas`: each team's nominal GPUs (all GPU types). `lendable`: how many of them a team may lend (its
    lendLimit; default all). Borrowed GPU-hours are a team's GPUs held above its quota; the GPUs borrowed at a
    moment are counted as lent by the teams that hold them unused, in proportion to what each may lend then.
    """
    by_name = {job.name: job for job in jobs}
    lendable = lendable if lendable is not None else quotas
    teams = sorted({job.team for job in by_name.values()} | set(quotas))
    answers = {team: Answer(quota_gpus=quotas.get(team, 0)) for team in teams}
    waits: dict[str, list[float]] = {team: [] for team in teams}
    ledger = _Ledger(by_name, answers)
    for event in sorted(events, key=lambda e: e.time):
        if event.job in by_name:
            ledger.apply(event, min(event.time, end))
    ledger.close(end)
    submitted, first_admission, finished = ledger.submitted, ledger.first_admission, ledger.finished
    segments, changes = ledger.segments, ledger.changes

    for job in by_name.values():
        _count(answers[job.team], job, finished, first_admission, submitted, waits[job.team], end)

    for team, hours in _wait_hours(segments).items():
        for cause, amount in hours.items():
            answers[team].wait_hours[cause] += amount
    usage = _usage(changes, teams)
    _sharing(usage, answers, quotas, lendable, end)
    total_gpus = cluster_gpus if cluster_gpus is not None else sum(quotas.values())
    for team, answer in answers.items():
        _waits_and_use(answer, waits[team], end)
    cluster = _cluster(answers, [wait for team in teams for wait in waits[team]], total_gpus, end)
    return Result(span=end, teams=answers, cluster=cluster, usage=usage, waits=waits)


class _Ledger:
    """Walks a replay's events in time order: who holds GPUs since when, who waits since when and why."""

    def __init__(self, by_name: Mapping[str, TraceJob], answers: dict[str, Answer]) -> None:
        self.by_name = by_name
        self.answers = answers
        self.submitted: dict[str, float] = {}
        self.admitted_at: dict[str, float] = {}
        self.first_admission: dict[str, float] = {}
        self.pending_since: dict[str, tuple[float, str]] = {}
        self.finished: set[str] = set()
        self.changes: list[tuple[float, str, float]] = []  # (time, team, +/- GPUs; a slice its part of one)
        self.segments: list[tuple[str, float, float, str]] = []  # (team, start, stop, cause) of every wait

    def apply(self, event: Event, now: float) -> None:
        name, job = event.job, self.by_name[event.job]
        answer = self.answers[job.team]
        if event.kind == "submitted":
            self.submitted[name] = now
            self.pending_since[name] = (now, "other")
        elif event.kind == "pending" and name in self.pending_since:
            since, cause = self.pending_since[name]
            if cause == "other" and since == self.submitted.get(name):
                # The first verdict covers the wait since submission (Kueue tried the job at once).
                self.pending_since[name] = (since, event.detail or "other")
            elif event.detail != cause:
                self.stop_waiting(name, now)
                self.pending_since[name] = (now, event.detail or "other")
        elif event.kind == "admitted" and name not in self.admitted_at:
            self.stop_waiting(name, now)
            self.admitted_at[name] = now
            self.first_admission.setdefault(name, now)
            self.changes.append((now, job.team, job.gpus))
        elif event.kind == "evicted" and name in self.admitted_at:
            answer.lost_gpu_hours += self.release(name, now)
            answer.preemptions += 1
            self.pending_since[name] = (now, "other")
        elif event.kind == "finished" and name in self.admitted_at:
            answer.useful_gpu_hours += self.release(name, now)
            self.finished.add(name)

    def close(self, end: float) -> None:
        for name in list(self.admitted_at):
            self.release(name, end)
        for name in list(self.pending_since):
            self.stop_waiting(name, end)

    def stop_waiting(self, name: str, now: float) -> None:
        if name in self.pending_since:
            since, cause = self.pending_since.pop(name)
            if now > since:
                self.segments.append((self.by_name[name].team, since, now, cause))

    def release(self, name: str, now: float) -> float:
        start = self.admitted_at.pop(name)
        job = self.by_name[name]
        self.changes.append((now, job.team, -job.gpus))
        held = job.gpus * max(0.0, now - start) / 3600
        self.answers[job.team].gpu_hours += held
        return held


def _count(
    answer: Answer,
    job: TraceJob,
    finished: set[str],
    first_admission: Mapping[str, float],
    submitted: Mapping[str, float],
    waits: list[float],
    end: float,
) -> None:
    answer.jobs += 1
    answer.trace_gpu_hours += job.gpu_hours
    if job.name in finished:
        answer.finished += 1
    else:
        answer.unfinished += 1
    if job.name in first_admission and job.name in submitted:
        waits.append(first_admission[job.name] - submitted[job.name])
    elif job.name in submitted:
        # Never admitted: it waited at least until the end, and counts so (a lower bound), or a config that admits
        # nothing would show no wait at all.
        waits.append(end - submitted[job.name])
        answer.never_admitted += 1
    else:
        answer.never_admitted += 1


def _waits_and_use(answer: Answer, waits: list[float], end: float) -> None:
    answer.wait_p50, answer.wait_p95 = percentile(waits, 0.5), percentile(waits, 0.95)
    answer.wait_max = max(waits) if waits else None
    if answer.quota_gpus and end > 0:
        answer.utilisation = answer.gpu_hours / (answer.quota_gpus * end / 3600)


def _cluster(answers: Mapping[str, Answer], waits: list[float], gpus: float, end: float) -> Answer:
    """The whole cluster: the teams' counts and hours added up; waits and utilisation over every job and GPU."""
    cluster = Answer(quota_gpus=gpus)
    for answer in answers.values():
        for name in ("jobs", "finished", "unfinished", "never_admitted", "preemptions"):
            setattr(cluster, name, getattr(cluster, name) + getattr(answer, name))
        for name in ("gpu_hours", "useful_gpu_hours", "trace_gpu_hours", "lost_gpu_hours"):
            setattr(cluster, name, getattr(cluster, name) + getattr(answer, name))
        cluster.borrowed_gpu_hours += answer.borrowed_gpu_hours
        cluster.lent_gpu_hours += answer.lent_gpu_hours
        for cause, hours in answer.wait_hours.items():
            cluster.wait_hours[cause] += hours
    _waits_and_use(cluster, waits, end)
    return cluster


def _usage(changes: list[tuple[float, str, float]], teams: Sequence[str]) -> dict[str, list[tuple[float, float]]]:
    usage: dict[str, list[tuple[float, float]]] = {team: [(0.0, 0)] for team in teams}
    held: dict[str, float] = dict.fromkeys(teams, 0)
    for time, team, delta in sorted(changes, key=lambda change: change[0]):
        held[team] += delta
        steps = usage[team]
        if steps[-1][0] == time:
            steps[-1] = (time, held[team])
        else:
            steps.append((time, held[team]))
    return usage


def _sharing(
    usage: dict[str, list[tuple[float, float]]],
    answers: dict[str, Answer],
    quotas: Mapping[str, float],
    lendable: Mapping[str, float],
    end: float,
) -> None:
    """Borrowed and lent GPU-hours, integrated over the intervals where no team's usage changes."""
    times = sorted({time for steps in usage.values() for time, _ in steps if time < end} | {0.0})
    cursor = dict.fromkeys(usage, 0)
    for index, start in enumerate(times):
        stop = times[index + 1] if index + 1 < len(times) else end
        if stop <= start:
            continue
        held = {}
        for team, steps in usage.items():
            while cursor[team] + 1 < len(steps) and steps[cursor[team] + 1][0] <= start:
                cursor[team] += 1
            held[team] = steps[cursor[team]][1]
        hours = (stop - start) / 3600
        borrowed = {team: max(0, held[team] - quotas.get(team, 0)) for team in held}
        spare = {
            team: min(max(0, quotas.get(team, 0) - held[team]), lendable.get(team, quotas.get(team, 0)))
            for team in held
        }
        total_borrowed, total_spare = sum(borrowed.values()), sum(spare.values())
        for team in held:
            answers[team].borrowed_gpu_hours += borrowed[team] * hours
            if total_borrowed and total_spare:
                answers[team].lent_gpu_hours += total_borrowed * spare[team] / total_spare * hours


def _wait_hours(segments: list[tuple[str, float, float, str]]) -> dict[str, dict[str, float]]:
    """Job-hours waiting, per team and cause. Kueue gives its verdict for the job at the head of a team's queue and
    parks the jobs behind it without one: a wait without a verdict of its own, while a job of the same team waits
    for quota (or for a node), is counted as that (quota first)."""
    hours: dict[str, dict[str, float]] = {}
    known: dict[str, list[tuple[float, float, str]]] = {}
    for team, start, stop, cause in segments:
        if cause != "other":
            known.setdefault(team, []).append((start, stop, cause))
    covers = {team: _Cover(spans) for team, spans in known.items()}
    for team, start, stop, cause in segments:
        totals = hours.setdefault(team, {"quota": 0.0, "fragmentation": 0.0, "other": 0.0})
        if cause != "other":
            totals[cause] += (stop - start) / 3600
            continue
        quota, fragmentation = covers[team].within(start, stop) if team in covers else (0.0, 0.0)
        totals["quota"] += quota / 3600
        totals["fragmentation"] += fragmentation / 3600
        totals["other"] += max(0.0, stop - start - quota - fragmentation) / 3600
    return hours


class _Cover:
    """When a team had a job waiting with a verdict: its time cut at every such wait's start and end, each piece
    `quota` (some job waited for quota then), else `fragmentation` (some job waited for a node), else neither, and
    the time of each kind before each cut. How much of any span was which then takes two binary searches, where
    comparing each wait with every other took minutes on a trace of thousands of waits."""

    def __init__(self, spans: list[tuple[float, float, str]]) -> None:
        self.cuts = sorted({t for start, stop, _ in spans for t in (start, stop)})
        at = {t: index for index, t in enumerate(self.cuts)}
        quota, other = [0] * len(self.cuts), [0] * len(self.cuts)
        for start, stop, cause in spans:
            counts = quota if cause == "quota" else other
            counts[at[start]] += 1
            counts[at[stop]] -= 1
        self.kinds: list[str | None] = []
        self.before: list[tuple[float, float]] = [(0.0, 0.0)]  # (quota, fragmentation) time before each cut
        waiting_quota = waiting_other = 0
        for index in range(len(self.cuts) - 1):
            waiting_quota += quota[index]
            waiting_other += other[index]
            kind = "quota" if waiting_quota > 0 else "fragmentation" if waiting_other > 0 else None
            width = self.cuts[index + 1] - self.cuts[index]
            done_quota, done_fragmentation = self.before[-1]
            self.kinds.append(kind)
            self.before.append(
                (
                    done_quota + (width if kind == "quota" else 0.0),
                    done_fragmentation + (width if kind == "fragmentation" else 0.0),
                )
            )

    def _until(self, t: float) -> tuple[float, float]:
        index = bisect.bisect_right(self.cuts, t) - 1
        if index < 0:
            return 0.0, 0.0
        if index >= len(self.kinds):
            return self.before[-1]
        quota, fragmentation = self.before[index]
        part = t - self.cuts[index]
        kind = self.kinds[index]
        return quota + (part if kind == "quota" else 0.0), fragmentation + (part if kind == "fragmentation" else 0.0)

    def within(self, start: float, stop: float) -> tuple[float, float]:
        """The time between start and stop when a job waited for quota, and when one waited for a node but none for
        quota."""
        (quota_before, fragmentation_before), (quota_after, fragmentation_after) = self._until(start), self._until(stop)
        return quota_after - quota_before, fragmentation_after - fragmentation_before
