"""Konduktor's admission policies on the session cluster, as they ship (enforcing), with their parameters and the
objects their cases assume: the `enforcing` fixture, shared by the policy cases and the tenancy tests; and the
refusal of a dry-run request, for the tests that try what an identity may not do."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from konduktor.kube.client import MERGE_PATCH, ApiError, Identity, Kube
from konduktor.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
CASE_DIR = POLICY_DIR / "cases"
PARAMS_FILE = POLICY_DIR / "params.yaml"
POLICY_FILES = sorted(path for path in POLICY_DIR.glob("*.yaml") if path != PARAMS_FILE)
CASE_FILES = sorted(path for path in CASE_DIR.glob("*.yaml") if path.name != "setup.yaml")
WARN_MODE = ["Warn", "Audit"]
ENFORCED = ["Deny", "Audit"]
ADMISSION = "admissionregistration.k8s.io/v1"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for path in POLICY_FILES for doc in documents(path) if doc["kind"] == kind}


POLICIES = of_kind("ValidatingAdmissionPolicy")
BINDINGS = of_kind("ValidatingAdmissionPolicyBinding")
PARAMS = documents(PARAMS_FILE)[0]


@dataclass(frozen=True)
class Case:
    policy: str
    name: str
    expect: str
    message: str
    object: dict[str, Any]
    sender: Identity | None = None


def load_cases() -> list[Case]:
    found = []
    for path in CASE_FILES:
        spec = yaml.safe_load(path.read_text())
        for case in spec["cases"]:
            sender = Identity(case["as"]["user"], case["as"].get("group")) if "as" in case else None
            found.append(
                Case(spec["policy"], case["name"], case["expect"], case.get("message", ""), case["object"], sender)
            )
    return found


CASES = load_cases()


def dry_run_create(kube: Kube, obj: dict[str, Any]) -> None:
    resource = kube.resource(obj["apiVersion"], obj["kind"])
    kube.request("POST", resource.path(obj["metadata"].get("namespace")), query={"dryRun": "All"}, body=obj)


def denial(kube: Kube, obj: dict[str, Any], sender: Identity | None = None) -> ApiError | None:
    """The refusal of a dry-run create of `obj`, sent by `sender` (impersonated) or by the cluster admin."""
    client = kube if sender is None else Kube(kube.kubeconfig, impersonate=sender)
    try:
        dry_run_create(client, obj)
    except ApiError as problem:
        return problem
    finally:
        if client is not kube:
            client.close()
    return None


def refusal(kube: Kube, method: str, path: str, body: dict[str, Any], content_type: str) -> ApiError | None:
    """The refusal of a dry-run request (None: admitted)."""
    try:
        kube.request(method, path, query={"dryRun": "All"}, body=body, content_type=content_type)
    except ApiError as problem:
        return problem
    return None


def create_refusal(kube: Kube, obj: dict[str, Any]) -> ApiError | None:
    """The refusal of a dry-run create of `obj`, sent by `kube`'s identity."""
    path = kube.resource(obj["apiVersion"], obj["kind"]).path(obj["metadata"].get("namespace"))
    return refusal(kube, "POST", path, obj, "application/json")


def patch_refusal(
    kube: Kube, kind: str, name: str, patch: dict[str, Any], namespace: str | None, subresource: str | None = None
) -> ApiError | None:
    """The refusal of a dry-run merge patch of a core object (or its subresource)."""
    path = kube.resource("v1", kind).path(namespace, name, subresource)
    return refusal(kube, "PATCH", path, patch, MERGE_PATCH)


def stored(kube: Kube, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """An object as it is now, without what the server writes, so it can be put back as it was."""
    obj = kube.get(api_version, kind, name, namespace)
    if obj is None:
        return None
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
    return {**{k: v for k, v in obj.items() if k not in ("status", "metadata")}, "metadata": meta}


@contextmanager
def policies_lifted(kube: Kube) -> Iterator[None]:
    """No binding of konduktor's policies while a module runs the health controller's work in a test namespace of
    its own (an earlier `up` may have left the chart's, which let only the chart's burn-in account tolerate the
    health taint); put back as they were afterwards. The API server drops a binding asynchronously: a request in
    the first moments may still be judged by it, which the controller's next poll retries."""
    bindings = [
        found
        for name in POLICIES
        if (found := stored(kube, ADMISSION, "ValidatingAdmissionPolicyBinding", name)) is not None
    ]
    for binding in bindings:
        kube.delete(ADMISSION, "ValidatingAdmissionPolicyBinding", binding["metadata"]["name"])
    try:
        yield
    finally:
        for binding in bindings:
            kube.create(binding)


@pytest.fixture(scope="module")
def enforcing(sim: Any) -> Iterator[Kube]:
    """The policies as shipped, enforced, on the session cluster. The same objects may already be there from the
    chart (owned by Helm, maybe in another mode); they are set aside and put back afterwards, so later tests find
    them as they were."""
    kube: Kube = sim.kube
    setup = documents(CASE_DIR / "setup.yaml")
    namespaces = [doc["metadata"]["name"] for doc in setup if doc["kind"] == "Namespace"]

    def terminating(name: str) -> bool:
        found = kube.get("v1", "Namespace", name)
        return found is not None and "deletionTimestamp" in found["metadata"]

    # An earlier module's teardown may still be deleting them; nothing can be created in them meanwhile.
    for name in namespaces:
        wait_until(f"namespace {name} to be gone", lambda n=name: not terminating(n), timeout=120)

    def ref(obj: dict[str, Any]) -> tuple[str, str, str, str | None]:
        meta = obj["metadata"]
        return obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")

    # What the cases' set-up adds is removed again, so that a later install (the chart's service accounts in the
    # burn-in namespace, say) never meets an object it does not own.
    created = [ref(obj) for obj in setup if kube.get(*ref(obj)) is None]
    params = (PARAMS["metadata"]["name"], PARAMS["metadata"]["namespace"])
    before = [stored(kube, "v1", "ConfigMap", *params)] + [
        stored(kube, ADMISSION, kind, name)
        for name in POLICIES
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    ]

    def remove_ours() -> None:
        for name in POLICIES:
            kube.delete(ADMISSION, "ValidatingAdmissionPolicyBinding", name)
        # The API server drops a deleted binding asynchronously; while it still holds one, the binding refuses
        # every request it matches once its parameters are gone. So the parameters go last.
        for name in POLICIES:
            first_denied = next(case for case in CASES if case.policy == name and case.expect == "deny")
            wait_until(f"{name} to be lifted", lambda c=first_denied: denial(kube, c.object, c.sender) is None, 60)
            kube.delete(ADMISSION, "ValidatingAdmissionPolicy", name)
        kube.delete("v1", "ConfigMap", *params)

    try:
        for obj in setup:  # while whatever policies are there still have their parameters
            kube.apply(obj)
        # Pods without a service account get "default", which kube-controller-manager creates in new namespaces.
        for name in namespaces:
            wait_until(f"{name}/default", lambda n=name: kube.get("v1", "ServiceAccount", "default", n) is not None, 60)
        kube.apply(PARAMS)
        for name in POLICIES:  # a binding merged with the chart's would hold both Warn and Deny
            kube.delete(ADMISSION, "ValidatingAdmissionPolicyBinding", name)
            kube.delete(ADMISSION, "ValidatingAdmissionPolicy", name)
        for name, policy in POLICIES.items():
            kube.apply(policy)
            kube.apply(BINDINGS[name])
        # The apiserver's policy informers pick new bindings up asynchronously.
        for name in POLICIES:
            first_denied = next(case for case in CASES if case.policy == name and case.expect == "deny")
            wait_until(
                f"{name} to be enforced", lambda c=first_denied: denial(kube, c.object, c.sender) is not None, 60
            )
        yield kube
    finally:
        remove_ours()
        for obj in before:
            if obj is not None:
                kube.create(obj)
        for api_version, kind, name, namespace in reversed(created):
            kube.delete(api_version, kind, name, namespace)
        # Gone, not Terminating, before the next module: a later install creates objects in the burn-in namespace.
        deleted = [name for _, kind, name, _ in created if kind == "Namespace"]
        wait_until("the namespaces to go", lambda: all(kube.get("v1", "Namespace", n) is None for n in deleted), 120)
