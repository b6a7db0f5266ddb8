"""The README keeps the two set-up commands that CI runs, and the documentation's links lead somewhere: every
relative link in the README and the pages under docs/ (and the other READMEs people follow) names a file that
exists and, when it has an anchor, a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted(
    [
        README,
        *(ROOT / "docs").rglob("*.md"),
        ROOT / "bench" / "README.md",
        ROOT / "overlays" / "README.md",
        ROOT / "e2e" / "README.md",
        ROOT / "policies" / "README.md",
    ]
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def links(page: Path) -> list[str]:
    return [m for m in LINK.findall(FENCE.sub("", page.read_text())) if not re.match(r"^[a-z]+:", m)]


def test_the_readme_has_the_two_set_up_commands_ci_runs() -> None:
    text = README.read_text()
    block = re.search(r"^## Set-up: two commands\n.*?^```sh\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    assert block, "README: no `## Set-up: two commands` with a sh block"
    commands = [line.split()[0] for line in block.group(1).splitlines() if line and not line.startswith(" ")]
    assert commands == ["scripts/up", "scripts/test"]
    assert "konduktor-install up" in (ROOT / "scripts" / "up").read_text()
    assert re.search(r"^exec scripts/test$", (ROOT / ".ci" / "run").read_text(), flags=re.MULTILINE)


def test_slug_follows_github() -> None:
    assert slug("Install: `konduktor-install up`") == "install-konduktor-install-up"
    assert slug("Team quotas: config.yaml") == "team-quotas-configyaml"
    assert slug("Settings in config.yaml (`health:`)") == "settings-in-configyaml-health"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for link in links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
