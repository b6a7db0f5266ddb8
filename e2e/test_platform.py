"""Acceptance: an installed Konduktor serves every team's queue, runs GPU work through it, and watches nodes.

    KONDUKTOR_E2E_KUBECONFIG=~/.kube/gpu KONDUKTOR_E2E_CONFIG=config.yaml .venv/bin/pytest e2e
runs it against a real cluster where `konduktor-install up config.yaml` has been run; without them it runs
`up examples/config.yaml` on the simulated cluster first (what CI does). The burn-in runs at
KONDUKTOR_E2E_BURNIN_LEVEL (default standard): on GPUs it measures them, on the simulated cluster the sim's
GPU agent answers for healthy GPUs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sim_fixture import EXAMPLE

from konduktor.cli.main import main
from konduktor.config.load import load_config
from konduktor.config.model import Config
from konduktor.kube.client import Kube
from konduktor.sim.workloads import gpu_job, is_true, job_state, workload_of
from konduktor.vocabulary import KUEUE_API
from konduktor.waiting import wait_until

# Without KONDUKTOR_E2E_KUBECONFIG the platform is `up` on the simulated cluster (the `platform` fixture).
pytestmark = pytest.mark.sim


@dataclass
class Platform:
    kube: Kube
    kubeconfig: Path
    config_path: Path
    config: Config


@pytest.fixture(scope="module")
def platform(request: pytest.FixtureRequest) -> Iterator[Platform]:
    kubeconfig = os.environ.get("KONDUKTOR_E2E_KUBECONFIG")
    if kubeconfig:
        config_path = Path(os.environ.get("KONDUKTOR_E2E_CONFIG", str(EXAMPLE)))
        kubeconfig_path = Path(kubeconfig)
    else:
        sim = request.getfixturevalue("sim")
        saved = os.environ.pop("KUBECONFIG", None)
        try:
            assert main(["up", str(EXAMPLE), "--sim", sim.cluster.name]) == 0
        finally:
            if saved is not None:
                os.environ["KUBECONFIG"] = saved
        config_path, kubeconfig_path = EXAMPLE, sim.kubeconfig
    kube = Kube(kubeconfig_path)
    try:
        yield Platform(kube, kubeconfig_path, config_path, load_config(config_path).config)
    finally:
        kube.close()


def test_every_team_has_an_active_queue(platform: Platform) -> None:
    for name, team in platform.config.teams.items():
        assert is_true(platform.kube.get(KUEUE_API, "ClusterQueue", name), "Active"), name
        for namespace in team.namespaces:
            assert platform.kube.get(KUEUE_API, "LocalQueue", "default", namespace) is not None, namespace


@pytest.mark.timeout(1800)  # per team up to 300 s to be admitted and 600 s to complete on a real cluster
def test_each_team_runs_a_gpu_job_through_its_queue(platform: Platform) -> None:
    kube = platform.kube
    submitted = []
    for team in platform.config.teams.values():
        namespace = team.namespaces[0]
        kube.create(gpu_job("e2e-gpu", namespace, gpus=1, queue="default", command=["nvidia-smi", "-L"]))
        submitted.append(namespace)
    try:
        for namespace in submitted:
            wait_until(
                f"the job in {namespace} to be admitted",
                lambda ns=namespace: is_true(workload_of(kube, ns, "e2e-gpu"), "Admitted"),
                timeout=300,
            )
            wait_until(
                f"the job in {namespace} to complete",
                lambda ns=namespace: job_state(kube, ns, "e2e-gpu") == "complete",
                timeout=600,
            )
    finally:
        for namespace in submitted:
            kube.delete("batch/v1", "Job", "e2e-gpu", namespace)


def test_the_health_controller_runs(platform: Platform) -> None:
    deployments = platform.kube.list(
        "apps/v1", "Deployment", "konduktor-system", label_selector="app.kubernetes.io/component=health-controller"
    )
    assert deployments, "no health controller Deployment"
    assert all(d.get("status", {}).get("availableReplicas", 0) >= 1 for d in deployments)


def test_admission_policies_are_installed(platform: Platform) -> None:
    names = {
        p["metadata"]["name"]
        for p in platform.kube.list("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding")
    }
    assert {
        "konduktor-gpu-through-localqueue",
        "konduktor-gpu-in-team-namespaces",
        "konduktor-gpu-visible-devices",
        "konduktor-gpu-health-toleration",
        "konduktor-pod-priority",
        "konduktor-security-profile",
        "konduktor-team-namespaces",
    } <= names


def test_team_namespaces_enforce_their_security_profile(platform: Platform) -> None:
    for name, team in platform.config.teams.items():
        for namespace in team.namespaces:
            found = platform.kube.get("v1", "Namespace", namespace)
            assert found is not None, namespace
            labels = found["metadata"]["labels"]
            assert labels["konduktor.ai/team"] == name
            assert labels["konduktor.ai/security-profile"] == team.pod_security, namespace
            # `gpu` is the platform policy's to enforce; the Pod Security levels are Pod Security's.
            enforce = "privileged" if team.pod_security == "gpu" else team.pod_security
            assert labels["pod-security.kubernetes.io/enforce"] == enforce, namespace


# On a real cluster the full level's DCGM diagnostic, matmul and NCCL steps run for hours; each step has its own
# deadline (konduktor.burnin.tiers), this only catches a hang.
@pytest.mark.timeout(4 * 3600)
def test_every_gpu_node_passes_burn_in(platform: Platform, capsys: pytest.CaptureFixture[str]) -> None:
    level = os.environ.get("KONDUKTOR_E2E_BURNIN_LEVEL", "standard")
    args = ["burnin", str(platform.config_path), "--level", level, "-o", "json"]
    code = main([*args, "--kubeconfig", str(platform.kubeconfig)])
    report = json.loads(capsys.readouterr().out)
    unfit = {n["node"]: n["verdict"] for n in report["nodes"] if n["verdict"] not in ("PASS", "WARN", "SKIPPED")}
    assert (code, unfit) == (0, {})
    gpu_nodes = sum(t.nodes for t in platform.config.gpu_types.values())
    assert len(report["nodes"]) == gpu_nodes
