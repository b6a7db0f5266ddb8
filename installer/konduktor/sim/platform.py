"""konduktor-core's own processes on the simulated cluster: the health controller and the capacity publisher.

On a real cluster they are the chart's Deployments. kwok's pods run nothing, so the simulated cluster runs each
Deployment's container command as a local process, as it runs Kueue: the command and arguments the chart rendered,
read from the Deployment in the cluster; the files it mounts from ConfigMaps (the controller's settings), read
from the cluster too; and the credentials of the Deployment's own service account, a token from the TokenRequest
API in a kubeconfig of its own, so that each process holds exactly the rights the chart's RBAC gives it. One
setting is the sim's: the controller reads its nodes' kernel logs from the files `sim fault` writes
(`kernel_log_files`), since the sim runs no Loki.

Each process runs under a small supervisor (`python -m konduktor.sim.supervisor`) that restarts it when it exits,
with a back-off, as the kubelet restarts a container. State, in `<sim state>/platform/`: per component its pid
file, kubeconfig, mounted files and `state.json` (fingerprint of what runs, token lifetime); logs in
`<component>.log` beside them. `ensure` is idempotent: a process runs on until the chart's settings change, the
Deployment goes, or its token is past half its life.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from ruamel.yaml import YAML

import konduktor
from konduktor.errors import KonduktorError
from konduktor.kube.client import Kube
from konduktor.kube.timestamps import parse_time
from konduktor.sim import kueue
from konduktor.sim.faults import kernel_log_dir
from konduktor.sim.processes import alive, free_port, stop_process, tail
from konduktor.vocabulary import SYSTEM_NAMESPACE
from konduktor.waiting import wait_until

PART_OF = "app.kubernetes.io/part-of=konduktor"
COMPONENT_LABEL = "app.kubernetes.io/component"
# The image's programs, run by this Python (the chart's image runs the same package).
PROGRAMS = {
    "konduktor-health": ("-m", "konduktor.cli.health"),
    "konduktor-install": ("-m", "konduktor.cli.main"),
}
SETTINGS_KEY = "health.yaml"  # the controller's settings in its ConfigMap (charts/konduktor-core)
SUPERVISOR = "konduktor.sim.supervisor"
# Asked for; the API server may grant less (--service-account-max-token-expiration). Renewed past half its life.
TOKEN_SECONDS = 7 * 24 * 3600
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Program:
    """One Deployment's container as the sim runs it: what the chart rendered, nothing local yet."""

    component: str
    deployment: str
    service_account: str
    argv: tuple[str, ...]  # command + args, with the image's program names
    mounts: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # mount path -> file name -> text
    env: Mapping[str, str] = field(default_factory=dict)
    port: int | None = None  # the container port its arguments name, replaced by a free local one

    def fingerprint(self) -> str:
        text = json.dumps(
            [self.service_account, self.argv, self.mounts, self.env], sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def program_of(deployment: Mapping[str, Any], config_maps: Mapping[str, Mapping[str, Any]]) -> Program:
    """The first container of `deployment` with the ConfigMaps it mounts (`config_maps` by name)."""
    meta = deployment["metadata"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    argv = (*container.get("command", ()), *container.get("args", ()))
    if not argv or argv[0] not in PROGRAMS:
        raise KonduktorError(
            f"Deployment {meta['name']} runs {argv[0] if argv else 'its image entrypoint'!r}, which the simulated "
            "cluster cannot run as a local process",
            hint=f"the sim runs {', '.join(PROGRAMS)}",
        )
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts: dict[str, dict[str, str]] = {}
    for mount in container.get("volumeMounts", []):
        source = volumes.get(mount["name"], {}).get("configMap")
        if source is not None:
            data = (config_maps.get(source["name"]) or {}).get("data") or {}
            mounts[mount["mountPath"].rstrip("/")] = dict(sorted(data.items()))
    env = {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    if any(
        e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name" for e in container.get("env", [])
    ):
        names = [e["name"] for e in container["env"] if e.get("valueFrom", {}).get("fieldRef")]
        env.update(dict.fromkeys(names, f"{meta['name']}-sim"))
    ports = [p["containerPort"] for p in container.get("ports", [])]
    return Program(
        component=meta.get("labels", {}).get(COMPONENT_LABEL) or meta["name"],
        deployment=meta["name"],
        service_account=pod.get("serviceAccountName") or "default",
        argv=tuple(str(a) for a in argv),
        mounts=mounts,
        env=env,
        port=ports[0] if ports else None,
    )


def local_argv(program: Program, mounted: Mapping[str, Path], kubeconfig: Path, port: int | None) -> list[str]:
    """The command line of `program` on this machine: this Python runs the image's program, mount paths name the
    local copies, the container port is `port`, and `--kubeconfig` names the service account's kubeconfig."""
    first, *rest = program.argv
    argv = [sys.executable, *PROGRAMS[first]]
    for arg in rest:
        local_arg = arg
        for mount, local in mounted.items():
            local_arg = local_arg.replace(f"{mount}/", f"{local}/")
        if port is not None and local_arg == f"--port={program.port}":
            local_arg = f"--port={port}"
        argv.append(local_arg)
    return [*argv, "--kubeconfig", str(kubeconfig)]


def with_kernel_logs(settings: str, directory: Path) -> str:
    """The controller's settings with the sim's kernel log files, unless they name a directory already."""
    data = YAML(typ="safe").load(settings) or {}
    data.setdefault("kernel_log_files", {"directory": str(directory)})
    return json.dumps(data, indent=2) + "\n"  # JSON is YAML


@dataclass
class Running:
    """What `state.json` keeps about a component's process."""

    fingerprint: str
    issued: float  # the token's, as Unix times
    expires: float
    port: int | None = None

    def due(self, now: float) -> bool:
        return now >= self.issued + (self.expires - self.issued) / 2


class SimPlatform:
    def __init__(self, root: Path, admin_kubeconfig: Path, progress: Progress | None = None) -> None:
        self.root = root
        self.home = root / "platform"
        self.admin_kubeconfig = admin_kubeconfig
        self.progress = progress or (lambda _message: None)

    # -- paths and state ------------------------------------------------------------------------------------
    def dir(self, component: str) -> Path:
        return self.home / component

    def log(self, component: str) -> Path:
        return self.home / f"{component}.log"

    def components(self) -> list[str]:
        return sorted(p.parent.name for p in self.home.glob("*/state.json"))

    def pid(self, component: str) -> int | None:
        try:
            pid = int((self.dir(component) / "pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def running(self, component: str) -> Running | None:
        try:
            return Running(**json.loads((self.dir(component) / "state.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def owns(self, args: list[str]) -> bool:
        """Whether a process's command line is one of these (the supervisor or the program it runs)."""
        marker = f"{self.home}/"
        return any(marker in arg for arg in args) and (
            SUPERVISOR in args or any(module in args for _, module in PROGRAMS.values())
        )

    # -- commands -------------------------------------------------------------------------------------------
    def ensure(self, kube: Kube) -> list[str]:
        """Every Deployment of konduktor-core running as a local process, started or restarted when the chart's
        settings changed or the token is due; those the chart no longer has stopped. Returns what was started."""
        # A Deployment being deleted (the namespace going, `down` midway) runs no new pod, nor does one whose
        # service account is missing: the ReplicaSet's pod creation is refused until it exists.
        deployments = [
            d
            for d in kube.list("apps/v1", "Deployment", SYSTEM_NAMESPACE, label_selector=PART_OF)
            if d["spec"].get("replicas", 1) > 0 and not d["metadata"].get("deletionTimestamp")
        ]
        config_maps = {c["metadata"]["name"]: c for c in kube.list("v1", "ConfigMap", SYSTEM_NAMESPACE)}
        accounts = {a["metadata"]["name"] for a in kube.list("v1", "ServiceAccount", SYSTEM_NAMESPACE)}
        wanted = {}
        for program in (program_of(d, config_maps) for d in deployments):
            if program.service_account in accounts:
                wanted[program.component] = program
            else:
                self.progress(f"platform: {program.component} waits for its service account {program.service_account}")
        for component in set(self.components()) - wanted.keys():
            self.progress(f"platform: stopping {component} (the cluster does not run it)")
            self.stop_one(component, forget=True)
        started = []
        now = time.time()
        for component, program in sorted(wanted.items()):
            running = self.running(component)
            if (
                running is not None
                and self.pid(component) is not None
                and running.fingerprint == program.fingerprint()
                and not running.due(now)
            ):
                continue
            self.stop_one(component)
            self.start_one(kube, program)
            started.append(component)
        return started

    def start_one(self, kube: Kube, program: Program) -> None:
        component = program.component
        home = self.dir(component)
        home.mkdir(parents=True, exist_ok=True)
        self.progress(f"platform: starting {component} as service account {program.service_account}")
        token = kube.request(
            "POST",
            f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts/{program.service_account}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": TOKEN_SECONDS},
            },
        )["status"]
        kubeconfig = home / "kubeconfig.yaml"
        admin = YAML(typ="safe").load(self.admin_kubeconfig.read_text())
        with kubeconfig.open("w") as handle:
            YAML(typ="safe").dump(kueue.token_kubeconfig(admin, token["token"], program.service_account), handle)
        kubeconfig.chmod(0o600)
        mounted: dict[str, Path] = {}
        for index, (mount, files) in enumerate(sorted(program.mounts.items())):
            local = home / "mounts" / str(index)
            local.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                sim_text = with_kernel_logs(text, kernel_log_dir(self.root)) if name == SETTINGS_KEY else text
                (local / name).write_text(sim_text)
            mounted[mount] = local
        port = free_port() if program.port is not None else None
        argv = local_argv(program, mounted, kubeconfig, port)
        issued = time.time()
        expires = parse_time(token["expirationTimestamp"])
        if expires is None:
            raise ValueError(f"token expirationTimestamp {token['expirationTimestamp']!r}: not an RFC 3339 time")
        log_path = self.log(component)
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", SUPERVISOR, "--", *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=_environment(program, kubeconfig),
                cwd=home,
            )
        (home / "pid").write_text(str(process.pid))
        state = Running(program.fingerprint(), issued, expires, port)
        (home / "state.json").write_text(json.dumps(state.__dict__))
        if port is not None:
            wait_until(
                f"{component} to answer /healthz",
                lambda: self.healthy(component),
                timeout=90,
                on_timeout=lambda: KonduktorError(
                    f"{component} did not become healthy", detail=tail(log_path, 20), hint=f"full log: {log_path}"
                ),
            )

    def healthy(self, component: str) -> bool:
        running = self.running(component)
        if running is None or running.port is None or self.pid(component) is None:
            return False
        try:
            return requests.get(f"http://127.0.0.1:{running.port}/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop_one(self, component: str, forget: bool = False) -> None:
        pid = self.pid(component)
        if pid is not None:
            stop_process(pid)  # the supervisor passes SIGTERM on and waits for its program
            # Its session's process group (start_new_session): whatever outlived a supervisor that had to be killed.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        (self.dir(component) / "pid").unlink(missing_ok=True)
        if forget:
            (self.dir(component) / "state.json").unlink(missing_ok=True)

    def stop(self) -> None:
        for component in self.components():
            self.stop_one(component)

    def status(self) -> dict[str, str]:
        return {component: "running" if self.pid(component) else "stopped" for component in self.components()}


def _environment(program: Program, kubeconfig: Path) -> dict[str, str]:
    """The caller's environment, the Deployment's variables, and this very package first on the path (the caller's
    PYTHONPATH may be relative, and the process runs in a directory of its own)."""
    package = str(Path(konduktor.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (package, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **program.env, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": path}
