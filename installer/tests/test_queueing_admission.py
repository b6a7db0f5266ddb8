"""`konduktor submit`'s judgement of a job by the cluster's admission, and `--fix`, the pure core: the reasons
read from the API's answers (Pod Security's, a policy's) and the least changes that answer them."""

from __future__ import annotations

import copy
from typing import Any

from konduktor.queueing.admission import (
    HOME_PATH,
    HOME_VOLUME,
    NON_ROOT_USER,
    fix_for,
    is_pod_security_refusal,
    is_pod_security_warning,
    lacks_rights,
    pod_specs,
    probe_pods,
    reasons_of,
)

# As the API server words them (k8s.io/pod-security-admission): the warning on a Job, the refusal of a Pod.
CHECKS = (
    'allowPrivilegeEscalation != false (container "train" must set securityContext.allowPrivilegeEscalation=false), '
    'unrestricted capabilities (container "train" must set securityContext.capabilities.drop=["ALL"]), '
    'runAsNonRoot != true (pod or container "train" must set securityContext.runAsNonRoot=true), '
    'seccompProfile (pod or container "train" must set securityContext.seccompProfile.type to "RuntimeDefault" '
    'or "Localhost")'
)
WARNING = f'would violate PodSecurity "restricted:latest": {CHECKS}'
REFUSAL = (
    'POST /api/v1/namespaces/team-a/pods: 403 pods "konduktor-submit-probe-x2" is forbidden: violates PodSecurity '
    f'"restricted:latest": {CHECKS}'
)
POLICY = (
    'POST /apis/batch/v1/namespaces/team-a/jobs: 422 jobs.batch "ngc" is forbidden: ValidatingAdmissionPolicy '
    "'konduktor-gpu-profile' with binding 'konduktor-gpu-profile' denied request: GPU pods must run as a non-root "
    "user (securityContext.runAsNonRoot)"
)


def ngc_job(**pod_security: Any) -> dict[str, Any]:
    """A Job as NVIDIA's NGC examples write one: root (the image's user), GPUs as limits only."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ngc", "namespace": "team-a"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    **({"securityContext": pod_security} if pod_security else {}),
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                            "resources": {"limits": {"nvidia.com/gpu": 8}},
                        }
                    ],
                }
            }
        },
    }


def test_pod_security_warnings_and_refusals_are_told_apart() -> None:
    assert is_pod_security_warning(WARNING) and not is_pod_security_refusal(WARNING)
    assert is_pod_security_refusal(REFUSAL) and not is_pod_security_warning(REFUSAL)
    assert not is_pod_security_refusal(POLICY) and not is_pod_security_warning(POLICY)


def test_missing_rights_are_told_from_an_admission_refusal() -> None:
    rbac = (
        'POST /apis/batch/v1/namespaces/team-b/jobs: 403 jobs.batch is forbidden: User "alice" cannot create '
        'resource "jobs" in API group "batch" in the namespace "team-b"'
    )
    assert lacks_rights(rbac)
    assert not lacks_rights(REFUSAL) and not lacks_rights(POLICY)


def test_reasons_are_pod_securitys_checks_one_by_one_and_a_policys_message() -> None:
    reasons = reasons_of([REFUSAL, POLICY])
    assert reasons[:4] == [
        'Pod Security restricted:latest: allowPrivilegeEscalation != false (container "train" must set '
        "securityContext.allowPrivilegeEscalation=false)",
        'Pod Security restricted:latest: unrestricted capabilities (container "train" must set '
        'securityContext.capabilities.drop=["ALL"])',
        'Pod Security restricted:latest: runAsNonRoot != true (pod or container "train" must set '
        "securityContext.runAsNonRoot=true)",
        'Pod Security restricted:latest: seccompProfile (pod or container "train" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
    ]
    assert reasons[4] == (
        "policy konduktor-gpu-profile: GPU pods must run as a non-root user (securityContext.runAsNonRoot)"
    )
    assert reasons_of(["POST /apis/batch/v1/namespaces/a/jobs: 422 something else"]) == ["something else"]


def test_restricted_is_met_with_a_non_root_user_a_writable_home_and_a_locked_down_container() -> None:
    job = ngc_job()
    before = copy.deepcopy(job)
    fixed = fix_for(job, reasons_of([REFUSAL]))
    assert job == before, "the job given is not changed"
    assert fixed.unfixed == []
    spec = fixed.job["spec"]["template"]["spec"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": NON_ROOT_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = spec["containers"][0]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert spec["volumes"] == [{"name": HOME_VOLUME, "emptyDir": {}}]
    assert container["env"] == [{"name": "HOME", "value": HOME_PATH}]
    assert container["volumeMounts"] == [{"name": HOME_VOLUME, "mountPath": HOME_PATH}]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 8}}  # nothing else touched
    at = "spec.template.spec"
    assert fixed.changes == [
        f"{at}.containers[0].securityContext.allowPrivilegeEscalation: false",
        f"{at}.containers[0].securityContext.capabilities.drop: [ALL]",
        f"{at}.securityContext.runAsNonRoot: true",
        f"{at}.securityContext.runAsUser: {NON_ROOT_USER}",
        f"{at}.volumes: + {{name: {HOME_VOLUME}, emptyDir: {{}}}}",
        f"{at}.containers[0].env: + HOME={HOME_PATH}",
        f"{at}.containers[0].volumeMounts: + {HOME_VOLUME} at {HOME_PATH}",
        f"{at}.securityContext.seccompProfile: {{type: RuntimeDefault}}",
    ]
    # A fixed job needs no further change: --fix is safe to run again.
    again = fix_for(fixed.job, reasons_of([REFUSAL]))
    assert again.changes == [] and again.job == fixed.job


def test_only_what_is_refused_is_changed() -> None:
    # The user is already non-root: no HOME is added, and an explicit user is kept.
    job = ngc_job(runAsUser=2000)
    fixed = fix_for(job, reasons_of(['pods "p" is forbidden: violates PodSecurity "restricted:latest": ' + CHECKS]))
    spec = fixed.job["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsUser"] == 2000 and "volumes" not in spec
    # An explicit root user is replaced; a HOME the container sets is kept.
    job = ngc_job(runAsUser=0)
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "HOME", "value": "/workspace"}]
    fixed = fix_for(job, ["Pod Security restricted:latest: runAsUser=0 (pod must not set runAsUser=0)"])
    spec = fixed.job["spec"]["template"]["spec"]
    assert spec["securityContext"] == {"runAsUser": NON_ROOT_USER, "runAsNonRoot": True}
    assert spec["containers"][0]["env"] == [{"name": "HOME", "value": "/workspace"}]
    assert "securityContext" not in spec["containers"][0] and "volumes" not in spec


def test_a_policys_message_naming_a_field_is_fixed_the_same_way() -> None:
    fixed = fix_for(ngc_job(), reasons_of([POLICY]))
    spec = fixed.job["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True and fixed.unfixed == []


def test_baseline_checks_and_what_cannot_be_fixed() -> None:
    job = ngc_job()
    spec = job["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["volumes"] = [{"name": "data", "hostPath": {"path": "/data"}}]
    container = spec["containers"][0]
    container["securityContext"] = {"privileged": True, "capabilities": {"add": ["SYS_ADMIN", "NET_BIND_SERVICE"]}}
    container["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    reasons = [
        "Pod Security baseline:latest: host namespaces (hostNetwork=true)",
        'Pod Security baseline:latest: privileged (container "train" must not set securityContext.privileged=true)',
        'Pod Security baseline:latest: non-default capabilities (container "train" must not include "SYS_ADMIN" in '
        "securityContext.capabilities.add)",
        'Pod Security baseline:latest: hostPort (container "train" uses hostPort 8080)',
        'Pod Security baseline:latest: hostPath volumes (volume "data")',
        "policy konduktor-something: the job names a team nobody knows",
    ]
    fixed = fix_for(job, reasons)
    spec = fixed.job["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert "hostNetwork" not in spec and container["securityContext"]["privileged"] is False
    assert container["securityContext"]["capabilities"] == {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}
    assert container["ports"] == [{"containerPort": 8080}]
    assert fixed.unfixed == reasons[4:]


def test_every_pod_template_of_a_job_kind_is_found_and_probed() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"generateName": "js-", "namespace": "team-a"},
        "spec": {
            "replicatedJobs": [
                {"name": "leader", "template": {"spec": {"template": {"spec": {"containers": [{"name": "l"}]}}}}},
                {"name": "worker", "template": {"spec": {"template": {"spec": {"containers": [{"name": "w"}]}}}}},
            ]
        },
    }
    assert [path for path, _ in pod_specs(jobset["spec"], "spec")] == [
        "spec.replicatedJobs[0].template.spec.template.spec",
        "spec.replicatedJobs[1].template.spec.template.spec",
    ]
    probes = probe_pods(jobset)
    assert [p["spec"]["containers"][0]["name"] for p in probes] == ["l", "w"]
    assert all(p["kind"] == "Pod" and p["metadata"]["namespace"] == "team-a" for p in probes)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    assert probe_pods(pod) == []  # a Pod's own dry run is Pod Security's judgement already
