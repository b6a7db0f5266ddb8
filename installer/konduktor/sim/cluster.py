"""The simulated GPU cluster: a real control plane (kwokctl's binary runtime), fake GPU nodes, and Kueue.

State lives in `<state dir>/<name>/`: kwokctl's work dir, the kubeconfig, Kueue's config, certificates, pid and
log, and `sim.json` (what was asked for). Every step checks what is already there, so `up` after a failure or
after `up` converges instead of failing.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests
from ruamel.yaml import YAML

from konduktor.errors import KonduktorError
from konduktor.kube.client import ApiError, Kube
from konduktor.kube.conditions import is_true
from konduktor.paths import state_dir
from konduktor.sim import kueue
from konduktor.sim.nodes import DEFAULT_TOPOLOGY, NodePool, node_manifests, system_node
from konduktor.sim.pki import write_serving_pki
from konduktor.sim.platform import SimPlatform
from konduktor.sim.processes import alive, free_port, gone, stop_process, tail
from konduktor.tools.pinned import Toolbox, module_dir
from konduktor.vocabulary import GPU_RESOURCE
from konduktor.waiting import wait_until

# The helpers for local processes are also used from here by the sim's other processes (Argo CD, the tests' Loki
# and Prometheus).
__all__ = ["DEFAULT_NAME", "Progress", "SimCluster", "SimSpec", "alive", "free_port", "gone", "stop_process", "tail"]

DEFAULT_NAME = "konduktor"
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in Kueue's main when internal certs are off
Progress = Callable[[str], None]
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


@dataclass(frozen=True)
class KueueKubeconfig:
    path: Path
    changed: bool  # Kueue must restart to use it


@dataclass
class SimSpec:
    """What a simulated cluster was asked to be; kept in sim.json so status and re-runs know it."""

    pools: list[NodePool]
    levels: tuple[str, ...] = DEFAULT_TOPOLOGY
    job_seconds: float = 5.0
    # Parts of Kueue's Configuration a config implies (fair sharing, waitForPodsReady, ...).
    kueue_settings: dict[str, Any] = field(default_factory=dict)
    kueue_ports: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> SimSpec:
        data = json.loads(text)
        return cls(
            pools=[NodePool(**pool) for pool in data["pools"]],
            levels=tuple(data["levels"]),
            job_seconds=float(data["job_seconds"]),
            kueue_settings=dict(data.get("kueue_settings", {})),
            kueue_ports=dict(data.get("kueue_ports", {})),
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

    # -- paths -------------------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig.yaml"

    @property
    def kwok_workdir(self) -> Path:
        return self.root / "kwok"

    @property
    def cluster_dir(self) -> Path:
        return self.kwok_workdir / "clusters" / self.name

    @property
    def kueue_dir(self) -> Path:
        return self.root / "kueue"

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

    # -- kwokctl ---------------------------------------------------------------------------------------------
    def kwokctl(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        kubectl = self.toolbox.path("kubectl")
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.kwok_workdir)
        # kwokctl looks for kubectl on PATH before it would try to download one.
        env["PATH"] = f"{kubectl.parent}{os.pathsep}{env.get('PATH', '')}"
        return subprocess.run(
            [str(self.toolbox.path("kwokctl")), *args, "--name", self.name],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def component_logs(self) -> str:
        logs = sorted((self.cluster_dir / "logs").glob("*.log"))
        return "\n".join(f"--- {log.name} (last lines)\n{tail(log, 8)}" for log in logs) or "(no component logs)"

    def created(self) -> bool:
        return (self.cluster_dir / "kwok.yaml").exists()

    def api_ready(self) -> bool:
        if not self.kubeconfig.exists():
            return False
        try:
            kube = Kube(self.kubeconfig, timeout=5)
        except KonduktorError:
            return False
        with kube:
            return kube.ready()

    def kwokctl_config(self, spec: SimSpec) -> str:
        binary = self.toolbox.path
        options = {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            "kubeApiserverBinary": str(binary("kube-apiserver")),
            "kubeControllerManagerBinary": str(binary("kube-controller-manager")),
            "kubeSchedulerBinary": str(binary("kube-scheduler")),
            "kubectlBinary": str(binary("kubectl")),
            "kwokControllerBinary": str(binary("kwok")),
            "etcdBinary": str(binary("etcd")),
            "kubeVersion": self.toolbox.tools["kubernetes"].version,
            "etcdVersion": self.toolbox.tools["etcd"].version,
            "kwokVersion": self.toolbox.tools["kwok"].version,
            # Pod logs come from Logs objects in the API (one per pod, naming a file on this machine), so a test
            # or a burn-in on the sim reads step output through the real pods/log endpoint.
            "enableCRDs": ["Logs"],
        }
        documents: list[dict[str, Any]] = [
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokctlConfiguration",
                "options": options,
                "componentsPatches": [
                    # Without a default route kube-apiserver cannot pick an address to advertise.
                    {"name": "kube-apiserver", "extraArgs": [{"key": "advertise-address", "value": "127.0.0.1"}]},
                    # Each controller calls the API as its own service account, as kubeadm and managed clusters
                    # run it: the admission policies tell the Job controller's pods from a person's by that name
                    # (system:serviceaccount:kube-system:job-controller), not by the admin's one identity.
                    {
                        "name": "kube-controller-manager",
                        "extraArgs": [{"key": "use-service-account-credentials", "value": "true"}],
                    },
                ],
            },
            *kueue.stages(module_dir(self.toolbox.tools["kwok"]), spec.job_seconds),
        ]
        path = self.root / "kwokctl.yaml"
        with path.open("w") as handle:
            YAML(typ="safe").dump_all(documents, handle)
        return str(path)

    def start_control_plane(self, spec: SimSpec) -> None:
        if self.created() and self.api_ready():
            self.progress("control plane: already running")
            return
        for attempt in range(2):
            result = self.launch_control_plane(spec)
            if result.returncode == 0 and self.api_ready():
                return
            # kwokctl picks free ports a moment before the components bind them; another process starting at
            # the same time can take one. A new cluster gets new ports, so that race is worth one retry.
            if attempt == 0 and "address already in use" in self.component_logs():
                self.progress("control plane: a port was taken meanwhile; starting again on new ports")
                self.kwokctl("delete", "cluster")
                continue
            break
        raise KonduktorError(
            f"the control plane of sim cluster {self.name!r} did not start (kwokctl exited {result.returncode})",
            detail=(result.stderr or result.stdout)[-2000:] + "\n" + self.component_logs(),
            hint="a port may be in use or a component crashed: read the logs above; "
            "`konduktor-install sim down` then `sim up` starts clean",
        )

    def launch_control_plane(self, spec: SimSpec) -> subprocess.CompletedProcess[str]:
        # A healthy start takes well under a minute on 2 cores; waiting longer only delays the error.
        if self.created():
            self.progress("control plane: starting the existing cluster")
            return self.kwokctl("start", "cluster", "--wait", "2m")
        config = self.kwokctl_config(spec)
        self.progress("control plane: starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok")
        return self.kwokctl(
            "create", "cluster", "--config", config, "--kubeconfig", str(self.kubeconfig), "--wait", "2m"
        )

    # -- Kueue ------------------------------------------------------------------------------------------------
    def kueue_pid(self) -> int | None:
        try:
            pid = int((self.kueue_dir / "kueue.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def kueue_healthy(self, spec: SimSpec) -> bool:
        port = spec.kueue_ports.get("health")
        if not port or self.kueue_pid() is None:
            return False
        try:
            return requests.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def metrics_certs(self) -> None:
        """Kueue loads its metrics certificate from a fixed path when its internal cert manager is off."""
        if (KUEUE_METRICS_CERTS / "tls.crt").exists() and (KUEUE_METRICS_CERTS / "tls.key").exists():
            return
        try:
            KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                shutil.copy(self.kueue_dir / "certs" / name, KUEUE_METRICS_CERTS / name)
        except OSError as problem:
            raise KonduktorError(
                f"Kueue needs its metrics certificate in {KUEUE_METRICS_CERTS}, which is not writable: {problem}",
                hint=f"run once: sudo install -d -o $USER {KUEUE_METRICS_CERTS}",
            ) from problem

    def start_kueue(self, kube: Kube, spec: SimSpec) -> None:
        module = module_dir(self.toolbox.tools["kueue"])
        self.progress("kueue: installing CRDs")
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kueue.NAMESPACE}})
        crds = kueue.crds(module)
        for crd in crds:
            kube.apply(crd)
        names = [crd["metadata"]["name"] for crd in crds]
        wait_until(
            "Kueue CRDs to be established",
            lambda: all(
                is_true(kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name), "Established")
                for name in names
            ),
            timeout=60,
        )
        # The team RoleBindings name Kueue's user roles (kueue-batch-user-role); a real install gets them
        # from Kueue's chart.
        self.progress("kueue: installing user roles")
        for role in kueue.user_roles(module):
            kube.apply(role)
        kubeconfig = self.kueue_kubeconfig(kube)
        ca = write_serving_pki(self.kueue_dir / "certs", "kueue-webhook", ["kueue-webhook-service.kueue-system.svc"])
        config_path = self.kueue_dir / "config.yaml"
        ports = spec.kueue_ports or {"webhook": free_port(), "health": free_port(), "metrics": free_port()}
        configuration = kueue.manager_configuration(
            ports["webhook"], ports["health"], ports["metrics"], self.kueue_dir / "certs", spec.kueue_settings
        )
        unchanged = config_path.exists() and YAML(typ="safe").load(config_path.read_text()) == configuration
        if not (unchanged and not kubeconfig.changed and self.kueue_healthy(spec)):
            self.stop_kueue()
            spec.kueue_ports = ports
            self.spec_file.write_text(spec.to_json())
            self.metrics_certs()
            with config_path.open("w") as handle:
                YAML(typ="safe").dump(configuration, handle)
            self.progress("kueue: starting the controller manager")
            log_path = self.kueue_dir / "kueue.log"
            with log_path.open("ab") as log:
                process = subprocess.Popen(
                    [
                        str(self.toolbox.path("kueue")),
                        "--config",
                        str(config_path),
                        "--kubeconfig",
                        str(kubeconfig.path),
                        # As the umbrella's Kueue, but for the visibility API, which needs an aggregated API
                        # Service that a loopback-only cluster cannot route to a local process.
                        "--feature-gates=VisibilityOnDemand=false,WorkloadPriorityClassDefaulting=true",
                        "--zap-log-level=info",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            (self.kueue_dir / "kueue.pid").write_text(str(process.pid))
            wait_until(
                "Kueue to become ready",
                lambda: self.kueue_healthy(spec),
                timeout=120,
                on_timeout=lambda: KonduktorError(
                    "Kueue did not become ready", detail=tail(log_path, 20), hint=f"full log: {log_path}"
                ),
            )
        # Webhooks only after Kueue listens: they fail closed and would block Jobs while it is down.
        self.progress("kueue: registering webhooks")
        for configuration in kueue.webhook_configurations(module, spec.kueue_ports["webhook"], ca.read_bytes()):
            kube.apply(configuration)

    def kueue_kubeconfig(self, kube: Kube) -> KueueKubeconfig:
        """A kubeconfig that is Kueue's service account (kueue.identity_objects), written when it changed."""
        for obj in kueue.identity_objects():
            kube.apply(obj)

        def token() -> str | None:
            secret = kube.get("v1", "Secret", kueue.TOKEN_SECRET, kueue.NAMESPACE) or {}
            encoded = secret.get("data", {}).get("token")
            return base64.b64decode(encoded).decode() if encoded else None

        wait_until("kube-controller-manager to issue Kueue's token", lambda: token() is not None, timeout=60)
        admin = YAML(typ="safe").load(self.kubeconfig.read_text())
        wanted = kueue.token_kubeconfig(admin, token() or "")
        path = self.kueue_dir / "kubeconfig.yaml"
        changed = not path.exists() or YAML(typ="safe").load(path.read_text()) != wanted
        if changed:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w") as handle:
                YAML(typ="safe").dump(wanted, handle)
            path.chmod(0o600)
        return KueueKubeconfig(path, changed)

    def stop_kueue(self) -> None:
        pid = self.kueue_pid()
        if pid is not None:
            stop_process(pid)
        (self.kueue_dir / "kueue.pid").unlink(missing_ok=True)

    # -- GPU agent --------------------------------------------------------------------------------------------
    @property
    def agent_pidfile(self) -> Path:
        return self.root / "gpu-agent.pid"

    def agent_pid(self) -> int | None:
        try:
            pid = int(self.agent_pidfile.read_text())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def start_agent(self) -> None:
        """The process that plays the tools of burn-in pods on fake GPU nodes (konduktor.sim.agent)."""
        if self.agent_pid() is not None:
            return
        self.progress("gpu agent: starting (serves burn-in step output through kwok's pod logs)")
        with (self.root / "gpu-agent.log").open("ab") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "konduktor.sim.agent",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--logs-dir",
                    str(self.root / "pod-logs"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.agent_pidfile.write_text(str(process.pid))

    def stop_agent(self) -> None:
        pid = self.agent_pid()
        if pid is not None:
            stop_process(pid)
        self.agent_pidfile.unlink(missing_ok=True)

    # -- nodes ------------------------------------------------------------------------------------------------
    def apply_nodes(self, kube: Kube, spec: SimSpec) -> list[str]:
        nodes = [system_node(), *node_manifests(spec.pools, spec.levels)]
        self.progress(f"nodes: applying {len(nodes)} fake nodes")

        def apply(node: dict[str, Any]) -> None:
            # A new node is created with its status in one request, as a kubelet registers its node: kwok's
            # node-initialize stage keeps the capacity and address it finds, so no version of the Node that kwok
            # can read lacks them (creating it bare and setting the status next raced with kwok's defaults).
            try:
                kube.create(node)
                return
            except ApiError as problem:
                if problem.status != 409:
                    raise
            # An existing node (`up` again, a reshaped cluster) is brought back to what the spec says.
            status = node.pop("status")
            kube.apply(node)
            kube.apply_status({"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"], "status": status})

        # A few requests in flight: a thousand nodes take seconds, not minutes, and the API server keeps up.
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(apply, nodes))
        return [n["metadata"]["name"] for n in nodes]

    def wait_nodes_ready(self, kube: Kube, names: list[str], timeout: float = 120) -> None:
        wanted = set(names)

        def ready() -> bool:
            items = kube.list("v1", "Node", label_selector="type=kwok")
            done = {
                n["metadata"]["name"]
                for n in items
                if any(
                    c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", [])
                )
            }
            return wanted <= done

        wait_until(f"{len(names)} nodes to be Ready", ready, timeout=timeout, interval=1)

    # -- commands ---------------------------------------------------------------------------------------------
    def up(self, spec: SimSpec) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.kueue_dir.mkdir(exist_ok=True)
        previous = self.spec()
        if previous is not None:
            spec.kueue_ports = previous.kueue_ports
        self.spec_file.write_text(spec.to_json())
        for binary in SIM_BINARIES:  # build what is missing before anything starts
            self.toolbox.path(binary)
        self.start_control_plane(spec)
        with Kube(self.kubeconfig) as kube:
            self.start_kueue(kube, spec)
            self.start_agent()
            names = self.apply_nodes(kube, spec)
            self.wait_nodes_ready(kube, names)
            self.platform.ensure(kube)  # nothing until konduktor-core is installed

    def down(self, keep: bool = False) -> None:
        """Stops every process of this cluster and returns only once none is left (then removes the state unless
        `keep`). kwokctl kills its components without waiting for them to exit and deletes their pid files, so
        the processes are found first and waited for here."""
        started = self.processes()
        self.platform.stop()
        self.stop_kueue()
        self.stop_agent()
        if self.created():
            result = self.kwokctl("stop" if keep else "delete", "cluster")
            if result.returncode != 0:
                raise KonduktorError(
                    f"kwokctl could not {'stop' if keep else 'delete'} sim cluster {self.name!r}",
                    detail=(result.stderr or result.stdout)[-2000:],
                )
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
            ours = (
                args[0].startswith(marker)
                or Path(args[0]).name == "kueue"
                or "konduktor.sim.agent" in args
                or self.platform.owns(args)
            )
            if ours and alive(int(entry.name)):
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
        for pidfile in sorted((self.cluster_dir / "pids").glob("*.pid")):
            with contextlib.suppress(OSError, ValueError):
                report["components"][pidfile.stem] = "running" if alive(int(pidfile.read_text())) else "stopped"
        report["components"]["kueue"] = (
            "ready" if spec and self.kueue_healthy(spec) else ("running" if self.kueue_pid() else "stopped")
        )
        report["components"]["gpu-agent"] = "running" if self.agent_pid() else "stopped"
        report["components"].update(self.platform.status())
        if not self.api_ready():
            report["components"]["kube-apiserver"] = "not answering"
            return report
        with Kube(self.kubeconfig) as kube:
            nodes = kube.list("v1", "Node")
        report["nodes"] = len(nodes)
        report["ready_nodes"] = sum(
            1
            for n in nodes
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
        )
        report["gpus"] = sum(int(n.get("status", {}).get("allocatable", {}).get(GPU_RESOURCE, 0)) for n in nodes)
        return report
