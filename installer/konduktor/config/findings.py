"""Problems found in a config: where (YAML path and line), how bad, what to do about it."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from konduktor.errors import UsageError

Severity = Literal["error", "warning"]
PathPart = str | int
YamlPath = tuple[PathPart, ...]

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def format_path(path: YamlPath) -> str:
    """`teams.team-a.gpus.h100.quota`; list items and keys with dots or slashes in brackets."""
    text = ""
    for part in path:
        if isinstance(part, int) or not _PLAIN_KEY.match(part):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    path: YamlPath
    message: str
    hint: str | None = None
    line: int | None = None

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def as_json(self) -> dict[str, object]:
        """One finding as `validate -o json` reports it."""
        return {
            "severity": self.severity,
            "line": self.line,
            "path": format_path(self.path),
            "message": self.message,
            "hint": self.hint,
            "rule": self.rule,
        }

    def located(self, filename: str) -> str:
        """`config.yaml:7: teams.team-a.gpus.h100.quota: must be >= 0`."""
        where = f"{filename}:{self.line}" if self.line is not None else filename
        return f"{where}: {format_path(self.path)}: {self.message}" if self.path else f"{where}: {self.message}"


def error(rule: str, path: YamlPath, message: str, hint: str | None = None) -> Finding:
    return Finding(rule, "error", path, message, hint)


def warning(rule: str, path: YamlPath, message: str, hint: str | None = None) -> Finding:
    return Finding(rule, "warning", path, message, hint)


def with_lines(findings: Iterable[Finding], lines: Mapping[YamlPath, int]) -> list[Finding]:
    """Each finding with the line of the deepest part of its path that the file has."""
    located = []
    for finding in findings:
        line = None
        for depth in range(len(finding.path), -1, -1):
            if finding.path[:depth] in lines:
                line = lines[finding.path[:depth]]
                break
        located.append(replace(finding, line=line))
    return located


class ConfigError(UsageError):
    """The config has errors; all of them are in `findings`, in file order."""

    def __init__(self, filename: str, findings: Sequence[Finding]) -> None:
        errors = [f for f in findings if f.is_error]
        self.filename = filename
        self.findings = list(findings)
        if len(errors) == 1:
            super().__init__(errors[0].located(filename), hint=errors[0].hint)
            return
        detail = []
        for finding in errors:
            detail.append(finding.located(filename))
            detail.extend(f"  hint: {line}" for line in (finding.hint or "").splitlines())
        super().__init__(f"{filename}: {len(errors)} errors", detail="\n".join(detail))


def did_you_mean(given: str, choices: Iterable[str]) -> str | None:
    """`did you mean 'gpusPerNode'?` for a typo, a case or `_`/`-` slip; None when nothing is close."""

    def squashed(text: str) -> str:
        return text.lower().replace("_", "").replace("-", "")

    options = list(choices)
    alike = [c for c in options if squashed(c) == squashed(given)]
    close = alike or difflib.get_close_matches(given, options, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def sort_by_line(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: f.line if f.line is not None else 0)
