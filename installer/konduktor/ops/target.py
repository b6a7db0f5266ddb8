"""Which cluster a command talks to, chosen as kubectl and helm choose.

- `--sim NAME`: that simulated cluster (never together with `--kubeconfig` or `--context`);
- `--kubeconfig FILE`: that file; else `$KUBECONFIG`: its files merged, as kubectl merges them; `--context` picks
  a context of either;
- nothing named: a command that changes the cluster uses the simulated cluster `konduktor`, so that the README's
  main job never reaches a production cluster by accident; a read-only one reads ~/.kube/config, as kubectl does,
  when there is one, else the simulated cluster. Inside a pod with no kubeconfig anywhere, every command uses the
  pod's service account, as kubectl does there: that identity is the one the pod was given for its cluster.
A simulated cluster's own kubeconfig file, however it is named (`export KUBECONFIG=$(konduktor-install sim
kubeconfig)`), is that simulated cluster.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from konduktor.errors import UsageError
from konduktor.kube.client import Identity, Kube, in_cluster_only
from konduktor.sim.cluster import DEFAULT_NAME, Progress, SimCluster
from konduktor.tools.toolbox import Toolbox

KUBECTL_DEFAULT = Path("~/.kube/config")
Confirm = Callable[[str], None]  # asks the user a yes/no question before a real cluster changes; returns on yes


@dataclass(frozen=True)
class Target:
    """The cluster a command talks to.

    `kubeconfig` None means $KUBECONFIG's files, merged (what kubectl, helm and the Kubernetes client read), or inside
    a pod without any, its service account;
    `sim` names the simulated cluster when it is one."""

    kubeconfig: Path | None
    context: str | None = None
    sim: str | None = None

    @property
    def simulated(self) -> bool:
        return self.sim is not None

    def toolbox(self, progress: Progress | None = None) -> Toolbox:
        """A real cluster may use a fitting helm on this machine; the simulated one runs the pinned build."""
        return Toolbox(progress=progress, host=not self.simulated)

    def connect(self, as_identity: Identity | None = None) -> Kube:
        """A connection to this cluster, acting as `as_identity` when given (as kubectl's --as and --as-group)."""
        return Kube(self.kubeconfig, self.context, impersonate=as_identity)

    def flags(self) -> str:
        """The options that name this cluster again, for a hint (empty where $KUBECONFIG already does)."""
        if self.sim is not None:
            return "" if self.sim == DEFAULT_NAME else f" --sim {self.sim}"
        named = f" --kubeconfig {self.kubeconfig}" if self.kubeconfig is not None else ""
        return named + (f" --context {self.context}" if self.context else "")


def simulated_cluster_of(kubeconfig: Path) -> str | None:
    """The name of the simulated cluster whose kubeconfig file this is, if it is one."""
    path = kubeconfig.expanduser().absolute()
    name = path.parent.name
    return name if SimCluster(name).kubeconfig == path else None


def resolve_target(
    kubeconfig: Path | None = None,
    context: str | None = None,
    sim: str | None = None,
    *,
    read_only: bool = False,
) -> Target:
    """The cluster the options name (see the module's rules); the simulated cluster may not be running yet."""
    if sim is not None:
        if kubeconfig is not None or context is not None:
            raise UsageError(
                f"--sim {sim} names a simulated cluster, and --kubeconfig/--context another one",
                hint="give --sim for a simulated cluster, or --kubeconfig and --context for any other",
            )
        return Target(SimCluster(sim).kubeconfig, sim=sim)
    environment = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if kubeconfig is not None:
        files = [kubeconfig]
    elif environment:
        files = environment
    elif context is not None or (read_only and KUBECTL_DEFAULT.expanduser().is_file()):
        files = [KUBECTL_DEFAULT.expanduser()]
    elif in_cluster_only():
        return Target(None)
    else:
        return Target(SimCluster(DEFAULT_NAME).kubeconfig, sim=DEFAULT_NAME)
    named = simulated_cluster_of(files[0]) if len(files) == 1 and context is None else None
    if named is not None:
        return Target(files[0], sim=named)
    return Target(files[0] if kubeconfig is not None or not environment else None, context)


def running_target(
    kubeconfig: Path | None = None, context: str | None = None, sim: str | None = None, *, read_only: bool = False
) -> Target:
    """As `resolve_target`; a simulated cluster must be running."""
    target = resolve_target(kubeconfig, context, sim, read_only=read_only)
    if target.sim is not None and target.kubeconfig is not None and not target.kubeconfig.exists():
        raise UsageError(
            f"the simulated cluster {target.sim!r} is not running",
            hint=f"start it: konduktor-install sim up{target.flags().replace('--sim', '--name')}, "
            "or name another cluster with --kubeconfig, --context or KUBECONFIG",
        )
    return target
