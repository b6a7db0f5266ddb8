"""charts/konduktor/images.txt, the list to mirror and to pin, names every image the platform runs: the charts'
own, the burn-in's and the preflight pods' defaults in code (which run privileged), each pinned by tag and, where
given, by digest."""

from __future__ import annotations

import re
from pathlib import Path

from konduktor.burnin.tiers import BurnInImages
from konduktor.config.model import KONDUKTOR_IMAGE, NodeCheckPods
from konduktor.helm.release import CHARTS
from konduktor.kube.documents import load_documents

IMAGES = CHARTS / "konduktor" / "images.txt"
PINNED = re.compile(
    r"^(?P<name>[a-z0-9][a-z0-9./_:-]*/[a-z0-9./_-]+):(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]*)(@sha256:[0-9a-f]{64})?$"
)


def listed(path: Path = IMAGES) -> dict[str, str]:
    """Each listed image without its digest -> the line as written."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    entries = [line for line in lines if line and not line.startswith("#")]
    assert len(entries) == len(set(entries)), "an image is listed twice"
    return {entry.split("@")[0]: entry for entry in entries}


def test_every_entry_is_pinned_by_tag_and_optionally_by_digest() -> None:
    for entry in listed().values():
        match = PINNED.match(entry)
        assert match is not None, f"{entry}: expected registry/name:tag[@sha256:<64 hex>]"
        assert match["tag"] != "latest", entry


def test_the_privileged_images_of_burnin_and_preflight_are_listed() -> None:
    images = listed()
    burnin = BurnInImages()
    for image in (burnin.dcgm, burnin.pytorch, burnin.nccl_tests, KONDUKTOR_IMAGE, NodeCheckPods().image):
        assert image.split("@")[0] in images, f"{image} is not in images.txt"


def test_the_images_the_controller_may_run_are_the_burnins_and_are_listed() -> None:
    """konduktor-core's burnin.images (what the admission policy lets the controller's Jobs run) are the code's
    defaults, and images.txt lists them; a release that pins digests changes all three together."""
    values = load_documents(CHARTS / "konduktor-core" / "values.yaml")[0]
    allowed = set(values["burnin"]["images"].values())
    burnin = BurnInImages()
    assert allowed == {burnin.dcgm, burnin.pytorch, burnin.nccl_tests}
    images = listed()
    for image in allowed:
        assert images.get(image.split("@")[0]) == image, f"{image} differs from images.txt"


def test_a_missing_or_floating_image_is_caught(tmp_path: Path) -> None:
    """The checks above can fail: a list without the burn-in images, or with a floating tag."""
    path = tmp_path / "images.txt"
    path.write_text("\n".join(line for line in IMAGES.read_text().splitlines() if "pytorch" not in line) + "\n")
    assert BurnInImages().pytorch not in listed(path)
    assert PINNED.match("nvcr.io/nvidia/pytorch") is None
    assert PINNED.match("nvcr.io/nvidia/pytorch:25.01-py3@sha256:abc") is None
    assert PINNED.match("nvcr.io/nvidia/pytorch:25.01-py3@sha256:" + "a" * 64) is not None
