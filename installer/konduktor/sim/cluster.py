"""The simulated GPU cluster: a real control plane (kwokctl's binary runtime), fake GPU nodes, and Kueue.

State lives in `<state dir>/<name>/`: kwokctl's work dir, the kubeconfig, Kueue's config, certificates, pid and
log, and `sim.json` (what was asked for). Every step checks what is already there, so `up` after a failure or
after `up` converges instead of failing.

`SimCluster` composes the parts, each supervised by a collaborator of its own: the control plane
(`konduktor.sim.control_plane`), Kueue (`konduktor.sim.kueue_process`), the GPU agent
(`konduktor.sim.agent_process`), the fake nodes (`konduktor.sim.node_fleet`) and konduktor-core's processes
(`konduktor.sim.platform`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from konduktor.errors import KonduktorError
from konduktor.kube.client import Kube
from konduktor.paths import state_dir
from konduktor.sim.agent_process import GpuAgentProcess
from konduktor.sim.control_plane import ControlPlane
from konduktor.sim.kueue_process import KueueProcess
from konduktor.sim.node_fleet import NodeFleet
from konduktor.sim.platform import SimPlatform
from konduktor.sim.processes import alive, free_port, gone, stop_process, tail
from konduktor.sim.spec import SimSpec
from konduktor.tools.gobuild import Progress
from konduktor.tools.toolbox import Toolbox

# The helpers for local processes are also used from here by the sim's other processes (Argo CD, the tests' Loki
# and Prometheus).
__all__ = ["DEFAULT_NAME", "Progress", "SimCluster", "SimSpec", "alive", "free_port", "gone", "stop_process", "tail"]

DEFAULT_NAME = "konduktor"
SIM_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "kwokctl",
    "kueue",
)


class SimCluster:
    def __init__(
        self, name: str = DEFAULT_NAME, toolbox: Toolbox | None = None, progress: Progress | None = None
    ) -> None:
        self.name = name
        # Absolute, so that the paths handed to the cluster's processes name it whatever the working directory.
        self.root = (state_dir() / name).absolute()
        self.progress = progress or (lambda _message: None)
        self.toolbox = toolbox or Toolbox(progress=self.progress)
        self.control_plane = ControlPlane(name, self.root, self.kubeconfig, self.toolbox, self.progress)
        self.kueue = KueueProcess(self.kueue_dir, self.kubeconfig, self.toolbox, self.progress)
        self.agent = GpuAgentProcess(self.root, self.kubeconfig, self.progress)
        self.nodes = NodeFleet(self.progress)

    # -- paths -------------------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig.yaml"

    @property
    def kwok_workdir(self) -> Path:
        return self.control_plane.workdir

    @property
    def cluster_dir(self) -> Path:
        return self.control_plane.cluster_dir

    @property
    def kueue_dir(self) -> Path:
        return self.root / "kueue"

    @property
    def agent_pidfile(self) -> Path:
        return self.agent.pidfile.path

    @property
    def spec_file(self) -> Path:
        return self.root / "sim.json"

    @property
    def platform(self) -> SimPlatform:
        """konduktor-core's processes (health controller, capacity publisher), once its chart is installed."""
        return SimPlatform(self.root, self.kubeconfig, self.progress)

    def spec(self) -> SimSpec | None:
        try:
            return SimSpec.from_json(self.spec_file.read_text())
        except (OSError, ValueError, KeyError):
            return None

    def save_spec(self, spec: SimSpec) -> None:
        self.spec_file.write_text(spec.to_json())

    # -- the control plane ---------------------------------------------------------------------------------
    def kwokctl(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return self.control_plane.kwokctl(*args, timeout=timeout)

    def component_logs(self) -> str:
        return self.control_plane.component_logs()

    def created(self) -> bool:
        return self.control_plane.created()

    def api_ready(self) -> bool:
        return self.control_plane.api_ready()

    # -- nodes ------------------------------------------------------------------------------------------------
    def apply_nodes(self, kube: Kube, spec: SimSpec) -> list[str]:
        return self.nodes.apply(kube, spec)

    def wait_nodes_ready(self, kube: Kube, names: list[str], timeout: float | None = None) -> None:
        self.nodes.wait_ready(kube, names, timeout)

    # -- commands ---------------------------------------------------------------------------------------------
    def up(self, spec: SimSpec) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.kueue_dir.mkdir(exist_ok=True)
        previous = self.spec()
        if previous is not None:
            spec.kueue_ports = previous.kueue_ports
        self.save_spec(spec)
        for binary in SIM_BINARIES:  # build what is missing before anything starts
            self.toolbox.path(binary)
        self.control_plane.start(spec)
        with Kube(self.kubeconfig) as kube:
            self.kueue.start(kube, spec, self.save_spec)
            self.agent.start()
            names = self.nodes.apply(kube, spec)
            self.nodes.wait_ready(kube, names)
            self.platform.ensure(kube)  # nothing until konduktor-core is installed

    def down(self, keep: bool = False) -> None:
        """Stops every process of this cluster and returns only once none is left (then removes the state unless
        `keep`). kwokctl kills its components without waiting for them to exit and deletes their pid files, so
        the processes are found first and waited for here."""
        started = self.processes()
        self.platform.stop()
        self.kueue.stop()
        self.agent.stop()
        self.control_plane.stop(keep)
        for pid in self.processes():  # what kwokctl left running, or has not seen exit yet
            stop_process(pid)
        # A process killed a moment ago may still be exiting (its command line already gone): wait for it too.
        survivors = [pid for pid in started if not gone(pid, timeout=10)]
        if survivors:
            raise KonduktorError(
                f"processes of sim cluster {self.name!r} did not stop: {', '.join(map(str, survivors))}",
                hint="stop them by pid (`kill -9 PID`), then run `konduktor-install sim down` again",
            )
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def processes(self) -> list[int]:
        """Live processes of this cluster, whether or not a pid file still names them: kwokctl's components (run
        from the cluster's own bin/), Kueue, the GPU agent and konduktor-core's processes, each with a path of the
        cluster's state directory on its command line. Other programs that name that directory (a `kubectl
        --kubeconfig` of the user's) are left alone."""
        marker = f"{self.root}{os.sep}"
        platform = self.platform
        parts = (self.control_plane, self.kueue, self.agent, platform)
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                args = [arg for arg in (entry / "cmdline").read_bytes().decode(errors="replace").split("\0") if arg]
            except OSError:
                continue
            if not args or not any(marker in arg for arg in args):
                continue
            if any(part.owns(args) for part in parts) and alive(int(entry.name)):
                found.append(int(entry.name))
        return found

    def status(self) -> dict[str, Any]:
        spec = self.spec()
        report: dict[str, Any] = {
            "name": self.name,
            "kubeconfig": str(self.kubeconfig),
            "exists": self.created(),
            "components": {},
            "nodes": 0,
            "ready_nodes": 0,
            "gpus": 0,
        }
        if not self.created():
            return report
        report["components"].update(self.control_plane.component_states())
        report["components"]["kueue"] = self.kueue.state(spec)
        report["components"]["gpu-agent"] = self.agent.state()
        report["components"].update(self.platform.status())
        if not self.api_ready():
            report["components"]["kube-apiserver"] = "not answering"
            return report
        with Kube(self.kubeconfig) as kube:
            report.update(self.nodes.counts(kube))
        return report
