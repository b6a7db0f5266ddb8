"""The test session's shared fixtures, declared once for installer/tests and e2e alike: one `sim` (the simulated
cluster, started once per session), the admission-policy, Loki and Prometheus fixtures.

A fixture imported by two conftest files is two fixtures: a whole-suite run would start two session clusters.
"""

from __future__ import annotations

import os
import tempfile

import pytest

# Set before any test imports code that reads it: clusters started by tests never touch the user's own, and each
# test process (pytest-xdist's workers inherit the controller's environment) has clusters of its own.
os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(
    prefix=f"konduktor-test-state-{os.environ.get('PYTEST_XDIST_WORKER', '')}"
)

from admission import enforcing
from loki_api import loki, loki_server
from prometheus_tsdb import prometheus
from sim_fixture import EXAMPLE, Sim, platform_stopped, sim

# Test modules import only EXAMPLE and Sim from `conftest`.
__all__ = ["EXAMPLE", "Sim", "enforcing", "loki", "loki_server", "platform_stopped", "prometheus", "sim"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With pytest-xdist (`scripts/test`, `--dist loadgroup`): the files that use the session's cluster run on one
    process, in file order, as they were written to follow each other there (a file may leave the platform
    installed, and with it the admission policies a later file meets); every other file runs whole on either one."""
    on_session = {item.path for item in items if "sim" in getattr(item, "fixturenames", ())}
    for item in items:
        group = "session-cluster" if item.path in on_session else str(item.path)
        item.add_marker(pytest.mark.xdist_group(group))
