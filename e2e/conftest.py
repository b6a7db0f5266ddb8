"""Acceptance tests run against the cluster in KONDUKTOR_E2E_KUBECONFIG (a real GPU cluster, set up with
KONDUKTOR_E2E_CONFIG) or, when it is not set, against the simulated cluster after `konduktor-install up`."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("KONDUKTOR_STATE", tempfile.mkdtemp(prefix="konduktor-e2e-state-"))

from sim_fixture import EXAMPLE, Sim, platform_stopped, sim

__all__ = ["EXAMPLE", "Sim", "platform_stopped", "sim"]
