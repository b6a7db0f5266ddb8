"""The packages of `konduktor` import each other only downwards (docs/design/architecture.md#import-rule), a CLI
module imports no other command's module, only the CLI's shared plumbing (`CLI_PLUMBING`), and a third-party
library that talks to the outside world is imported by one package only, its edge (`LIBRARY_EDGES`).

Every module's imports are read with `ast` (imports inside functions and under TYPE_CHECKING included), each
one is mapped to its package, and the pair must be allowed by `ALLOWED`. Imports that run against the layering
today are listed in `KNOWN_VIOLATIONS`: a shrinking list, one line per module-to-module import, that may only
lose lines. A new violation fails the first test; a line whose import is gone fails the second, so the list
never keeps a stale excuse.

Inside `health`, the biggest package, the pure decisions sit below the edges that read and write the cluster,
Loki and Prometheus (`HEALTH_EDGES`): a pure module imports no edge, so every decision runs on plain data.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Set
from pathlib import Path

import konduktor

PACKAGE_ROOT = Path(konduktor.__file__).parent

# The floor: modules everyone may use; they import nothing above the floor.
FLOOR = frozenset({"vocabulary", "errors", "paths", "waiting"})

# package -> the packages it may import (besides itself and the floor). Read bottom to top.
ALLOWED: dict[str, frozenset[str]] = {
    "vocabulary": frozenset(),
    "errors": frozenset(),
    "paths": frozenset(),
    "waiting": frozenset({"errors"}),
    "gpu": frozenset(),
    "config": frozenset({"gpu"}),  # the MIG profiles a sharing layout is checked against
    "tools": frozenset(),
    "image": frozenset(),
    "kube": frozenset(),
    "quotas": frozenset({"gpu", "config", "kube"}),
    "alerts": frozenset({"config"}),
    "helm": frozenset({"gpu", "config", "quotas", "alerts", "tools"}),
    "burnin": frozenset({"gpu", "config", "kube"}),
    "observability": frozenset({"gpu", "tools", "burnin"}),
    "preflight": frozenset({"gpu", "config", "quotas", "kube", "burnin"}),
    "health": frozenset({"gpu", "config", "kube", "burnin", "observability"}),
    "sim": frozenset({"gpu", "config", "kube", "helm", "quotas", "burnin", "tools"}),
    "queueing": frozenset({"gpu", "config", "kube", "quotas"}),
    "whatif": frozenset({"gpu", "config", "tools", "kube", "quotas", "helm", "sim", "observability"}),
    "ops": frozenset(
        {"gpu", "config", "tools", "kube", "quotas", "helm", "burnin", "preflight", "health", "sim", "queueing"}
    ),
    "cli": frozenset(
        {
            "ops",
            "gpu",
            "config",
            "tools",
            "image",
            "kube",
            "quotas",
            "alerts",
            "queueing",
            "helm",
            "burnin",
            "preflight",
            "health",
            "sim",
            "whatif",
        }
    ),
}

# The CLI's shared plumbing: the only `cli` modules another `cli` module may import. A command module parses its
# arguments, calls `ops` (or the domain) and prints; it never imports another command's module.
CLI_PLUMBING = frozenset(
    {
        "konduktor.cli.app",  # the Typer app and error handling every program runs in
        "konduktor.cli.lazy",  # commands imported when they run
        "konduktor.cli.help_text",  # help that names values
        "konduktor.cli.console",  # stdout, stderr, progress, tables and documents
        "konduktor.cli.target",  # --kubeconfig, --context, --sim
        "konduktor.cli.arguments",  # the config file argument, durations
        "konduktor.cli.quota_options",  # --adopt, --drain-removed-teams, --drain-timeout
        "konduktor.cli.confirm",  # --yes and the question before a real cluster changes
    }
)

# Imports that break the layering, (importing module, imported module): remove lines, never add them. Empty: every
# import runs downwards.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()

# Third-party libraries behind their edges: library -> the one package that may import it (under TYPE_CHECKING
# too). The others call that package's functions, so a library's types, errors and quirks stay in one place.
LIBRARY_EDGES: dict[str, str] = {
    "kubernetes": "kube",  # the Kubernetes client: clients built, objects applied, rights checked (konduktor.kube)
    "pyhelm3": "helm",  # helm through pyhelm3: install, upgrade, render, and its errors read (konduktor.helm.release)
    "testinfra": "preflight",  # the hosts the node checks run on, local or over SSH (konduktor.preflight.hosts)
}

# health's inner order: the modules that talk to the outside world, its edges. An edge imports the Kubernetes
# client (`EDGE_MODULES`) or a network library (`EDGE_LIBRARIES`); every other health module is a pure decision
# and imports none of them. Found from the imports, so a new edge shows here and must be listed.
EDGE_MODULES = frozenset({"konduktor.kube.client"})
EDGE_LIBRARIES = frozenset({"kubernetes", "requests", "http", "socket"})
HEALTH_EDGES = frozenset(
    {
        "konduktor.health.actuator",  # carries out the decisions: node writes, Workloads, requalification Jobs
        "konduktor.health.fleet_events",  # the teams' fault Events, in their own clusters
        "konduktor.health.health_status",  # what `nodes` and `status` read from the cluster
        "konduktor.health.leader",  # the Lease
        "konduktor.health.loki",  # kernel log lines from Loki
        "konduktor.health.loop",  # the controller: its watch, its passes and its writes
        "konduktor.health.node_writes",  # taints, conditions and Events on Nodes
        "konduktor.health.nodes",  # the Node list and watch
        "konduktor.health.prometheus",  # DCGM series from Prometheus
        "konduktor.health.quarantine",  # `burnin --quarantine`, `nodes quarantine`
        "konduktor.health.refused_writes",  # pods a node refused, given back
        "konduktor.health.release",  # `nodes release` and `requalify`
        "konduktor.health.requalification",  # the burn-in Jobs and their logs
        "konduktor.health.server",  # /healthz and /metrics over HTTP
        "konduktor.health.telemetry",  # the controller's metrics, API errors among them
        "konduktor.health.triage_sources",  # `nodes triage`: Loki, Prometheus, Events and the Node
        "konduktor.health.workloads",  # Kueue Workloads and their pods
    }
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("konduktor", *parts))


def package_of(module: str) -> str:
    """`konduktor.health.decide` -> `health`; `konduktor.errors` -> `errors`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a source file's tree, parsed once per test process (the checks below all walk every file)."""
    return tuple(ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))))


def imported_modules(path: Path) -> Iterator[str]:
    """The `konduktor` modules that a source file imports, relative imports resolved."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                names = [".".join([*base, *([node.module] if node.module else [])])]
            else:
                names = [node.module or ""]
            # `from konduktor.tools import host_tools` imports the module `konduktor.tools.host_tools`.
            names = [_submodule_or_self(names[0], alias.name) for alias in node.names]
        else:
            continue
        yield from (name for name in names if name == "konduktor" or name.startswith("konduktor."))


def imported_libraries(path: Path) -> Iterator[str]:
    """The top-level names of the modules a source file imports absolutely: `from pyhelm3.errors import Error`
    -> `pyhelm3`."""
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.split(".")[0]


@functools.cache
def library_edges() -> frozenset[tuple[str, str]]:
    """(importing module, library) for every library of `LIBRARY_EDGES` a module imports."""
    edges: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        source = module_name(path)
        edges.update((source, library) for library in imported_libraries(path) if library in LIBRARY_EDGES)
    return frozenset(edges)


def library_allowed(source: str, library: str) -> bool:
    return library not in LIBRARY_EDGES or package_of(source) == LIBRARY_EDGES[library]


def _submodule_or_self(module: str, name: str) -> str:
    candidate = PACKAGE_ROOT.joinpath(*module.split(".")[1:], name)
    is_module = candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file()
    return f"{module}.{name}" if is_module else module


@functools.cache
def import_edges() -> frozenset[tuple[str, str]]:
    edges: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        source = module_name(path)
        edges.update((source, target) for target in imported_modules(path))
    return frozenset(edges)


def is_allowed(source: str, target: str) -> bool:
    source_package, target_package = package_of(source), package_of(target)
    if target_package in (source_package, ""):
        return True
    if target_package in FLOOR and source_package not in FLOOR:
        return True
    return target_package in ALLOWED[source_package]


def violations() -> set[tuple[str, str]]:
    return {(source, target) for source, target in import_edges() if not is_allowed(source, target)}


def cli_import_allowed(source: str, target: str) -> bool:
    """Outside `cli`, the layering decides; inside, a module may import itself and the plumbing only."""
    if not package_of(source) == package_of(target) == "cli":
        return True
    return source == target or target in CLI_PLUMBING


def cli_to_cli() -> set[tuple[str, str]]:
    """Imports from one `cli` module of another that is not plumbing."""
    return {(source, target) for source, target in import_edges() if not cli_import_allowed(source, target)}


def test_every_package_has_a_place_in_the_layering() -> None:
    packages = {package_of(module_name(path)) for path in PACKAGE_ROOT.rglob("*.py")} - {""}
    assert packages <= ALLOWED.keys(), f"add these packages to ALLOWED: {sorted(packages - ALLOWED.keys())}"


def test_no_import_runs_against_the_layering() -> None:
    new = sorted(violations() - KNOWN_VIOLATIONS)
    assert not new, "imports against the layering:\n" + "\n".join(f"  {s} -> {t}" for s, t in new)


def test_known_violations_are_still_there() -> None:
    gone = sorted(KNOWN_VIOLATIONS - violations())
    assert not gone, "fixed, delete from KNOWN_VIOLATIONS:\n" + "\n".join(f"  {s} -> {t}" for s, t in gone)


def test_no_cli_module_imports_another_command() -> None:
    """`up` does not reach into `preflight`'s or `quotas`' command modules for their logic: what several commands
    do lives in `ops` (or below), what they share to parse and print in the plumbing."""
    found = sorted(cli_to_cli())
    assert not found, "cli modules importing other commands' modules (move the logic to ops):\n" + "\n".join(
        f"  {s} -> {t}" for s, t in found
    )


def test_cli_plumbing_modules_are_there() -> None:
    """The allow-list names modules that exist, so it never keeps a stale excuse."""
    modules = {module_name(path) for path in (PACKAGE_ROOT / "cli").glob("*.py")}
    assert modules >= CLI_PLUMBING, f"gone from cli, delete from CLI_PLUMBING: {sorted(CLI_PLUMBING - modules)}"


def test_third_party_libraries_are_imported_only_by_their_edge_package() -> None:
    found = sorted((source, library) for source, library in library_edges() if not library_allowed(source, library))
    assert not found, "libraries imported outside their edge package (call a function of the edge instead):\n" + (
        "\n".join(f"  {s} -> {library} (only in {LIBRARY_EDGES[library]})" for s, library in found)
    )


def test_every_edge_package_exists_and_imports_its_library() -> None:
    """The contract names packages that are there and libraries that are used, so it never keeps a stale line."""
    assert set(LIBRARY_EDGES.values()) <= ALLOWED.keys()
    assert {library for _, library in library_edges()} == LIBRARY_EDGES.keys()


def test_the_library_checker_sees_an_import_outside_its_edge() -> None:
    """A library imported by another package is judged wrong, by its own edge right; other libraries are free."""
    assert not library_allowed("konduktor.ops.values", "pyhelm3")
    assert not library_allowed("konduktor.cli.preflight", "testinfra")
    assert not library_allowed("konduktor.health.loop", "kubernetes")
    assert library_allowed("konduktor.helm.release", "pyhelm3")
    assert library_allowed("konduktor.preflight.ssh", "testinfra")
    assert library_allowed("konduktor.ops.values", "yaml")
    assert ("konduktor.kube.client", "kubernetes") in library_edges()  # the edges it judges are seen
    assert ("konduktor.preflight.ssh", "testinfra") in library_edges()


def test_the_checker_sees_an_upward_import() -> None:
    """The checker itself can fail: upward imports are judged wrong, downward ones right."""
    assert not is_allowed("konduktor.burnin.verdict", "konduktor.health.decide")
    assert not is_allowed("konduktor.health.loop", "konduktor.cli.app")
    assert not is_allowed("konduktor.errors", "konduktor.config.model")
    assert is_allowed("konduktor.waiting", "konduktor.errors")
    assert is_allowed("konduktor.cli.up", "konduktor.sim.cluster")
    assert ("konduktor.cli.health", "konduktor.cli.app") in import_edges()
    assert ("konduktor.cli.tools", "konduktor.tools.toolbox") in import_edges()
    assert ("konduktor.cli.up", "konduktor.ops.up") in import_edges()


def test_the_cli_checker_sees_a_command_importing_another() -> None:
    """One command's module importing another's is judged wrong; plumbing and the layers below are right."""
    assert not cli_import_allowed("konduktor.cli.up", "konduktor.cli.preflight")
    assert not cli_import_allowed("konduktor.cli.nodes", "konduktor.cli.burnin")
    assert not cli_import_allowed("konduktor.cli.plan", "konduktor.cli.up")  # what they share is in ops
    assert cli_import_allowed("konduktor.cli.up", "konduktor.cli.console")
    assert cli_import_allowed("konduktor.cli.up", "konduktor.ops.up")
    assert cli_import_allowed("konduktor.cli.down", "konduktor.cli.confirm")
    assert ("konduktor.cli.main", "konduktor.cli.lazy") in import_edges()  # the edges it judges are seen


def is_health_edge(path: Path) -> bool:
    """A health module that reads or writes the outside world: it imports the Kubernetes client or talks HTTP."""
    return bool(set(imported_modules(path)) & EDGE_MODULES or set(imported_libraries(path)) & EDGE_LIBRARIES)


def health_edges() -> set[str]:
    return {module_name(path) for path in (PACKAGE_ROOT / "health").glob("*.py") if is_health_edge(path)}


def pure_imports_of_edges(edges: Set[tuple[str, str]], health_edge_modules: frozenset[str]) -> set[tuple[str, str]]:
    """(pure health module, edge) for every health module outside the edges that imports one of them."""
    return {
        (source, target)
        for source, target in edges
        if package_of(source) == "health" and source not in health_edge_modules and target in health_edge_modules
    }


def test_the_health_edges_are_the_listed_ones() -> None:
    """Every health module that imports the Kubernetes client or a network library is listed as an edge, and
    every listed edge still is one, so the list says which modules touch the outside world."""
    found = health_edges()
    assert found == HEALTH_EDGES, (
        f"new edges, list them in HEALTH_EDGES: {sorted(found - HEALTH_EDGES)}; "
        f"no longer edges, delete: {sorted(HEALTH_EDGES - found)}"
    )


def test_no_pure_health_module_imports_an_edge() -> None:
    found = sorted(pure_imports_of_edges(import_edges(), HEALTH_EDGES))
    assert not found, "pure health modules importing an edge (move the shared name down):\n" + "\n".join(
        f"  {s} -> {t}" for s, t in found
    )


def test_the_health_order_checker_sees_a_pure_module_importing_an_edge() -> None:
    """A decision importing an edge is judged wrong; an edge importing a decision, or another edge, is right."""
    assert pure_imports_of_edges({("konduktor.health.breaker", "konduktor.health.leader")}, HEALTH_EDGES)
    assert pure_imports_of_edges({("konduktor.health.triage", "konduktor.health.loki")}, HEALTH_EDGES)
    assert not pure_imports_of_edges({("konduktor.health.loop", "konduktor.health.decide")}, HEALTH_EDGES)
    assert not pure_imports_of_edges({("konduktor.health.loop", "konduktor.health.actuator")}, HEALTH_EDGES)
    assert is_health_edge(PACKAGE_ROOT / "health" / "loki.py")  # requests
    assert is_health_edge(PACKAGE_ROOT / "health" / "nodes.py")  # konduktor.kube.client
    assert not is_health_edge(PACKAGE_ROOT / "health" / "decide.py")
    assert ("konduktor.health.loop", "konduktor.health.decide") in import_edges()
