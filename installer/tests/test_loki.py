"""The pinned Loki is the one the umbrella deploys, and with the umbrella's settings the health controller's
query finds a node's kernel lines, as the collector labels them, under the node label it reads."""

from __future__ import annotations

import subprocess
import time

import pytest
import requests
from loki_api import UMBRELLA_VALUES, LokiApi, new_tenant

from konduktor.health.loki import entries
from konduktor.tools.catalog import load_tools
from konduktor.tools.toolbox import Toolbox

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


def test_the_pinned_loki_is_the_one_the_umbrella_deploys() -> None:
    images = (UMBRELLA_VALUES.parent / "images.txt").read_text().split()
    [image] = [i for i in images if i.startswith("docker.io/grafana/loki:")]
    tool = load_tools()["loki"]
    assert image.rpartition(":")[2] == tool.version.removeprefix("v")
    result = subprocess.run(
        [str(Toolbox().path("loki")), "-version"], capture_output=True, text=True, check=False, timeout=60
    )
    assert f"version {tool.version.removeprefix('v')} " in result.stdout + result.stderr, result


def query(api: LokiApi, logql: str, start: int, end: int) -> object:
    answer = requests.get(
        f"{api.loki.url}/loki/api/v1/query_range",
        params={"query": logql, "start": str(start), "end": str(end), "limit": "100", "direction": "forward"},
        headers={"X-Scope-OrgID": api.tenant},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.slow  # starts the pinned Loki
def test_the_controllers_query_finds_kernel_lines_per_node_as_the_collector_labels_them(loki: LokiApi) -> None:
    start = time.time_ns()
    loki.add("gpu-a", f"[ 10.000001] {XID_79}")
    loki.add("gpu-b", "[ 10.000002] eth0: link up")  # a kernel line, but not a GPU one
    settings = loki.settings()
    found = entries(query(loki, settings.query, start, time.time_ns() + 1), settings.node_label)
    assert [(line.node, line.line) for line, _, _ in found if line is not None] == [("gpu-a", f"[ 10.000001] {XID_79}")]


@pytest.mark.slow  # starts the pinned Loki
def test_another_tenant_sees_none_of_these_lines(loki: LokiApi) -> None:
    start = time.time_ns()
    loki.add("gpu-a", f"[ 11.000001] {XID_79}")
    other = new_tenant(loki.loki)
    settings = other.settings()
    assert entries(query(other, settings.query, start, time.time_ns() + 1), settings.node_label) == []
    mine = loki.settings()
    assert len(entries(query(loki, mine.query, start, time.time_ns() + 1), mine.node_label)) == 1
