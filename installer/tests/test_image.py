"""The konduktor image runs as the chart runs it: built once for the module (`konduktor-install image build`:
Debian's packages, the project's wheel and the hash lock; no registry), unpacked, and its root file system run as
user 65532, read-only, with a /tmp tmpfs and the settings file the chart mounts, against the simulated cluster.

No container runtime works on the test machines (crun refuses setrlimit on hybrid cgroups), so the runner is
`unshare --mount` + `chroot --userspec=65532:65532` on the unpacked root: the same files, user, environment,
command and read-only root as the pod; the host network is shared, as the simulated API server listens on
127.0.0.1. docs/admin.md, "The konduktor image".
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, Sim
from health_cluster import our_events, reset_node, set_allocatable
from ruamel.yaml import YAML
from sim_fixture import health_taints, node
from support import render

from konduktor.cli.main import main
from konduktor.config.load import load_config
from konduktor.config.model import KONDUKTOR_IMAGE
from konduktor.helm.release import CHARTS
from konduktor.image.build import Built, build
from konduktor.image.oci import layer_members, manifest_digest, read_image, unpack
from konduktor.ops.chart import chart_image
from konduktor.quotas.sync import sync_quotas
from konduktor.vocabulary import CAPACITY_CONFIGMAP
from konduktor.waiting import wait_until

# The module's fixture builds the image: a cold build downloads Debian's packages and the wheels (minutes).
pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
USER = 65532
NAMESPACE = "konduktor-image-test"  # the chart's release namespace here: the controller's Lease
TEAMS = ("team-a", "team-b")
VICTIM = "gpu-h100-0002"


@dataclass(frozen=True)
class Image:
    built: Built
    root: Path  # the unpacked root file system
    config: dict[str, Any]  # the OCI config's `config` section (Env, User, Entrypoint, Cmd)
    work: Path


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    work = tmp_path_factory.mktemp("image")
    built = build(work / "dist")
    root = work / "root"
    unpack(built.archive.path, root)
    _, config = read_image(built.archive.path)
    return Image(built, root, config["config"], work)


def flat_kubeconfig(path: Path) -> str:
    """The kubeconfig with its certificate and key files inlined (the files are not inside the image's root)."""
    config = YAML(typ="safe").load(path.read_text())
    for section, key in (("clusters", "cluster"), ("users", "user")):
        for entry in config.get(section, []):
            fields = entry[key]
            for name in ("certificate-authority", "client-certificate", "client-key"):
                if name in fields:
                    fields[f"{name}-data"] = base64.b64encode(Path(fields.pop(name)).read_bytes()).decode()
    return json.dumps(config)


def runner(
    image: Image, argv: Sequence[str], *, settings: Path | None = None, kubeconfig: Path | None = None,
    env: dict[str, str] | None = None, read_only: bool = True,
) -> list[str]:  # fmt: skip
    """The command line that runs `argv` in the image as the pod does: user and group 65532 (no other group),
    the root file system read-only, a tmpfs at /tmp, the settings folder read-only at /etc/konduktor, the image's
    environment (and `env`), and the kubeconfig at /tmp/kubeconfig (KUBECONFIG)."""
    variables = [*image.config["Env"], *(f"{k}={v}" for k, v in (env or {}).items())]
    steps = ['mount --bind "$R" "$R"']
    if read_only:
        steps.append('mount -o remount,bind,ro "$R"')
    steps += [
        'mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"',
        'mount --rbind /dev "$R/dev"',
        'mount -t proc proc "$R/proc"',
    ]
    if settings is not None:
        steps += [
            f'mount --bind {shlex.quote(str(settings))} "$R/etc/konduktor"',
            'mount -o remount,bind,ro "$R/etc/konduktor"',
        ]
    if kubeconfig is not None:
        (image.work / "kubeconfig.json").write_text(flat_kubeconfig(kubeconfig))
        steps += [
            f'cp {shlex.quote(str(image.work / "kubeconfig.json"))} "$R/tmp/kubeconfig"',
            'chmod 644 "$R/tmp/kubeconfig"',
        ]
        variables.append("KUBECONFIG=/tmp/kubeconfig")
    steps.append(f'exec chroot --userspec={USER}:{USER} --groups={USER} "$R" env -i "$@"')
    script = "set -e; R=$1; shift; " + "; ".join(steps)
    return ["unshare", "--mount", "--propagation", "private", "--fork", "--kill-child", "sh", "-c", script, "sh",
            str(image.root), *variables, *argv]  # fmt: skip


def run(image: Image, argv: Sequence[str], timeout: float = 180, **options: Any) -> subprocess.CompletedProcess[str]:
    command = runner(image, argv, **options)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def rendered(*settings: str) -> list[dict[str, Any]]:
    args = [f"--set={setting}" for setting in settings]
    return render(None, "--namespace", NAMESPACE, *args)


def container(objects: list[dict[str, Any]], deployment_suffix: str) -> dict[str, Any]:
    (deployment,) = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith(deployment_suffix)
    ]
    (first,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(first)


# --- the archive -------------------------------------------------------------------------------------------------


def test_the_digest_file_names_the_image_in_the_archive(image: Image) -> None:
    archive = image.built.archive.path
    written = image.built.digest_file.read_text().strip()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", written)
    assert written == manifest_digest(archive) == image.built.digest
    manifest, config = read_image(archive)  # every blob checked against its digest
    assert [layer["mediaType"] for layer in manifest["layers"]] == ["application/vnd.oci.image.layer.v1.tar+gzip"]
    assert config["rootfs"]["diff_ids"] and config["os"] == "linux"
    with tarfile.open(archive) as tar:
        assert json.load(tar.extractfile("oci-layout")) == {"imageLayoutVersion": "1.0.0"}  # type: ignore[arg-type]


def test_skopeo_reads_the_archive_and_copies_it_keeping_the_digest(image: Image) -> None:
    """What admins push with (docs/admin.md): skopeo finds the digest the file names, and a copy keeps it."""
    archive = f"oci-archive:{image.built.archive.path}"
    raw = subprocess.run(["skopeo", "inspect", "--raw", archive], capture_output=True, check=True, timeout=120)
    assert f"sha256:{hashlib.sha256(raw.stdout).hexdigest()}" == image.built.digest
    layout = image.work / "copied"
    subprocess.run(["skopeo", "copy", "-q", archive, f"oci:{layout}:0.1.0"], check=True, timeout=300)
    (copied,) = json.loads((layout / "index.json").read_text())["manifests"]
    assert copied["digest"] == image.built.digest


def test_the_image_runs_the_controller_as_65532_as_the_chart_does(image: Image) -> None:
    assert image.config["User"] == f"{USER}:{USER}"
    controller = container(rendered(), "-health")
    assert image.config["Entrypoint"] == controller["command"] == ["konduktor-health"]
    # The default command is the chart's, less the port and the Lease's namespace that the chart adds.
    assert image.config["Cmd"] == controller["args"][:2] == ["run", "--config=/etc/konduktor/health.yaml"]
    assert "HOME=/tmp" in image.config["Env"]


def test_every_file_is_roots_and_none_is_writable_by_65532(image: Image) -> None:
    members = list(layer_members(image.built.archive.path))
    assert len(members) > 1000
    assert {m.uid for m in members} == {0}
    # Debian's own groups own a few (shadow: unix_chkpwd, mail, staff: /var/local, utmp: the login records).
    assert {m.gid for m in members} <= {0, 8, 42, 43, 50}
    writable = sorted(m.name for m in members if m.mode & 0o002 and not m.issym())
    assert writable == ["run/lock", "tmp", "var/tmp"]  # sticky world-writable folders, as Debian has them
    assert all(m.mode & 0o1000 for m in members if m.name in writable)
    # In the unpacked root, mounted read-write: user 65532 can still write nowhere but in those.
    places = ["/", "/etc", "/etc/konduktor", "/usr/bin", "/opt/konduktor/bin",
              "/opt/konduktor/lib/python3.11/site-packages/konduktor", "/var/tmp"]  # fmt: skip
    probe = "import os,sys\nfor d in sys.argv[1:]:\n  print(d, os.access(d, os.W_OK))"
    done = run(image, ["python3", "-c", probe, *places], read_only=False)
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines() if line.endswith("True")] == ["/var/tmp"]


def test_the_image_holds_exactly_the_locked_distributions(image: Image) -> None:
    locked = {}
    for line in (ROOT / "requirements" / "runtime.lock").read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line):
            locked[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    site = image.root / "opt/konduktor/lib/python3.11/site-packages"
    installed = {}
    for info in site.glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        installed[re.sub(r"[-_.]+", "-", name).lower()] = version
    assert installed.pop("konduktor") == "0.1.0"
    # A distribution whose marker excludes Linux or Python 3.11 (colorama: Windows) is locked, not installed.
    assert installed.items() <= locked.items()
    assert {"kubernetes", "pydantic", "typer", "prometheus-client", "cryptography"} <= installed.keys()
    assert not list(image.root.glob("**/*.pyc")), "no byte code: it would carry the build's state"


# --- on the simulated cluster ------------------------------------------------------------------------------------


def test_up_and_preflight_name_the_image_of_the_config(
    sim: Sim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """config.yaml's image: is what the chart gets (up's dry run says so, in its report and its JSON) and what
    preflight names. No image build needed: the config only names one."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    digest = "sha256:" + "5e" * 32
    config = tmp_path / "config.yaml"
    config.write_text(EXAMPLE.read_text() + f"image:\n  repository: registry.example/konduktor\n  digest: '{digest}'\n")
    assert main(["up", str(config), "--sim", sim.cluster.name, "--dry-run"]) == 0
    assert f"  image registry.example/konduktor@{digest} (health controller, capacity publisher)" in (
        capsys.readouterr().out.splitlines()
    )
    assert main(["up", str(config), "--sim", sim.cluster.name, "--dry-run", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["image"] == f"registry.example/konduktor@{digest}"
    main(["preflight", str(config), "--kubeconfig", str(sim.kubeconfig)])
    assert f"konduktor image: registry.example/konduktor@{digest}" in capsys.readouterr().err


def test_without_image_up_runs_the_charts_own() -> None:
    for chart in ("konduktor-core", "konduktor"):  # the simulated cluster's chart, and the umbrella
        assert chart_image(CHARTS / chart, {}) == KONDUKTOR_IMAGE
    given = {"controller": {"image": {"repository": "r.example/k", "tag": "v2"}}}
    assert chart_image(CHARTS / "konduktor-core", given) == "r.example/k:v2"
    assert chart_image(CHARTS / "konduktor", {"konduktor-core": given}) == "r.example/k:v2"


@pytest.fixture
def namespace(sim: Sim) -> Iterator[str]:
    sim.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    yield NAMESPACE
    reset_node(sim.kube, VICTIM)
    for event in our_events(sim.kube, VICTIM):
        sim.kube.delete("v1", "Event", event["metadata"]["name"], "default")
    sim.kube.delete("v1", "Namespace", NAMESPACE)


def test_the_health_controller_runs_from_the_image_and_quarantines_a_lost_gpu(
    image: Image, sim: Sim, namespace: str
) -> None:
    objects = rendered("controller.settings.gpu_lost_grace_seconds=0")
    (settings_map,) = [o for o in objects if o["kind"] == "ConfigMap" and "health.yaml" in o.get("data", {})]
    settings = image.work / "settings"
    settings.mkdir(exist_ok=True)
    for key, text in settings_map["data"].items():
        (settings / key).write_text(text)
    controller = container(objects, "-health")
    set_allocatable(sim.kube, VICTIM, 8)  # a GPU fell off the bus
    argv = [*controller["command"], *controller["args"], "--once"]
    done = run(image, argv, settings=settings, kubeconfig=sim.kubeconfig, env={"POD_NAME": "konduktor-health-0"})
    assert done.returncode == 0, done.stderr
    writes = json.loads(done.stdout.splitlines()[-1])["writes"]
    assert {w["node"] for w in writes} == {VICTIM}
    assert "taint" in [w["action"] for w in writes], writes
    assert health_taints(node(sim.kube, VICTIM)), "the node was not tainted"
    # It led through the Lease in the chart's namespace (and handed it back on leaving).
    assert sim.kube.get("coordination.k8s.io/v1", "Lease", "konduktor-health", namespace) is not None


def test_the_capacity_publisher_runs_from_the_image(image: Image, sim: Sim) -> None:
    sync_quotas(sim.kube, load_config(EXAMPLE).config, prune=False, dry_run=False)
    for team in TEAMS:
        sim.kube.delete("v1", "ConfigMap", CAPACITY_CONFIGMAP, team)
    publisher = container(rendered(), "-capacity-publisher")
    assert publisher["command"][:2] == ["konduktor-install", "publish-capacity"]
    command = runner(image, publisher["command"], kubeconfig=sim.kubeconfig)
    logs = image.work / "publisher.log"
    with logs.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def published() -> bool:
        """It says so once it has written every team's ConfigMap (so the ConfigMaps alone come before the line)."""
        assert process.poll() is None, f"the publisher exited ({process.returncode}): {logs.read_text()}"
        return "published ConfigMap konduktor-capacity in" in logs.read_text()

    try:
        wait_until("the image's publisher to publish in every team namespace", published, timeout=180)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    assert all(sim.kube.get("v1", "ConfigMap", CAPACITY_CONFIGMAP, team) for team in TEAMS)
