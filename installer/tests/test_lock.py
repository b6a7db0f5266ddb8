"""The supply chain is locked: the Python lock files agree with pyproject.toml and carry a hash for every
distribution; each pinned Go tool builds from a committed go.mod and go.sum that agree with versions.toml, with
the checksum database on."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from konduktor.errors import KonduktorError
from konduktor.tools.catalog import load_tools
from konduktor.tools.gobuild import CHECKSUM_EXEMPTIONS, go_environment
from konduktor.tools.gomod import lock_problems

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def locked(name: str) -> dict[str, str]:
    """Each distribution of a lock file and its pinned version; every one must carry hashes."""
    text = (ROOT / "requirements" / name).read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.strip())
    pins = {}
    for entry in entries:
        if entry.startswith("#"):
            continue
        match = re.match(r"([A-Za-z0-9_.-]+)==([^\s;\\]+)", entry)
        assert match, f"{name}: not an exact pin: {entry.splitlines()[0]}"
        assert "--hash=sha256:" in entry, f"{name}: {match.group(1)} has no hash"
        pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def declared(*extras: str) -> list[Requirement]:
    build = [Requirement(r) for r in PROJECT["build-system"]["requires"]]
    runtime = [Requirement(r) for r in PROJECT["project"]["dependencies"]]
    optional = [Requirement(r) for extra in extras for r in PROJECT["project"]["optional-dependencies"][extra]]
    return build + runtime + optional


@pytest.mark.parametrize(("lock", "extras"), [("runtime.lock", ()), ("dev.lock", ("dev",))])
def test_python_locks_pin_every_declared_requirement(lock: str, extras: tuple[str, ...]) -> None:
    pins = locked(lock)
    for requirement in declared(*extras):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{lock} has no {requirement.name}: run scripts/lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock} pins {requirement.name}=={pins[name]}, pyproject.toml asks {requirement}: run scripts/lock"
        )


def test_the_runtime_lock_holds_no_development_tool() -> None:
    """scripts/up installs the runtime lock: no linter, type checker or torch (5 GB with CUDA) rides along.
    (pytest does: pytest-testinfra, the node preflight's runner, is a runtime dependency.)"""
    runtime = locked("runtime.lock")
    assert {"torch", "numpy", "ruff", "mypy", "hypothesis", "types-requests"}.isdisjoint(runtime)
    assert {"torch", "ruff", "mypy"} <= set(locked("dev.lock"))


def test_the_dev_lock_agrees_with_the_runtime_lock() -> None:
    """scripts/test installs the dev lock over the runtime one: a shared distribution has one version."""
    runtime, dev = locked("runtime.lock"), locked("dev.lock")
    assert {n: v for n, v in runtime.items() if dev.get(n) != v} == {}


def test_the_bootstrap_lock_is_uv_alone_at_the_version_asked() -> None:
    """scripts/bootstrap installs it through pip before anything else; uv then installs the other locks."""
    asked = [Requirement(line) for line in (ROOT / "requirements" / "bootstrap.in").read_text().splitlines()
             if line and not line.startswith("#")]  # fmt: skip
    assert [(r.name, str(r.specifier)) for r in asked] == [("uv", f"=={locked('bootstrap.lock')['uv']}")]
    assert list(locked("bootstrap.lock")) == ["uv"]


def test_committed_go_modules_agree_with_versions_toml() -> None:
    assert lock_problems(load_tools()) == []


def test_a_module_at_another_version_is_reported(tmp_path: Path) -> None:
    tools = load_tools()
    folder = tmp_path / "kueue"
    folder.mkdir()
    source = Path(__file__).resolve().parents[1] / "konduktor" / "tools" / "modules" / "kueue"
    (folder / "go.mod").write_text(
        (source / "go.mod").read_text().replace("sigs.k8s.io/kueue v0.19.2", "sigs.k8s.io/kueue v0.19.1")
    )
    (folder / "go.sum").write_text((source / "go.sum").read_text())
    problems = lock_problems({"kubernetes": tools["kubernetes"], "kueue": tools["kueue"]}, tmp_path)
    assert "kueue: go.mod requires sigs.k8s.io/kueue v0.19.1, versions.toml pins v0.19.2" in problems
    assert any(p.startswith("kubernetes: no go.mod and go.sum") for p in problems)


def test_go_builds_keep_the_checksum_database_on() -> None:
    env = go_environment({"GONOSUMDB": "*", "GOPRIVATE": "*", "GOINSECURE": "*", "GOFLAGS": "-mod=mod"})
    assert env["GOFLAGS"] == "-mod=readonly"
    assert env["GOSUMDB"] == "sum.golang.org"
    assert all(env[name] == "" for name in CHECKSUM_EXEMPTIONS)  # overrides `go env -w` as well
    assert go_environment({"GOSUMDB": "sum.golang.org https://sum.example"})["GOSUMDB"].startswith("sum.golang.org")
    with pytest.raises(KonduktorError, match="GOSUMDB=off"):
        go_environment({"GOSUMDB": "off"})


def test_a_tool_that_pins_a_newer_go_builds_with_that_toolchain_only() -> None:
    """Argo CD asks for Go 1.27: its build fetches that toolchain; every other tool builds with the machine's Go."""
    tools = load_tools()
    argocd = tools["argo-cd"]
    assert argocd.toolchain is not None and argocd.toolchain.startswith("go1.27")
    assert go_environment({}, argocd.toolchain)["GOTOOLCHAIN"] == argocd.toolchain
    assert go_environment({})["GOTOOLCHAIN"] == "local"
    assert all(tool.toolchain is None for name, tool in tools.items() if name != "argo-cd")
