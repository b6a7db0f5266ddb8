"""Alerts reach people, end to end on the simulated cluster: a GPU fault -> the real health controller quarantines
the node -> the real Prometheus (konduktor-core's rules) fires -> the real Alertmanager (the configuration `render`
makes from examples/config.yaml) -> the webhook receiver of the example's routes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from alert_pipeline import WebhookReceiver, alert_pipeline, health_controller, scraped
from conftest import Sim
from health_cluster import (  # noqa: F401 (fixtures: `kube`, the controller's namespace; `clean`, nodes reset)
    NAMESPACE,
    clean,
    kube_with_controller_namespace,
    set_allocatable,
    settings,
    wait_for_job,
    write_config,
)
from sim_fixture import health_taints, node

from konduktor.config import load_config
from konduktor.health.requalification_runs import REQUALIFICATION_LABEL
from konduktor.health.settings import BreakerSettings
from konduktor.waiting import wait_until

pytestmark = [pytest.mark.sim, pytest.mark.usefixtures("kube", "clean")]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "config.yaml"
RUNBOOKS = "https://konduktor.readthedocs.io/en/latest/docs/runbooks.md"  # konduktor-core's runbookBaseURL


def test_a_quarantined_node_is_announced_and_its_requalification_resolves_it(sim: Sim, tmp_path: Path) -> None:
    victim = "gpu-h100-0001"
    with alert_pipeline(load_config(EXAMPLE).config, tmp_path) as pipeline:
        hold = write_config(tmp_path / "hold.yaml", settings())  # cool-down of an hour: the node stays out
        with health_controller(sim.kubeconfig, hold, pipeline.controller_port, NAMESPACE, tmp_path / "health.log"):
            wait_until("Prometheus to scrape the controller", scraped(pipeline), timeout=60)
            fault = time.time()
            set_allocatable(sim.kube, victim, 9)  # a GPU falls off the bus
            wait_until("the node to be tainted", lambda: bool(health_taints(node(sim.kube, victim))), timeout=30)
            wait_until(
                "the quarantine alert to reach the receiver",
                lambda: pipeline.receiver.alerts("KonduktorNodeQuarantined", "firing", fault),
                timeout=90,
            )
        [(notification, alert)] = pipeline.receiver.alerts("KonduktorNodeQuarantined", "firing", fault)
        print(f"\nfault -> notification: {notification.received - fault:.2f}s")
        # The example routes a warning about no team to its default receiver, `platform`.
        assert (notification.path, notification.body["receiver"]) == ("/platform", "platform")
        assert alert["labels"]["node"] == victim
        assert alert["labels"]["reason"] == "GPULost"  # the signal that quarantined it
        assert alert["labels"]["severity"] == "warning"
        assert alert["annotations"]["runbook_url"] == f"{RUNBOOKS}#konduktornodequarantined"
        assert victim in alert["annotations"]["summary"]
        assert pipeline.receiver.alerts("KonduktorNodeQuarantined", "resolved") == []

        # The GPU is back; a controller with no cool-down requalifies the node by a burn-in, which releases it.
        set_allocatable(sim.kube, victim, 10)
        requalify = write_config(tmp_path / "requalify.yaml", settings(cooldown_seconds=0))
        with health_controller(sim.kubeconfig, requalify, pipeline.controller_port, NAMESPACE, tmp_path / "health.log"):
            wait_until(
                "a requalification Job",
                lambda: sim.kube.list("batch/v1", "Job", NAMESPACE, label_selector=f"{REQUALIFICATION_LABEL}=true"),
                timeout=60,
            )
            [job] = sim.kube.list("batch/v1", "Job", NAMESPACE, label_selector=f"{REQUALIFICATION_LABEL}=true")
            wait_for_job(sim.kube, job["metadata"]["name"])
            wait_until("the node to be released", lambda: not health_taints(node(sim.kube, victim)), timeout=60)
            wait_until(
                "the quarantine alert to resolve at the receiver",
                lambda: last_word(pipeline.receiver, "KonduktorNodeQuarantined") == "resolved",
                timeout=90,
            )
        # One firing and one resolved notification: the restart between the two controllers (a scrape gap) did
        # not resolve the alert of a node that stayed in quarantine (the rule's keep_firing_for).
        said = [status for _, status in sorted(
            (n.received, a["status"]) for status in ("firing", "resolved")
            for n, a in pipeline.receiver.alerts("KonduktorNodeQuarantined", status)
        )]  # fmt: skip
        assert said == ["firing", "resolved"]
        resolved, alert = pipeline.receiver.alerts("KonduktorNodeQuarantined", "resolved")[-1]
        assert resolved.body["receiver"] == "platform"
        assert (alert["labels"]["node"], alert["labels"]["reason"]) == (victim, "GPULost")
        assert alert["annotations"]["runbook_url"] == f"{RUNBOOKS}#konduktornodequarantined"


def last_word(receiver: WebhookReceiver, alertname: str) -> str | None:
    """The status of the newest notification about the alert."""
    said = [
        (n.received, alert["status"])
        for status in ("firing", "resolved")
        for n, alert in receiver.alerts(alertname, status)
    ]
    return max(said)[1] if said else None


def test_the_breaker_tripping_is_announced_as_critical(sim: Sim, tmp_path: Path) -> None:
    with alert_pipeline(load_config(EXAMPLE).config, tmp_path) as pipeline:
        tight = write_config(tmp_path / "tight.yaml", settings(breaker=BreakerSettings(max_fraction=1, max_nodes=1)))
        with health_controller(sim.kubeconfig, tight, pipeline.controller_port, NAMESPACE, tmp_path / "health.log"):
            wait_until("Prometheus to scrape the controller", scraped(pipeline), timeout=60)
            assert pipeline.receiver.alerts("KonduktorQuarantineBreakerTripped", "firing") == []
            set_allocatable(sim.kube, "gpu-h100-0001", 9)
            set_allocatable(sim.kube, "gpu-h100-0002", 9)
            wait_until(
                "the breaker alert to reach the receiver",
                lambda: pipeline.receiver.alerts("KonduktorQuarantineBreakerTripped", "firing"),
                timeout=90,
            )
    [(notification, alert)] = pipeline.receiver.alerts("KonduktorQuarantineBreakerTripped", "firing")
    assert notification.body["receiver"] == "platform"  # the example's route for critical alerts
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["runbook_url"] == f"{RUNBOOKS}#konduktorquarantinebreakertripped"
    # One node was quarantined before the breaker opened; the other was left in service.
    tainted = [name for name in ("gpu-h100-0001", "gpu-h100-0002") if health_taints(node(sim.kube, name))]
    assert len(tainted) == 1
