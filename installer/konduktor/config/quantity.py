"""Kubernetes resource quantities ("192", "500m", "1900Gi", "1e3"), read exactly and written back.

Quotas are derived by multiplying and dividing node allocatable; exact fractions keep the sum of the
derived team quotas from exceeding the pool through float rounding.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# The exponent form is tried before the suffix so that "1E3" is 1000 while "1E" is one exa.
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<exponent>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
MEBI = 2**20
# Far beyond any node (Kubernetes keeps quantities within 64 bits), small enough to compute exactly at once.
_MAX_DIGITS = 40
_MAX_EXPONENT = 30


def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity; ValueError when Kubernetes would reject it too."""
    match = _QUANTITY.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 192, 500m, 1900Gi)")
    exponent = match["exponent"] or "e0"
    # Bounded before any arithmetic: "1e999999999" would take minutes and gigabytes to compute exactly.
    if len(match["number"]) > _MAX_DIGITS or len(exponent) > 4 or abs(int(exponent[1:])) > _MAX_EXPONENT:
        shown = text if len(text) <= 24 else f"{text[:12]}...({len(text):,} characters)"
        raise ValueError(f"{shown!r} is out of range for a quantity")
    value = Fraction(match["number"])
    if match["exponent"]:
        value *= Fraction(10) ** int(exponent[1:])
    elif match["suffix"]:
        suffix = match["suffix"]
        value *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    return value


def cpu_millicores(text: str) -> Fraction:
    return parse_quantity(text) * 1000


def format_cpu(millicores: int) -> str:
    """Whole cores when exact ("368"), millicores otherwise ("367500m")."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def format_memory(mebibytes: int) -> str:
    """The largest binary unit that keeps the value exact ("3672Gi", "1500Mi")."""
    if mebibytes == 0:
        return "0"
    for unit, size in (("Ti", 2**20), ("Gi", 2**10)):
        if mebibytes % size == 0:
            return f"{mebibytes // size}{unit}"
    return f"{mebibytes}Mi"
