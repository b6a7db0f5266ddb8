"""Hostile config files: alias bombs, deep nesting, self-referencing aliases and oversized numbers are refused
with a line and a hint (exit 2), after reading a bounded part of the file, in bounded memory; the health
controller's settings file goes through the same loader."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from konduktor.config.findings import ConfigError, Finding
from konduktor.config.load import ALIAS_ALLOWANCE, MAX_DEPTH, MAX_FILE_BYTES, load_config, parse_config, read_yaml
from konduktor.config.quantity import parse_quantity
from konduktor.errors import UsageError
from konduktor.health.settings import load_settings

VALID = textwrap.dedent("""\
    version: 1
    cluster:
      name: gpu-lab
    capacityReserve: {cpu: "8", memory: 64Gi}
    gpuTypes:
      h100:
        product: NVIDIA-H100-80GB-HBM3
        nodes: 4
        gpusPerNode: 10
        nodeAllocatable: {cpu: "192", memory: 1900Gi}
    teams:
      team-a:
        namespaces: [team-a]
        fairShareWeight: 1
        gpus:
          h100: {quota: 20}
    """)
# Lines of VALID whose value is a number, with the setting's path.
NUMBER_LINES = {8: "gpuTypes.h100.nodes", 9: "gpuTypes.h100.gpusPerNode", 14: "teams.team-a.fairShareWeight"}
LOCATED = re.compile(r"^config\.yaml:(\d+): ")
HOSTILE = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def refused(text: str) -> list[Finding]:
    """The errors of a config that must not load; each names its line and comes with a hint."""
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    assert raised.value.exit_code == 2
    errors = [f for f in raised.value.findings if f.is_error]
    assert errors and all(f.line is not None and f.hint for f in errors), errors
    return errors


def the_error(text: str) -> tuple[int, str]:
    [finding] = refused(text)
    assert finding.line is not None
    return finding.line, finding.located("config.yaml")


def laughs(width: int, levels: int, indent: str = "") -> str:
    """The billion laughs: each level is a list of `width` aliases of the level before."""
    lines = [f"{indent}l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"{indent}l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]" for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def values_in(data: Any) -> int:
    if isinstance(data, dict):
        return 1 + sum(values_in(v) for v in data.values())
    if isinstance(data, list):
        return 1 + sum(values_in(v) for v in data)
    return 1


@st.composite
def alias_bombs(draw: st.DrawFn) -> tuple[str, int]:
    """A config whose aliases expand to at least 10^6 values, nested under a few keys."""
    width = draw(st.integers(2, 12))
    levels = draw(st.integers(1, 40).filter(lambda n: width ** (n + 1) >= 10**6))
    nesting = draw(st.integers(0, 3))
    head = "version: 1\n" + "".join(f"{'  ' * depth}k{depth}:\n" for depth in range(nesting))
    return head + laughs(width, levels, "  " * nesting), head.count("\n")


@HOSTILE
@given(alias_bombs())
def test_hostile_alias_bombs_are_refused_at_an_alias_line(bomb: tuple[str, int]) -> None:
    text, head_lines = bomb
    line, message = the_error(text)
    assert "aliases expand to more than" in message
    assert head_lines + 2 <= line <= text.count("\n")  # an alias line, not the anchor of the first level


@HOSTILE
@given(st.integers(2, 10), st.integers(1, 12))
def test_hostile_modest_aliases_read_in_full(width: int, levels: int) -> None:
    """The bound leaves room for aliases as configs use them: their values are all there, shared."""
    assume(width ** (levels + 1) <= ALIAS_ALLOWANCE // 2)
    data, _ = read_yaml("version: 1\n" + laughs(width, levels), "config.yaml")
    top = data[f"l{levels}"]
    assert values_in(top) == sum(width**n for n in range(levels + 2))
    assert top[0] is top[-1]  # an alias is the anchored value itself, not a copy


def test_hostile_aliases_may_add_a_fixed_allowance() -> None:
    width = 10
    defaults = "defaults: &d [" + ", ".join(["x"] * width) + "]\n"
    # Each alias adds 11 values: just within the allowance, then one more than it grants.
    fits = (ALIAS_ALLOWANCE) // (width + 1) - 10
    within = "version: 1\n" + defaults + "r: [" + ", ".join(["*d"] * fits) + "]\n"
    assert values_in(read_yaml(within, "config.yaml")[0]["r"]) == 1 + fits * (width + 1)
    beyond = "version: 1\n" + defaults + "r: [" + ", ".join(["*d"] * (3 * fits)) + "]\n"
    assert "aliases expand to more than 100,000 values" in the_error(beyond)[1]


def nested(style: str, depth: int) -> str:
    """A value nested `depth` collections deep, as the value of key `deep` on line 3."""
    if style == "flow-list":
        return "deep: " + "[" * depth + "]" * depth + "\n"
    if style == "flow-map":
        return "deep: " + "{a: " * depth + "1" + "}" * depth + "\n"
    if style == "compact-list":
        return "deep:\n" + "- " * depth + "x\n"
    return "deep:\n" + "".join(f"{'  ' * level}a:\n" for level in range(1, depth)) + f"{'  ' * depth}a: 1\n"


@HOSTILE
@given(
    st.sampled_from(["flow-list", "flow-map", "compact-list", "indented-map"]),
    st.integers(MAX_DEPTH, 3000) | st.sampled_from([10**5, 3 * 10**5]),
    st.integers(0, 4),
)
def test_hostile_deep_nesting_is_refused_with_its_line(style: str, depth: int, comments: int) -> None:
    if style == "indented-map":
        depth = min(depth, 400)  # the indentation grows with the square of the depth
    text = "version: 1\n" + "# padding\n" * comments + nested(style, depth)
    line, message = the_error(text)
    assert message.endswith(f"deep: nested more than {MAX_DEPTH} levels deep")
    first = 2 + comments
    if style.startswith("flow"):
        assert line == first
    else:
        assert first <= line <= first + MAX_DEPTH + 1


@HOSTILE
@given(st.sampled_from(["flow-list", "flow-map", "compact-list", "indented-map"]), st.integers(1, MAX_DEPTH - 1))
def test_hostile_nesting_within_the_bound_reads(style: str, depth: int) -> None:
    data, _ = read_yaml("version: 1\n" + nested(style, depth), "config.yaml")
    assert "deep" in data


@HOSTILE
@given(st.integers(0, 6), st.sampled_from(["[*a]", "{k: *a}", "[1, [2, *a]]"]), st.booleans())
def test_hostile_alias_inside_its_own_anchor(depth: int, inner: str, block: bool) -> None:
    body = "{x: " * depth + f"&a {inner}" + "}" * depth
    text = f"version: 1\nself:\n  - {body}\n" if block else f"version: 1\nself: {body}\n"
    line, message = the_error(text)
    assert line == (3 if block else 2)
    assert "the alias *a is inside the value it refers to" in message


def test_hostile_alias_with_no_anchor() -> None:
    line, message = the_error("version: 1\ncluster: *nowhere\n")
    assert (line, message) == (2, "config.yaml:2: invalid YAML: the alias *nowhere has no anchor &nowhere before it")


number_texts = st.one_of(
    st.from_regex(r"\A[+-]?[1-9][0-9]{19,12000}\Z"),  # beyond 64 bits, up to 3 times Python's int() limit
    st.from_regex(r"\A0x[1-9a-f][0-9a-f]{16,5000}\Z"),
    st.from_regex(r"\A[+-]?[1-9](\.[0-9]{0,5})?e\+?(309|[4-9][0-9]{2}|[1-9][0-9]{3,9})\Z"),  # past the float range
)


@HOSTILE
@given(number_texts, st.sampled_from(sorted(NUMBER_LINES)))
def test_hostile_numbers_are_refused_where_they_are(number: str, line: int) -> None:
    lines = VALID.splitlines(keepends=True)
    key = lines[line - 1].split(":")[0]
    lines[line - 1] = f"{key}: {number}\n"
    found, message = the_error("".join(lines))
    assert found == line
    assert message.startswith(f"config.yaml:{line}: {NUMBER_LINES[line]}: the number ")
    assert message.endswith(" is too large") and len(message) < 200


@HOSTILE
@given(st.integers(0, 10_000), st.integers(-(2**63) + 1, 2**63 - 1))
def test_hostile_leading_zeros_are_no_size(zeros: int, number: int) -> None:
    sign = "-" if number < 0 else ""
    data, _ = read_yaml(f"x: {sign}{'0' * zeros}{abs(number)}\n", "config.yaml")
    assert data["x"] == number


@HOSTILE
@given(st.from_regex(r"\A[1-9][0-9]{40,3000}(Gi)?\Z") | st.from_regex(r"\A1e[1-9][0-9]{2,9}\Z"))
def test_hostile_quantities_are_refused_before_any_arithmetic(quantity: str) -> None:
    with pytest.raises(ValueError, match="out of range for a quantity"):
        parse_quantity(quantity)
    text = VALID.replace("memory: 64Gi}", f'memory: "{quantity}"}}')
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "config.yaml")
    [finding] = raised.value.findings
    assert finding.located("config.yaml").startswith("config.yaml:4: capacityReserve.memory: ")


def test_hostile_infinity_is_no_setting() -> None:
    line, message = the_error(VALID.replace("fairShareWeight: 1", "fairShareWeight: .inf"))
    assert (line, message) == (14, "config.yaml:14: teams.team-a.fairShareWeight: must be a finite number (got inf)")


def test_hostile_endless_gang_timeout() -> None:
    text = VALID.replace("gpuTypes:", f"kueue: {{gangTimeout: {'9' * 30}h}}\ngpuTypes:")
    with pytest.raises(ConfigError, match="longer than a Go duration can be"):
        parse_config(text, "config.yaml")


WORST = {
    "billion laughs": "version: 1\n" + laughs(10, 9),
    "nested 300,000 deep": "version: 1\n" + nested("flow-list", 300_000),
    "a 100,000-digit number": "version: 1\nteams: " + "9" * 100_000 + "\n",
    "a self-referencing alias": "version: 1\na: &a [" + "[" * 50 + "*a" + "]" * 50 + "]\n",
}


@pytest.mark.parametrize("name", list(WORST))
def test_hostile_files_take_bounded_memory(name: str) -> None:
    text = WORST[name]
    tracemalloc.start()
    try:
        refused(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20 + 4 * len(text), f"{name}: {peak:,} bytes"


def test_hostile_oversized_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    with path.open("w") as out:
        out.write("version: 1\n")
        out.truncate(MAX_FILE_BYTES + 1)  # a sparse file: reading it would be the first problem
    with pytest.raises(UsageError, match="more than a config file can be") as raised:
        load_config(path)
    assert raised.value.exit_code == 2 and raised.value.hint
    with pytest.raises(UsageError, match="more than a config file can be"):
        load_settings(path)


# --- both commands, as processes -----------------------------------------------------------------------------

# A process that reads a hostile file must stay within this address space (or die with a MemoryError, exit 101).
MEMORY_LIMIT = 2**30
INSTALLER = "from konduktor.cli.main import run; run()"
HEALTH = "from konduktor.cli.health import run; run()"


@pytest.mark.parametrize("name", list(WORST))
@pytest.mark.parametrize(
    "command",
    [
        pytest.param(lambda path: [INSTALLER, "validate", str(path)], id="validate"),
        pytest.param(lambda path: [INSTALLER, "render", str(path)], id="render"),
        pytest.param(lambda path: [HEALTH, "classify", "--config", str(path)], id="health-classify"),
    ],
)
def test_hostile_files_exit_2_with_line_and_hint(
    tmp_path: Path, name: str, command: Callable[[Path], list[str]]
) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(WORST[name].replace("version: 1\n", "dry_run: false\n") if HEALTH in command(path) else WORST[name])
    done = subprocess.run(
        [sys.executable, "-c", *command(path)],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT)),
    )
    assert done.returncode == 2, done.stderr
    assert re.search(rf"^error: {re.escape(str(path))}:\d+: ", done.stderr, re.MULTILINE), done.stderr
    assert "hint: " in done.stderr
    assert "Traceback" not in done.stderr and "bug:" not in done.stderr
