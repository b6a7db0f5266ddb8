"""A fast start: `--help`, `validate` and `render` import neither the Kubernetes client nor the controller nor
the burn-in, and the lazily loaded commands are the same commands, with the same help, as when imported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from quota_samples import EXAMPLES
from typer import _click

import konduktor
from konduktor.cli.main import InstallerCommands, app, main

# What only the cluster-facing commands need; each costs tens to hundreds of milliseconds to import.
HEAVY = (
    "kubernetes",
    "urllib3",
    "requests",
    "pyhelm3",
    "testinfra",
    "prometheus_client",
    "konduktor.kube",
    "konduktor.helm",
    "konduktor.health",
    "konduktor.burnin",
    "konduktor.preflight",
    "konduktor.sim",
    "konduktor.ops",
    "konduktor.cli.up",
    "konduktor.cli.preflight",
)


def imported_by(*args: str) -> tuple[int, set[str]]:
    """The exit code of `konduktor-install ARGS` in a fresh interpreter, and every module it imported."""
    program = (
        "import json, sys\n"
        "from konduktor.cli.main import main\n"
        "code = main(sys.argv[1:])\n"
        "sys.stdout.write('\\n' + json.dumps(sorted(sys.modules)))\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, set(json.loads(done.stdout.rsplit("\n", 1)[1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        (),
        ("validate", str(EXAMPLES / "config.yaml")),
        ("validate", "--help"),
        ("render", str(EXAMPLES / "config.yaml")),
        ("render", str(EXAMPLES / "multi-department.yaml"), "-o", "json"),
        ("schema",),
    ],
    ids=["help", "no-args", "validate", "validate-help", "render", "render-json", "schema"],
)
def test_cli_start_imports_nothing_cluster_facing(args: tuple[str, ...]) -> None:
    code, modules = imported_by(*args)
    assert code in (0, 2)  # no arguments prints the help with the usage exit code
    assert "konduktor.cli.main" in modules
    assert heavy(modules) == []


def test_cli_start_validate_loads_no_output_writers() -> None:
    """`validate` prints one line: the YAML writer and rich's tables are for the commands that write them."""
    code, modules = imported_by("validate", str(EXAMPLES / "config.yaml"))
    assert code == 0
    assert sorted(m for m in modules if m.startswith(("ruamel", "rich.table"))) == []
    code, modules = imported_by("render", str(EXAMPLES / "config.yaml"))
    assert code == 0 and "ruamel.yaml" in modules  # the same check sees the writer where it is used


def test_cli_start_the_heavy_modules_are_real_names() -> None:
    """The list above names modules that exist: `up` and `preflight` on the simulated cluster import every one of
    them."""
    code, modules = imported_by("up", "--help")
    assert code == 0
    code, preflight = imported_by("preflight", "--help")
    assert code == 0
    modules |= preflight
    missing = [h for h in HEAVY if h not in modules and h not in ("testinfra", "prometheus_client", "pyhelm3")]
    assert missing == []


def test_cli_start_validate_errors_still_come_with_lines(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text((EXAMPLES / "config.yaml").read_text().replace("quota: 20", "quota: -1", 1))
    code, modules = imported_by("validate", str(config))
    assert code == 2 and heavy(modules) == []


def loaded_commands() -> dict[str, _click.Command]:
    """Every top-level command as the group runs it (importing each one's module)."""
    group = typer.main.get_group(app)
    assert isinstance(group, InstallerCommands)
    context = _click.Context(group)
    commands = {name: group.get_command(context, name) for name in group.list_commands(context)}
    return {name: command for name, command in commands.items() if command is not None}


def test_cli_start_listed_help_is_each_commands_own() -> None:
    """The top-level help lists commands without importing them; its lines must be what each command says."""
    commands = loaded_commands()
    listed = {entry.name: entry for entry in InstallerCommands.commands_to_load}
    assert list(commands) == list(listed)
    for name, command in commands.items():
        assert command.name == name
        assert command.hidden == listed[name].hidden, name
        if not command.hidden:
            first_paragraph = (command.help or "").split("\n\n")[0]
            assert " ".join(first_paragraph.split()) == listed[name].help, f"update the help of {name!r} in main.py"


def test_cli_start_help_lists_the_visible_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for entry in InstallerCommands.commands_to_load:
        assert (f" {entry.name} " in out) != entry.hidden, entry.name


def test_cli_start_sub_apps_and_hidden_commands_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--help"]) == 0
    assert "kubeconfig" in capsys.readouterr().out
    assert main(["preflight-node", "--help"]) == 0
    assert "preflight pod" in capsys.readouterr().out


def test_cli_start_a_typo_still_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["valdate", str(EXAMPLES / "config.yaml")]) == 2
    assert "Did you mean 'validate'?" in capsys.readouterr().err


def test_cli_start_order_stays_once_commands_are_loaded() -> None:
    group = typer.main.get_group(app)
    context = _click.Context(group)
    before = group.list_commands(context)
    assert group.get_command(context, "sim") is not None
    assert group.list_commands(context) == before


@pytest.mark.parametrize(
    ("program", "typed", "completed"),
    [("konduktor-install", "val", "validate"), ("konduktor-health", "cla", "classify")],
)
def test_version_short_help_and_completion(program: str, typed: str, completed: str) -> None:
    """What every command line answers: `--version`, `-h` as `--help`, and shell completion of its commands."""
    executable = str(Path(sys.executable).parent / program)

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([executable, *args], env=env, capture_output=True, text=True, timeout=60, check=False)

    version = run("--version")
    assert (version.returncode, version.stdout) == (0, f"{program} {konduktor.__version__}\n")
    short, long = run("-h"), run("--help")
    assert short.returncode == 0 and short.stdout == long.stdout and "Usage:" in short.stdout
    variable = "_" + program.upper().replace("-", "_") + "_COMPLETE"
    completion = run(
        env={**os.environ, variable: "complete_bash", "COMP_WORDS": f"{program} {typed}", "COMP_CWORD": "1"}
    )
    assert (completion.returncode, completion.stdout.split()) == (0, [completed])


def test_cli_start_team_commands_listed_help_is_each_commands_own(capsys: pytest.CaptureFixture[str]) -> None:
    """`konduktor` (for team members) lists its commands the same way, without importing them."""
    from konduktor.cli import team

    group = typer.main.get_group(team.app)
    assert isinstance(group, team.TeamCommands)
    context = _click.Context(group)
    listed = {entry.name: entry for entry in team.TeamCommands.commands_to_load}
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None
        first_paragraph = (command.help or "").split("\n\n")[0]
        assert " ".join(first_paragraph.split()) == listed[name].help, f"update the help of {name!r} in team.py"
    assert team.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f" {name} " in out for name in listed)


def command_paths(group: _click.Command, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command under a group (loading the lazy ones), as the words that name it."""
    if not isinstance(group, typer.core.TyperGroup):
        return [prefix]
    context = _click.Context(group)
    found = [prefix]
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None
        found += command_paths(command, (*prefix, name))
    return found


@pytest.mark.parametrize("program", ["konduktor-install", "konduktor-health", "konduktor"])
def test_every_help_names_values_not_python_types(program: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Flags are bare and values are named (`--context CONTEXT`, `{CONFIG}`): no option shows `<bool>`, `<str>`,
    `<float>` or `<int>`, and the usage line names arguments in capitals."""
    from konduktor.cli import health, team

    app_, main_ = {"konduktor-install": (app, main), "konduktor-health": (health.app, health.main)}.get(
        program, (team.app, team.main)
    )
    paths = command_paths(typer.main.get_group(app_))
    assert len(paths) >= 3  # the program and its commands
    for path in paths:
        assert main_([*path, "--help"]) == 0, path
        shown = capsys.readouterr().out
        assert "Usage:" in shown
        options = [line for line in shown.splitlines() if " --" in line]
        typed = [t for t in ("<bool>", "<str>", "<float>", "<int>") if any(t in line for line in options)]
        usage = next(line for line in shown.splitlines() if "Usage:" in line)
        assert not typed and not re.search(r"[{\[][a-z_]+[}\]]", usage), f"{program} {' '.join(path)}: {typed} {usage}"
