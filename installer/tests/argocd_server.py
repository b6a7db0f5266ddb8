"""Argo CD as local processes beside the simulated control plane, as upstream's Procfile runs it for development.

The application controller, the repo server and Konduktor's config management plugin (`argocd-cmp-server`) are
the one pinned `argocd` binary under their role names; their caches live in a Redis of their own (Debian's
redis-server) on a loopback port. Argo CD reads its settings from the `argocd` namespace of the sim and its
sources from git (a local `file:///` repository in tests). Outside a cluster it needs: ARGOCD_FAKE_IN_CLUSTER
with the KUBECONFIG variable (the in-cluster destination), 127.0.0.1 addresses instead of Service names, GnuPG
off, and its own temporary, TLS and SSH directories per instance.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from konduktor.errors import KonduktorError
from konduktor.kube.client import Kube
from konduktor.kube.conditions import is_true
from konduktor.kube.documents import load_documents
from konduktor.sim.cluster import stop_process, tail
from konduktor.sim.processes import distinct_free_ports
from konduktor.tools.gobuild import module_dir
from konduktor.tools.toolbox import Toolbox
from konduktor.waiting import wait_until

NAMESPACE = "argocd"
IN_CLUSTER = "https://kubernetes.default.svc"
# Argo CD's informers see only ConfigMaps and Secrets with this label.
PART_OF = {"app.kubernetes.io/part-of": "argocd"}
# The plugin that turns a config.yaml into the objects `konduktor-install render` writes.
PLUGIN = "konduktor"
APPLICATION = ("argoproj.io/v1alpha1", "Application")
REFRESH = "argocd.argoproj.io/refresh"
HELPER_SCRIPTS = ("git-verify-wrapper.sh", "gpg-wrapper.sh")
# Argo CD's documented health check for Applications ("App of Apps"), which Argo CD no longer has built in, with
# one guard: a child is Healthy only once it is also Synced. Argo CD leaves resources that do not exist yet out of
# an application's health (argoproj/argo-cd#27917), so a child application that has not applied its Deployments
# reads Healthy, and without the guard the next wave starts before the platform runs. The app of apps' own object
# is exempt, as it cannot wait for its own sync (docs/design/gitops.md).
APPLICATION_HEALTH = """hs = {}
hs.status = "Progressing"
hs.message = ""
if obj.status ~= nil and obj.status.health ~= nil then
  hs.status = obj.status.health.status
  if obj.status.health.message ~= nil then
    hs.message = obj.status.health.message
  end
  -- An app of apps that manages itself cannot wait for its own sync: it is the application of its tracking id.
  local tracking = nil
  if obj.metadata.annotations ~= nil then
    tracking = obj.metadata.annotations["argocd.argoproj.io/tracking-id"]
  end
  local name = obj.metadata.name
  local itself = tracking == name .. ":argoproj.io/Application:" .. obj.metadata.namespace .. "/" .. name
  local synced = obj.status.sync ~= nil and obj.status.sync.status == "Synced"
  if hs.status == "Healthy" and not synced and not itself then
    hs.status = "Progressing"
    hs.message = "waiting for the application to be Synced"
  end
end
return hs
"""


def crds(module_dir: Path) -> list[dict[str, Any]]:
    """Application and AppProject (ApplicationSets are not used)."""
    folder = module_dir / "manifests" / "crds"
    return [doc for name in ("application-crd.yaml", "appproject-crd.yaml") for doc in load_documents(folder / name)]


def settings_objects(secret_key: str, reconciliation_seconds: int) -> list[dict[str, Any]]:
    """The namespace, argocd-cm, argocd-secret and the `default` project (argocd-server would create it; the
    sim runs no server)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "argocd-cm", "namespace": NAMESPACE, "labels": PART_OF},
            "data": {
                # How often the controller compares every application with git when no webhook tells it to.
                "timeout.reconciliation": f"{reconciliation_seconds}s",
                # An Application's health is its own status: with it, the app of apps waits for the platform
                # (wave 0) to be Healthy before it creates the quotas application (wave 1).
                "resource.customizations.health.argoproj.io_Application": APPLICATION_HEALTH,
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "argocd-secret", "namespace": NAMESPACE, "labels": PART_OF},
            "stringData": {"server.secretkey": secret_key},
        },
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AppProject",
            "metadata": {"name": "default", "namespace": NAMESPACE},
            "spec": {
                "sourceRepos": ["*"],
                "destinations": [{"server": "*", "namespace": "*"}],
                "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
            },
        },
    ]


def plugin_config(render_command: list[str]) -> dict[str, Any]:
    """The ConfigManagementPlugin that renders a folder holding config.yaml: config.yaml is the source of truth,
    and an invalid one fails the sync with render's own error (file:line and field)."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ConfigManagementPlugin",
        "metadata": {"name": PLUGIN},
        "spec": {
            "generate": {"command": [*render_command, "config.yaml"]},
            "discover": {"fileName": "config.yaml"},
        },
    }


@dataclass(frozen=True)
class Ports:
    redis: int
    repo_server: int
    repo_metrics: int
    controller_metrics: int


def environment(
    base: Mapping[str, str], kubeconfig: Path, home: Path, tool_dirs: list[Path], plugin_sockets: Path
) -> dict[str, str]:
    """What every Argo CD process of one instance runs with."""
    env = dict(base)
    env.update(
        {
            # https://kubernetes.default.svc is this kubeconfig's cluster; read from the variable, not --kubeconfig.
            "ARGOCD_FAKE_IN_CLUSTER": "true",
            "KUBECONFIG": str(kubeconfig),
            "ARGOCD_GPG_ENABLED": "false",
            # Checkouts ($TMPDIR/_argocd-repo, emptied at start) and the plugin's work dir, per instance.
            "TMPDIR": str(home / "tmp"),
            "ARGOCD_TLS_DATA_PATH": str(home / "tls"),
            "ARGOCD_SSH_DATA_PATH": str(home / "ssh"),
            "ARGOCD_GNUPGHOME": str(home / "gnupg"),
            "ARGOCD_APP_CONF_PATH": str(home / "conf"),
            "ARGOCD_ASK_PASS_SOCK": str(home / "askpass.sock"),
            "ARGOCD_PLUGINSOCKFILEPATH": str(plugin_sockets),
            "ARGOCD_CONTROLLER_REPLICAS": "1",
            # git asks `argocd` for credentials, and the repo server runs helm and kustomize: all from PATH.
            "PATH": ":".join([*(str(d) for d in tool_dirs), base.get("PATH", "/usr/bin:/bin")]),
            "HOME": str(home),
        }
    )
    return env


def redis_command(redis_server: Path, port: int, directory: Path) -> list[str]:
    return [
        str(redis_server),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(directory),
        "--save",
        "",
        "--appendonly",
        "no",
    ]


def repo_server_command(binary: Path, ports: Ports) -> list[str]:
    return [
        str(binary.parent / "argocd-repo-server"),
        "--address",
        "127.0.0.1",
        "--port",
        str(ports.repo_server),
        "--metrics-address",
        "127.0.0.1",
        "--metrics-port",
        str(ports.repo_metrics),
        "--redis",
        f"127.0.0.1:{ports.redis}",
        # Plain gRPC on loopback; its default mTLS CA path (/app/config/...) would contradict that.
        "--disable-tls",
        "--client-ca-path=",
        "--loglevel",
        "info",
    ]


def controller_command(binary: Path, ports: Ports, reconciliation_seconds: int) -> list[str]:
    return [
        str(binary.parent / "argocd-application-controller"),
        "--namespace",
        NAMESPACE,
        "--redis",
        f"127.0.0.1:{ports.redis}",
        "--repo-server",
        f"127.0.0.1:{ports.repo_server}",
        "--repo-server-plaintext",
        "--metrics-port",
        str(ports.controller_metrics),
        "--app-resync",
        str(reconciliation_seconds),
        "--loglevel",
        "info",
    ]


def cmp_server_command(binary: Path, config_dir: Path) -> list[str]:
    return [str(binary.parent / "argocd-cmp-server"), "--config-dir-path", str(config_dir), "--loglevel", "info"]


def quotas_application(name: str, repo_url: str, path: str, revision: str = "main") -> dict[str, Any]:
    """An Application that syncs the config.yaml in `path` through the plugin, pruning and self-healing."""
    return {
        "apiVersion": APPLICATION[0],
        "kind": APPLICATION[1],
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "project": "default",
            "source": {"repoURL": repo_url, "targetRevision": revision, "path": path, "plugin": {"name": PLUGIN}},
            "destination": {"server": IN_CLUSTER},
            "syncPolicy": {"automated": {"prune": True, "selfHeal": True}, "syncOptions": ["ServerSideApply=true"]},
        },
    }


def application_status(kube: Kube, name: str) -> dict[str, Any]:
    status: dict[str, Any] = (kube.get(*APPLICATION, name, NAMESPACE) or {}).get("status", {})
    return status


def synced_healthy(status: dict[str, Any], revision: str) -> bool:
    """Synced to this git revision and Healthy."""
    sync = status.get("sync", {})
    # An application of several sources (a chart and a values file) reports one revision per source.
    revisions = sync.get("revisions") or [sync.get("revision")]
    return bool(
        sync.get("status") == "Synced"
        and all(r == revision for r in revisions)
        and status.get("health", {}).get("status") == "Healthy"
    )


def refresh(kube: Kube, name: str) -> None:
    """What a git webhook does: ask the controller to compare the application with git now."""
    kube.patch(*APPLICATION, name, {"metadata": {"annotations": {REFRESH: "normal"}}}, NAMESPACE)


def team_config(example: Path, cluster: str, quotas: Mapping[str, int | str]) -> dict[str, Any]:
    """An example config with teams of its own: each a copy of the example's first team, with its GPU quota."""
    config: dict[str, Any] = YAML(typ="safe").load(example.read_text())
    template = next(iter(config["teams"].values()))
    example_type = next(iter(template["gpus"]))
    # Cluster-scoped objects (flavor, priority classes, topology) named after this cluster, so that its objects
    # never meet those of another config on the same cluster, which would refuse them as someone else's.
    gpu_type = f"{example_type}-{cluster}"
    config["cluster"]["name"] = cluster
    config["gpuTypes"] = {gpu_type: config["gpuTypes"][example_type]}
    config["priorities"] = {f"{cluster}-{name}": value for name, value in (config.get("priorities") or {}).items()}
    if config.get("topology"):
        config["topology"]["name"] = f"{cluster}-topology"
    config["teams"] = {
        team: {
            **template,
            "namespaces": [team],
            "groups": [team],
            "gpus": {gpu_type: {**template["gpus"][example_type], "quota": quota}},
        }
        for team, quota in quotas.items()
    }
    # The example's per-team alert routes name its own teams.
    routes = (config.get("alerts") or {}).get("routes") or {}
    routes.pop("teams", None)
    return config


class GitRepo:
    """A git repository on disk that Argo CD reads through file:///, as an admin's clone would push to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "admin@example.com")
        self.git("config", "user.name", "Cluster admin")

    @property
    def url(self) -> str:
        return self.path.resolve().as_uri()

    def git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.path, check=True, capture_output=True, text=True).stdout

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()

    def commit_config(self, folder: str, config: dict[str, Any], message: str) -> str:
        """Writes `folder`/config.yaml, commits it and returns the commit."""
        target = self.path / folder / "config.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w") as handle:
            YAML(typ="safe").dump(config, handle)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.head()


def redis_server() -> Path:
    found = shutil.which("redis-server")
    if found is None:
        raise KonduktorError(
            "redis-server is not installed; Argo CD keeps its caches in Redis",
            hint="run scripts/bootstrap dev (it installs it), or apt-get install redis-server",
        )
    return Path(found)


def start(command: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as handle:
        return subprocess.Popen(
            command,
            env=dict(env),
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def new_secret_key() -> str:
    return secrets.token_urlsafe(32)


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def established(kube: Kube, name: str) -> bool:
    return is_true(kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name), "Established")


class ArgoCD:
    """One Argo CD instance (Redis, repo server, plugin, application controller) syncing into a cluster.

    `home` holds its logs, sockets and scratch directories; `tool_dirs` are put first on PATH (the folder of
    the `argocd` binary, helm, kustomize); `render_command` is how the plugin runs `konduktor-install render`.
    """

    def __init__(
        self,
        binary: Path,
        module_dir: Path,
        kubeconfig: Path,
        home: Path,
        tool_dirs: list[Path],
        render_command: list[str],
        reconciliation_seconds: int = 180,
    ) -> None:
        self.binary = binary
        self.module_dir = module_dir
        self.kubeconfig = kubeconfig
        self.home = home
        self.tool_dirs = [binary.parent, *tool_dirs]
        self.render_command = render_command
        self.reconciliation_seconds = reconciliation_seconds
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.ports = Ports(*distinct_free_ports(4))

    @classmethod
    def pinned(cls, toolbox: Toolbox, kubeconfig: Path, home: Path) -> ArgoCD:
        """The pinned Argo CD build, with the pinned helm and kustomize, and this installation's
        `konduktor-install render` as the plugin."""
        return cls(
            binary=toolbox.path("argocd"),
            module_dir=module_dir(toolbox.tools["argo-cd"]),
            kubeconfig=kubeconfig,
            home=home,
            tool_dirs=[toolbox.path("helm").parent, toolbox.path("kustomize").parent],
            render_command=[str(Path(sys.executable).parent / "konduktor-install"), "render"],
        )

    def log(self, role: str) -> Path:
        return self.home / f"{role}.log"

    def install(self, kube: Kube) -> None:
        """The CRDs (server-side: the Application CRD exceeds the last-applied annotation) and the settings."""
        for crd in crds(self.module_dir):
            kube.apply(crd)
        wait_until(
            "the Argo CD CRDs to be established",
            lambda: all(established(kube, crd["metadata"]["name"]) for crd in crds(self.module_dir)),
            timeout=60,
        )
        for obj in settings_objects(new_secret_key(), self.reconciliation_seconds):
            kube.apply(obj)

    def start(self, kube: Kube, base_env: Mapping[str, str]) -> None:
        self.install(kube)
        for folder in ("tmp", "tls", "ssh", "gnupg", "conf", "redis", "plugin", "bin"):
            (self.home / folder).mkdir(parents=True, exist_ok=True)
        # The repo server runs these scripts of Argo CD's image (commit signature checks, deprecated but always
        # called); the module ships them without their executable bit.
        for script in HELPER_SCRIPTS:
            target = self.home / "bin" / script
            shutil.copyfile(self.module_dir / "hack" / script, target)
            target.chmod(0o755)
        # A short path: the plugin's Unix socket lives there (sun_path holds about 108 bytes).
        sockets = (self.home / "plugin").resolve()
        env = environment(base_env, self.kubeconfig, self.home, [self.home / "bin", *self.tool_dirs], sockets)
        config_dir = self.home / "plugin-config"
        config_dir.mkdir(exist_ok=True)
        with (config_dir / "plugin.yaml").open("w") as handle:
            YAML(typ="safe").dump(plugin_config(self.render_command), handle)
        self.run("redis", redis_command(redis_server(), self.ports.redis, self.home / "redis"), env)
        self.await_port("redis", self.ports.redis)
        self.run("argocd-cmp-server", cmp_server_command(self.binary, config_dir), env)
        wait_until(
            "the config management plugin to listen",
            lambda: any(sockets.glob("*.sock")),
            timeout=60,
            on_timeout=lambda: self.failure("argocd-cmp-server"),
        )
        self.run("argocd-repo-server", repo_server_command(self.binary, self.ports), env)
        self.await_port("argocd-repo-server", self.ports.repo_server)
        self.run(
            "argocd-application-controller",
            controller_command(self.binary, self.ports, self.reconciliation_seconds),
            env,
        )
        self.await_port("argocd-application-controller", self.ports.controller_metrics)

    def run(self, role: str, command: list[str], env: Mapping[str, str]) -> None:
        self.processes[role] = start(command, env, self.log(role))

    def await_port(self, role: str, port: int) -> None:
        wait_until(
            f"{role} to listen on 127.0.0.1:{port}",
            lambda: self.check(role) and listening(port),
            timeout=120,
            on_timeout=lambda: self.failure(role),
        )

    def check(self, role: str) -> bool:
        if self.processes[role].poll() is not None:
            raise self.failure(role)
        return True

    def failure(self, role: str) -> KonduktorError:
        return KonduktorError(
            f"{role} of Argo CD did not start", detail=tail(self.log(role), 20), hint=f"full log: {self.log(role)}"
        )

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            stop_process(process.pid)
        self.processes.clear()
