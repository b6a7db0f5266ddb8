"""`konduktor-install image`: build the konduktor image as an OCI image archive (konduktor.image.build)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from konduktor.cli.console import err, progress
from konduktor.image.build import build as build_image

app = typer.Typer(
    help="Build the konduktor image (OCI archive) from Debian's packages and the hash lock; no registry needed."
)


@app.command("build")
def build(
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder of the archive and its digest file.")] = Path(
        "dist"
    ),
    mirror: Annotated[
        list[str] | None,
        typer.Option(
            "--mirror",
            help="Debian mirror for mmdebstrap (a URI, a `deb ...` line or a sources file; repeatable); default: "
            "mmdebstrap's, with bookworm-updates and bookworm-security.",
        ),
    ] = None,
) -> None:
    """Build the image reproducibly, with no container registry or runtime: prints its digest (sha256:...)."""
    with progress("image") as report:
        built = build_image(output, mirrors=mirror or (), report=report)
    archive = built.archive
    spent = ", ".join(f"{step} {seconds:.0f} s" for step, seconds in built.seconds.items())
    err.print(
        f"konduktor {built.tag}: {archive.path} ({archive.layer.size / 2**20:.0f} MiB, "
        f"{archive.layer_unpacked / 2**20:.0f} MiB unpacked; {spent})\n"
        f"digest {built.digest} (also in {built.digest_file})\n"
        f"push: skopeo copy oci-archive:{archive.path} docker://REGISTRY/konduktor@{built.digest}",
        markup=False,
    )
    typer.echo(built.digest)
