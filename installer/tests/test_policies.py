"""The admission policies: shipped enforcing with a case list each, and every case checked against the simulated
cluster's real kube-apiserver with the policies enforced (server-side dry-run creates, so nothing runs), each sent
as the case's user where it names one (impersonation)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml
from admission import (
    ADMISSION,
    BINDINGS,
    CASES,
    ENFORCED,
    PARAMS,
    POLICIES,
    POLICY_FILES,
    REPO,
    WARN_MODE,
    Case,
    denial,
    documents,
)

from konduktor.kube.client import Kube
from konduktor.waiting import wait_until

# -- what ships ----------------------------------------------------------------------------------------------


def test_each_policy_file_holds_a_policy_and_its_binding_enforcing() -> None:
    for path in POLICY_FILES:
        kinds = {doc["kind"]: doc for doc in documents(path)}
        assert set(kinds) == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, path.name
        policy, binding = kinds["ValidatingAdmissionPolicy"], kinds["ValidatingAdmissionPolicyBinding"]
        assert policy["apiVersion"] == binding["apiVersion"] == ADMISSION
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        assert binding["spec"]["validationActions"] == ENFORCED, f"{path.name} must ship enforcing"
        assert policy["spec"]["failurePolicy"] == "Fail"


def test_workload_policies_judge_updates_and_exempt_by_identity_not_owner() -> None:
    """A pending pod can gain a toleration, a label or an owner by UPDATE; and ownerReferences are the user's to
    write, so no policy may trust them."""
    for name, policy in POLICIES.items():
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
            assert set(rule["operations"]) == {"CREATE", "UPDATE"}, name
        assert "ownerReferences" not in json.dumps(policy["spec"].get("matchConditions", [])), name


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


def in_warn_mode(binding: dict[str, Any]) -> dict[str, Any]:
    """The binding switched to warn-first, the opt-in for adopting clusters (Deny cannot be combined with Warn)."""
    switched = copy.deepcopy(binding)
    switched["spec"]["validationActions"] = WARN_MODE
    return switched


@pytest.mark.sim
@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.policy}: {case.name}")
def test_policy_case(enforcing: Kube, case: Case) -> None:
    problem = denial(enforcing, case.object, case.sender)
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
    enforcing.apply(in_warn_mode(BINDINGS[name]))
    try:
        wait_until(f"{name} in warn mode", lambda: denial(enforcing, violation.object) is None, 60)
        warning = warnings_of_dry_run_create(enforcing, violation.object)
        assert f"Validation failed for ValidatingAdmissionPolicy '{name}'" in warning
        assert violation.message in warning
    finally:
        enforcing.apply(BINDINGS[name])
        wait_until(f"{name} enforced again", lambda: denial(enforcing, violation.object) is not None, 60)
