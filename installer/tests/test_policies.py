"""The admission policies: shipped in warn mode with a case list each, and every case checked against the simulated
cluster's real kube-apiserver with the policies enforced (server-side dry-run creates, so nothing runs)."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from konduktor.kube.client import ApiError, Kube

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


def load_cases() -> list[Case]:
    found = []
    for path in CASE_FILES:
        spec = yaml.safe_load(path.read_text())
        for case in spec["cases"]:
            found.append(Case(spec["policy"], case["name"], case["expect"], case.get("message", ""), case["object"]))
    return found


CASES = load_cases()


# -- what ships ----------------------------------------------------------------------------------------------


def test_each_policy_file_holds_a_policy_and_its_binding_in_warn_mode() -> None:
    for path in POLICY_FILES:
        kinds = {doc["kind"]: doc for doc in documents(path)}
        assert set(kinds) == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, path.name
        policy, binding = kinds["ValidatingAdmissionPolicy"], kinds["ValidatingAdmissionPolicyBinding"]
        assert policy["apiVersion"] == binding["apiVersion"] == ADMISSION
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        assert binding["spec"]["validationActions"] == WARN_MODE, f"{path.name} must ship in warn mode"
        assert policy["spec"]["failurePolicy"] == "Fail"


def test_parameterised_policies_read_the_shipped_configmap() -> None:
    for name, policy in POLICIES.items():
        reads = set(_param_keys(policy))
        if not reads:
            assert "paramRef" not in BINDINGS[name]["spec"], name
            continue
        assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
        reference = BINDINGS[name]["spec"]["paramRef"]
        assert (reference["name"], reference["namespace"]) == (
            PARAMS["metadata"]["name"],
            PARAMS["metadata"]["namespace"],
        )
        assert reads <= set(PARAMS["data"]), (
            f"{name} reads parameters the ConfigMap lacks: {reads - set(PARAMS['data'])}"
        )


def _param_keys(policy: dict[str, Any]) -> list[str]:
    return re.findall(r"params\.data\.(\w+)", json.dumps(policy["spec"]))


def test_the_priority_classes_are_the_example_configs() -> None:
    config = yaml.safe_load((REPO / "examples" / "config.yaml").read_text())
    assert PARAMS["data"]["priorityClasses"].split(",") == list(config["priorities"])


def test_each_policy_has_allowed_and_denied_cases() -> None:
    assert {case.policy for case in CASES} == set(POLICIES)
    for name in POLICIES:
        expectations = {case.expect for case in CASES if case.policy == name}
        assert expectations == {"allow", "deny"}, name
    assert all(case.message for case in CASES if case.expect == "deny")


# -- on the real kube-apiserver ------------------------------------------------------------------------------


def enforced(binding: dict[str, Any]) -> dict[str, Any]:
    """The binding switched from warn mode to enforcement (Deny cannot be combined with Warn)."""
    switched = copy.deepcopy(binding)
    switched["spec"]["validationActions"] = ENFORCED
    return switched


def dry_run_create(kube: Kube, obj: dict[str, Any]) -> None:
    resource = kube.resource(obj["apiVersion"], obj["kind"])
    kube.request("POST", resource.path(obj["metadata"].get("namespace")), query={"dryRun": "All"}, body=obj)


def denial(kube: Kube, obj: dict[str, Any]) -> ApiError | None:
    try:
        dry_run_create(kube, obj)
    except ApiError as problem:
        return problem
    return None


def wait_for(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def stored(kube: Kube, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """An object as it is now, without what the server writes, so it can be put back as it was."""
    obj = kube.get(api_version, kind, name, namespace)
    if obj is None:
        return None
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
    return {**{k: v for k, v in obj.items() if k not in ("status", "metadata")}, "metadata": meta}


@pytest.fixture(scope="module")
def enforcing(sim: Any) -> Iterator[Kube]:
    """The policies enforced on the session cluster. The same objects may already be there from the chart (in
    Warn mode, owned by Helm); they are set aside and put back afterwards, so later tests find them as they were."""
    kube: Kube = sim.kube
    setup = documents(CASE_DIR / "setup.yaml")
    namespaces = [doc["metadata"]["name"] for doc in setup if doc["kind"] == "Namespace"]
    created = [name for name in namespaces if kube.get("v1", "Namespace", name) is None]
    params = (PARAMS["metadata"]["name"], PARAMS["metadata"]["namespace"])
    before = [stored(kube, "v1", "ConfigMap", *params)] + [
        stored(kube, ADMISSION, kind, name)
        for name in POLICIES
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    ]

    def remove_ours() -> None:
        for name in POLICIES:
            kube.delete(ADMISSION, "ValidatingAdmissionPolicyBinding", name)
            kube.delete(ADMISSION, "ValidatingAdmissionPolicy", name)
        kube.delete("v1", "ConfigMap", *params)

    try:
        for obj in setup:  # while whatever policies are there still have their parameters
            kube.apply(obj)
        # Pods without a service account get "default", which kube-controller-manager creates in new namespaces.
        for name in namespaces:
            wait_for(lambda n=name: kube.get("v1", "ServiceAccount", "default", n) is not None, f"{name}/default")
        kube.apply(PARAMS)
        for name in POLICIES:  # a binding merged with the chart's would hold both Warn and Deny
            kube.delete(ADMISSION, "ValidatingAdmissionPolicyBinding", name)
            kube.delete(ADMISSION, "ValidatingAdmissionPolicy", name)
        for name, policy in POLICIES.items():
            kube.apply(policy)
            kube.apply(enforced(BINDINGS[name]))
        # The apiserver's policy informers pick new bindings up asynchronously.
        for name in POLICIES:
            first_denied = next(case for case in CASES if case.policy == name and case.expect == "deny")
            wait_for(lambda c=first_denied: denial(kube, c.object) is not None, f"{name} to be enforced")
        yield kube
    finally:
        remove_ours()
        for obj in before:
            if obj is not None:
                kube.create(obj)
        for name in created:
            kube.delete("v1", "Namespace", name)


@pytest.mark.sim
@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.policy}: {case.name}")
def test_policy_case(enforcing: Kube, case: Case) -> None:
    problem = denial(enforcing, case.object)
    if case.expect == "allow":
        assert problem is None, f"denied: {problem}"
        return
    assert problem is not None, "allowed, expected a denial"
    assert problem.status == 403, problem.message
    assert f"ValidatingAdmissionPolicy '{case.policy}'" in problem.message
    assert case.message in problem.message


def warnings_of_dry_run_create(kube: Kube, obj: dict[str, Any]) -> str:
    """The Warning headers of an admitted dry-run create (the client's own calls do not return headers)."""
    resource = kube.resource(obj["apiVersion"], obj["kind"])
    method, url, headers, body, _ = kube.api.param_serialize(
        "POST",
        resource.path(obj["metadata"].get("namespace")),
        query_params=[("dryRun", "All")],
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=obj,
        auth_settings=["BearerToken"],
    )
    response = kube.api.call_api(method, url, header_params=headers, body=body, _request_timeout=kube.timeout)
    assert response.status == 201, response.status
    # A warning is `299 - "<text>"` with the text's own quotes escaped.
    return str(response.headers.get("Warning", "")).replace('\\"', '"')


@pytest.mark.sim
def test_in_warn_mode_a_violation_is_admitted_with_a_warning(enforcing: Kube) -> None:
    name = "konduktor-priority-classes"
    violation = next(case for case in CASES if case.policy == name and case.expect == "deny")
    enforcing.apply(BINDINGS[name])
    try:
        wait_for(lambda: denial(enforcing, violation.object) is None, f"{name} back in warn mode")
        warning = warnings_of_dry_run_create(enforcing, violation.object)
        assert f"Validation failed for ValidatingAdmissionPolicy '{name}'" in warning
        assert violation.message in warning
    finally:
        enforcing.apply(enforced(BINDINGS[name]))
        wait_for(lambda: denial(enforcing, violation.object) is not None, f"{name} enforced again")
