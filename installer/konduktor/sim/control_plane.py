"""The simulated cluster's control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok,
run by kwokctl's binary runtime from the pinned builds."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from konduktor.errors import KonduktorError
from konduktor.kube.client import Kube
from konduktor.sim import kueue
from konduktor.sim.processes import alive, distinct_free_ports, stop_process, tail
from konduktor.sim.spec import SimSpec
from konduktor.tools.gobuild import Progress, module_dir
from konduktor.tools.toolbox import Toolbox

# kwokctl's options for the ports of the binary runtime's components (KwokctlConfiguration, kwok v0.8).
COMPONENT_PORTS = (
    "kubeApiserverPort",
    "etcdPort",
    "etcdPeerPort",
    "kubeControllerManagerPort",
    "kubeSchedulerPort",
    "kwokControllerPort",
)

# kwok's own defaults (KwokConfiguration v1alpha1, kwok v0.8), written out (see `config`).
KWOK_DEFAULTS = {
    "cidr": "10.0.0.0/24",
    "enableDebuggingHandlers": True,
    "enableProfilingHandler": True,
    "enableContentionProfiling": False,
    "enablePodsOnNodeSyncListPager": True,
    "enablePodsOnNodeSyncStreamWatch": False,
    "podsOnNodeSyncParallelism": 1,
}
# How many nodes' and pods' stages (and node leases) kwok plays at once; its default is 4 of each. Each is one request
# to the API server, so on a busy machine their latency, not kwok's CPU, set the pace: 4 at a time made new nodes
# Ready at ~18 a second, and renewed leases at ~15 a second, fewer than 5,000 nodes need (bench/README.md#fleet-scale).
KWOK_PARALLELISM = {"nodePlayStageParallelism": 16, "nodeLeaseParallelism": 32, "podPlayStageParallelism": 16}
# Each node's Lease, which kwok renews every quarter of its duration: kwokctl's default (40 s x its heartbeatFactor
# of 5 = 200 s, renewed every 50 s) is 200 writes a second at 10,000 nodes, and when they lagged, the node lifecycle
# controller marked the nodes Unknown and kwok initialized them again, over and over: at 5,000 nodes on a busy
# machine 2,121 were NotReady 4 minutes into the start, their leases not renewed since their creation. At 600 s
# (renewed every 150 s) a settled 10,000-node cluster still renewed 60-100 a second, most of a core of the 2 that
# kube-apiserver, etcd and kwok share with what runs on it. 3,600 s (renewed every 15 minutes) is 11 a second;
# the controller manager waits 2 hours for a renewal before it calls a node Unknown. A fake node never dies unless
# kwok does (a restarted sim hands kwok the Leases at once: hand_node_leases_to_kwok): the sim loses nothing by it.
NODE_LEASE_SECONDS = 3_600
NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_MONITOR_GRACE_MS = 7_200_000
NODE_MONITOR_PERIOD_MS = 25_000  # kwokctl's 5 s x 5, as before: one pass over every node


class ControlPlane:
    """kwokctl's cluster `name`, its work dir under `root` and the admin `kubeconfig` it writes."""

    def __init__(self, name: str, root: Path, kubeconfig: Path, toolbox: Toolbox, progress: Progress) -> None:
        self.name = name
        self.root = root
        self.kubeconfig = kubeconfig
        self.toolbox = toolbox
        self.progress = progress

    @property
    def workdir(self) -> Path:
        return self.root / "kwok"

    @property
    def cluster_dir(self) -> Path:
        return self.workdir / "clusters" / self.name

    def kwokctl(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        kubectl = self.toolbox.path("kubectl")
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.workdir)
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

    def port_taken(self) -> bool:
        """A component found a port kwokctl picked for it taken by another process."""
        logs = (self.cluster_dir / "logs").glob("*.log")
        return any("address already in use" in log.read_text(errors="replace") for log in logs)

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

    def owns(self, args: list[str]) -> bool:
        """Whether a command line is one of kwokctl's components (they run from the cluster's own bin/)."""
        return args[0].startswith(f"{self.root}{os.sep}")

    def component_states(self) -> dict[str, str]:
        """Each component kwokctl keeps a pid file for: running or stopped."""
        states = {}
        for pidfile in sorted((self.cluster_dir / "pids").glob("*.pid")):
            with contextlib.suppress(OSError, ValueError):
                states[pidfile.stem] = "running" if alive(int(pidfile.read_text())) else "stopped"
        return states

    def config(self, spec: SimSpec) -> str:
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
            # The node heartbeat settings below as written, not multiplied by kwokctl's default factor of 5.
            "heartbeatFactor": 1,
            "nodeLeaseDurationSeconds": NODE_LEASE_SECONDS,
            "kubeControllerManagerNodeMonitorGracePeriodMilliseconds": NODE_MONITOR_GRACE_MS,
            "kubeControllerManagerNodeMonitorPeriodMilliseconds": NODE_MONITOR_PERIOD_MS,
            # The components' ports, picked below the ephemeral range (free_port): left to kwokctl, they come from
            # that range, where any client's connect() may take one before its component binds it.
            **dict(zip(COMPONENT_PORTS, distinct_free_ports(len(COMPONENT_PORTS)), strict=True)),
        }
        documents: list[dict[str, Any]] = [
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokctlConfiguration",
                "options": options,
                "componentsPatches": [
                    {
                        "name": "kube-apiserver",
                        "extraArgs": [
                            # Without a default route kube-apiserver cannot pick an address to advertise.
                            {"key": "advertise-address", "value": "127.0.0.1"},
                            # A new Node is not tainted not-ready at its creation: the node lifecycle controller lifts
                            # that taint with one PATCH a node from 8 workers (no flag sets more), 2.5-7 nodes a
                            # second on a busy machine, the slowest step of a large start. A pod bound to a node kwok
                            # has not reached yet waits for kwok, as it would for a slow kubelet.
                            {"key": "disable-admission-plugins", "value": "TaintNodesByCondition"},
                        ],
                    },
                    # Each controller calls the API as its own service account, as kubeadm and managed clusters
                    # run it: the admission policies tell the Job controller's pods from a person's by that name
                    # (system:serviceaccount:kube-system:job-controller), not by the admin's one identity.
                    {
                        "name": "kube-controller-manager",
                        "extraArgs": [
                            {"key": "use-service-account-credentials", "value": "true"},
                            # Its clients' default of 20 requests/s made the node lifecycle controller take minutes
                            # to lift the not-ready taint of 1,000 new nodes, which the sim waits for.
                            {"key": "kube-api-qps", "value": "200"},
                            {"key": "kube-api-burst", "value": "400"},
                            # A node kwok has not initialized yet is left alone as long as a renewal may take:
                            # past the default 60 s the node lifecycle controller marks it Unknown ("Kubelet never
                            # posted node status"), one more write for each of the thousands a large start queues.
                            {"key": "node-startup-grace-period", "value": f"{NODE_MONITOR_GRACE_MS // 1000}s"},
                            # The only copy of each (Kueue runs so too): no Lease renewed every 2 s for a standby.
                            {"key": "leader-elect", "value": "false"},
                        ],
                    },
                    {"name": "kube-scheduler", "extraArgs": [{"key": "leader-elect", "value": "false"}]},
                    # kwok logs every node patch and every lease renewal at INFO: at 10,000 nodes ~200 lines a
                    # second that nobody reads. Warnings and errors still go to its log.
                    {"name": "kwok-controller", "extraArgs": [{"key": "v", "value": "WARN"}]},
                ],
            },
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokConfiguration",
                # kwokctl writes this document out with what it leaves unset as empty, zero or false, and kwok takes
                # it as written, so each of kwok's defaults (v1alpha1 KwokConfiguration) is spelt out: without the
                # pods' IP range no pod starts; the debugging handlers serve pod logs (kubectl logs, burn-in steps).
                "options": {**KWOK_DEFAULTS, **KWOK_PARALLELISM},
            },
            *kueue.stages(module_dir(self.toolbox.tools["kwok"]), spec.job_seconds),
        ]
        path = self.root / "kwokctl.yaml"
        with path.open("w") as handle:
            YAML(typ="safe").dump_all(documents, handle)
        return str(path)

    def start(self, spec: SimSpec) -> None:
        if self.created() and self.api_ready():
            self.progress("control plane: already running")
            return
        for attempt in range(3):
            fresh = not self.created()
            result = self.launch(spec)
            # The components' ports are picked free a moment before they bind them; another cluster starting at
            # the same time can still take one, rarely, as they come from outside the ephemeral range. The component
            # exits, even when the API server came up (no service account tokens without kube-controller-manager,
            # no Ready nodes without kwok). A new cluster gets new ports, so that race is worth a retry.
            raced = fresh and self.port_taken()
            if result.returncode == 0 and self.api_ready() and not raced:
                if not fresh:
                    self.hand_node_leases_to_kwok()
                return
            if raced and attempt < 2:
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

    def launch(self, spec: SimSpec) -> subprocess.CompletedProcess[str]:
        # A healthy start takes well under a minute on 2 cores; waiting longer only delays the error.
        if self.created():
            self.progress("control plane: starting the existing cluster")
            return self.kwokctl("start", "cluster", "--wait", "2m")
        config = self.config(spec)
        self.progress("control plane: starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok")
        return self.kwokctl(
            "create", "cluster", "--config", config, "--kubeconfig", str(self.kubeconfig), "--wait", "2m"
        )

    def hand_node_leases_to_kwok(self) -> None:
        """Give the nodes' Leases to the kwok just started. Each kwok process holds them under an identity of its own
        (host name and a new UUID), and leaves another's alone until it expires: an hour here (NODE_LEASE_SECONDS), so
        for up to an hour after a restart nothing would play the nodes' pods (none started, none deleted). The
        sim runs one kwok, so the Leases a cluster started again finds are a stopped process's: kwok is stopped,
        they are deleted, and kwokctl starts kwok alone again (it starts only the components not running)."""
        self.progress("control plane: handing the nodes' leases to the new kwok")
        pidfile = self.cluster_dir / "pids" / "kwok-controller.pid"
        with contextlib.suppress(OSError, ValueError):
            stop_process(int(pidfile.read_text()))
        # kwokctl takes a component whose pid answers a signal as running, and a stopped kwok may linger as a zombie
        # of a parent that has not reaped it yet: without its pid file it is started again.
        pidfile.unlink(missing_ok=True)
        with Kube(self.kubeconfig) as kube:
            leases = kube.resource("coordination.k8s.io/v1", "Lease").path(NODE_LEASE_NAMESPACE)
            kube.request("DELETE", leases)  # every Lease of the namespace, in one request
        result = self.kwokctl("start", "cluster", "--wait", "2m")
        if result.returncode != 0:
            raise KonduktorError(
                f"kwok of sim cluster {self.name!r} did not start again (kwokctl exited {result.returncode})",
                detail=(result.stderr or result.stdout)[-2000:] + "\n" + self.component_logs(),
            )

    def stop(self, keep: bool) -> None:
        """kwokctl stops the components (`keep`) or deletes the cluster; it does not wait for them to exit."""
        if not self.created():
            return
        result = self.kwokctl("stop" if keep else "delete", "cluster")
        if result.returncode != 0:
            raise KonduktorError(
                f"kwokctl could not {'stop' if keep else 'delete'} sim cluster {self.name!r}",
                detail=(result.stderr or result.stdout)[-2000:],
            )
