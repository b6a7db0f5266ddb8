"""The test suite's own rules (docs/development.md#tests): a test that needs the simulated cluster says so with the
`sim` marker, so that `-m "not sim"` is the unit tier; and no test module imports another, so that what several
modules share has one home (conftest.py, `support.py` or the helper module of its topic)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_count import api_servers_under

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_DIRS = (REPO_ROOT / "installer" / "tests", REPO_ROOT / "e2e")


def test_every_collected_test_that_takes_the_sim_fixture_is_marked_sim(request: pytest.FixtureRequest) -> None:
    """Over the tests of this session (all of them in a whole run): one whose fixtures reach `sim`, directly or
    through another fixture, carries the marker. A test that starts a `SimCluster` of its own, or asks for `sim`
    only at run time (e2e's `platform`), is marked by hand."""
    unmarked = [
        item.nodeid
        for item in request.session.items
        if "sim" in getattr(item, "fixturenames", ()) and item.get_closest_marker("sim") is None
    ]
    assert not unmarked, "needs the simulated cluster, add @pytest.mark.sim:\n" + "\n".join(unmarked)


def imported_test_modules(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        found += [name for name in names if name.split(".")[0].startswith("test_")]
    return found


def test_no_test_module_imports_another() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)} imports {module}"
        for directory in TEST_DIRS
        for path in sorted(directory.glob("*.py"))
        for module in imported_test_modules(path)
    ]
    assert not found, "move what is shared to conftest.py or a helper module:\n" + "\n".join(found)


def test_the_cluster_count_sees_each_api_server_started_under_a_state_directory(tmp_path: Path) -> None:
    """The run's summary counts simulated clusters by their kube-apiserver processes under a process's state
    directory: one started there is seen once, one elsewhere never."""
    binary = tmp_path / "bin" / "kube-apiserver"  # a Python that waits, by the API server's name
    binary.parent.mkdir()
    binary.symlink_to(sys.executable)
    state, elsewhere = tmp_path / "state", tmp_path / "elsewhere"
    wait = "import sys; sys.stdin.read()"
    ours = subprocess.Popen([binary, "-c", wait, f"--etcd-prefix={state}/cluster/etcd"], stdin=subprocess.PIPE)
    other = subprocess.Popen([binary, "-c", wait, f"--etcd-prefix={elsewhere}/cluster/etcd"], stdin=subprocess.PIPE)
    try:
        assert {pid for pid, _ in api_servers_under(str(state))} == {ours.pid}
    finally:
        for process in (ours, other):
            process.kill()
            process.wait()
    assert api_servers_under(str(state)) == set()
