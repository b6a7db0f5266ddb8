"""The `konduktor-install` command line."""

from __future__ import annotations

import sys

from konduktor.cli import burnin, cluster_quotas, preflight, quotas, sim, tools, up
from konduktor.cli.app import new_app, run_app

app = new_app(
    "konduktor-install", "Install, check and operate Konduktor on a GPU cluster (or on the simulated cluster)."
)
app.add_typer(tools.app, name="tools")
app.add_typer(sim.app, name="sim")
app.add_typer(cluster_quotas.app, name="quotas")
quotas.register(app)
preflight.register(app)
burnin.register(app)
app.command("up")(up.up)
app.command("plan")(up.plan)
app.command("status")(up.status)
app.command("down")(up.down)


def main(argv: list[str] | None = None) -> int:
    return run_app(app, argv, "konduktor-install")


def run() -> None:
    sys.exit(main(sys.argv[1:]))
