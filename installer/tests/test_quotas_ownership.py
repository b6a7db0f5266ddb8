"""Konduktor changes or deletes only what it created or was told to adopt, on the simulated cluster: a namespace
that another manager (Argo CD) and another config own is refused by `quotas diff`/`apply` and `plan`, adopted only
when named with --adopt (and marked), and never deleted by `down --purge`."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, Sim
from ruamel.yaml import YAML

from konduktor.cli.main import main
from konduktor.config.load import load_config
from konduktor.errors import ExitCode
from konduktor.kube.client import Kube
from konduktor.kube.sync import ADOPTED_ANNOTATION
from konduktor.quotas.sync import sync_quotas
from konduktor.vocabulary import KUEUE_API
from konduktor.waiting import wait_until

pytestmark = pytest.mark.sim
FOREIGN = "owned-elsewhere"
ARGO_LABELS = {"app.kubernetes.io/managed-by": "argocd", "konduktor.ai/config": "other-cluster"}


def config_with_foreign_namespace(tmp_path: Path) -> Path:
    """The example, with team-a also given the namespace another tool owns."""
    yaml = YAML()
    document: Any = yaml.load(EXAMPLE.read_text())
    edited = copy.deepcopy(document)
    edited["teams"]["team-a"]["namespaces"].append(FOREIGN)
    path = tmp_path / "config.yaml"
    with path.open("w") as out:
        yaml.dump(edited, out)
    return path


def wait_gone(kube: Kube, names: list[str]) -> None:
    wait_until(
        f"namespaces {', '.join(names)} to be deleted",
        lambda: all(kube.get("v1", "Namespace", n) is None for n in names),
        timeout=120,
    )


@pytest.fixture()
def foreign(sim: Sim) -> Iterator[Kube]:
    kube = sim.kube
    kube.delete("v1", "Namespace", FOREIGN)
    wait_gone(kube, [FOREIGN])
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FOREIGN, "labels": ARGO_LABELS}})
    yield kube
    kube.delete("v1", "Namespace", FOREIGN)
    wait_gone(kube, [FOREIGN])
    sync_quotas(kube, load_config(EXAMPLE).config, prune=True, dry_run=False)  # as the other tests expect it


def labels(kube: Kube, name: str) -> dict[str, str]:
    found = kube.get("v1", "Namespace", name)
    assert found is not None
    return dict(found["metadata"].get("labels") or {})


def test_a_namespace_someone_else_owns_is_refused_then_adopted_only_by_name_and_never_purged(
    sim: Sim, foreign: Kube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kube = foreign
    config = config_with_foreign_namespace(tmp_path)
    given = ["--kubeconfig", str(sim.kubeconfig)]
    sync_quotas(kube, load_config(EXAMPLE).config, prune=True, dry_run=False)
    capsys.readouterr()

    assert main(["quotas", "diff", str(config), *given]) == ExitCode.CHECK_FAILED
    shown = capsys.readouterr().out
    assert f"refuse    Namespace {FOREIGN}: owned by app.kubernetes.io/managed-by=argocd, " in shown
    assert f"konduktor.ai/config=other-cluster; adopt it with --adopt Namespace/{FOREIGN}" in shown
    assert main(["plan", str(config), "--sim", sim.cluster.name]) == ExitCode.CHECK_FAILED
    assert f"refuse    Namespace {FOREIGN}" in capsys.readouterr().out
    assert main(["up", str(config), "--sim", sim.cluster.name]) == ExitCode.CHECK_FAILED  # before installing
    assert f"Namespace {FOREIGN}: owned by app.kubernetes.io/managed-by=argocd" in capsys.readouterr().err

    assert main(["quotas", "apply", str(config), *given]) == ExitCode.CHECK_FAILED
    said = capsys.readouterr().err
    assert f"Namespace {FOREIGN}: owned by app.kubernetes.io/managed-by=argocd" in said
    assert ARGO_LABELS.items() <= labels(kube, FOREIGN).items()  # nothing was changed, in it or anywhere else
    assert kube.get(KUEUE_API, "LocalQueue", "default", FOREIGN) is None

    adopt = ["--adopt", f"Namespace/{FOREIGN}"]
    assert main(["quotas", "diff", str(config), *given, *adopt]) == ExitCode.NEGATIVE
    assert f"adopt     Namespace {FOREIGN} (metadata.annotations, metadata.labels): taken over from" in (
        capsys.readouterr().out
    )
    assert main(["quotas", "apply", str(config), *given, *adopt]) == ExitCode.OK
    namespace = kube.get("v1", "Namespace", FOREIGN)
    assert namespace is not None
    assert namespace["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "konduktor"
    assert namespace["metadata"]["annotations"][ADOPTED_ANNOTATION] == (
        "app.kubernetes.io/managed-by=argocd, konduktor.ai/config=other-cluster"
    )
    wait_until("the adopted namespace's LocalQueue", lambda: kube.get(KUEUE_API, "LocalQueue", "default", FOREIGN))
    # Adopted once, it is ours to keep in sync; the record of the adoption stays.
    assert main(["quotas", "diff", str(config), *given]) == ExitCode.OK
    assert main(["quotas", "apply", str(config), *given]) == ExitCode.OK
    assert ADOPTED_ANNOTATION in (kube.get("v1", "Namespace", FOREIGN) or {})["metadata"]["annotations"]

    capsys.readouterr()
    assert main(["down", "--purge", "--yes", *given]) == ExitCode.OK
    said = capsys.readouterr().err
    assert f"left what Konduktor adopted and did not create: Namespace {FOREIGN}" in said
    wait_gone(kube, ["team-a", "team-b"])  # what Konduktor created is purged
    assert kube.get("v1", "Namespace", FOREIGN) is not None
    assert (kube.get("v1", "Namespace", FOREIGN) or {})["metadata"].get("deletionTimestamp") is None
