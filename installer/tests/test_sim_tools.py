"""The pinned tool set: wrapper modules, version overrides, and what a user sees when a build fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from konduktor.cli.main import main
from konduktor.errors import UsageError
from konduktor.sim.tools import (
    Tool,
    escape_module_path,
    load_tools,
    module_dir,
    parse_overrides,
    staging_replaces,
    with_versions,
    wrapper_directives,
    wrapper_gomod,
)

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
        assert tool.version.startswith("v"), tool


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
