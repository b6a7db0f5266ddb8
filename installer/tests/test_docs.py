"""The README keeps the two set-up commands that CI runs, and the documentation's links lead somewhere: every
relative link in the README and the pages under docs/ (and the other READMEs people follow) names a file that
exists and, when it has an anchor, a heading of that file; so does every repository path to a Markdown page that
the code of installer/konduktor names in its comments and docstrings (`docs/design/burnin.md#thresholds`)."""

from __future__ import annotations

import re
from collections import Counter
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
        *(ROOT / "charts").glob("*/README.md"),
    ]
)
CODE = ROOT / "installer" / "konduktor"
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.MULTILINE | re.DOTALL)
# A path to a Markdown page in a comment or docstring, from the repository's root: a top-level directory of the
# repository, then the page, then perhaps an anchor.
TOP_LEVEL = "|".join(sorted(re.escape(p.name) for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")))
CODE_LINK = re.compile(rf"(?<![\w./-])((?:{TOP_LEVEL})/[\w./-]*\.md)(?:#([\w-]+))?")
# Paths the code names in another project's repository, not this one.
UPSTREAM = {
    ("installer/konduktor/whatif/job_series.py", "docs/metrics/workload/job-metrics.md"),  # kube-state-metrics'
}


def slug(heading: str) -> str:
    """GitHub's anchor of a heading, from its text as rendered: Markdown's marks go (links keep their text,
    code and emphasis lose their backticks, stars and underscores), then lower case, punctuation other than
    '-' and '_' dropped, each space to a hyphen. (GitHub has no `{#id}` of its own: that stays text.)"""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[`*]|(?<!\w)_+|_+(?!\w)", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings; GitHub numbers a repeated one (`-1`, `-2`, ...)."""
    text = FENCE.sub("", page.read_text())
    seen: Counter[str] = Counter()
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE):
        anchor = slug(heading)
        found.add(f"{anchor}-{seen[anchor]}" if seen[anchor] else anchor)
        seen[anchor] += 1
    return found


def links(page: Path) -> list[str]:
    return [m for m in LINK.findall(FENCE.sub("", page.read_text())) if not re.match(r"^[a-z]+:", m)]


def code_links(source: Path) -> list[str]:
    """The repository's Markdown pages (with their anchors) that a source file names."""
    where = str(source.relative_to(ROOT))
    return [
        f"{path}#{anchor}" if anchor else path
        for path, anchor in CODE_LINK.findall(source.read_text())
        if (where, path) not in UPSTREAM
    ]


def unresolved(link: str, base: Path, page: Path) -> str | None:
    """Why `link` (relative to `base`, `#anchor` alone meaning `page`) leads nowhere, or None."""
    path, _, anchor = link.partition("#")
    target = (base / path).resolve() if path else page
    if not target.exists():
        return f"{link}: no such file"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}"
    return None


SOURCES = sorted(p for p in CODE.rglob("*") if p.suffix in {".py", ".toml", ".json"} and code_links(p))


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
    assert slug("`max_unhealthy` and *the* _breaker_") == "max_unhealthy-and-the-breaker"
    assert slug("Set-up: [two](x.md) commands") == "set-up-two-commands"
    assert slug("Rights {#worker-rights}") == "rights-worker-rights"


def test_repeated_headings_are_numbered(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Notes\n\n## Notes\n\n```sh\n# Notes\n```\n\n## Notes\n")
    assert anchors(page) == {"notes", "notes-1", "notes-2"}


def test_code_links_are_repository_paths() -> None:
    source = CODE / "burnin" / "verdict" / "run.py"
    assert CODE_LINK.findall("(docs/design/burnin.md#thresholds), docs/health.md. cluster/node-metrics.md") == [
        ("docs/design/burnin.md", "thresholds"),
        ("docs/health.md", ""),
    ]
    assert unresolved("docs/design/burnin.md#thresholds", ROOT, source) is None
    assert unresolved("docs/design/burnin.md#no-such-heading", ROOT, source)
    assert unresolved("docs/no-such-page.md", ROOT, source)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = [why for link in links(page) if (why := unresolved(link, page.parent, page))]
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_page_the_code_names_resolves(source: Path) -> None:
    broken = [why for link in code_links(source) if (why := unresolved(link, ROOT, source))]
    assert not broken, f"{source.relative_to(ROOT)}: " + "; ".join(broken)
