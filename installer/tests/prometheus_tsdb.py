"""A real Prometheus over a TSDB backfilled from OpenMetrics text (promtool), for the readers of DCGM series."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from konduktor.sim.cluster import free_port
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until


class BackfilledPrometheus:
    """The pinned Prometheus over the series of an OpenMetrics file, backfilled into `directory` by promtool."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, source: Path) -> str:
        """Backfill `source`, start Prometheus over it and return its URL once it is ready."""
        data = self.directory / "tsdb"
        backfill = subprocess.run(
            [str(Toolbox().path("promtool")), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
            capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        assert backfill.returncode == 0, backfill.stderr
        config = self.directory / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 15s\n")
        port = free_port()
        log = (self.directory / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                str(Toolbox().path("prometheus")),
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return requests.get(f"{url}/-/ready", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_until("Prometheus to be ready", ready, timeout=300)
        return url

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture()
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """A real Prometheus over a TSDB backfilled from OpenMetrics text; returns its URL."""
    started: list[BackfilledPrometheus] = []

    def start(openmetrics: str) -> str:
        source = tmp_path / "series.om"
        source.write_text(openmetrics)
        started.append(BackfilledPrometheus(tmp_path))
        return started[-1].start(source)

    yield start
    for server in started:
        server.stop()
