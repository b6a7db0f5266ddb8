"""The pinned Loki as one local process, configured as the umbrella deploys it, for the health controller's tests.

The configuration takes from charts/konduktor/values.yaml what decides how kernel lines are stored and found:
multi-tenancy (`auth_enabled`), the schema, and the resource attributes that become stream labels (`source`,
`k8s.node.name`). Lines are written as the umbrella's collector writes them: OTLP/HTTP to `/otlp/v1/logs` with
those resource attributes. The controller reads them with the umbrella's query and node label. Each test writes
and reads in a tenant of its own, so one Loki serves the whole session without one test seeing another's faults.

Shared by the health controller's simulated-cluster tests and `bench/health_bench.py`.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from konduktor.errors import KonduktorError
from konduktor.health.settings import LokiSettings
from konduktor.sim.cluster import free_port, stop_process, tail
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

UMBRELLA_VALUES = Path(__file__).resolve().parents[2] / "charts" / "konduktor" / "values.yaml"
QUERY_RANGE_ROUTE = 'route="loki_api_v1_query_range"'


def umbrella() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(UMBRELLA_VALUES.read_text())
    return values


def loki_config(data: Path, http_port: int, grpc_port: int) -> dict[str, Any]:
    """The umbrella's Loki settings on loopback ports, with a data directory of its own."""
    chart = umbrella()["loki"]["loki"]
    return {
        "auth_enabled": chart["auth_enabled"],
        "server": {
            "http_listen_address": "127.0.0.1",
            "http_listen_port": http_port,
            "grpc_listen_address": "127.0.0.1",
            "grpc_listen_port": grpc_port,
            "log_level": "warn",
        },
        "common": {
            "instance_addr": "127.0.0.1",  # not the address of a network interface: nothing else joins the ring
            "path_prefix": str(data),
            "storage": {
                "filesystem": {"chunks_directory": str(data / "chunks"), "rules_directory": str(data / "rules")}
            },
            "replication_factor": chart["commonConfig"]["replication_factor"],
            "ring": {"kvstore": {"store": "inmemory"}},
        },
        "schema_config": chart["schemaConfig"],
        "limits_config": {"otlp_config": chart["limits_config"]["otlp_config"]},
        # Ready at once (default: 15 s after start), since nothing else is waiting to join.
        "ingester": {"lifecycler": {"min_ready_duration": "0s"}},
        "analytics": {"reporting_enabled": False},
    }


class Loki:
    """One Loki process; `restart()` keeps its data directory, as a pod restart keeps its volume."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.binary = Toolbox().path("loki")
        self.http_port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.config = home / "loki.yaml"
        self.config.write_text(yaml.safe_dump(loki_config(home / "data", self.http_port, self.grpc_port)))
        self.log = home / "loki.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.binary), f"-config.file={self.config}"], stdout=log, stderr=subprocess.STDOUT
            )
        wait_until(
            "Loki to be ready",
            self.ready,
            timeout=120,
            on_timeout=lambda: KonduktorError(f"Loki is not ready after 120 s:\n{tail(self.log)}"),
        )

    def ready(self) -> bool:
        assert self.process is not None
        assert self.process.poll() is None, f"Loki exited {self.process.returncode}:\n{tail(self.log)}"
        try:
            return requests.get(f"{self.url}/ready", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_process(self.process.pid, grace=30)
            self.process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def query_ranges(self) -> int:
        """query_range requests Loki has answered since it started (all tenants)."""
        metrics = requests.get(f"{self.url}/metrics", timeout=5).text
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in metrics.splitlines()
            if line.startswith("loki_request_duration_seconds_count{") and QUERY_RANGE_ROUTE in line
        )


@dataclass
class LokiApi:
    """One tenant of the session's Loki: what a test writes there, and the controller's settings to read it."""

    loki: Loki
    tenant: str

    def add(self, node_name: str, line: str, at_ns: int | None = None) -> int:
        """A kernel line of a node, as the umbrella's collector ships it; returns its timestamp (ns)."""
        stamp = at_ns or time.time_ns()
        self.push([(node_name, line, stamp)])
        return stamp

    def push(self, lines: list[tuple[str, str, int]]) -> None:
        """(node, line, timestamp ns) kernel lines in one OTLP request, one resource per node."""
        resources: dict[str, list[dict[str, Any]]] = {}
        for node_name, line, stamp in lines:
            resources.setdefault(node_name, []).append({"timeUnixNano": str(stamp), "body": {"stringValue": line}})
        body = {
            "resourceLogs": [
                {
                    "resource": {"attributes": [attribute("source", "kernel"), attribute("k8s.node.name", name)]},
                    "scopeLogs": [{"logRecords": records}],
                }
                for name, records in resources.items()
            ]
        }
        answer = requests.post(
            f"{self.loki.url}/otlp/v1/logs", json=body, headers={"X-Scope-OrgID": self.tenant}, timeout=30
        )
        assert answer.status_code in (200, 204), f"Loki refused the lines: {answer.status_code} {answer.text}"

    def settings(self, **overrides: Any) -> LokiSettings:
        """The umbrella's query and node label for the controller, in this tenant."""
        reader = umbrella()["konduktor-core"]["controller"]["settings"]["loki"]
        return LokiSettings(
            url=self.loki.url, query=reader["query"], node_label=reader["node_label"], tenant=self.tenant, **overrides
        )


def attribute(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


_tenants = itertools.count(1)


def new_tenant(loki: Loki) -> LokiApi:
    return LokiApi(loki, f"test-{time.time_ns()}-{next(_tenants)}")


@pytest.fixture(scope="session")
def loki_server() -> Iterator[Loki]:
    """The session's Loki, built on first use like every pinned tool, never skipped for being missing."""
    home = Path(tempfile.mkdtemp(prefix="konduktor-test-loki-"))
    server = Loki(home)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture()
def loki(loki_server: Loki) -> LokiApi:
    """A tenant of its own in the session's Loki."""
    return new_tenant(loki_server)
