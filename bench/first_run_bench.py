"""First-run figures: what `scripts/up` costs on a new machine, and what it cost when it built everything.

    .venv/bin/python bench/first_run_bench.py [--bootstrap runtime,dev] [--up] [--cold-up]

- tool builds: each pinned tool's cold build time from its cache manifest, summed for what `up` needs
  (`scripts/up` builds these) and for the test-only tools (`scripts/test` adds them);
- bootstrap: `scripts/bootstrap runtime` (and `dev`: test tools and torch) into a new virtualenv in a copy of
  the committed tree, with empty pip and uv caches (every distribution downloaded), then in another copy with the
  caches warm (as a fresh CI clone);
- with --up, `scripts/up` end to end with warm tools, in its own state directory: a new simulated cluster,
  then again;
- with --cold-up, what a new machine pays: `scripts/up` end to end in a copy of the committed tree with empty
  pip, uv, Go module, Go build and tool caches (every download and every compile of the tools `up` needs; about
  11 minutes of both cores), and each tool's build time from that run's manifests.

Without --cold-up nothing is built: the manifests of ~/.cache/konduktor keep each tool's cold build time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from konduktor.tools.catalog import load_tools
from konduktor.tools.gobuild import installed

ROOT = Path(__file__).resolve().parents[1]


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def tool_builds() -> dict[str, float]:
    """Cold build seconds per purpose (`up`, `test`) from the manifests; NaN when a tool is not built."""
    sums = {"up": 0.0, "test": 0.0}
    print("tool builds (cold, from the cache manifests):")
    for tool in load_tools().values():
        if not tool.packages:
            continue
        build = installed(tool)
        seconds = build.seconds if build else float("nan")
        purpose = "up" if "up" in tool.needed_by else "test"
        sums[purpose] += seconds
        print(f"  {tool.name:<11} {tool.version:<9} {purpose:<5} {seconds:8.1f} s")
    print(f"  what `up` needs: {sums['up']:.0f} s; test-only tools: {sums['test']:.0f} s")
    return sums


def bootstrap(kind: str) -> tuple[float, float, int]:
    """`scripts/bootstrap KIND` in a copy of the committed tree with empty pip and uv caches (every distribution
    downloaded), then in a second copy with those caches warm (a fresh CI clone); the virtualenv's size in MiB."""
    with tempfile.TemporaryDirectory(prefix="konduktor-first-run-") as scratch:
        caches = {"PIP_CACHE_DIR": Path(scratch) / "pip-cache", "UV_CACHE_DIR": Path(scratch) / "uv-cache"}
        env = {**os.environ, **{name: str(path) for name, path in caches.items()}, "PYTHON": sys.executable}
        env.pop("VIRTUAL_ENV", None)
        seconds = []
        for copy in ("cold", "warm"):
            tree = Path(scratch) / copy
            tree.mkdir()
            archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
            seconds.append(timed(["scripts/bootstrap", kind], tree, env))
        size = subprocess.run(["du", "-sm", str(tree / ".venv")], capture_output=True, text=True, check=True)
        return seconds[0], seconds[1], int(size.stdout.split()[0])


def scripts_up() -> tuple[float, float]:
    """`scripts/up` with warm tools in a state directory of its own: a new simulated cluster, then again."""
    state = tempfile.mkdtemp(prefix="konduktor-first-run-state-")
    env = {**os.environ, "KONDUKTOR_STATE": state}
    try:
        return timed(["scripts/up"], ROOT, env), timed(["scripts/up"], ROOT, env)
    finally:
        subprocess.run([str(ROOT / ".venv" / "bin" / "konduktor-install"), "sim", "down"], env=env, check=False)
        shutil.rmtree(state, ignore_errors=True)


def cold_scripts_up() -> None:
    """`scripts/up` on a new machine: a copy of the committed tree and nothing cached, then its tools' figures."""
    scratch = Path(tempfile.mkdtemp(prefix="konduktor-cold-up-"))
    tree, caches = (
        scratch / "tree",
        {
            "PIP_CACHE_DIR": scratch / "pip",
            "UV_CACHE_DIR": scratch / "uv",
            "GOCACHE": scratch / "go-build",
            "GOMODCACHE": scratch / "go-mod",
            "KONDUKTOR_CACHE": scratch / "konduktor",
            "KONDUKTOR_STATE": scratch / "state",
        },
    )
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    env = {**os.environ, **{name: str(path) for name, path in caches.items()}}
    env.pop("VIRTUAL_ENV", None)
    try:
        seconds = timed(["scripts/up"], tree, env)
        print(f"cold scripts/up (empty pip, uv, Go and tool caches): {seconds:.0f} s")
        for tool in load_tools().values():
            manifest = caches["KONDUKTOR_CACHE"] / "tools" / f"{tool.name}-{tool.version}" / "manifest.json"
            if manifest.exists():
                print(f"  {tool.name:<11} {tool.version:<9} {json.loads(manifest.read_text())['seconds']:8.1f} s")
    finally:
        subprocess.run([str(tree / ".venv" / "bin" / "konduktor-install"), "sim", "down"], env=env, check=False)
        # The Go module cache is read-only by design; make it removable.
        subprocess.run(["chmod", "-R", "u+w", str(scratch)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", default="runtime", help="comma-separated: runtime, dev (dev downloads torch)")
    parser.add_argument("--up", action="store_true", help="also time scripts/up end to end (warm tools)")
    parser.add_argument("--cold-up", action="store_true", help="time scripts/up on a new machine (nothing cached)")
    args = parser.parse_args()

    builds = tool_builds()
    for kind in filter(None, args.bootstrap.split(",")):
        cold, warm, size = bootstrap(kind)
        print(f"scripts/bootstrap {kind}: cold {cold:.0f} s, warm {warm:.0f} s, virtualenv {size} MiB")
        if kind == "runtime":
            print(f"  cold scripts/up before `up` starts: {cold + builds['up']:.0f} s (bootstrap + the tools up needs)")
        if kind == "dev":
            every = cold + builds["up"] + builds["test"]
            print(f"  the former first run before `up` started (dev bootstrap + every tool): {every:.0f} s")
    if args.up:
        try:
            new, again = scripts_up()
        except subprocess.CalledProcessError as failure:
            sys.exit(f"scripts/up exited {failure.returncode} (its output is above); no figure")
        print(f"scripts/up, warm tools: new simulated cluster {new:.0f} s, again {again:.0f} s")
    if args.cold_up:
        cold_scripts_up()


if __name__ == "__main__":
    main()
