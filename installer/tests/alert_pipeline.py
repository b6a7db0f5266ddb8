"""The alerting path as it runs in a cluster, as local processes: the real health controller
(`konduktor-health run`) against the simulated cluster, the real Prometheus scraping it with konduktor-core's alert
rules, the real Alertmanager with the configuration `render` makes from a config's `alerts:` section, and a
webhook receiver in this process that records what reaches it.

Only what cannot be the same outside a cluster differs: the Secrets are files in a directory instead of mounts
under /etc/alertmanager/secrets, endpoints are 127.0.0.1 ports, and intervals are seconds (scrape, evaluation,
group_wait, group_interval, the quarantine alert's `for` and `keep_firing_for`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any

import requests
import yaml

from konduktor.alerts.render import alertmanager_config
from konduktor.config.model import Config, SecretKey
from konduktor.sim.cluster import free_port
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "charts" / "konduktor-core"
# The quarantine alert waits 1m in the chart and keeps firing 2m past a release (or a scrape gap); seconds here,
# so a test sees it fire and resolve, still long enough to outlast a controller restart.
SHORTER = {"KonduktorNodeQuarantined": {"for": "1s", "keep_firing_for": "20s"}}


@dataclass
class Notification:
    received: float  # time.time() when the POST arrived
    path: str
    body: dict[str, Any]


@dataclass
class WebhookReceiver:
    """Records every Alertmanager webhook POST (the receiver people would run, not a stand-in for a program)."""

    notifications: list[Notification] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serve(self) -> ThreadingHTTPServer:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    receiver.notifications.append(Notification(time.time(), self.path, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def alerts(self, alertname: str, status: str, since: float = 0.0) -> list[tuple[Notification, dict[str, Any]]]:
        """Each alert of that name and status in the notifications received after `since`."""
        with self.lock:
            received = list(self.notifications)
        return [
            (n, alert)
            for n in received
            if n.received >= since
            for alert in n.body["alerts"]
            if alert["labels"].get("alertname") == alertname and alert["status"] == status
        ]


def chart_rules(helm: Path) -> dict[str, Any]:
    """The rule groups konduktor-core installs where the umbrella turns its PrometheusRule on (runbook links made
    absolute by the chart)."""
    result = subprocess.run(
        [str(helm), "template", "konduktor", str(CORE), "--set", "prometheusRule.enabled=true",
         "--show-only", "templates/prometheusrule.yaml"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    groups = yaml.safe_load(result.stdout)["spec"]["groups"]
    for group in groups:
        for rule in group["rules"]:
            rule.update(SHORTER.get(rule.get("alert", ""), {}))
    return {"groups": groups}


def local_alertmanager_config(config: Config, secrets: Path, receiver_url: str) -> dict[str, Any]:
    """The rendered configuration with second-long intervals and its Secrets as files under `secrets`: each
    webhook URL Secret holds the test receiver's URL (with the receiver's name as its path)."""
    quick = config.alerts.model_copy(update={"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"})
    local = config.model_copy(update={"alerts": quick})
    for name, receiver in local.alerts.receivers.items():
        if receiver.webhook is not None:
            write_secret(secrets, receiver.webhook.url, f"{receiver_url}/{name}")
    return alertmanager_config(local, PurePosixPath(secrets))


def write_secret(secrets: Path, ref: SecretKey, value: str) -> None:
    path = secrets / ref.secret / ref.key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value)


def http_ready(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            return requests.get(url, timeout=1).status_code == 200
        except requests.RequestException:
            return False

    return ready


@dataclass
class AlertPipeline:
    receiver: WebhookReceiver
    controller_port: int
    prometheus_url: str
    alertmanager_url: str


@contextmanager
def alert_pipeline(config: Config, workdir: Path) -> Iterator[AlertPipeline]:
    """Alertmanager and Prometheus running, Prometheus scraping `controller_port` (start the controller there)."""
    toolbox = Toolbox()
    receiver = WebhookReceiver()
    server = receiver.serve()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        secrets = workdir / "secrets"
        am_config = workdir / "alertmanager.yml"
        am_config.write_text(
            yaml.safe_dump(local_alertmanager_config(config, secrets, f"http://127.0.0.1:{server.server_address[1]}"))
        )
        am_port = free_port()
        processes.append(
            subprocess.Popen(
                [str(toolbox.path("alertmanager")), f"--config.file={am_config}",
                 f"--storage.path={workdir / 'alertmanager'}", f"--web.listen-address=127.0.0.1:{am_port}",
                 "--cluster.listen-address="],
                stdout=(workdir / "alertmanager.log").open("wb"), stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        alertmanager_url = f"http://127.0.0.1:{am_port}"
        wait_until("Alertmanager to be ready", http_ready(f"{alertmanager_url}/-/ready"), timeout=60)

        controller_port = free_port()
        rules = workdir / "rules.yml"
        rules.write_text(yaml.safe_dump(chart_rules(toolbox.path("helm"))))
        prometheus_config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
            "scrape_configs": [
                {
                    "job_name": "konduktor-health-controller",
                    "static_configs": [{"targets": [f"127.0.0.1:{controller_port}"]}],
                }
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config))
        prometheus_port = free_port()
        processes.append(
            subprocess.Popen(
                [str(toolbox.path("prometheus")), f"--config.file={workdir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                stdout=(workdir / "prometheus.log").open("wb"), stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        prometheus_url = f"http://127.0.0.1:{prometheus_port}"
        wait_until("Prometheus to be ready", http_ready(f"{prometheus_url}/-/ready"), timeout=60)
        yield AlertPipeline(receiver, controller_port, prometheus_url, alertmanager_url)
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        server.shutdown()
        server.server_close()


@contextmanager
def health_controller(kubeconfig: Path, config: Path, port: int, namespace: str, log: Path) -> Iterator[None]:
    """`konduktor-health run` as its own process, serving /metrics on `port`; stopped (lease released) after."""
    process = subprocess.Popen(
        [sys.executable, "-m", "konduktor.cli.health", "run", "--kubeconfig", str(kubeconfig), "--config", str(config),
         "--lease-namespace", namespace, "--port", str(port)],
        env={**os.environ, "POD_NAME": f"alerts-{time.monotonic_ns()}"},
        stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until("the controller to serve metrics", http_ready(f"http://127.0.0.1:{port}/metrics"), timeout=60)
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


def scraped(pipeline: AlertPipeline) -> Callable[[], bool]:
    """Whether Prometheus scrapes the controller successfully."""

    def up() -> bool:
        answer = requests.get(
            f"{pipeline.prometheus_url}/api/v1/query",
            params={"query": 'up{job="konduktor-health-controller"}'},
            timeout=5,
        ).json()
        return any(r["value"][1] == "1" for r in answer["data"]["result"])

    return up
