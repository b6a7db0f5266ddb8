"""helm and kubectl already on this machine, used for real clusters instead of building the pinned ones.

A binary named by KONDUKTOR_HELM / KONDUKTOR_KUBECTL, else the first on PATH, stands in for the pinned build
when its version fits; one that does not fit is refused when named explicitly, and passed over (the pinned one
is built) when merely found on PATH. The simulated cluster always runs the pinned builds: its tests and its
components are made for those versions.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_VARS = {"helm": "KONDUKTOR_HELM", "kubectl": "KONDUKTOR_KUBECTL"}
VERSION_ARGS = {"helm": ["version", "--template", "{{.Version}}"], "kubectl": ["version", "--client", "-o", "json"]}


@dataclass(frozen=True)
class HostTool:
    """A binary found on this machine, its version, and why it cannot replace the pinned one (None: it can)."""

    binary: str
    path: Path
    source: str  # "PATH" or "$KONDUKTOR_HELM"
    version: str | None
    problem: str | None

    @property
    def explicit(self) -> bool:
        return self.source != "PATH"


def semver(text: str) -> tuple[int, int, int] | None:
    match = re.search(r"v?(\d+)\.(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None


def reported_version(binary: str, output: str) -> str | None:
    """The version in what `helm version --template {{.Version}}` or `kubectl version --client -o json` print."""
    if binary == "kubectl":
        try:
            output = str(json.loads(output)["clientVersion"]["gitVersion"])
        except (ValueError, KeyError, TypeError):
            return None
    found = re.search(r"v\d+\.\d+\.\d+\S*", output)
    return found.group(0) if found else None


def unfit(binary: str, version: str | None, pinned: str) -> str | None:
    """Why a binary at `version` cannot stand in for the pinned `binary` (None: it can).

    helm: the same major version, whose flags and server-side apply the installer uses (Helm 3 has neither
    --server-side nor --force-conflicts). kubectl: within one minor version of the pinned Kubernetes, the
    skew kubectl supports against an API server.
    """
    found, wanted = semver(version or ""), semver(pinned)
    assert wanted is not None, f"pinned version {pinned} is not semver"
    if found is None:
        return "could not tell its version"
    if binary == "helm" and found[0] != wanted[0]:
        return f"helm {version} is not Helm {wanted[0]} (the pinned helm is {pinned})"
    if binary == "kubectl" and (found[0] != wanted[0] or abs(found[1] - wanted[1]) > 1):
        lowest, highest = f"v{wanted[0]}.{wanted[1] - 1}", f"v{wanted[0]}.{wanted[1] + 1}"
        return f"kubectl {version} is outside {lowest}-{highest} (one minor version around the pinned {pinned})"
    return None


def probe(binary: str, path: Path) -> str | None:
    try:
        done = subprocess.run(
            [str(path), *VERSION_ARGS[binary]], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    return reported_version(binary, done.stdout) if done.returncode == 0 else None


def find(binary: str, pinned: str, env: Mapping[str, str] | None = None) -> HostTool | None:
    """The helm or kubectl named by its environment variable, else the one on PATH; None when there is none."""
    env = os.environ if env is None else env
    variable = ENV_VARS.get(binary)
    if variable is None:
        return None
    if named := env.get(variable):
        path, source = Path(named).expanduser(), f"${variable}"
        if not (path.is_file() and os.access(path, os.X_OK)):
            return HostTool(binary, path, source, None, "not an executable file")
    else:
        which = shutil.which(binary, path=env.get("PATH"))
        if which is None:
            return None
        path, source = Path(which), "PATH"
    version = probe(binary, path)
    return HostTool(binary, path, source, version, unfit(binary, version, pinned))
