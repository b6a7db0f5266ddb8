"""Binary resolution: the path of each binary of the pinned tool set, built on first use."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from konduktor.errors import UsageError
from konduktor.paths import cache_dir
from konduktor.tools import host_tools
from konduktor.tools.catalog import Tool, load_tools
from konduktor.tools.gobuild import Installed, Progress, build, installed


class Toolbox:
    """The binaries of the pinned tool set, built on first use.

    With `host`, for commands against a real cluster, a fitting helm or kubectl already on this machine (named
    by KONDUKTOR_HELM / KONDUKTOR_KUBECTL, else on PATH) is used instead of the pinned build.
    """

    def __init__(
        self,
        tools: Mapping[str, Tool] | None = None,
        progress: Progress | None = None,
        root: Path | None = None,
        *,
        host: bool = False,
    ) -> None:
        self.tools = dict(tools or load_tools())
        self.progress = progress or (lambda _message: None)
        self.root = root or cache_dir()
        self.host = host

    def provider(self, binary: str) -> Tool:
        for tool in self.tools.values():
            if binary in tool.binaries():
                return tool
        known = sorted(b for tool in self.tools.values() if tool.packages for b in tool.binaries())
        raise UsageError(f"no pinned tool provides {binary!r}", hint=f"binaries: {', '.join(known)}")

    def path(self, binary: str) -> Path:
        tool = self.provider(binary)
        if self.host and (found := host_tools.find(binary, tool.version)):
            if found.problem is None:
                return found.path
            if found.explicit:
                raise UsageError(
                    f"{found.source.removeprefix('$')}={found.path}: {found.problem}",
                    hint=f"name a {binary} that fits, or unset {found.source.removeprefix('$')} to use the "
                    f"pinned {binary} {tool.version}",
                )
            self.progress(f"{binary} on PATH ({found.path}): {found.problem}; using the pinned {binary} {tool.version}")
        return build(tool, self.tools["kubernetes"], self.progress, self.root).paths[binary]

    def needed_by(self, purpose: str) -> list[str]:
        return [name for name, tool in self.tools.items() if purpose in tool.needed_by]

    def install(self, names: list[str] | None = None) -> list[Installed]:
        # Tools without packages are manifest sources (CRDs); module_dir() fetches them when needed.
        selected = names or [name for name, tool in self.tools.items() if tool.packages]
        unknown = [n for n in selected if n not in self.tools]
        if unknown:
            raise UsageError(f"unknown tool {', '.join(unknown)}", hint=f"tools are: {', '.join(self.tools)}")
        pending = [n for n in selected if installed(self.tools[n], self.root) is None]
        done = []
        for name in selected:
            then = pending[pending.index(name) + 1 :] if name in pending else []
            done.append(build(self.tools[name], self.tools["kubernetes"], self.progress, self.root, then))
        return done
