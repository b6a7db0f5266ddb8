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


@pytest.fixture()
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """A real Prometheus over a TSDB backfilled from OpenMetrics text; returns its URL."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(openmetrics: str) -> str:
        data = tmp_path / "tsdb"
        source = tmp_path / "series.om"
        source.write_text(openmetrics)
        backfill = subprocess.run(
            [str(Toolbox().path("promtool")), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert backfill.returncode == 0, backfill.stderr
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 15s\n")
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        processes.append(
            subprocess.Popen(
                [
                    str(Toolbox().path("prometheus")),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={data}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return requests.get(f"{url}/-/ready", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_until("Prometheus to be ready", ready, timeout=60)
        return url

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=30)
