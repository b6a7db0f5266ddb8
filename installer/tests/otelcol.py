"""The OpenTelemetry collector the umbrella deploys, as a local program: built with the pinned collector builder
(ocb) from data/otelcol/manifest.yaml on first use, cached beside the pinned tools, never skipped for being
missing; and the collector configuration the umbrella renders.

The builder resolves the manifest's component versions through the module proxy with the checksum database on,
like `go get`, and compiles without symbols and with trimmed paths (ocb's default, not a debug build).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
import yaml

from konduktor.paths import cache_dir
from konduktor.tools.toolbox import Toolbox

MANIFEST = Path(__file__).parent / "data" / "otelcol" / "manifest.yaml"
UMBRELLA_VALUES = Path(__file__).resolve().parents[2] / "charts" / "konduktor" / "values.yaml"


def collector() -> Path:
    """The collector binary of the manifest, built once per manifest content."""
    manifest: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    digest = hashlib.sha256(MANIFEST.read_bytes()).hexdigest()[:12]
    home = cache_dir() / "tools" / f"otelcol-{manifest['dist']['version']}-{digest}"
    binary = home / "otelcol"
    if binary.exists():
        return binary
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="otelcol-build-") as scratch:
        manifest["dist"]["output_path"] = str(Path(scratch) / "build")
        config = Path(scratch) / "manifest.yaml"
        config.write_text(yaml.safe_dump(manifest))
        built = subprocess.run(
            [str(Toolbox().path("builder")), "--config", str(config)],
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )
        assert built.returncode == 0, f"the collector builder failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
        home.mkdir(parents=True, exist_ok=True)
        shutil.move(Path(scratch) / "build" / "otelcol", binary)  # complete, or not there at all
    seconds = round(time.monotonic() - started, 1)
    (home / "manifest.json").write_text(json.dumps({"manifest": str(MANIFEST.name), "seconds": seconds}))
    return binary


def umbrella_config(storage: Path) -> dict[str, Any]:
    """The collector configuration the umbrella deploys: its `alternateConfig` plus what the opentelemetry-collector
    chart's presets that it turns on add (the upstream chart cannot be rendered here, so its preset additions are
    written out: `logsCollection` with `storeCheckpoints` adds the `file_storage` extension and a `filelog`
    receiver of the pods' logs, `kubernetesAttributes` adds the `k8sattributes` processor to the `logs` pipeline).
    Only the file storage directory differs from a node's."""
    chart = yaml.safe_load(UMBRELLA_VALUES.read_text())["opentelemetry-collector"]
    config: dict[str, Any] = chart["alternateConfig"]
    presets = chart["presets"]
    assert presets["logsCollection"]["enabled"] and presets["logsCollection"]["storeCheckpoints"]
    assert presets["kubernetesAttributes"]["enabled"]
    config.setdefault("extensions", {})["file_storage"] = {"directory": str(storage)}
    config["service"]["extensions"] = [*config["service"]["extensions"], "file_storage"]
    config["receivers"]["filelog"] = {
        "include": ["/var/log/pods/*/*/*.log"],
        "start_at": "end",
        "storage": "file_storage",
        "include_file_path": True,
        "operators": [{"type": "container", "id": "container-parser"}],
    }
    config["processors"]["k8sattributes"] = {"auth_type": "serviceAccount", "passthrough": False}
    logs = config["service"]["pipelines"]["logs"]
    logs["receivers"] = [*logs["receivers"], "filelog"]
    logs["processors"] = ["k8sattributes", *logs["processors"]]
    return config


def component_type(name: str) -> str:
    """`filelog/kernel` and `file_log` are the same component type."""
    return name.split("/", 1)[0].replace("_", "")


def validate(binary: Path, config: dict[str, Any], workdir: Path) -> subprocess.CompletedProcess[str]:
    """`otelcol validate`: the configuration resolved and each component's settings checked, nothing started."""
    path = workdir / "collector.yaml"
    path.write_text(yaml.safe_dump(config))
    # The variables a node's collector pod gets from the chart.
    env = {"MY_POD_IP": "127.0.0.1", "OTEL_K8S_NODE_NAME": "gpu-node-0", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [str(binary), "validate", f"--config={path}"], capture_output=True, text=True, check=False, env=env, timeout=120
    )


def kernel_pipeline(
    storage: Path, kern_log: Path, loki_url: str, tenant: str, ports: tuple[int, int]
) -> dict[str, Any]:
    """The umbrella's kernel-log pipeline as one node's collector runs it, paths and endpoints aside: the node's
    kern.log, the file storage directory, the Loki URL and tenant, loopback ports. The pod-log pipeline, which
    needs the Kubernetes API from inside a pod, is left out."""
    config = umbrella_config(storage)
    config["receivers"] = {"filelog/kernel": {**config["receivers"]["filelog/kernel"], "include": [str(kern_log)]}}
    config["processors"].pop("k8sattributes")
    del config["service"]["pipelines"]["logs"]
    exporter = config["exporters"]["otlphttp/loki"]
    exporter["endpoint"] = f"{loki_url}/otlp"
    exporter["headers"] = {"X-Scope-OrgID": tenant}
    health, metrics = ports
    config["extensions"]["health_check"]["endpoint"] = f"127.0.0.1:{health}"
    config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]["port"] = metrics
    return config


class Collector:
    """One node's collector process; `restart()` keeps its file storage, as a pod restart keeps the host path."""

    def __init__(self, binary: Path, config: dict[str, Any], node: str, workdir: Path, health_port: int) -> None:
        self.binary, self.node, self.workdir = binary, node, workdir
        self.path = workdir / "collector.yaml"
        self.path.write_text(yaml.safe_dump(config))
        self.log = workdir / "collector.log"
        self.health = f"http://127.0.0.1:{health_port}/"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {"MY_POD_IP": "127.0.0.1", "OTEL_K8S_NODE_NAME": self.node, "PATH": "/usr/bin:/bin"}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.binary), f"--config={self.path}"], env=env, stdout=log, stderr=subprocess.STDOUT
            )

    def ready(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.log.read_text()[-3000:]
        try:
            return requests.get(self.health, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # the collector flushes its batch and saves its file offsets on SIGTERM
            self.process.wait(timeout=60)
