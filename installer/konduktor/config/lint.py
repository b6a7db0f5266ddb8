"""Lint rules over a parsed config: what Kueue accepts but gets wrong, and what Kueue would reject.

Rule ids are those of docs/design/kueue.md#lint-rules (L1-L15 Kueue facts; L16 guards tenancy, L17 the alert routes,
L18 the health settings, L19 the clusters of a multi-cluster config, L20 GPU sharing). Every rule is a pure function
of the config (L14 also of a list of nodes) returning findings with a YAML path; the loader adds the line numbers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from konduktor.config.capacity import share_for, usable_per_node
from konduktor.config.clusters import worker_capacity, worker_quotas
from konduktor.config.findings import Finding, YamlPath, did_you_mean, error, warning
from konduktor.config.model import Config, GpuQuota, GpuType, HealthRequalification, SharingGroup, Team, selects
from konduktor.config.quantity import cpu_millicores, parse_quantity
from konduktor.gpu.sharing import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_DISABLED_LAYOUT,
    layout_problems,
    resource_key,
)
from konduktor.vocabulary import GPU_RESOURCE, HOSTNAME_LABEL, KUEUE_NAMESPACE, PRODUCT_LABEL

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE_MAX = 63
SUBDOMAIN_MAX = 253
TOPOLOGY_LABEL_MAX = 316  # Kueue Topology CRD limit on a level's nodeLabel
# Kueue's pod webhook must not manage these, and a team's default LocalQueue there would capture system pods.
RESERVED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", KUEUE_NAMESPACE)
# Kueue limits from the ClusterQueue / ResourceFlavor / Topology CRDs and webhooks.
MAX_FLAVORS_PER_GROUP = 64
MAX_FLAVORS_TOTAL = 256
MAX_FLAVOR_LABELS = 8
MAX_TOPOLOGY_LEVELS = 16
MAX_COVERED_RESOURCES = 64  # per resource group
MIN_FAIR_SHARE_WEIGHT = 1e-9
VALID_STRATEGY_LISTS = (
    ["LessThanOrEqualToFinalShare"],
    ["LessThanInitialShare"],
    ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
)
QUOTA_RESOURCES = ("cpu", "memory", GPU_RESOURCE)


def lint(config: Config) -> list[Finding]:
    """Every finding of rules L1-L13 and L15-L19 that needs only the config."""
    return [finding for rule in RULES for finding in rule(config)]


def is_dns_label(name: str) -> bool:
    return len(name) <= LABEL_VALUE_MAX and bool(DNS_LABEL.match(name))


def is_dns_subdomain(name: str) -> bool:
    return len(name) <= SUBDOMAIN_MAX and bool(DNS_SUBDOMAIN.match(name))


def is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= LABEL_VALUE_MAX and bool(_LABEL_NAME.match(value)))


def is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns_subdomain(prefix):
        return False
    return len(name) <= LABEL_VALUE_MAX and bool(_LABEL_NAME.match(name))


def _suggest_name(name: str, *, dots: bool = False) -> str | None:
    """`Team A` -> `for example 'team-a'`; None when nothing usable is left."""
    limit = SUBDOMAIN_MAX if dots else LABEL_VALUE_MAX
    kept = r"[^a-z0-9.]+" if dots else r"[^a-z0-9]+"
    suggestion = re.sub(kept, "-", name.lower()).strip("-.")[:limit].rstrip("-.")
    return f"for example {suggestion!r}" if suggestion else None


def _label_rule(what: str, name: str) -> str:
    return (
        f"{what} {name!r} is not a valid name: lowercase letters, digits and '-', "
        f"starting and ending with a letter or digit, at most {LABEL_VALUE_MAX} characters"
    )


def _subdomain_rule(what: str, name: str) -> str:
    return (
        f"{what} {name!r} is not a valid name: lowercase letters, digits, '-' and '.', "
        f"starting and ending with a letter or digit, at most {SUBDOMAIN_MAX} characters"
    )


def names(config: Config) -> Iterator[Finding]:
    """L1: names become Kubernetes names and label values (queue-name, priority-class, our team label)."""

    def label_name(path: tuple[str | int, ...], what: str, name: str) -> Iterator[Finding]:
        if not is_dns_label(name):
            yield error("L1", path, _label_rule(what, name), hint=_suggest_name(name))

    def subdomain_name(path: tuple[str | int, ...], what: str, name: str) -> Iterator[Finding]:
        if not is_dns_subdomain(name):
            yield error("L1", path, _subdomain_rule(what, name), hint=_suggest_name(name, dots=True))

    yield from label_name(("cluster", "name"), "cluster name", config.cluster.name)
    for team_name, team in config.teams.items():
        yield from label_name(("teams", team_name), "team", team_name)
        for index, namespace in enumerate(team.namespaces):
            yield from label_name(("teams", team_name, "namespaces", index), "namespace", namespace)
        for index, group in enumerate(team.groups):
            if not group.strip():
                yield error("L1", ("teams", team_name, "groups", index), "group names must not be empty")
        if team.department is not None:
            yield from subdomain_name(("teams", team_name, "department"), "department", team.department)
            if team.department == config.cluster.name:
                yield error(
                    "L1",
                    ("teams", team_name, "department"),
                    f"department {team.department!r} has the cluster's name, which the root cohort uses",
                    hint="give the department a name of its own",
                )
    for priority in config.priorities:
        yield from label_name(("priorities", priority), "priority", priority)
    for type_name, gpu_type in config.gpu_types.items():
        yield from subdomain_name(("gpuTypes", type_name), "GPU type", type_name)
        for key, value in gpu_type.selector.items():
            path = ("gpuTypes", type_name, "nodeLabels", key)
            if not is_label_key(key):
                yield error("L1", path, f"{key!r} is not a valid label key")
            if not is_label_value(value):
                yield error(
                    "L1",
                    path,
                    f"{value!r} is not a valid label value (at most 63 characters: "
                    "letters, digits, '-', '_', '.'; starting and ending alphanumeric)",
                )
        for index, toleration in enumerate(gpu_type.tolerations):
            if toleration.key is not None and not is_label_key(toleration.key):
                yield error(
                    "L1",
                    ("gpuTypes", type_name, "tolerations", index, "key"),
                    f"{toleration.key!r} is not a valid taint key",
                )
    if config.topology is not None:
        yield from subdomain_name(("topology", "name"), "topology", config.topology.name)


def known_gpu_types(config: Config) -> Iterator[Finding]:
    """L2: a team's GPU type must be defined, or its ClusterQueue stays inactive (FlavorNotFound)."""
    for team_name, team in config.teams.items():
        for type_name in team.gpus:
            if type_name not in config.gpu_types:
                hint = did_you_mean(type_name, config.gpu_types) or (
                    f"define it under gpuTypes (defined: {', '.join(config.gpu_types)})"
                )
                yield error("L2", ("teams", team_name, "gpus", type_name), f"unknown GPU type {type_name!r}", hint=hint)


def gpu_quota_vs_capacity(config: Config) -> Iterator[Finding]:
    """L3: Kueue never compares quotas with the nodes; over-promised quota admits pods that stay Pending."""
    for type_name, gpu_type in config.gpu_types.items():
        quotas = {name: config.teams[name].gpus[type_name].quota for name in config.teams_using(type_name)}
        total = sum(quotas.values())
        shape = f"{gpu_type.whole_nodes} nodes x {gpu_type.gpus_per_node} GPUs"
        if gpu_type.sharing:
            shape += " not in a sharing group"
        listing = ", ".join(f"{name} {quota}" for name, quota in quotas.items()) or "no team"
        if total > gpu_type.capacity:
            yield error(
                "L3",
                ("gpuTypes", type_name),
                f"team quotas add up to {total} {type_name} GPUs but there are {gpu_type.capacity} ({shape})",
                hint=f"quotas: {listing}; lower them, or add nodes and raise `nodes`",
            )
        elif total < gpu_type.capacity:
            yield warning(
                "L3",
                ("gpuTypes", type_name),
                f"{gpu_type.capacity - total} of {gpu_type.capacity} {type_name} GPUs are in no "
                "team's quota; Kueue admits nothing onto them, not even borrowed work",
                hint=f"quotas: {listing}; give the rest to a team",
            )


def cpu_memory_vs_allocatable(config: Config) -> Iterator[Finding]:
    """L4: the cpu/memory that goes with each GPU comes from what the nodes leave after the reserve."""
    reserve = config.capacity_reserve
    for type_name, gpu_type in config.gpu_types.items():
        cpu, memory = usable_per_node(gpu_type, reserve)
        for resource, usable, allocatable in (
            ("cpu", cpu, gpu_type.node_allocatable.cpu),
            ("memory", memory, gpu_type.node_allocatable.memory),
        ):
            if usable <= 0:
                yield error(
                    "L4",
                    ("capacityReserve", resource),
                    f"the reserve of {getattr(reserve, resource)} {resource} per node leaves nothing of "
                    f"{type_name}'s {allocatable} allocatable {resource} for jobs",
                    hint=f"check gpuTypes.{type_name}.nodeAllocatable.{resource} (kubectl describe node: Allocatable)",
                )
        if cpu <= 0 or memory <= 0:
            continue
        quotas = [config.teams[name].gpus[type_name].quota for name in config.teams_using(type_name)]
        if sum(quotas) > gpu_type.capacity:
            continue  # L3 already reports it; the derived cpu/memory only follow the GPUs
        shares = [share_for(quota, gpu_type, reserve) for quota in quotas]
        pool = share_for(gpu_type.capacity, gpu_type, reserve)
        if sum(s.cpu_millicores for s in shares) > pool.cpu_millicores or (
            sum(s.memory_mebibytes for s in shares) > pool.memory_mebibytes
        ):
            yield error(
                "L4",
                ("gpuTypes", type_name),
                "derived cpu/memory quotas exceed the nodes' allocatable minus the reserve",
            )
    for resource in ("cpu", "memory"):
        if parse_quantity(getattr(reserve, resource)) == 0:
            yield warning(
                "L4",
                ("capacityReserve", resource),
                f"no {resource} reserved for system pods: the GPU operator, DCGM exporter and "
                "monitoring agents use it on every node, so admitted jobs may not fit",
                hint='reserve what DaemonSets request per node, e.g. capacityReserve: {cpu: "8", memory: 64Gi}',
            )


def limits_need_a_cohort(config: Config) -> Iterator[Finding]:
    """L5: borrowing/lending limits need a cohort (Kueue rejects them without one) and a partner."""
    users = {type_name: len(config.teams_using(type_name)) for type_name in config.gpu_types}
    for team_name, team in config.teams.items():
        if team.department is not None and not config.shares:
            yield warning(
                "L5",
                ("teams", team_name, "department"),
                "departments group teams into cohorts, and `kueue.sharing: none` has no cohorts",
                hint="remove `department`, or share with `kueue.sharing: fair`",
            )
        for type_name, limits in team.gpus.items():
            has_partner = users.get(type_name, 0) > 1
            for key, value in (("borrowLimit", limits.borrow_limit), ("lendLimit", limits.lend_limit)):
                if value is None:
                    continue
                path = ("teams", team_name, "gpus", type_name, key)
                if not config.shares:
                    yield error(
                        "L5",
                        path,
                        f"{key} needs sharing, and `kueue.sharing` is none",
                        hint="remove the limit, or set `kueue.sharing: fair` (or classic)",
                    )
                elif not has_partner and type_name in config.gpu_types:
                    yield error(
                        "L5",
                        path,
                        f"no other team uses {type_name}, so there is nothing to "
                        f"{'borrow' if key == 'borrowLimit' else 'lend to'}",
                        hint=f"remove {key}, or give another team a {type_name} quota (0 allowed)",
                    )


def lend_within_quota(config: Config) -> Iterator[Finding]:
    """L6: Kueue's webhook rejects lendingLimit > nominalQuota."""
    for team_name, team in config.teams.items():
        for type_name, limits in team.gpus.items():
            if limits.lend_limit is not None and limits.lend_limit > limits.quota:
                yield error(
                    "L6",
                    ("teams", team_name, "gpus", type_name, "lendLimit"),
                    f"lendLimit {limits.lend_limit} is more than the quota {limits.quota}",
                    hint="a team can lend at most its own quota",
                )


def _lendable(limits: GpuQuota) -> int:
    return limits.lend_limit if limits.lend_limit is not None else limits.quota


def borrow_within_reach(config: Config) -> Iterator[Finding]:
    """L7 (warning): borrow limits that promise more than the cluster or the lenders can give."""
    if not config.shares:
        return
    # What all teams may lend per GPU type, computed once: each team's share is what the others lend.
    lendable_total: dict[str, int] = {}
    for team in config.teams.values():
        for type_name, limits in team.gpus.items():
            lendable_total[type_name] = lendable_total.get(type_name, 0) + _lendable(limits)
    for team_name, team in config.teams.items():
        for type_name, limits in team.gpus.items():
            gpu_type = config.gpu_types.get(type_name)
            if limits.borrow_limit is None or gpu_type is None:
                continue
            path = ("teams", team_name, "gpus", type_name, "borrowLimit")
            reach = limits.quota + limits.borrow_limit
            if reach > gpu_type.capacity:
                yield warning(
                    "L7",
                    path,
                    f"quota + borrowLimit = {reach} is more than the {gpu_type.capacity} "
                    f"{type_name} GPUs in the cluster",
                    hint=f"at most {gpu_type.capacity - limits.quota} can ever be borrowed",
                )
                continue  # past the cluster is also past what the others can lend: one warning is enough
            lendable = lendable_total[type_name] - _lendable(limits)
            if limits.borrow_limit > lendable:
                yield warning(
                    "L7",
                    path,
                    f"borrowLimit {limits.borrow_limit} is more than the {lendable} "
                    f"{type_name} GPUs the other teams may lend; it only acts up to "
                    f"{lendable}",
                    hint="raise other teams' lendLimit or lower this borrowLimit",
                )


def kueue_settings(config: Config) -> Iterator[Finding]:
    """L8: fair sharing vs borrowWithinCohort, valid preemption strategies, quota-covered resources."""
    settings = config.kueue
    set_fields = settings.model_fields_set
    strategies = list(settings.fair_sharing_strategies)
    path = ("kueue", "fairSharingStrategies")
    if settings.sharing == "fair":
        if settings.borrow_within_cohort is not None:
            yield error(
                "L8",
                ("kueue", "borrowWithinCohort"),
                "Kueue ignores borrowWithinCohort under fair sharing",
                hint="remove it, or use `sharing: classic`",
            )
        if strategies not in VALID_STRATEGY_LISTS:
            yield error(
                "L8",
                path,
                f"{strategies} is not a strategy list Kueue accepts",
                hint="use one of: " + "; ".join(str(s) for s in VALID_STRATEGY_LISTS),
            )
        elif len(strategies) == 2:
            yield warning(
                "L8",
                path,
                "both strategies together have an open preemption-loop bug (kubernetes-sigs/kueue#14543)",
                hint="start with [LessThanInitialShare]",
            )
    else:
        if "fair_sharing_strategies" in set_fields:
            yield warning(
                "L8", path, f"ignored: fair sharing strategies apply only to `sharing: fair`, not {settings.sharing}"
            )
        if settings.borrow_within_cohort is not None and settings.sharing == "none":
            yield warning("L8", ("kueue", "borrowWithinCohort"), "ignored: there is no cohort with `sharing: none`")
    for index, prefix in enumerate(settings.exclude_resource_prefixes):
        covered = [r for r in QUOTA_RESOURCES if prefix and r.startswith(prefix)]
        if not prefix:
            yield error("L8", ("kueue", "excludeResourcePrefixes", index), "an empty prefix would exclude everything")
        elif covered:
            yield error(
                "L8",
                ("kueue", "excludeResourcePrefixes", index),
                f"{prefix!r} would take {', '.join(covered)} out of quota accounting",
                hint="exclude only resources no quota covers, e.g. ephemeral-storage",
            )


def fair_share_weights(config: Config) -> Iterator[Finding]:
    """L9: Kueue rejects a weight in (0, 1e-9]; weights matter only under fair sharing."""
    for team_name, team in config.teams.items():
        weight = team.fair_share_weight
        path = ("teams", team_name, "fairShareWeight")
        if 0 < weight <= MIN_FAIR_SHARE_WEIGHT:
            yield error("L9", path, f"{weight} is too small: use 0 (always last) or more than 1e-9")
        elif weight != 1 and config.kueue.sharing != "fair":
            yield warning("L9", path, f"ignored: weights apply only to `sharing: fair`, not {config.kueue.sharing}")


def flavor_limits(config: Config) -> Iterator[Finding]:
    """L10: Kueue's limits on flavors per resource group and on labels/tolerations per flavor."""
    if len(config.gpu_types) > MAX_FLAVORS_TOTAL:
        yield error("L10", ("gpuTypes",), f"{len(config.gpu_types)} GPU types; Kueue allows {MAX_FLAVORS_TOTAL}")
    for team_name, team in config.teams.items():
        if len(team.gpus) + len(team.slices) > MAX_FLAVORS_PER_GROUP:
            yield error(
                "L10",
                ("teams", team_name, "gpus"),
                f"{len(team.gpus) + len(team.slices)} GPU types and sharing groups in one team; a Kueue resource "
                "group holds at most "
                f"{MAX_FLAVORS_PER_GROUP} flavors",
            )
    for type_name, gpu_type in config.gpu_types.items():
        path = ("gpuTypes", type_name)
        selector = gpu_type.selector
        if not selector:
            yield error(
                "L10",
                (*path, "nodeLabels"),
                "no labels: the flavor would select every node",
                hint=f"omit nodeLabels to select `{PRODUCT_LABEL}: {gpu_type.product}`",
            )
        elif len(selector) > MAX_FLAVOR_LABELS:
            yield error(
                "L10", (*path, "nodeLabels"), f"{len(selector)} labels; a ResourceFlavor allows {MAX_FLAVOR_LABELS}"
            )
        if len(gpu_type.tolerations) > MAX_FLAVOR_LABELS:
            yield error(
                "L10",
                (*path, "tolerations"),
                f"{len(gpu_type.tolerations)} tolerations; a ResourceFlavor allows {MAX_FLAVOR_LABELS}",
            )
        labelled = selector.get(PRODUCT_LABEL)
        if labelled is not None and labelled != gpu_type.product:
            yield error(
                "L10",
                (*path, "nodeLabels", PRODUCT_LABEL),
                f"selects {labelled!r} but the type's product is {gpu_type.product!r}",
                hint="make them the same, or drop the label from nodeLabels",
            )


def topology_shape(config: Config) -> Iterator[Finding]:
    """L11: Topology levels as Kueue's CRD demands, and hostname last so single pods are placed whole."""
    if config.topology is None:
        yield warning(
            "L11",
            ("topology",),
            "no topology: Kueue may admit an 8-GPU pod when the free GPUs are spread over nodes, "
            "and it will stay Pending",
            hint="add `topology: {levels: [kubernetes.io/hostname]}` (racks or blocks before it)",
        )
        return
    levels = config.topology.levels
    path = ("topology", "levels")
    if not 1 <= len(levels) <= MAX_TOPOLOGY_LEVELS:
        yield error("L11", path, f"{len(levels)} levels; Kueue allows 1 to {MAX_TOPOLOGY_LEVELS}")
    seen: set[str] = set()
    for index, level in enumerate(levels):
        if level in seen:
            yield error("L11", (*path, index), f"{level!r} is listed twice")
        seen.add(level)
        if not is_label_key(level) or len(level) > TOPOLOGY_LABEL_MAX:
            yield error("L11", (*path, index), f"{level!r} is not a valid node label key")
        if level == HOSTNAME_LABEL and index != len(levels) - 1:
            yield error(
                "L11",
                (*path, index),
                f"{HOSTNAME_LABEL} may only be the last (narrowest) level",
                hint="list levels widest first: block, rack, then hostname",
            )
    if levels and HOSTNAME_LABEL not in levels:
        yield warning(
            "L11",
            path,
            f"no {HOSTNAME_LABEL} level: Kueue checks free GPUs per "
            f"{levels[-1]}, not per node, so a pod can be admitted where it cannot fit",
            hint=f"append {HOSTNAME_LABEL} as the last level",
        )


def namespace_ownership(config: Config) -> Iterator[Finding]:
    """L12: one team per namespace (overlapping namespaceSelectors), and no system namespaces."""
    owner: dict[str, str] = {}
    for team_name, team in config.teams.items():
        for index, namespace in enumerate(team.namespaces):
            path = ("teams", team_name, "namespaces", index)
            if namespace in RESERVED_NAMESPACES:
                yield error("L12", path, f"{namespace!r} is a system namespace; Kueue must not manage its pods")
            elif namespace in owner:
                first = owner[namespace]
                yield error(
                    "L12",
                    path,
                    f"namespace {namespace!r} already belongs to team {first}"
                    if first != team_name
                    else f"namespace {namespace!r} is listed twice",
                )
            else:
                owner[namespace] = team_name


def borrow_only_entries(config: Config) -> Iterator[Finding]:
    """L13: quota 0 is a valid borrow-only entry (it is rendered), unless the team can never borrow."""
    for team_name, team in config.teams.items():
        for type_name, limits in team.gpus.items():
            if limits.quota != 0:
                continue
            path = ("teams", team_name, "gpus", type_name, "quota")
            if not config.shares:
                yield warning(
                    "L13",
                    path,
                    f"quota 0 without sharing: {team_name} can never run on {type_name}",
                    hint="give it a quota, or share with `kueue.sharing: fair`",
                )
            elif limits.borrow_limit == 0:
                yield warning("L13", path, f"quota 0 and borrowLimit 0: {team_name} can never run on {type_name}")


def pod_security_exceptions(config: Config) -> Iterator[Finding]:
    """L16 (warning): a team whose namespaces admit privileged pods. Its members hold `edit` there, so any of
    them can run a privileged, hostPID or hostPath pod: root on a GPU node, and other teams' pods and tokens."""
    for team_name, team in config.teams.items():
        if team.pod_security == "privileged":
            yield warning(
                "L16",
                ("teams", team_name, "podSecurity"),
                f"team {team_name}'s namespaces admit privileged pods: any member of {team_name} can become root "
                "on a GPU node and reach other teams' pods, volumes and tokens",
                hint="keep this exception only for a team of node administrators; the default `gpu` still refuses "
                "privileged, hostPath, hostPID and hostNetwork pods, and lets RDMA jobs add IPC_LOCK",
            )


def alert_receivers(config: Config) -> Iterator[Finding]:
    """L17: every alert route names a configured receiver and a known team; with no receiver at all (a warning),
    Alertmanager has nowhere to send the platform's alerts and they reach nobody."""
    alerts = config.alerts
    if not alerts.receivers:
        yield warning(
            "L17",
            ("alerts",) if alerts.routes.default or alerts.routes.severity or alerts.routes.teams else (),
            "no alert receiver is configured: alerts fire in Alertmanager but reach nobody",
            hint="add `alerts.receivers` (slack, pagerduty, webhook or email; see examples/config.yaml)",
        )
    known = sorted(alerts.receivers)

    def unknown(path: YamlPath, name: str) -> Finding:
        hint = did_you_mean(name, known) or (f"receivers are: {', '.join(known)}" if known else None)
        return error("L17", path, f"no receiver named {name!r} in alerts.receivers", hint=hint)

    routes = alerts.routes
    if routes.default is not None and routes.default not in alerts.receivers:
        yield unknown(("alerts", "routes", "default"), routes.default)
    for severity, name in routes.severity.items():
        if name not in alerts.receivers:
            yield unknown(("alerts", "routes", "severity", severity), name)
    for team, name in routes.teams.items():
        if team not in config.teams:
            yield error(
                "L17",
                ("alerts", "routes", "teams", team),
                f"no team named {team!r}",
                hint=did_you_mean(team, config.teams) or f"teams are: {', '.join(sorted(config.teams))}",
            )
        elif name not in alerts.receivers:
            yield unknown(("alerts", "routes", "teams", team), name)


def health_settings(config: Config) -> Iterator[Finding]:
    """L18: the health section does not contradict itself. Requalification turned off with its other settings
    given is an error (which one is meant?); NoExecute on unusable nodes with a policy other than requeue is a
    warning, since the taint evicts those pods at once and the policy cannot let them finish."""
    health = config.health
    requalification = health.requalification
    if requalification.enabled is False:
        for field in ("tier", "max_concurrent", "cooldown_seconds", "priority_class"):
            if getattr(requalification, field) is not None:
                name = HealthRequalification.model_fields[field].alias or field
                yield error(
                    "L18",
                    ("health", "requalification", name),
                    f"requalification is turned off (enabled: false), so {name} would do nothing",
                    hint="remove it, or set enabled: true",
                )
    policy = health.affected_work.unusable
    if health.allow_no_execute and policy in ("drain", "none"):
        yield warning(
            "L18",
            ("health", "affectedWork", "unusable"),
            f"allowNoExecute evicts the pods of a node-unusable fault at once, so unusable: {policy} cannot "
            "leave them running",
            hint="use unusable: requeue (Kueue readmits the workload on healthy nodes), or drop allowNoExecute",
        )


def cluster_rules(config: Config) -> Iterator[Finding]:
    """L19: the clusters are named once each, hold defined GPU types adding up to the fleet's nodes, and every
    team's GPUs per cluster are on clusters that have the type, add up to its quota and fit the cluster."""
    clusters = config.clusters
    if clusters is None:
        for team_name, team in config.teams.items():
            if team.clusters is not None:
                yield error(
                    "L19",
                    ("teams", team_name, "clusters"),
                    "quotas per cluster need a `clusters:` section naming the workers",
                    hint="add `clusters:` (docs/multicluster.md), or remove this key",
                )
        return
    yield from _cluster_names(config)
    # The capacity of each worker is judged once its GPU types and every team's quotas per cluster are right:
    # otherwise it would repeat the same mistake in other words.
    earlier = list(_worker_types(config))
    for team_name, team in config.teams.items():
        if team.clusters is not None:
            earlier.extend(_team_clusters(config, team_name, team))
    yield from earlier
    if not any(finding.is_error for finding in earlier):
        yield from _worker_capacity(config)


def _cluster_names(config: Config) -> Iterator[Finding]:
    assert config.clusters is not None
    seen: dict[str, YamlPath] = {config.cluster.name: ("cluster", "name")}
    for index, worker in enumerate(config.clusters.workers):
        path = ("clusters", "workers", index, "name")
        if worker.name in seen:
            where = "the manager (cluster.name)" if seen[worker.name] == ("cluster", "name") else "an earlier worker"
            yield error("L19", path, f"cluster {worker.name!r} is named twice: {where} has this name too")
        elif not is_dns_label(worker.name):
            yield error(
                "L19",
                path,
                f"worker {worker.name!r} is not a valid name: lowercase letters, digits and '-', starting and ending "
                "with a letter or digit, at most 63 characters",
            )
        seen.setdefault(worker.name, path)


def _worker_types(config: Config) -> Iterator[Finding]:
    assert config.clusters is not None
    for index, worker in enumerate(config.clusters.workers):
        for type_name in worker.gpu_types:
            if type_name not in config.gpu_types:
                hint = did_you_mean(type_name, config.gpu_types) or f"defined: {', '.join(config.gpu_types)}"
                yield error(
                    "L19",
                    ("clusters", "workers", index, "gpuTypes", type_name),
                    f"unknown GPU type {type_name!r}",
                    hint=hint,
                )
    for type_name, gpu_type in config.gpu_types.items():
        counts = [(w.name, w.gpu_types[type_name]) for w in config.clusters.workers if type_name in w.gpu_types]
        total = sum(nodes for _, nodes in counts)
        if total != gpu_type.nodes:
            listing = ", ".join(f"{name} {nodes}" for name, nodes in counts) or "no worker"
            yield error(
                "L19",
                ("gpuTypes", type_name, "nodes"),
                f"{gpu_type.nodes} {type_name} nodes, but the workers have {total} ({listing})",
                hint="with `clusters:`, gpuTypes.<type>.nodes is the whole fleet: the sum over the workers",
            )


def _team_clusters(config: Config, team_name: str, team: Team) -> Iterator[Finding]:
    assert config.clusters is not None and team.clusters is not None
    workers = {worker.name: worker for worker in config.clusters.workers}
    for cluster_name, gpus in team.clusters.items():
        path = ("teams", team_name, "clusters", cluster_name)
        worker = workers.get(cluster_name)
        if worker is None:
            if cluster_name == config.cluster.name:
                yield error("L19", path, f"{cluster_name!r} is the manager, which runs no jobs: quotas go on workers")
            else:
                hint = did_you_mean(cluster_name, workers) or f"workers: {', '.join(workers)}"
                yield error("L19", path, f"unknown cluster {cluster_name!r}", hint=hint)
            continue
        for type_name in gpus:
            if type_name not in team.gpus:
                yield error(
                    "L19",
                    (*path, type_name),
                    f"the team has no {type_name!r} quota",
                    hint=f"add it under teams.{team_name}.gpus, or remove it here",
                )
            elif type_name not in worker.gpu_types:
                has = ", ".join(worker.gpu_types)
                yield error(
                    "L19",
                    (*path, type_name),
                    f"cluster {cluster_name!r} has no {type_name} GPUs (it has {has})",
                )
    for type_name, limits in team.gpus.items():
        given = {name: gpus[type_name] for name, gpus in team.clusters.items() if type_name in gpus and name in workers}
        if sum(given.values()) != limits.quota:
            listing = ", ".join(f"{name} {gpus}" for name, gpus in given.items()) or "none"
            yield error(
                "L19",
                ("teams", team_name, "gpus", type_name, "quota"),
                f"quota {limits.quota} {type_name}, but the team's clusters add up to {sum(given.values())} "
                f"({listing})",
                hint=f"the quota is the sum of teams.{team_name}.clusters.<worker>.{type_name}",
            )


def _worker_capacity(config: Config) -> Iterator[Finding]:
    assert config.clusters is not None
    quotas = worker_quotas(config)
    for index, worker in enumerate(config.clusters.workers):
        for type_name in worker.gpu_types:
            held = {team: gpus[type_name] for team, gpus in quotas[worker.name].items() if gpus.get(type_name)}
            capacity = worker_capacity(config, worker, type_name)
            if sum(held.values()) > capacity:
                listing = ", ".join(f"{team} {gpus}" for team, gpus in held.items())
                yield error(
                    "L19",
                    ("clusters", "workers", index, "gpuTypes", type_name),
                    f"the teams hold {sum(held.values())} {type_name} GPUs on {worker.name!r}, which has {capacity}",
                    hint=f"{listing}; give the teams `clusters:` quotas that fit each worker",
                )


def gpu_sharing(config: Config) -> Iterator[Finding]:
    """L20: GPUs shared below one GPU (docs/design/gpu-sharing.md): groups the nodes can be, layouts the GPU can
    make, and team quotas in the resources the group's nodes advertise, adding up to no more than they have."""
    groups = {name: (type_name, gpu_type, group) for name, type_name, gpu_type, group in config.sharing_groups()}
    seen: dict[str, str] = {}
    for name, type_name, gpu_type, group in config.sharing_groups():
        path = ("gpuTypes", type_name, "sharing", name)
        if name in seen and seen[name] != type_name:
            yield error("L20", path, f"sharing group {name!r} is also a group of {seen[name]}", hint="name it anew")
        seen[name] = type_name
        if name in config.gpu_types:
            yield error("L20", path, f"{name!r} is also a GPU type: both name a ResourceFlavor", hint="name it anew")
        if not is_dns_label(name) or len(name) > LABEL_VALUE_MAX or name.startswith("all-"):
            yield error(
                "L20",
                path,
                f"{name!r} cannot name a sharing group: it is a ResourceFlavor name and the value of the node label "
                "that gives the nodes their sharing",
                hint=f"lowercase letters, digits and '-', at most {LABEL_VALUE_MAX}, not starting with 'all-' "
                f"(the GPU Operator's own layouts, e.g. {MIG_DISABLED_LAYOUT})",
            )
        if group.mig is not None:
            for problem in layout_problems(gpu_type.product, group.mig):
                yield error("L20", (*path, "mig"), problem, hint="docs/gpu-sharing.md lists each product's profiles")
    for type_name, gpu_type in config.gpu_types.items():
        grouped = sum(group.nodes for group in gpu_type.sharing.values())
        if grouped > gpu_type.nodes:
            yield error(
                "L20",
                ("gpuTypes", type_name, "sharing"),
                f"the sharing groups hold {grouped} nodes but the type has {gpu_type.nodes}",
                hint="lower the groups' nodes, or raise the type's nodes",
            )
    if groups and config.clusters is not None:
        yield error(
            "L20",
            ("clusters",),
            "sharing groups are not supported with clusters: yet (a worker's share of each group is not defined)",
            hint="share GPUs on a single-cluster config, or remove the sharing groups",
        )
    yield from _team_slices(config, groups)
    covered = 3 + len(config.shared_resources())
    if covered > MAX_COVERED_RESOURCES:
        yield error(
            "L20",
            ("gpuTypes",),
            f"cpu, memory, GPUs and {covered - 3} shared resources make {covered} resources in one ClusterQueue "
            f"resource group; Kueue allows {MAX_COVERED_RESOURCES}",
        )


def _team_slices(config: Config, groups: Mapping[str, tuple[str, GpuType, SharingGroup]]) -> Iterator[Finding]:
    totals: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for team_name, team in config.teams.items():
        if not team.gpus and not team.slices:
            yield error(
                "L20",
                ("teams", team_name),
                "the team has no GPUs: neither gpus nor slices",
                hint="give it a quota of whole GPUs under gpus, or of shared ones under slices",
            )
        for name, quotas in team.slices.items():
            path = ("teams", team_name, "slices", name)
            if name not in groups:
                yield error(
                    "L20",
                    path,
                    f"unknown sharing group {name!r}",
                    hint=did_you_mean(name, groups)
                    or f"groups are defined under gpuTypes.<type>.sharing (defined: {', '.join(groups) or 'none'})",
                )
                continue
            _, gpu_type, group = groups[name]
            offered = {resource_key(r): n * group.nodes for r, n in group.units(gpu_type.gpus_per_node).items()}
            for key, limits in quotas.items():
                if key not in offered:
                    yield error(
                        "L20",
                        (*path, key),
                        f"the nodes of {name} do not advertise {key}",
                        hint=did_you_mean(key, offered) or f"they advertise {', '.join(offered)}",
                    )
                    continue
                totals.setdefault((name, key), []).append((team_name, limits.quota))
                if limits.lend_limit is not None and limits.lend_limit > limits.quota:
                    yield error(
                        "L20",
                        (*path, key, "lendLimit"),
                        f"lendLimit {limits.lend_limit} is more than the quota {limits.quota}",
                        hint="a team can lend at most its own quota",
                    )
                if (limits.borrow_limit is not None or limits.lend_limit is not None) and not config.shares:
                    yield error(
                        "L20",
                        (*path, key),
                        "borrowLimit and lendLimit need teams that share (kueue.sharing fair or classic)",
                    )
    for (name, key), given in totals.items():
        _, gpu_type, group = groups[name]
        have = group.units(gpu_type.gpus_per_node)[f"nvidia.com/{key}"] * group.nodes
        total = sum(quota for _, quota in given)
        listing = ", ".join(f"{team} {quota}" for team, quota in given)
        if total > have:
            yield error(
                "L20",
                ("gpuTypes", groups[name][0], "sharing", name),
                f"team quotas add up to {total} {key} but the group's {group.nodes} nodes have {have}",
                hint=f"quotas: {listing}; lower them, or add nodes to the group",
            )


RULES: tuple[Callable[[Config], Iterable[Finding]], ...] = (
    names,
    known_gpu_types,
    gpu_quota_vs_capacity,
    cpu_memory_vs_allocatable,
    limits_need_a_cohort,
    lend_within_quota,
    borrow_within_reach,
    kueue_settings,
    fair_share_weights,
    flavor_limits,
    topology_shape,
    namespace_ownership,
    borrow_only_entries,
    pod_security_exceptions,
    alert_receivers,
    health_settings,
    cluster_rules,
    gpu_sharing,
)


def check_pod_request(config: Config, team_name: str, gpus_per_pod: int, gpu_type: str | None = None) -> list[Finding]:
    """L15 (warning): a pod asking for more GPUs than any node of the type has can never be placed.

    Kueue admits by quota totals, so without this check the job waits or sits Pending forever.
    With no `gpu_type`, only types the team has a quota entry for are considered.
    """
    team = config.teams.get(team_name)
    if team is None:
        return [
            error(
                "L15", ("teams", team_name), f"unknown team {team_name!r}", hint=did_you_mean(team_name, config.teams)
            )
        ]
    candidates = [gpu_type] if gpu_type is not None else list(team.gpus)
    findings = []
    for type_name in candidates:
        definition = config.gpu_types.get(type_name)
        path = ("teams", team_name, "gpus", type_name)
        if definition is None or type_name not in team.gpus:
            findings.append(warning("L15", path, f"{team_name} has no {type_name} quota; the pod is never admitted"))
            continue
        if gpus_per_pod > definition.gpus_per_node:
            findings.append(
                warning(
                    "L15",
                    path,
                    f"a pod asking for {gpus_per_pod} GPUs never fits a {type_name} node "
                    f"({definition.gpus_per_node} GPUs each)",
                    hint=f"split the job into pods of at most {definition.gpus_per_node} GPUs",
                )
            )
        limits = team.gpus[type_name]
        reach = limits.quota + (
            (limits.borrow_limit if limits.borrow_limit is not None else definition.capacity) if config.shares else 0
        )
        if gpus_per_pod > min(reach, definition.capacity):
            findings.append(
                warning(
                    "L15",
                    path,
                    f"{team_name} can use at most {min(reach, definition.capacity)} "
                    f"{type_name} GPUs; a {gpus_per_pod}-GPU pod is never admitted",
                )
            )
    return findings


def check_nodes(config: Config, nodes: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """L14: the cluster's nodes against the GPU types (for the live preflight).

    `nodes` are dicts with `name`, `labels` and `allocatable` (as in Node.status.allocatable).
    Fewer nodes, GPUs, cpu or memory than the config says means quotas promise what does not exist.
    """
    findings: list[Finding] = []
    matches: dict[str, list[Mapping[str, Any]]] = {}
    for type_name, gpu_type in config.gpu_types.items():
        matches[type_name] = [n for n in nodes if selects(gpu_type.selector, n.get("labels") or {})]
    owners = Counter(str(node.get("name")) for found in matches.values() for node in found)
    for name, count in sorted(owners.items()):
        if count > 1:
            types = [t for t, found in matches.items() if any(n.get("name") == name for n in found)]
            findings.append(
                error(
                    "L14",
                    ("gpuTypes",),
                    f"node {name} matches {len(types)} GPU types ({', '.join(types)})",
                    hint="make each type's nodeLabels select distinct nodes",
                )
            )
    for type_name, gpu_type in config.gpu_types.items():
        path = ("gpuTypes", type_name)
        found = matches[type_name]
        wanted = ", ".join(f"{k}={v}" for k, v in gpu_type.selector.items())
        if len(found) < gpu_type.nodes:
            findings.append(
                error(
                    "L14",
                    (*path, "nodes"),
                    f"{len(found)} nodes match {wanted}, the config says {gpu_type.nodes}",
                    hint="label the missing nodes, or lower `nodes` (and the quotas)",
                )
            )
        elif len(found) > gpu_type.nodes:
            findings.append(
                warning(
                    "L14",
                    (*path, "nodes"),
                    f"{len(found)} nodes match {wanted}, the config says {gpu_type.nodes}; "
                    "the extra ones are in no quota",
                )
            )
        for node in found:
            findings.extend(_node_resources(config, type_name, node))
            if config.topology is not None:
                missing = [level for level in config.topology.levels if level not in (node.get("labels") or {})]
                if missing:
                    findings.append(
                        error(
                            "L14",
                            ("topology", "levels"),
                            f"node {node.get('name')} lacks topology label(s) {', '.join(missing)}",
                            hint="Kueue's topology-aware scheduling ignores nodes without the full label set",
                        )
                    )
    return findings


def _shared_node(config: Config, type_name: str, node: Mapping[str, Any]) -> Iterator[Finding]:
    """A node whose GPUs the GPU Operator shares (a MIG layout, a device plugin config) advertises slices, not whole
    GPUs. In one of the type's sharing groups: what the group's layout gives, a warning when short (mig-manager or
    the device plugin may still be at work, and `up` relabels the nodes). In none: `up` gives it back whole GPUs."""
    gpu_type = config.gpu_types[type_name]
    labels = node.get("labels") or {}
    allocatable = node.get("allocatable") or {}
    for group_name, group in gpu_type.sharing.items():
        key, value = group.node_label(group_name)
        if labels.get(key) != value:
            continue
        for resource, count in group.units(gpu_type.gpus_per_node).items():
            have = int(parse_quantity(str(allocatable.get(resource, "0"))))
            if have < count:
                state = labels.get(MIG_CONFIG_STATE_LABEL, "(none)") if group.mig is not None else None
                yield warning(
                    "L14",
                    ("gpuTypes", type_name, "sharing", group_name),
                    f"node {node.get('name')} of sharing group {group_name} has {have} allocatable {resource}, its "
                    f"layout gives {count}" + (f" ({MIG_CONFIG_STATE_LABEL}={state})" if state else ""),
                    hint="mig-manager or the device plugin may still be applying the layout; else see their logs",
                )


def _node_resources(config: Config, type_name: str, node: Mapping[str, Any]) -> Iterator[Finding]:
    gpu_type = config.gpu_types[type_name]
    allocatable = node.get("allocatable") or {}
    name = node.get("name")
    path = ("gpuTypes", type_name)
    gpus = int(parse_quantity(str(allocatable.get(GPU_RESOURCE, "0"))))
    labels = node.get("labels") or {}
    layout = labels.get(MIG_CONFIG_LABEL)
    if (layout is not None and layout != MIG_DISABLED_LAYOUT) or DEVICE_PLUGIN_CONFIG_LABEL in labels:
        yield from _shared_node(config, type_name, node)
    elif gpus < gpu_type.gpus_per_node:
        yield error(
            "L14",
            (*path, "gpusPerNode"),
            f"node {name} has {gpus} allocatable {GPU_RESOURCE}, the config says {gpu_type.gpus_per_node}",
            hint="check the device plugin on the node (or a quarantine), or lower gpusPerNode",
        )
    elif gpus > gpu_type.gpus_per_node:
        yield warning(
            "L14",
            (*path, "gpusPerNode"),
            f"node {name} has {gpus} allocatable {GPU_RESOURCE}, the config says {gpu_type.gpus_per_node}",
        )
    for resource, wanted, parse in (
        ("cpu", gpu_type.node_allocatable.cpu, cpu_millicores),
        ("memory", gpu_type.node_allocatable.memory, parse_quantity),
    ):
        have = allocatable.get(resource)
        if have is not None and parse(str(have)) < parse(wanted):
            yield error(
                "L14",
                (*path, "nodeAllocatable", resource),
                f"node {name} has {have} allocatable {resource}, less than the configured {wanted}",
                hint="use the smallest node's Allocatable (kubectl describe node)",
            )
