"""Kueue for the simulated cluster: its CRDs and roles applied, its controller manager run as a local process with
its own service account's token, and its webhooks registered once it listens."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests
from ruamel.yaml import YAML

from konduktor.errors import KonduktorError
from konduktor.helm.values import umbrella_kueue_feature_gates
from konduktor.kube.client import Kube
from konduktor.kube.conditions import is_true
from konduktor.sim import kueue
from konduktor.sim.pki import write_serving_pki
from konduktor.sim.processes import PidFile, distinct_free_ports, tail
from konduktor.sim.spec import SimSpec
from konduktor.tools.gobuild import Progress, module_dir
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in Kueue's main when internal certs are off


def feature_gates_flag() -> str:
    """Kueue's --feature-gates as the umbrella sets them, but for the visibility API, which needs an aggregated API
    Service that a loopback-only cluster cannot route to a local process."""
    gates = {**umbrella_kueue_feature_gates(), "VisibilityOnDemand": False}
    return "--feature-gates=" + ",".join(f"{gate}={str(on).lower()}" for gate, on in gates.items())


@dataclass(frozen=True)
class KueueKubeconfig:
    path: Path
    changed: bool  # Kueue must restart to use it


class KueueProcess:
    """Kueue's state in `directory` (config, kubeconfig, certificates, pid and log); `admin_kubeconfig` is the
    cluster's, from which Kueue's own kubeconfig is made."""

    def __init__(self, directory: Path, admin_kubeconfig: Path, toolbox: Toolbox, progress: Progress) -> None:
        self.directory = directory
        self.admin_kubeconfig = admin_kubeconfig
        self.toolbox = toolbox
        self.progress = progress
        self.pidfile = PidFile(directory / "kueue.pid")

    def pid(self) -> int | None:
        return self.pidfile.pid()

    def owns(self, args: list[str]) -> bool:
        return Path(args[0]).name == "kueue"

    def healthy(self, spec: SimSpec) -> bool:
        port = spec.kueue_ports.get("health")
        if not port or self.pid() is None:
            return False
        try:
            return requests.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def state(self, spec: SimSpec | None) -> str:
        return "ready" if spec and self.healthy(spec) else ("running" if self.pid() else "stopped")

    def metrics_certs(self) -> None:
        """Kueue loads its metrics certificate from a fixed path when its internal cert manager is off."""
        if (KUEUE_METRICS_CERTS / "tls.crt").exists() and (KUEUE_METRICS_CERTS / "tls.key").exists():
            return
        try:
            KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                shutil.copy(self.directory / "certs" / name, KUEUE_METRICS_CERTS / name)
        except OSError as problem:
            raise KonduktorError(
                f"Kueue needs its metrics certificate in {KUEUE_METRICS_CERTS}, which is not writable: {problem}",
                hint=f"run once: sudo install -d -o $USER {KUEUE_METRICS_CERTS}",
            ) from problem

    def start(self, kube: Kube, spec: SimSpec, save_spec: Callable[[SimSpec], None]) -> None:
        """Kueue running with the configuration `spec` implies; `save_spec` records the ports it was given."""
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
        kubeconfig = self.kubeconfig(kube)
        ca = write_serving_pki(self.directory / "certs", "kueue-webhook", ["kueue-webhook-service.kueue-system.svc"])
        config_path = self.directory / "config.yaml"
        ports = spec.kueue_ports or dict(zip(("webhook", "health", "metrics"), distinct_free_ports(3), strict=True))
        configuration = kueue.manager_configuration(
            ports["webhook"], ports["health"], ports["metrics"], self.directory / "certs", spec.kueue_settings
        )
        unchanged = config_path.exists() and YAML(typ="safe").load(config_path.read_text()) == configuration
        if not (unchanged and not kubeconfig.changed and self.healthy(spec)):
            self.stop()
            spec.kueue_ports = ports
            save_spec(spec)
            self.metrics_certs()
            with config_path.open("w") as handle:
                YAML(typ="safe").dump(configuration, handle)
            self.progress("kueue: starting the controller manager")
            log_path = self.directory / "kueue.log"
            self.pidfile.start(
                [
                    str(self.toolbox.path("kueue")),
                    "--config",
                    str(config_path),
                    "--kubeconfig",
                    str(kubeconfig.path),
                    feature_gates_flag(),
                    "--zap-log-level=info",
                ],
                log_path,
            )
            wait_until(
                "Kueue to become ready",
                lambda: self.healthy(spec),
                timeout=120,
                on_timeout=lambda: KonduktorError(
                    "Kueue did not become ready", detail=tail(log_path, 20), hint=f"full log: {log_path}"
                ),
            )
        # Webhooks only after Kueue listens: they fail closed and would block Jobs while it is down.
        self.progress("kueue: registering webhooks")
        for configuration in kueue.webhook_configurations(module, spec.kueue_ports["webhook"], ca.read_bytes()):
            kube.apply(configuration)

    def kubeconfig(self, kube: Kube) -> KueueKubeconfig:
        """A kubeconfig that is Kueue's service account (kueue.identity_objects), written when it changed."""
        for obj in kueue.identity_objects():
            kube.apply(obj)

        def token() -> str | None:
            secret = kube.get("v1", "Secret", kueue.TOKEN_SECRET, kueue.NAMESPACE) or {}
            encoded = secret.get("data", {}).get("token")
            return base64.b64decode(encoded).decode() if encoded else None

        wait_until("kube-controller-manager to issue Kueue's token", lambda: token() is not None, timeout=60)
        admin = YAML(typ="safe").load(self.admin_kubeconfig.read_text())
        wanted = kueue.token_kubeconfig(admin, token() or "")
        path = self.directory / "kubeconfig.yaml"
        changed = not path.exists() or YAML(typ="safe").load(path.read_text()) != wanted
        if changed:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w") as handle:
                YAML(typ="safe").dump(wanted, handle)
            path.chmod(0o600)
        return KueueKubeconfig(path, changed)

    def stop(self) -> None:
        self.pidfile.stop()
