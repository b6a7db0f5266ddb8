"""The GPU agent's process: it plays the tools of burn-in pods on fake GPU nodes (konduktor.sim.agent)."""

from __future__ import annotations

import sys
from pathlib import Path

from konduktor.sim.processes import PidFile
from konduktor.tools.gobuild import Progress

AGENT_MODULE = "konduktor.sim.agent"


class GpuAgentProcess:
    """The agent of the cluster whose state is in `root`, reading the API through `kubeconfig`."""

    def __init__(self, root: Path, kubeconfig: Path, progress: Progress) -> None:
        self.root = root
        self.kubeconfig = kubeconfig
        self.progress = progress
        self.pidfile = PidFile(root / "gpu-agent.pid")

    def pid(self) -> int | None:
        return self.pidfile.pid()

    def owns(self, args: list[str]) -> bool:
        return AGENT_MODULE in args

    def state(self) -> str:
        return "running" if self.pid() else "stopped"

    def start(self) -> None:
        if self.pid() is not None:
            return
        self.progress("gpu agent: starting (serves burn-in step output through kwok's pod logs)")
        self.pidfile.start(
            [
                sys.executable,
                "-m",
                AGENT_MODULE,
                "--kubeconfig",
                str(self.kubeconfig),
                "--logs-dir",
                str(self.root / "pod-logs"),
            ],
            self.root / "gpu-agent.log",
        )

    def stop(self) -> None:
        self.pidfile.stop()
