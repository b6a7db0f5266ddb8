"""`konduktor-install up examples/config.yaml` on the simulated cluster with warm tools, split by step:
first on a new cluster, then again (nothing to change).

    .venv/bin/python bench/up_bench.py
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(prefix="konduktor-bench-")
os.environ.pop("KUBECONFIG", None)

from konduktor.config.load import load_config
from konduktor.ops.up import UpRequest, run_up
from konduktor.sim.cluster import SimCluster

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "config.yaml"


def main() -> None:
    try:
        for label in ("new cluster", "again, nothing to change"):
            started = time.monotonic()
            result = run_up(UpRequest(load_config(EXAMPLE), sim="bench-up"))
            total = time.monotonic() - started
            steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.steps)
            print(f"up ({label}): {total:.1f} s in all: {steps}")
    finally:
        SimCluster("bench-up").down()


if __name__ == "__main__":
    main()
