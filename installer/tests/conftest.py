"""Shared fixtures: `sim`, one running simulated cluster per session (see sim_fixture.py)."""

from __future__ import annotations

import os
import tempfile

# Set before any test imports code that reads it: clusters started by tests never touch the user's own.
os.environ.setdefault("KONDUKTOR_STATE", tempfile.mkdtemp(prefix="konduktor-test-state-"))

from admission import enforcing
from loki_api import loki, loki_server
from prometheus_tsdb import prometheus
from sim_fixture import EXAMPLE, Sim, platform_stopped, sim

# Test modules import only these from `conftest`: pytest loads e2e/conftest.py under the same module name.
__all__ = ["EXAMPLE", "Sim", "enforcing", "loki", "loki_server", "platform_stopped", "prometheus", "sim"]
