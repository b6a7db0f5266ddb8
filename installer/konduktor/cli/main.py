"""The `konduktor-install` command line.

Each command's module is imported when that command runs (`konduktor.cli.lazy`): `validate`, `render` and
`--help` never import the Kubernetes client, the health controller or the burn-in.
"""

from __future__ import annotations

import sys

from konduktor.cli.app import new_app, run_app
from konduktor.cli.lazy import LazyCommand, LazyGroup


class InstallerCommands(LazyGroup):
    commands_to_load = (
        LazyCommand(
            "validate",
            "konduktor.cli.config_commands:register",
            "Check a config: every error at once with its line (exit 2); warnings alone exit 0.",
        ),
        LazyCommand(
            "render",
            "konduktor.cli.config_commands:register",
            "Render the Kueue objects, namespaces and RBAC of a config (nothing touches the cluster).",
        ),
        LazyCommand(
            "schema",
            "konduktor.cli.config_commands:register",
            "Print the JSON Schema of config.yaml (for editors and CI).",
        ),
        LazyCommand(
            "preflight",
            "konduktor.cli.preflight:register",
            "Check the cluster (API, version, GPU nodes, taints, RDMA, capacity, CRDs) and GPU hosts. Exit 3 on FAIL.",
        ),
        LazyCommand("preflight-node", "konduktor.cli.preflight:register", hidden=True),
        LazyCommand(
            "burnin",
            "konduktor.cli.burnin:register",
            "Burn in GPU nodes with Jobs and judge them: PASS, WARN, FAIL, ERROR or SKIPPED per node.",
        ),
        LazyCommand(
            "triage",
            "konduktor.cli.triage:triage",
            "Which node of a job had a GPU fault in its time window, with evidence. Exit 0: a culprit; 1: none.",
        ),
        LazyCommand(
            "nodes",
            "konduktor.cli.nodes:app",
            "Every GPU node with its health: state, reason, since when, quarantine owner, last burn-in verdict, and "
            "what happens next to a node out of service; then the fleet breaker and the health controller.",
        ),
        LazyCommand(
            "up",
            "konduktor.cli.up:up",
            "Install or upgrade Konduktor from a config: the simulated cluster when no kubeconfig is given. A config "
            "with `clusters:` installs every cluster it names, the workers in dispatch order, then the manager.",
        ),
        LazyCommand(
            "plan",
            "konduktor.cli.plan:plan",
            "What `up` would change. Exit 0: nothing; 1: changes pending (release, quotas or nodes' sharing labels); "
            "3: `up` would refuse a quota change (an object belongs to someone else) or a GPU layout change on a node "
            "where GPU work runs (unless --drain-for-sharing); 2 or 5: error.",
        ),
        LazyCommand(
            "status",
            "konduktor.cli.status:status",
            "The release, the team queues and the health controller. Exit 1 when Konduktor is not installed.",
        ),
        LazyCommand(
            "down",
            "konduktor.cli.down:down",
            "Remove what `up` made: the release and every quota object Konduktor owns. Namespaces (and what runs "
            "in them) stay unless --purge.",
        ),
        LazyCommand(
            "publish-capacity",
            "konduktor.cli.capacity:publish_capacity",
            "Publish free GPUs per GPU type and how they spread over nodes, free slices per sharing group, quarantines "
            "and team quota usage (whole GPUs and slices) for team members (no job or pod names), in a size that does "
            "not grow with the fleet.",
        ),
        LazyCommand(
            "relay-fleet-events",
            "konduktor.cli.fleet_events:relay_fleet_events",
            "Copy the health controller's Events to job owners from each worker to the manager's jobs.",
        ),
        LazyCommand(
            "tools",
            "konduktor.cli.tools:app",
            "Build, lock and list the pinned tools (helm, kubectl, kwok, etcd, Kubernetes, Kueue).",
        ),
        LazyCommand(
            "image",
            "konduktor.cli.image:app",
            "Build the konduktor image (OCI archive) from Debian's packages and the hash lock; no registry needed.",
        ),
        LazyCommand(
            "sim",
            "konduktor.cli.sim:app",
            "Run a local simulated GPU cluster: etcd, kube-apiserver, scheduler, Kueue, kwok GPU nodes.",
        ),
        LazyCommand(
            "whatif",
            "konduktor.cli.whatif:whatif",
            "Replay a job trace against a config (and another): waits, use, preemptions, per team.",
        ),
        LazyCommand(
            "trace",
            "konduktor.cli.trace:app",
            "Make a what-if trace: from the cluster's finished jobs, or from the Alibaba GPU trace.",
        ),
        LazyCommand(
            "quotas",
            "konduktor.cli.quotas:app",
            "Apply team quotas to a cluster, show pending changes, explain a team's usage.",
        ),
    )


app = new_app(
    "konduktor-install",
    "Install, check and operate Konduktor on a GPU cluster (or on the simulated cluster).",
    group=InstallerCommands,
)


def main(argv: list[str] | None = None) -> int:
    return run_app(app, argv, "konduktor-install")


def run() -> None:
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    run()
