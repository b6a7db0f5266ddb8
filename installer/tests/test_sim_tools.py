"""The pinned tool set: wrapper modules, version overrides, and what a user sees when a build fails."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from konduktor.cli.console import DETAIL, progress
from konduktor.cli.main import main
from konduktor.errors import KonduktorError, UsageError
from konduktor.tools.catalog import Tool, load_tools, parse_overrides, with_versions
from konduktor.tools.gobuild import GoBuild, build, escape_module_path, installed, module_dir
from konduktor.tools.gomod import LOCKED_MODULES, staging_replaces, wrapper_directives, wrapper_gomod
from konduktor.tools.host_tools import ENV_VARS, reported_version, unfit
from konduktor.tools.toolbox import Toolbox

KUBERNETES_GOMOD = """module k8s.io/kubernetes

require (
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/cri-streaming => ./staging/src/k8s.io/cri-streaming
)
"""


def test_every_pinned_tool_has_a_tag_and_binaries() -> None:
    tools = load_tools()
    assert {"kubernetes", "etcd", "kwok", "kueue", "helm"} <= set(tools)
    binaries = [b for tool in tools.values() for b in tool.binaries()]
    for needed in (
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
        "etcd",
        "kwok",
        "kwokctl",
        "kueue",
        "helm",
    ):
        assert binaries.count(needed) == 1, needed
    for tool in tools.values():
        # An upstream tool at a tag; our own module at a hash of its source.
        assert tool.version.startswith("src-" if tool.source else "v"), tool


def test_kubernetes_reports_its_real_version() -> None:
    """Kueue parses the API server's version as semver and exits on the unset default."""
    flags = load_tools()["kubernetes"].linker_flags()
    assert "k8s.io/component-base/version.gitVersion=v1.36" in flags


def test_staging_replaces_point_at_published_tags() -> None:
    assert staging_replaces(KUBERNETES_GOMOD, "v1.36.3") == [
        "k8s.io/api => k8s.io/api v0.36.3",
        "k8s.io/client-go => k8s.io/client-go v0.36.3",
        "k8s.io/cri-streaming => k8s.io/cri-streaming v0.36.3",
    ]


def test_wrapper_module_requires_the_tool_and_repeats_the_replaces() -> None:
    tool = Tool("kueue", "sigs.k8s.io/kueue", "v0.19.2", ("cmd/kueue",))
    text = wrapper_gomod(tool, ["k8s.io/api => k8s.io/api v0.36.3"])
    assert "require sigs.k8s.io/kueue v0.19.2" in text
    assert "\tk8s.io/api => k8s.io/api v0.36.3" in text
    assert tool.binaries() == ["kueue"]
    assert Tool("etcd", "go.etcd.io/etcd/server/v3", "v3.6.16", (".",), binary="etcd").binaries() == ["etcd"]


def test_version_overrides() -> None:
    tools = with_versions(load_tools(), parse_overrides(["kueue=v0.19.1"]))
    assert tools["kueue"].version == "v0.19.1"
    with pytest.raises(UsageError, match="unknown tool"):
        with_versions(load_tools(), {"kuueue": "v1.0.0"})
    with pytest.raises(UsageError, match="not a module tag"):
        with_versions(load_tools(), {"kueue": "latest"})
    with pytest.raises(UsageError, match="TOOL=VERSION"):
        parse_overrides(["kueue"])


def test_bad_version_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "install", "kueue", "--version", "kueue=latest"]) == 2
    captured = capsys.readouterr()
    assert "error: --version kueue=latest: not a module tag" in captured.err
    assert "Traceback" not in captured.err


def test_a_version_that_cannot_be_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tag the module proxy does not have: a clear error, the go output, a hint, exit 1, no traceback."""
    monkeypatch.setenv("KONDUKTOR_CACHE", str(tmp_path))
    assert main(["tools", "install", "kwok", "--version", "kwok=v0.0.99"]) == 1
    err = capsys.readouterr().err
    assert "error: could not build kwok v0.0.99: sigs.k8s.io/kwok@v0.0.99: reading" in err  # go's own words
    assert "hint: sigs.k8s.io/kwok has no version v0.0.99" in err
    assert "Traceback" not in err
    assert not list((tmp_path / "tools").glob("kwok-v0.0.99/manifest.json"))


def test_tools_list_shows_versions_and_paths(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "list", "-o", "json"]) == 0
    out = capsys.readouterr().out
    assert '"binary": "kube-apiserver"' in out
    assert '"version": "v1.36.3"' in out


def test_tools_path_prints_the_pinned_binary_and_refuses_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "path", "kubectl"]) == 0
    pinned = installed(load_tools()["kubernetes"])
    assert pinned is not None and capsys.readouterr().out == f"{pinned.paths['kubectl']}\n"
    assert main(["tools", "path", "kubectll"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "error: no pinned tool provides 'kubectll'" in captured.err
    assert "kubectl" in captured.err and "Traceback" not in captured.err


def test_wrapper_repeats_the_tools_own_directives() -> None:
    """promtool-style modules only build with their replace/exclude lines; local paths cannot be repeated."""
    tool_gomod = """module github.com/prometheus/prometheus

replace github.com/hashicorp/memberlist => github.com/grafana/memberlist v0.3.1 // fork
replace go.etcd.io/etcd/api/v3 => ../api

exclude (
\tcloud.google.com/go v0.26.0
\tgithub.com/old/thing v1.0.0
)

replace (
\tk8s.io/api => k8s.io/api v0.35.0
)
"""
    shared = staging_replaces(KUBERNETES_GOMOD, "v1.36.3")
    replaces, excludes = wrapper_directives(tool_gomod, shared)
    assert replaces == [
        "github.com/hashicorp/memberlist => github.com/grafana/memberlist v0.3.1",
        "k8s.io/api => k8s.io/api v0.35.0",  # the tool's own choice wins
        "k8s.io/client-go => k8s.io/client-go v0.36.3",
        "k8s.io/cri-streaming => k8s.io/cri-streaming v0.36.3",
    ]
    assert excludes == ["cloud.google.com/go v0.26.0", "github.com/old/thing v1.0.0"]
    text = wrapper_gomod(
        Tool("promtool", "github.com/prometheus/prometheus", "v0.314.0", ("cmd/promtool",)), replaces, excludes
    )
    assert "exclude (\n\tcloud.google.com/go v0.26.0" in text


def test_module_cache_paths_escape_upper_case() -> None:
    assert escape_module_path("github.com/Azure/go-autorest") == "github.com/!azure/go-autorest"
    assert escape_module_path("sigs.k8s.io/kueue") == "sigs.k8s.io/kueue"


def test_manifest_sources_resolve_even_when_they_need_a_newer_go() -> None:
    """argo-cd's module asks for a newer Go than the pinned toolchain; its CRDs are still read."""
    crds = module_dir(load_tools()["argo-cd"]) / "manifests" / "crds"
    assert (crds / "application-crd.yaml").is_file()


# --- committed build modules, progress and the cache -------------------------------------------------------------


@pytest.mark.slow  # compiles Go
def test_a_tool_builds_from_its_committed_module_and_a_second_run_reuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KONDUKTOR_CACHE", str(tmp_path))
    assert main(["tools", "install", "helm"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"helm v4\.2\.4: compiling helm · \d+/\d+ packages", err), err
    assert "helm v4.2.4: built in " in err
    source = tmp_path / "tools" / "helm-v4.2.4" / "src"
    committed = LOCKED_MODULES / "helm"
    assert (source / "go.mod").read_text() == (committed / "go.mod").read_text()  # read-only: go changed nothing
    assert (source / "go.sum").read_text() == (committed / "go.sum").read_text()
    version = subprocess.run(
        [str(tmp_path / "tools" / "helm-v4.2.4" / "bin" / "helm"), "version", "--template", "{{.Version}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout == "v4.2.4"

    assert main(["tools", "install", "helm"]) == 0
    again = capsys.readouterr().err
    assert f"helm v4.2.4: reusing the cache {tmp_path / 'tools' / 'helm-v4.2.4'}" in again
    assert "compiling" not in again


def test_a_module_that_differs_from_the_committed_go_sum_is_not_built(tmp_path: Path) -> None:
    """A go.sum line that does not match what the proxy serves (as after a tampered module): the build stops."""
    tools = load_tools()
    modules = tmp_path / "modules"
    shutil.copytree(LOCKED_MODULES / "helm", modules / "helm")
    sums = modules / "helm" / "go.sum"
    line = next(x for x in sums.read_text().splitlines() if x.startswith("helm.sh/helm/v4 v4.2.4 h1:"))
    forged = line[: -len("AAAAAAAAAAAA=")] + "AAAAAAAAAAAA="
    sums.write_text(sums.read_text().replace(line, forged))
    with pytest.raises(KonduktorError) as failure:
        build(tools["helm"], tools["kubernetes"], lambda _m: None, root=tmp_path / "cache", modules=modules)
    assert "checksum mismatch" in (failure.value.detail or "")
    assert failure.value.hint is not None and "differs from go.sum" in failure.value.hint
    assert installed(tools["helm"], tmp_path / "cache") is None


def test_progress_without_a_terminal_prints_each_step_and_throttles_its_detail(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with progress("tools") as report:
        report("kwok v0.8.0: downloading modules")
        for done in range(1, 200):
            report(f"kwok v0.8.0: compiling kwok{DETAIL}{done}/200 packages")
        report("kwok v0.8.0: compiling kwokctl · 0/90 packages")
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "tools: kwok v0.8.0: downloading modules",
        "tools: kwok v0.8.0: compiling kwok · 1/200 packages",
        "tools: kwok v0.8.0: compiling kwokctl · 0/90 packages",
    ]


def test_tools_needed_by_up_leave_out_the_test_tools() -> None:
    toolbox = Toolbox()
    assert set(toolbox.needed_by("up")) == {"kubernetes", "etcd", "kwok", "kueue", "helm"}
    assert set(toolbox.needed_by("test")) == {
        "prometheus",
        "kustomize",
        "helm-docs",
        "alertmanager",
        "loki",
        "otelcol-builder",
        "argo-cd",
    }
    assert main(["tools", "install", "--for", "nothing"]) == 2


# --- helm and kubectl already on this machine ----------------------------------------------------------------------


def test_versions_that_fit() -> None:
    assert unfit("helm", "v4.0.1", "v4.2.4") is None
    assert "is not Helm 4" in (unfit("helm", "v3.15.2", "v4.2.4") or "")
    assert unfit("kubectl", "v1.35.2", "v1.36.3") is None
    assert unfit("kubectl", "v1.37.0", "v1.36.3") is None
    assert "outside v1.35-v1.37" in (unfit("kubectl", "v1.32.4-dispatcher", "v1.36.3") or "")
    assert unfit("kubectl", None, "v1.36.3") == "could not tell its version"
    kubectl_json = '{"clientVersion": {"gitVersion": "v1.32.4-dispatcher"}, "kustomizeVersion": "v5.5.0"}'
    assert reported_version("kubectl", kubectl_json) == "v1.32.4-dispatcher"
    assert reported_version("helm", "v4.2.4") == "v4.2.4"


@pytest.fixture
def host_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding the pinned helm and kubectl, as a workstation with fitting tools installed has."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for binary in ("helm", "kubectl"):
        (folder / binary).symlink_to(Toolbox().path(binary))
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    for variable in ENV_VARS.values():
        monkeypatch.delenv(variable, raising=False)
    return folder


def test_a_fitting_tool_on_path_serves_real_clusters_only(host_bin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert Toolbox(host=True).path("helm") == host_bin / "helm"
    assert Toolbox(host=True).path("kubectl") == host_bin / "kubectl"
    assert Toolbox().path("kubectl") == installed(load_tools()["kubernetes"]).paths["kubectl"]  # type: ignore[union-attr]
    assert main(["tools", "list", "-o", "json"]) == 0
    rows = {row["binary"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["helm"]["source"] == "PATH" and rows["helm"]["path"] == str(host_bin / "helm")
    assert rows["helm"]["version"] == "v4.2.4"
    assert rows["kube-apiserver"]["source"] == "cache"


def test_a_named_tool_that_does_not_fit_is_refused(
    host_bin: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    not_helm = host_bin / "kubectl"  # answers `helm version --template` with an error: no version to trust
    monkeypatch.setenv("KONDUKTOR_HELM", str(not_helm))
    with pytest.raises(UsageError, match=f"KONDUKTOR_HELM={not_helm}: could not tell its version"):
        Toolbox(host=True).path("helm")
    assert Toolbox().path("helm") != not_helm  # the simulated cluster keeps the pinned helm
    assert main(["tools", "list", "-o", "json"]) == 0
    rows = {row["binary"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["helm"]["source"] == "cache"
    assert rows["helm"]["host"]["problem"] == "could not tell its version"
    monkeypatch.setenv("KONDUKTOR_HELM", str(host_bin / "missing"))
    with pytest.raises(UsageError, match="not an executable file"):
        Toolbox(host=True).path("helm")


def test_an_unfit_tool_on_path_is_passed_over(host_bin: Path) -> None:
    (host_bin / "helm").unlink()
    (host_bin / "helm").symlink_to(Toolbox().path("kubectl"))  # a `helm` whose version cannot be read
    notes: list[str] = []
    assert Toolbox(host=True, progress=notes.append).path("helm") == Toolbox().path("helm")
    assert any("could not tell its version; using the pinned helm v4.2.4" in n for n in notes), notes


@pytest.mark.slow  # compiles Go
def test_build_progress_counts_the_packages_go_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On an empty build cache every package is compiled; the count reaches the total go listed beforehand."""
    monkeypatch.setenv("GOCACHE", str(tmp_path / "gocache"))
    module = tmp_path / "hello"
    (module / "greet").mkdir(parents=True)
    (module / "go.mod").write_text("module example.com/hello\n\ngo 1.26\n")
    (module / "greet" / "greet.go").write_text(
        'package greet\n\nimport "strings"\n\nfunc Hi() string { return strings.ToUpper("hi") }\n'
    )
    (module / "main.go").write_text(
        'package main\n\nimport (\n\t"fmt"\n\n\t"example.com/hello/greet"\n)\n\n'
        "func main() { fmt.Println(greet.Hi()) }\n"
    )
    messages: list[str] = []
    go = GoBuild(Tool("hello", "example.com/hello", "v0.0.0", (".",), binary="hello"), module, messages.append)
    go.compile("example.com/hello", "hello", tmp_path / "hello-bin", lambda b, done, total: f"{b} · {done}/{total}")
    counts = [tuple(map(int, m.rsplit(" ", 1)[1].split("/"))) for m in messages if " · " in m]
    assert counts[0][0] == 0 and counts[0][1] > 10  # fmt's standard library packages are compiled too
    assert counts[-1][0] == counts[-1][1]
    assert [done for done, _ in counts] == sorted(done for done, _ in counts)
    assert subprocess.run([str(tmp_path / "hello-bin")], capture_output=True, text=True, check=True).stdout == "HI\n"


def test_argocd_is_one_binary_under_its_role_names() -> None:
    """Upstream's multi-call binary: the role is the name it is started under."""
    argocd = load_tools()["argo-cd"]
    assert argocd.built_binaries() == ["argocd"]
    assert {"argocd-application-controller", "argocd-repo-server", "argocd-cmp-server"} <= set(argocd.binaries())
    assert "github.com/argoproj/argo-cd/v3/common.version=3.6.1" in argocd.linker_flags()
