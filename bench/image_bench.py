"""The konduktor image's build: size, time cold and warm, and whether two builds of one commit agree.

    .venv/bin/python bench/image_bench.py [--builds 2]

Each build is `konduktor.image.build.build` (what `konduktor-install image build` and scripts/image run), run as
root (mmdebstrap's root mode). The first build has an empty Debian package cache (its own KONDUKTOR_CACHE, so
every .deb is downloaded); the later ones reuse it (warm). pip's cache is this machine's, as in CI. Prints, per
build, its time by step and its digest; then the archive's size, the layer compressed and unpacked, and whether
every build gave the same digest (and if not, the first entries of the layers that differ).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from konduktor.image.build import Built, build
from konduktor.image.oci import layer_members


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def differences(first: Path, other: Path, limit: int = 10) -> list[str]:
    """The first layer entries whose metadata or size differ between two archives (content is not compared)."""

    def entries(archive: Path) -> dict[str, tuple[int, int, int, int, int, str]]:
        return {m.name: (m.mode, m.uid, m.gid, m.size, m.mtime, m.linkname) for m in layer_members(archive)}

    a, b = entries(first), entries(other)
    names = sorted(set(a) ^ set(b)) + sorted(n for n in set(a) & set(b) if a[n] != b[n])
    return names[:limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=2, help="Builds of this commit (the first one cold).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="image-bench-") as scratch:
        os.environ["KONDUKTOR_CACHE"] = str(Path(scratch) / "cache")  # an empty Debian package cache
        builds: list[tuple[Built, float]] = []
        for number in range(args.builds):
            started = time.monotonic()
            built = build(Path(scratch) / f"build-{number}")
            seconds = time.monotonic() - started
            builds.append((built, seconds))
            steps = ", ".join(f"{step} {spent:.0f} s" for step, spent in built.seconds.items())
            kind = "cold (no Debian package cached)" if number == 0 else "warm"
            print(f"build {number + 1}, {kind}: {seconds:.0f} s ({steps}) -> {built.digest}")
        first = builds[0][0].archive
        print(f"archive {mib(first.path.stat().st_size)}: layer {mib(first.layer.size)} gzipped, "
              f"{mib(first.layer_unpacked)} unpacked")  # fmt: skip
        digests = {built.digest for built, _ in builds}
        if len(digests) == 1:
            print(f"same digest in all {len(builds)} builds: {first.manifest.digest}")
        else:
            print(f"{len(digests)} different digests in {len(builds)} builds")
            for built, _ in builds[1:]:
                if built.digest != first.manifest.digest:
                    print(f"  differing entries: {differences(first.path, built.archive.path)}")


if __name__ == "__main__":
    main()
