"""The test session's shared fixtures, declared once for installer/tests and e2e alike: one `sim` (the simulated
cluster, started once per session), the admission-policy, Loki and Prometheus fixtures.

A fixture imported by two conftest files is two fixtures: a whole-suite run would start two session clusters.
"""

from __future__ import annotations

import os
import tempfile

# Set before any test imports code that reads it: clusters started by tests never touch the user's own.
os.environ.setdefault("KONDUKTOR_STATE", tempfile.mkdtemp(prefix="konduktor-test-state-"))

from admission import enforcing
from loki_api import loki, loki_server
from prometheus_tsdb import prometheus
from sim_fixture import EXAMPLE, Sim, platform_stopped, sim

# Test modules import only EXAMPLE and Sim from `conftest`.
__all__ = ["EXAMPLE", "Sim", "enforcing", "loki", "loki_server", "platform_stopped", "prometheus", "sim"]
