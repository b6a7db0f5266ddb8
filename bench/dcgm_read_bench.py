"""The health controller's DCGM read at fleet scale: what one poll asks the pinned Prometheus and reads back, at
1,000, 5,000 and 10,000 nodes of 8 GPUs, each GPU with the 10 health fields dcgm-exporter exports (with its labels),
4 samples in the 2-minute window (a 30-s scrape), all quiet but for `--faulty` nodes whose double-bit ECC count
rises.

For each size: the series in Prometheus; the poll as the controller makes it (`PrometheusSource.read`: the moved
series, then the raw samples of their nodes): its answers' bytes, the seconds it took and the CPU of this process
(the controller's part); and the poll as the controller made it before, every GPU's raw samples in one query: the
same figures. The series are backfilled with promtool into a new TSDB (a few minutes at 10,000 nodes).

    .venv/bin/python bench/dcgm_read_bench.py [--nodes 1000,5000,10000] [--faulty 5] [--repeats 3]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "installer" / "tests"))

from prometheus_tsdb import BackfilledPrometheus

from konduktor.health.prometheus import HEALTH_FIELDS, PrometheusSource, matrix, signal
from konduktor.health.settings import PrometheusSettings
from konduktor.health.telemetry import HealthMetrics

GPUS = 8
SAMPLES = (80, 60, 40, 20)  # seconds before now: 4 samples in the controller's 120-s window
DRIVER = "570.133.20"


def write_series(path: Path, nodes: int, faulty: int, now: float) -> int:
    """The fleet's health series as OpenMetrics (one family after another); returns the number of series."""
    count = 0
    with path.open("w") as out:
        for field in HEALTH_FIELDS:
            for node in range(nodes):
                host = f"gpu-h100-{node:05d}"
                for gpu in range(GPUS):
                    labels = (
                        f'gpu="{gpu}",UUID="GPU-{node:08x}-{gpu:04x}-4000-8000-000000000000",device="nvidia{gpu}",'
                        f'modelName="NVIDIA H100 80GB HBM3",Hostname="{host}",DCGM_FI_DRIVER_VERSION="{DRIVER}",'
                        f'instance="10.0.{node // 250}.{node % 250}:9400",job="nvidia-dcgm-exporter"'
                    )
                    rising = node < faulty and gpu == 0 and field == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
                    for index, ago in enumerate(SAMPLES):
                        value = 2 if rising and index >= 2 else 0
                        out.write(f"{field}{{{labels}}} {value} {now - ago:.3f}\n")
                    count += 1
        out.write("# EOF\n")
    return count


def measured(call: Callable[[], tuple[int, int]]) -> tuple[float, float, int, int]:
    """Wall seconds and this process's CPU seconds of one poll, the bytes of its answers and the faults it found."""
    wall, cpu = time.monotonic(), time.process_time()
    received, faults = call()
    return time.monotonic() - wall, time.process_time() - cpu, received, faults


def poll_now(settings: PrometheusSettings, now: float) -> tuple[int, int]:
    """`PrometheusSource.read` of a new controller (every fault is new to it)."""
    source = PrometheusSource(settings, HealthMetrics())
    received: list[int] = []
    source.http.hooks["response"].append(lambda response, *_, **__: received.append(len(response.content)))
    faults = source.read(now)
    return sum(received), len(faults)


def poll_before(settings: PrometheusSettings, now: float) -> tuple[int, int]:
    """The read as it was: the raw samples of every health series of the fleet, judged series by series."""
    query = f'{{__name__=~"{"|".join(HEALTH_FIELDS)}"}}[{settings.window_seconds:.0f}s]'
    answer = requests.get(f"{settings.url}/api/v1/query", params={"query": query, "time": f"{now:.3f}"}, timeout=600)
    answer.raise_for_status()
    series = matrix(answer.json(), settings.node_label, settings.gpu_label)
    return len(answer.content), sum(1 for found in map(signal, series) if found is not None)


def run(nodes: int, faulty: int, repeats: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix=f"dcgm-read-{nodes}-"))
    now = time.time()
    started = time.monotonic()
    series = write_series(directory / "series.om", nodes, faulty, now)
    server = BackfilledPrometheus(directory)
    settings = PrometheusSettings(url=server.start(directory / "series.om"))
    ready = time.monotonic() - started
    try:
        polls = {
            "now: the moved series, then their nodes'": [
                measured(lambda: poll_now(settings, now)) for _ in range(repeats)
            ],
            "before: every GPU's raw samples": [measured(lambda: poll_before(settings, now)) for _ in range(repeats)],
        }
        print(
            f"\n{nodes} nodes x {GPUS} GPUs: {series} health series, {series * len(SAMPLES)} samples in the window "
            f"(backfilled, Prometheus ready in {ready:.0f} s; load average {os.getloadavg()[0]:.1f})"
        )
        print(f"  {'one poll, median of ' + str(repeats):<44} {'answers':>12} {'seconds':>8} {'CPU here':>9}   faults")
        for name, runs in polls.items():
            wall, cpu, size, faults = (statistics.median(run[i] for run in runs) for i in range(4))
            print(f"  {name:<44} {size / 1e6:9.3f} MB {wall:8.2f} {cpu:8.2f}s   {faults:.0f}")
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1000,5000,10000", help="comma-separated node counts")
    parser.add_argument("--faulty", type=int, default=5, help="nodes whose double-bit ECC count rises in the window")
    parser.add_argument("--repeats", type=int, default=3, help="polls measured per size (the median is printed)")
    args = parser.parse_args()
    for nodes in (int(n) for n in args.nodes.split(",")):
        run(nodes, args.faulty, args.repeats)


if __name__ == "__main__":
    main()
