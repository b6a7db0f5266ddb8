"""The metric names a PromQL expression reads, and Grafana template variables replaced by concrete values.

Name extraction is lexical, not a parser: string literals, label matchers, grouping clauses, durations and
numbers are removed, and what remains that is an identifier but neither a keyword nor a function call is a
metric name. Whether the expression parses at all is left to the real promtool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"([^"]+)"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_OFFSET = re.compile(r"\boffset\s+-?[0-9][0-9smhdwy]*")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_:.])(?:0x[0-9a-fA-F]+|[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?[smhdwy]*)")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# group_left/group_right may stand without a label list (`* on (pod) group_left sum(...)`).
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2", "group_left", "group_right"})

# Grafana writes a variable as $name, ${name}, ${name:format} or [[name]]; "$1" in label_replace is not one.
_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\$([A-Za-z_]\w*)|\[\[([A-Za-z_]\w*)\]\]")


def metric_names(expr: str) -> set[str]:
    """Metric names selected anywhere in `expr`, including `{__name__="..."}` selectors."""
    strings_gone = _STRING.sub(lambda m: '""' if m.group(0).startswith('"') else "''", expr)
    names = set(_NAME_MATCHER.findall(expr))
    text = _MATCHERS.sub(" ", strings_gone)
    text = _GROUPING.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    text = _STRING.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    for match in _IDENTIFIER.finditer(text):
        word = match.group(0)
        if word.lower() in KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def variables(expr: str) -> set[str]:
    """Grafana template variables used in `expr`."""
    return {next(g for g in m.groups() if g) for m in _VARIABLE.finditer(expr)}


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with each known Grafana variable replaced; unknown ones are left for the caller to report."""

    def replace(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        return values.get(name, match.group(0))

    return _VARIABLE.sub(replace, expr)
