"""Kueue's user-facing ClusterRoles on the simulated cluster, as a real install has them: a team member may list
workloads and create Jobs in the team's namespace and in no other, decided by the sim's real RBAC authorizer."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLE, Sim

from konduktor.config.load import load_config
from konduktor.kube.client import Kube
from konduktor.kube.documents import load_documents
from konduktor.quotas.render import BATCH_USER_ROLE, RBAC_API, role_bindings
from konduktor.quotas.sync import sync_quotas
from konduktor.sim.kueue import read, user_roles
from konduktor.tools.gobuild import module_dir
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

MEMBER = "ada@example.org"  # a person in team-a's group, as the team's RoleBinding subjects say


def kueue_module() -> Path:
    return module_dir(Toolbox().tools["kueue"])


@pytest.mark.slow  # reads all of the pinned Kueue's manifests twice
def test_the_fast_reader_reads_every_manifest_of_the_pinned_kueue_as_load_documents_does() -> None:
    files = sorted((kueue_module() / "config").rglob("*.yaml"))
    assert len(files) > 100 and any(path.parent.name == "bases" for path in files)  # the CRDs among them
    for path in files:
        assert read(path) == load_documents(path), path


def test_user_roles_are_kueues_people_roles_under_the_charts_names() -> None:
    names = {role["metadata"]["name"] for role in user_roles(kueue_module())}
    assert {BATCH_USER_ROLE, "kueue-batch-admin-role", "kueue-workload-viewer-role", "kueue-job-editor-role"} <= names
    # The controller's own roles are not for people.
    assert not names & {"kueue-manager-role", "kueue-metrics-reader", "kueue-leader-election-role"}
    # Kueue's chart, which a real install uses, names each one `<fullname>-<name>` with fullname "kueue".
    templates = "".join(p.read_text() for p in (kueue_module() / "charts" / "kueue" / "templates" / "rbac").glob("*"))
    for name in names:
        assert f"name: '{{{{ include \"kueue.fullname\" . }}}}-{name.removeprefix('kueue-')}'" in templates, name


def can(kube: Kube, verb: str, group: str, resource: str, namespace: str, user: str, groups: list[str]) -> bool:
    """The API server's own answer (SubjectAccessReview) for a user in `groups`."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": [*groups, "system:authenticated"],
            "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": namespace},
        },
    }
    answer = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
    return bool(answer["status"].get("allowed"))


@pytest.mark.sim
def test_every_role_a_team_binding_names_exists(sim: Sim) -> None:
    config = load_config(EXAMPLE).config
    for binding in role_bindings(config):
        role = binding["roleRef"]["name"]
        assert sim.kube.get(RBAC_API, "ClusterRole", role) is not None, f"{binding['metadata']['name']}: {role}"


@pytest.mark.sim
def test_a_team_member_works_in_its_namespace_and_not_in_another_teams(sim: Sim) -> None:
    config = load_config(EXAMPLE).config
    sync_quotas(sim.kube, config, prune=True, dry_run=False)
    groups = list(config.teams["team-a"].groups)
    checks = [("list", "kueue.x-k8s.io", "workloads"), ("create", "batch", "jobs")]
    # The aggregation controller fills the aggregated roles' rules shortly after they are created.
    wait_until(
        "team-a's member to be allowed in team-a",
        lambda: all(can(sim.kube, verb, g, r, "team-a", MEMBER, groups) for verb, g, r in checks),
        timeout=60,
    )
    for verb, group, resource in checks:
        assert not can(sim.kube, verb, group, resource, "team-b", MEMBER, groups), f"{verb} {resource} in team-b"
    # Without the team's group the same person gets nothing in team-a either: the rights come from the binding.
    assert not can(sim.kube, "list", "kueue.x-k8s.io", "workloads", "team-a", MEMBER, [])
    # The batch-user role alone carries the rights (the edit binding also aggregates Kueue's viewers).
    batch_user = sim.kube.get(RBAC_API, "ClusterRole", BATCH_USER_ROLE)
    assert batch_user is not None
    granted = {
        (group, resource, verb)
        for rule in batch_user.get("rules") or []
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }
    assert {("kueue.x-k8s.io", "workloads", "list"), ("batch", "jobs", "create")} <= granted
