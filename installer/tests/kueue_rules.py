"""Kueue's own admission rules (CRD markers, CEL, webhooks) for rendered objects, checked without a cluster.

Written from the v1beta2 API types and webhooks, independently of the renderer, so a renderer bug
cannot hide behind a shared helper.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from konduktor.config.quantity import parse_quantity

SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
KUEUE_KINDS = {
    "ResourceFlavor",
    "Topology",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "WorkloadPriorityClass",
    "AdmissionCheck",
    "MultiKueueConfig",
    "MultiKueueCluster",
}
OWNERSHIP = {"app.kubernetes.io/managed-by": "konduktor"}


def violations(objects: Sequence[dict[str, Any]]) -> list[str]:
    """Every rule a rendered object set breaks; empty when Kueue and the API server would accept it."""
    problems: list[str] = []
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for obj in objects:
        kind, metadata = obj["kind"], obj["metadata"]
        key = f"{metadata.get('namespace', '')}/{metadata['name']}"
        if key in by_kind.setdefault(kind, {}):
            problems.append(f"{kind} {key} rendered twice")
        by_kind[kind][key] = obj
        if kind in KUEUE_KINDS and obj["apiVersion"] != "kueue.x-k8s.io/v1beta2":
            problems.append(f"{kind} {key}: apiVersion {obj['apiVersion']}")
        labels = metadata.get("labels", {})
        if not OWNERSHIP.items() <= labels.items() or "konduktor.ai/config" not in labels:
            problems.append(f"{kind} {key}: missing ownership labels")
        for label, value in labels.items():
            if len(value) > 63 or not LABEL_VALUE.match(value):
                problems.append(f"{kind} {key}: label {label}={value!r} is not a valid label value")
        name = metadata["name"]
        if kind in {"Namespace", "LocalQueue", "WorkloadPriorityClass"}:
            # LocalQueue and priority names are also label values (queue-name, priority-class).
            if len(name) > 63 or not DNS_LABEL.match(name):
                problems.append(f"{kind} {key}: name must be a DNS label of at most 63 characters")
        elif len(name) > 253 or not SUBDOMAIN.match(name):
            problems.append(f"{kind} {key}: name must be a DNS subdomain")

    def names(kind: str) -> set[str]:
        return {obj["metadata"]["name"] for obj in by_kind.get(kind, {}).values()}

    for key, flavor in by_kind.get("ResourceFlavor", {}).items():
        spec = flavor["spec"]
        if len(spec.get("nodeLabels", {})) > 8 or len(spec.get("tolerations", [])) > 8:
            problems.append(f"ResourceFlavor {key}: more than 8 nodeLabels or tolerations")
        if "topologyName" in spec:
            if not spec.get("nodeLabels"):
                problems.append(f"ResourceFlavor {key}: topologyName needs at least one nodeLabel")
            if spec["topologyName"] not in names("Topology"):
                problems.append(f"ResourceFlavor {key}: Topology {spec['topologyName']} not rendered")
    for key, topology in by_kind.get("Topology", {}).items():
        levels = [level["nodeLabel"] for level in topology["spec"]["levels"]]
        if not 1 <= len(levels) <= 16 or len(set(levels)) != len(levels):
            problems.append(f"Topology {key}: 1-16 unique levels")
        if "kubernetes.io/hostname" in levels[:-1]:
            problems.append(f"Topology {key}: kubernetes.io/hostname only as the lowest level")
    for key, cohort in by_kind.get("Cohort", {}).items():
        parent = cohort["spec"].get("parentName")
        if parent is not None and parent not in names("Cohort"):
            problems.append(f"Cohort {key}: parent {parent} not rendered")
    for key, queue in by_kind.get("ClusterQueue", {}).items():
        problems.extend(f"ClusterQueue {key}: {p}" for p in _cluster_queue(queue["spec"], names))
    for key, queue in by_kind.get("LocalQueue", {}).items():
        if queue["spec"]["clusterQueue"] not in names("ClusterQueue"):
            problems.append(f"LocalQueue {key}: ClusterQueue {queue['spec']['clusterQueue']} not rendered")
        if queue["metadata"]["namespace"] not in names("Namespace"):
            problems.append(f"LocalQueue {key}: namespace not rendered")
    problems.extend(_multikueue(by_kind, names))
    for key, priority in by_kind.get("WorkloadPriorityClass", {}).items():
        if not isinstance(priority["value"], int) or not -(2**31) <= priority["value"] < 2**31:
            problems.append(f"WorkloadPriorityClass {key}: value must be an int32")
    return problems


def _multikueue(by_kind: dict[str, dict[str, dict[str, Any]]], names: Any) -> list[str]:
    """A ClusterQueue's admission checks, their MultiKueueConfigs and the MultiKueueClusters those list exist."""
    problems: list[str] = []
    for key, queue in by_kind.get("ClusterQueue", {}).items():
        for check in queue["spec"].get("admissionChecksStrategy", {}).get("admissionChecks", []):
            if check["name"] not in names("AdmissionCheck"):
                problems.append(f"ClusterQueue {key}: AdmissionCheck {check['name']} not rendered")
    for key, check in by_kind.get("AdmissionCheck", {}).items():
        parameters = check["spec"].get("parameters")
        if check["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue":
            # The MultiKueue controller reads its parameters from a MultiKueueConfig (admissioncheck.go).
            if parameters is None or (parameters["apiGroup"], parameters["kind"]) != (
                "kueue.x-k8s.io",
                "MultiKueueConfig",
            ):
                problems.append(f"AdmissionCheck {key}: MultiKueue needs a MultiKueueConfig as parameters")
            elif parameters["name"] not in names("MultiKueueConfig"):
                problems.append(f"AdmissionCheck {key}: MultiKueueConfig {parameters['name']} not rendered")
    for key, config in by_kind.get("MultiKueueConfig", {}).items():
        clusters = config["spec"]["clusters"]
        # CRD: 1-20 items, unique (a CEL rule).
        if not 1 <= len(clusters) <= 20 or len(set(clusters)) != len(clusters):
            problems.append(f"MultiKueueConfig {key}: 1-20 unique clusters")
        problems.extend(
            f"MultiKueueConfig {key}: MultiKueueCluster {name} not rendered"
            for name in clusters
            if name not in names("MultiKueueCluster")
        )
    return problems


def _cluster_queue(spec: dict[str, Any], names: Any) -> list[str]:
    problems = []
    cohort = spec.get("cohortName")
    if cohort is not None and cohort not in names("Cohort"):
        problems.append(f"cohort {cohort} not rendered")
    if not spec.get("namespaceSelector"):
        problems.append("no namespaceSelector: it would admit from no namespace (nil) or every namespace ({})")
    weight = spec.get("fairSharing", {}).get("weight")
    if weight is not None and 0 < parse_quantity(weight) <= parse_quantity("1n"):
        problems.append("fairSharing.weight must be 0 or more than 1e-9")
    preemption = spec.get("preemption", {})
    if (
        preemption.get("reclaimWithinCohort", "Never") == "Never"
        and preemption.get("borrowWithinCohort", {}).get("policy", "Never") != "Never"
    ):
        problems.append("borrowWithinCohort needs reclaimWithinCohort other than Never")
    groups = spec.get("resourceGroups", [])
    if len(groups) > 16:
        problems.append("more than 16 resource groups")
    seen_flavors: set[str] = set()
    for group in groups:
        covered = group["coveredResources"]
        if not 1 <= len(group["flavors"]) <= 64:
            problems.append("1-64 flavors per resource group")
        for flavor in group["flavors"]:
            if flavor["name"] in seen_flavors:
                problems.append(f"flavor {flavor['name']} in two resource groups")
            seen_flavors.add(flavor["name"])
            if flavor["name"] not in names("ResourceFlavor"):
                problems.append(f"flavor {flavor['name']} has no ResourceFlavor")
            if [r["name"] for r in flavor["resources"]] != covered:
                problems.append(f"flavor {flavor['name']}: resources must match coveredResources in order")
            for resource in flavor["resources"]:
                problems.extend(_quota(resource, cohort is not None, flavor["name"]))
    return problems


def _quota(resource: dict[str, Any], has_cohort: bool, flavor: str) -> list[str]:
    problems = []
    where = f"{flavor}/{resource['name']}"
    nominal = parse_quantity(resource["nominalQuota"])
    for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
        if key in resource and parse_quantity(resource[key]) < 0:
            problems.append(f"{where}: {key} is negative")
        if key != "nominalQuota" and key in resource and not has_cohort:
            problems.append(f"{where}: {key} without a cohort")
    if "lendingLimit" in resource and parse_quantity(resource["lendingLimit"]) > nominal:
        problems.append(f"{where}: lendingLimit more than nominalQuota")
    return problems
