"""`triage`'s DCGM read on a long job: the real Prometheus (pinned), backfilled with every health field of every GPU
of N nodes over H hours (one double-bit ECC error in it), read the way triage reads it (the series that moved,
then only their samples) and, for comparison, as one query of every raw sample. Prometheus's own query statistics
give the samples each way loads at its peak, against its per-query limit (`--query.max-samples`, 50 million by
default), scaled to a week-long 64-node job.

Prints figures; asserts nothing.

    .venv/bin/python bench/triage_bench.py [--nodes 8] [--hours 24] [--interval 60] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from konduktor.health.prometheus import HEALTH_FIELDS, PrometheusSource, moved_query
from konduktor.health.settings import PrometheusSettings
from konduktor.health.telemetry import HealthMetrics
from konduktor.sim.cluster import free_port
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

GPUS = 8
LIMIT = 50_000_000  # Prometheus's default --query.max-samples
WEEK_64_NODES = 64 * 7 * 24  # node-hours of a week-long 64-node job


def openmetrics(path: Path, nodes: list[str], start: float, end: float, interval: float) -> int:
    """Every health field of every GPU, quiet, but one double-bit ECC error on the first node halfway through."""
    stamps = [start + i * interval for i in range(int((end - start) / interval) + 1)]
    fault_at = stamps[len(stamps) // 2]
    samples = 0
    with path.open("w") as out:
        for field in HEALTH_FIELDS:
            for node in nodes:
                for gpu in range(GPUS):
                    series = f'{field}{{gpu="{gpu}",Hostname="{node}"}}'
                    faulty = field == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" and node == nodes[0] and gpu == 3
                    out.writelines(f"{series} {2 if faulty and t >= fault_at else 0} {t:.3f}\n" for t in stamps)
                    samples += len(stamps)
        out.write("# EOF\n")
    return samples


def stats(url: str, query: str, at: float) -> tuple[float, int, int]:
    """Seconds, peak samples and answer bytes of one instant query, from Prometheus's own statistics."""
    began = time.perf_counter()
    response = requests.get(f"{url}/api/v1/query", params={"query": query, "time": f"{at:.3f}", "stats": "all"})
    took = time.perf_counter() - began
    response.raise_for_status()
    numbers: dict[str, Any] = response.json()["data"]["stats"]["samples"]
    return took, int(numbers["peakSamples"]), len(response.content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument("--interval", type=float, default=60, help="scrape interval of the series, seconds")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    nodes = [f"gpu-h100-{i:04d}" for i in range(args.nodes)]
    end = time.time() - 60
    start = end - args.hours * 3600
    toolbox = Toolbox()
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as scratch:
        data, source = Path(scratch) / "tsdb", Path(scratch) / "series.om"
        samples = openmetrics(source, nodes, start, end, args.interval)
        began = time.perf_counter()
        subprocess.run(
            [str(toolbox.path("promtool")), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
            check=True, capture_output=True,
        )  # fmt: skip
        backfill = time.perf_counter() - began
        source.unlink()
        (Path(scratch) / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [str(toolbox.path("prometheus")), f"--config.file={scratch}/prometheus.yml",
             f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_until("Prometheus to be ready", lambda: _ready(url), timeout=120)
            source_ = PrometheusSource(PrometheusSettings(url=url), HealthMetrics(), timeout=300)
            times, found = [], []
            for _ in range(args.repeat):
                began = time.perf_counter()
                found = source_.faults_between(start, end, nodes)
                times.append(time.perf_counter() - began)
            seconds = end - start + source_.settings.window_seconds
            matcher = f'Hostname=~"{"|".join(nodes)}"'
            moved = stats(url, moved_query(seconds, matcher), end)
            raw_query = f'{{__name__=~"{"|".join(HEALTH_FIELDS)}",{matcher}}}[{round(seconds * 1000)}ms]'
            raw = [stats(url, raw_query, end) for _ in range(args.repeat)]
        finally:
            server.terminate()
            server.wait(timeout=60)
    node_hours = args.nodes * args.hours
    print(f"series: {args.nodes} nodes x {GPUS} GPUs x {len(HEALTH_FIELDS)} fields over {args.hours:g} h every "
          f"{args.interval:g} s = {samples:,} samples (backfill {backfill:.1f} s)")  # fmt: skip
    print(f"faults found: {[(f.sample.node, f.sample.metric, f.sample.value) for f in found]}")
    print(f"triage's read (moved series, then their samples): median {statistics.median(times) * 1000:.0f} ms, "
          f"max {max(times) * 1000:.0f} ms over {args.repeat} runs")  # fmt: skip
    print(f"  first query: {moved[0] * 1000:.0f} ms, peak {moved[1]:,} samples, answer {moved[2]:,} bytes")
    raw_peak, raw_bytes = raw[0][1], raw[0][2]
    print(f"one query of every raw sample: median {statistics.median(r[0] for r in raw) * 1000:.0f} ms, "
          f"peak {raw_peak:,} samples, answer {raw_bytes:,} bytes")  # fmt: skip
    scale = WEEK_64_NODES / node_hours * (60 / args.interval) * 2  # dcgm-exporter's default 30 s scrape
    print(f"scaled to a week-long 64-node job scraped every 30 s (x{scale:,.0f}): one raw query would load "
          f"~{raw_peak * scale:,.0f} samples ({raw_peak * scale / LIMIT:.1f}x the default limit of {LIMIT:,}) and "
          f"answer ~{raw_bytes * scale / 1e9:.1f} GB")  # fmt: skip


def _ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/-/ready", timeout=1).status_code == 200
    except requests.RequestException:
        return False


if __name__ == "__main__":
    main()
