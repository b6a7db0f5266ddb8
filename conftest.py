"""The test session's shared fixtures, declared once for installer/tests and e2e alike: one `sim` (the simulated
cluster, started once per session), the admission-policy, Loki and Prometheus fixtures.

A fixture imported by two conftest files is two fixtures: a whole-suite run would start two session clusters.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

# Set before any test imports code that reads it: clusters started by tests never touch the user's own, and each
# test process (pytest-xdist's workers inherit the controller's environment) has clusters of its own. Removed when
# the process ends, after the session's cluster is down.
os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(
    prefix=f"konduktor-test-state-{os.environ.get('PYTEST_XDIST_WORKER', '')}"
)

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: the rest in file order
