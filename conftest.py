"""The test session's shared fixtures, declared once for installer/tests and e2e alike: one `sim` (the simulated
cluster, started once per session), the admission-policy, Loki and Prometheus fixtures.

A fixture imported by two conftest files is two fixtures: a whole-suite run would start two session clusters.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

# Compiled modules are kept, whatever the environment says (PYTHONDONTWRITEBYTECODE): otherwise each test process
# compiles the product and rewrites the tests' asserts anew, and so does every command a test starts in a process of
# its own, about a third of the unit tier's CPU. The compiled files go where Python keeps them (git ignores them).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
from cluster_count import COUNTS_DIR, ClusterCounter, record, summary

# Set before any test imports code that reads it: clusters started by tests never touch the user's own, and each
# test process (pytest-xdist's workers inherit the controller's environment) has clusters of its own. Removed when
# the process ends, after the session's cluster is down.
os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(
    prefix=f"konduktor-test-state-{os.environ.get('PYTEST_XDIST_WORKER', '')}"
)
if COUNTS_DIR not in os.environ:  # the run's first process: the others inherit it
    os.environ[COUNTS_DIR] = tempfile.mkdtemp(prefix="konduktor-test-clusters-")
    atexit.register(shutil.rmtree, os.environ[COUNTS_DIR], ignore_errors=True)

from admission import enforcing
from loki_api import loki, loki_server
from prometheus_tsdb import prometheus
from sim_fixture import EXAMPLE, Sim, platform_stopped, sim

atexit.register(shutil.rmtree, os.environ["KONDUKTOR_STATE"], ignore_errors=True)

# Test modules import only EXAMPLE and Sim from `conftest`.
__all__ = ["EXAMPLE", "Sim", "enforcing", "loki", "loki_server", "platform_stopped", "prometheus", "sim"]


# The files that take longest, longest first (bench/README.md, "The test suite's time"). They start first, so that
# with several processes (`scripts/test`: `--dist loadfile --no-loadscope-reorder` hands out whole files in this
# order) no process is left with one of them at the end while the others are idle.
LONGEST_FIRST = (
    "test_multikueue_sim.py",
    "test_whatif_replay.py",
    "test_up.py",
    "test_whatif_compare.py",
    "test_umbrella_install.py",
    "test_image.py",
    "test_health_work_cluster.py",
    "test_alert_delivery.py",
    "test_sim_cluster.py",
    "test_team_cli.py",
    "test_gitops_app_of_apps.py",
    "test_try_it.py",
    "test_gitops_argocd.py",
)


_counter = ClusterCounter(os.environ["KONDUKTOR_STATE"])


def pytest_sessionstart(session: pytest.Session) -> None:
    _counter.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    record(_counter.stop(), os.environ.get("PYTEST_XDIST_WORKER", ""))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    line = summary()
    if line is not None:
        terminalreporter.write_line(line)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: the rest in file order
