"""konduktor-core's processes on the simulated cluster: the sim runs the chart's health controller and capacity
publisher as local processes, with the settings the chart rendered and tokens of their own service accounts (so
the API server refuses them what the chart's RBAC does not give), and `sim fault` drives a node's fault signals."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import EXAMPLE, Sim
from ruamel.yaml import YAML
from sim_fixture import node, release_nodes

from konduktor.cli.main import main
from konduktor.config.load import load_config
from konduktor.errors import KonduktorError
from konduktor.health.leader import LEASE_API, LEASE_NAME
from konduktor.health.settings import load_settings
from konduktor.helm.release import CHARTS, install_or_upgrade, uninstall
from konduktor.helm.values import merge_values
from konduktor.kube.client import ApiError, Kube
from konduktor.queueing.cluster import published_capacity
from konduktor.quotas.sync import sync_quotas
from konduktor.sim.faults import kernel_log_dir
from konduktor.sim.gpus import FAULTS_ANNOTATION
from konduktor.sim.processes import tail
from konduktor.vocabulary import GPU_RESOURCE, SYSTEM_NAMESPACE
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
CORE = CHARTS / "konduktor-core"
RELEASE = "konduktor"
CONTROLLER = "health-controller"
PUBLISHER = "capacity-publisher"
NODE = "gpu-h100-0003"
ACCOUNT = f"system:serviceaccount:{SYSTEM_NAMESPACE}"


def values(**settings: Any) -> dict[str, Any]:
    """The sim's values, a 1 s publication cycle, and the teams' admission policies off (tried in test_policies.py;
    enforcing here they would judge later modules' pods)."""
    base = YAML(typ="safe").load((CORE / "values-sim.yaml").read_text())
    extra = {"policies": {"enabled": False}, "capacityPublisher": {"heartbeatSeconds": 1, "settleSeconds": 0.2}}
    return merge_values(merge_values(base, extra), {"controller": {"settings": settings}})


@pytest.fixture
def installed(sim: Sim) -> Iterator[Kube]:
    sync_quotas(sim.kube, load_config(EXAMPLE).config, prune=False, dry_run=False)  # the publisher's team rights
    sim.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
    install_or_upgrade(sim.kubeconfig, CORE, RELEASE, SYSTEM_NAMESPACE, values())
    yield sim.kube
    sim.cluster.platform.stop()
    uninstall(sim.kubeconfig, RELEASE, SYSTEM_NAMESPACE)


def username(kubeconfig: Any) -> str:
    with Kube(kubeconfig) as kube:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        answer = kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review)
    return str(answer["status"]["userInfo"]["username"])


def published_at(kube: Kube) -> str:
    capacity = published_capacity(kube, "team-a")
    return capacity.published_at if capacity else ""


def refused(attempt: Any) -> None:
    with pytest.raises(ApiError) as raised:
        attempt()
    assert raised.value.status == 403, raised.value.message


def test_the_sim_runs_the_charts_processes_as_their_service_accounts(sim: Sim, installed: Kube) -> None:
    platform = sim.cluster.platform
    since = datetime.now(UTC).isoformat(timespec="seconds")
    assert platform.ensure(installed) == [PUBLISHER, CONTROLLER]
    assert {k: v for k, v in sim.cluster.status()["components"].items() if k in (CONTROLLER, PUBLISHER)} == {
        CONTROLLER: "running",
        PUBLISHER: "running",
    }
    controller_kubeconfig = platform.dir(CONTROLLER) / "kubeconfig.yaml"
    publisher_kubeconfig = platform.dir(PUBLISHER) / "kubeconfig.yaml"
    assert username(controller_kubeconfig) == f"{ACCOUNT}:konduktor-konduktor-core-health"
    assert username(publisher_kubeconfig) == f"{ACCOUNT}:konduktor-capacity-publisher"
    # Exactly the chart's rights: neither may read Secrets; the publisher may not touch a Node.
    with Kube(controller_kubeconfig) as controller, Kube(publisher_kubeconfig) as publisher:
        refused(lambda: controller.list("v1", "Secret", SYSTEM_NAMESPACE))
        refused(lambda: publisher.patch("v1", "Node", NODE, {"metadata": {"labels": {"x": "y"}}}))
    # The controller leads (it acts: no dry run on the sim) and the publisher keeps the teams' capacity fresh.
    wait_until(
        "the sim's controller to hold the Lease",
        lambda: (
            (installed.get(LEASE_API, "Lease", LEASE_NAME, SYSTEM_NAMESPACE) or {})
            .get("spec", {})
            .get("holderIdentity")
            == "konduktor-konduktor-core-health-sim"
        ),
        timeout=90,
    )
    wait_until(
        "a publication after the start",
        lambda: published_at(installed) > since,
        timeout=60,
        on_timeout=lambda: KonduktorError(f"no publication; its log:\n{tail(platform.log(PUBLISHER), 30)}"),
    )
    settings = load_settings(platform.dir(CONTROLLER) / "mounts" / "0" / "health.yaml")
    assert settings.dry_run is False and settings.cooldown_seconds == 60
    assert settings.kernel_log_files is not None
    assert settings.kernel_log_files.directory == str(kernel_log_dir(sim.cluster.root))

    pids = {c: platform.pid(c) for c in (CONTROLLER, PUBLISHER)}
    assert platform.ensure(installed) == []  # nothing changed: nothing restarted
    assert {c: platform.pid(c) for c in (CONTROLLER, PUBLISHER)} == pids
    install_or_upgrade(sim.kubeconfig, CORE, RELEASE, SYSTEM_NAMESPACE, values(breaker={"max_nodes": 7}))
    assert platform.ensure(installed) == [CONTROLLER]  # new settings: the controller restarts with them
    assert platform.pid(PUBLISHER) == pids[PUBLISHER] and platform.pid(CONTROLLER) not in (None, pids[CONTROLLER])
    assert load_settings(platform.dir(CONTROLLER) / "mounts" / "0" / "health.yaml").breaker.max_nodes == 7

    # Its service account gone (a namespace being deleted, `down` midway): no pod could start, so neither does the
    # process, and nothing fails; the account back, it runs again.
    account = installed.get("v1", "ServiceAccount", "konduktor-capacity-publisher", SYSTEM_NAMESPACE)
    assert account is not None
    installed.delete("v1", "ServiceAccount", "konduktor-capacity-publisher", SYSTEM_NAMESPACE)
    assert platform.ensure(installed) == []
    assert platform.status() == {CONTROLLER: "running"}
    meta = {k: account["metadata"][k] for k in ("name", "namespace", "labels", "annotations")}
    installed.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    assert platform.ensure(installed) == [PUBLISHER]

    uninstall(sim.kubeconfig, RELEASE, SYSTEM_NAMESPACE)
    assert platform.ensure(installed) == []
    assert platform.status() == {}  # the chart's gone, and its processes with it


def test_sim_fault_drives_a_nodes_signals_and_clear_undoes_them(
    sim: Sim, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    name = ["--name", sim.cluster.name]
    try:
        assert main(["sim", "fault", "gpu-nope-0000", "--kind", "xid79", *name]) == 2
        assert "no node 'gpu-nope-0000'" in capsys.readouterr().err
        assert main(["sim", "fault", NODE, "--kind", "xid80", *name]) == 2
        assert "xid79, lost-gpu, ecc" in capsys.readouterr().err
        assert main(["sim", "fault", NODE, "--kind", "xid79", "--gpu", "10", *name]) == 2

        assert main(["sim", "fault", NODE, "--kind", "xid79", "--gpu", "2", *name]) == 0
        faulty = node(sim.kube, NODE)
        assert faulty["status"]["allocatable"][GPU_RESOURCE] == "9"
        assert faulty["metadata"]["annotations"][FAULTS_ANNOTATION] == "2=xid"
        line = (kernel_log_dir(sim.cluster.root) / f"{NODE}.log").read_text().splitlines()[-1]
        assert "NVRM: Xid (PCI:0000:38:00.0): 79," in line
        assert main(["sim", "fault", NODE, "--kind", "ecc", "--gpu", "5", *name]) == 0
        faulty = node(sim.kube, NODE)
        assert faulty["metadata"]["annotations"][FAULTS_ANNOTATION] == "2=xid,5=ecc"
        assert faulty["status"]["allocatable"][GPU_RESOURCE] == "8"

        assert main(["sim", "fault", NODE, "--clear", *name]) == 0
        healthy = node(sim.kube, NODE)
        assert healthy["status"]["allocatable"][GPU_RESOURCE] == "10"
        assert FAULTS_ANNOTATION not in (healthy["metadata"].get("annotations") or {})
    finally:
        release_nodes(sim.kube, [NODE])
