"""The what-if engine, our Go module (whatif-engine/): gofmt- and go vet-clean, its go tests pass, its go.mod at the
versions the tools catalog pins, and its build cached like the pinned tools (a changed source is a new version)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from konduktor.paths import product_dir
from konduktor.tools.catalog import load_tools, source_version
from konduktor.tools.gobuild import go_environment
from konduktor.tools.gomod import lock_problems, source_problems

MODULE = product_dir("whatif-engine")


def go(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["go", *args], cwd=MODULE, env=go_environment(os.environ), capture_output=True, text=True, check=False
    )


@pytest.mark.slow  # go vet and go test of the engine
def test_the_engine_is_gofmt_and_vet_clean_and_its_go_tests_pass() -> None:
    unformatted = subprocess.run(["gofmt", "-l", "."], cwd=MODULE, capture_output=True, text=True, check=True)
    assert unformatted.stdout == ""
    for tags in ([], ["-tags", "whatifengine"]):
        vetted = go("vet", *tags, "./...")
        assert vetted.returncode == 0, vetted.stdout + vetted.stderr
    tested = go("test", "./...")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "ok  \tkonduktor.ai/whatif-engine/replay" in tested.stdout


def test_the_engine_requires_the_pinned_kueue_and_kubernetes_libraries(tmp_path: Path) -> None:
    tools = load_tools()
    assert lock_problems(tools) == []
    engine = tools["whatif-engine"]
    copy = tmp_path / "whatif-engine"
    shutil.copytree(MODULE, copy)
    gomod = copy / "go.mod"
    gomod.write_text(gomod.read_text().replace("sigs.k8s.io/kueue v0.19.2", "sigs.k8s.io/kueue v0.19.1"))
    problems = source_problems(engine, tools, "v0.36.3", copy)
    assert problems == [
        f"whatif-engine: go.mod requires sigs.k8s.io/kueue v0.19.1; versions.toml: {tools['kueue'].version}"
    ]


def test_a_changed_source_is_a_new_version(tmp_path: Path) -> None:
    copy = tmp_path / "whatif-engine"
    shutil.copytree(MODULE, copy)
    before = source_version(copy)
    assert before == load_tools()["whatif-engine"].version
    (copy / "replay" / "replay.go").write_text((copy / "replay" / "replay.go").read_text() + "\n// changed\n")
    assert source_version(copy) != before
