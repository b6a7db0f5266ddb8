"""How fast the CLI starts: wall time of `konduktor-install --help`, `validate` and `render` on
examples/config.yaml (median and max of N runs, each a new process), and the slowest imports of `validate`
(from `python -X importtime`).

    .venv/bin/python bench/cli_bench.py [--runs 10] [--python PATH]

--python runs another installation (e.g. a checkout before a change) with the same commands.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "examples" / "config.yaml")
COMMANDS = {
    "--help": ["--help"],
    "validate examples/config.yaml": ["validate", CONFIG],
    "render examples/config.yaml": ["render", CONFIG],
}
ENTRY = "from konduktor.cli.main import run; run()"


def run_times(python: str, args: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of each run; CPU time says more when other work shares the cores."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([python, "-c", ENTRY, *args], capture_output=True, check=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return walls, cpus


def slowest_imports(python: str, args: list[str], count: int) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The modules with the most import time of their own, and the top-level imports with the most in all (us)."""
    done = subprocess.run([python, "-X", "importtime", "-c", ENTRY, *args], capture_output=True, text=True, check=True)
    own: list[tuple[int, str]] = []
    total: list[tuple[int, str]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line.removeprefix("import time:").split("|")
        own.append((int(self_us), name.strip()))
        if not name.startswith("  "):  # imported by the program itself, not by another module
            total.append((int(cumulative_us), name.strip()))
    return sorted(own, reverse=True)[:count], sorted(total, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--python", default=sys.executable, help="The interpreter of the installation to time.")
    options = parser.parse_args()
    subprocess.run([options.python, "-c", ENTRY, "--help"], capture_output=True, check=True)  # warm the .pyc files
    print(f"load average before: {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
    print(f"{'command':<32} {'wall median':>12} {'wall max':>9} {'CPU median':>11}  ({options.runs} runs)")
    for label, args in COMMANDS.items():
        walls, cpus = run_times(options.python, args, options.runs)
        print(f"{label:<32} {statistics.median(walls):>11.3f}s {max(walls):>8.3f}s {statistics.median(cpus):>10.3f}s")
    own, total = slowest_imports(options.python, COMMANDS["validate examples/config.yaml"], 5)
    print("\nvalidate, slowest imports (own time):")
    for micros, name in own:
        print(f"  {micros / 1000:7.1f} ms  {name}")
    print("validate, slowest top-level imports (with what they import):")
    for micros, name in total:
        print(f"  {micros / 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
