"""`plan`: what `up` would change, without changing it: the release's objects (a server-side dry run of the upgrade
with the same values, against the deployed release; a client-side render when the simulated cluster is not running
yet), the nodes' sharing labels (which nodes change layout, and the GPU work on them) and the quota objects; and the
exit code that sums it up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from konduktor.burnin.runner import Say
from konduktor.config.model import Config
from konduktor.errors import ExitCode
from konduktor.helm.diff import ObjectChange, release_changes
from konduktor.helm.release import NAMESPACE, RELEASE, Release, check_values, render_new, render_upgrade
from konduktor.helm.schema import ValuesFile
from konduktor.kube.documents import load_documents
from konduktor.kube.sync import Change
from konduktor.ops.chart import chart_for
from konduktor.ops.sharing import SharingPlan, read_sharing
from konduktor.ops.target import Target
from konduktor.ops.up import FleetShare
from konduktor.quotas.sync import Takeover, pending_code, plan_quotas


@dataclass(frozen=True)
class UpPlan:
    """The release as it is (None: not installed), the chart `up` would install (name, version), the release's
    objects it would add, remove or change, the quota objects it would change, and the nodes whose sharing labels
    it would change (None: the cluster was not read)."""

    installed: Release | None
    chart: str
    version: str
    changes: list[ObjectChange]
    quotas: list[Change]
    sharing: SharingPlan | None = None

    @property
    def code(self) -> int:
        code = plan_code(self.installed, self.changes, self.quotas)
        if self.sharing is not None and (self.sharing.blocked or self.sharing.relaid):
            return max(code, ExitCode.CHECK_FAILED)  # up would refuse, as for a quota change
        if code == ExitCode.OK and self.sharing is not None and (self.sharing.changes or self.sharing.cordoned):
            return ExitCode.NEGATIVE
        return code


def plan_up(
    target: Target,
    config: Config,
    extra: dict[str, Any],
    files: Sequence[ValuesFile],
    takeover: Takeover,
    say: Say,
    share: FleetShare | None = None,
) -> UpPlan:
    """Reads only. A values file the charts' schemas refuse is bad input, found before the cluster is read. `share`
    is the cluster's part of a fleet, as `up` gets it."""
    settings = None if share is None else share.kueue_settings
    # The chart and its values, chosen once: at once when values files are given, else once the cluster was read.
    chosen = chart_for(target.simulated, config, extra, settings) if files else None
    if chosen is not None:
        check_values(chosen[0], RELEASE, NAMESPACE, chosen[1], files, target.toolbox())
    quotas: list[Change] = []
    sharing = None
    if target.sim is not None and target.kubeconfig is not None and not target.kubeconfig.exists():
        say(f"plan: the simulated cluster {target.sim!r} is not running; up creates it")
        chart, chart_values = chosen or chart_for(target.simulated, config, extra, settings)
        rendered = render_new(chart, RELEASE, NAMESPACE, chart_values, target.toolbox())
    else:
        # A kubeconfig that does not load is bad input (2); then the cluster is read (unreachable: 5) before the
        # chart is looked at, so that an outage is never reported as a local problem.
        with target.connect() as kube:
            planned = plan_quotas(kube, config, takeover, None if share is None else share.quotas)
            quotas = [c for c in planned if c.action != "unchanged"]
            sharing = read_sharing(kube, config)
            chart, chart_values = chosen or chart_for(target.simulated, config, extra, settings)
            rendered = render_upgrade(
                target.kubeconfig,
                chart,
                RELEASE,
                NAMESPACE,
                chart_values,
                toolbox=target.toolbox(),
                context=target.context,
            )
    wanted = load_documents(chart / "Chart.yaml")[0]
    changes = release_changes(rendered.deployed, rendered.wanted)
    return UpPlan(rendered.installed, f"{wanted['name']}", str(wanted["version"]), changes, quotas, sharing)


def plan_code(installed: Release | None, changes: list[ObjectChange], quotas: list[Change]) -> int:
    """3 when `up` would refuse a quota change; 1 when it would install, change the release or the quotas; else 0.
    A release that is not `deployed` (a failed or interrupted upgrade) is pending: `up` would finish it."""
    code = pending_code(quotas)
    release_pending = installed is None or installed.status != "deployed" or bool(changes)
    return ExitCode.NEGATIVE if code == ExitCode.OK and release_pending else code
