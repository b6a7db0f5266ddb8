"""Helm releases on the simulated cluster: expected states are reported as states, not as failures."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import Sim

PROBE = """
import sys
from pathlib import Path
from konduktor.helm.release import current, uninstall
kubeconfig = Path(sys.argv[1])
assert current(kubeconfig, "konduktor-never-installed", "default") is None
assert uninstall(kubeconfig, "konduktor-never-installed", "default") is False
"""


@pytest.mark.sim
def test_a_release_not_installed_yet_prints_nothing(sim: Sim) -> None:
    """Before a first install helm's status probe exits non-zero: that is the answer "not installed", which the
    caller reports in its own words. pyhelm3 would log it as `command failed: .../helm status ...`. (A process of
    its own: pytest's log capture would hide what a user sees on stderr.)"""
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(sim.kubeconfig)], capture_output=True, text=True, timeout=120, check=False
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stderr == "" and probe.stdout == ""
