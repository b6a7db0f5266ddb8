"""GitOps with the real Argo CD on a new simulated cluster: the first sync of a config.yaml in git to Synced and
Healthy, and the latency from a committed quota change to the changed ClusterQueue (the commit followed by a
refresh, as a git webhook sends it).

    .venv/bin/python bench/gitops_bench.py [--changes 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["KONDUKTOR_STATE"] = tempfile.mkdtemp(prefix="konduktor-bench-")
# Argo CD's local processes are the ones the GitOps tests run.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "installer" / "tests"))

import argocd_server as sim_argocd
from argocd_server import ArgoCD, GitRepo

from konduktor.kube.client import Kube
from konduktor.paths import product_dir
from konduktor.sim.cluster import SimCluster
from konduktor.sim.pools import spec_from
from konduktor.tools.toolbox import Toolbox
from konduktor.vocabulary import KUEUE_API
from konduktor.waiting import wait_until

APP = "bench-quotas"
FOLDER = "clusters/bench"
TEAMS = ("bench-a", "bench-b")


def gpu_quota(kube: Kube, team: str) -> str:
    queue = kube.get(KUEUE_API, "ClusterQueue", team) or {"spec": {"resourceGroups": []}}
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                if resource["name"] == "nvidia.com/gpu":
                    return str(resource["nominalQuota"])
    return ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=5)
    args = parser.parse_args()
    example = product_dir("examples") / "config.yaml"
    toolbox = Toolbox()
    cluster = SimCluster("bench-gitops")
    cluster.up(spec_from(example, job_seconds=2))
    kube = Kube(cluster.kubeconfig)
    home = Path(tempfile.mkdtemp(prefix="argocd-"))
    instance = ArgoCD.pinned(toolbox, cluster.kubeconfig, home)
    repo = GitRepo(Path(tempfile.mkdtemp(prefix="gitops-repo-")))
    try:
        started = time.monotonic()
        instance.start(kube, os.environ)
        print(
            f"Argo CD started (CRDs, settings, Redis and 3 processes): {time.monotonic() - started:.1f} s",
        )
        quotas = dict.fromkeys(TEAMS, 16)
        revision = repo.commit_config(FOLDER, sim_argocd.team_config(example, "bench-lab", quotas), "two teams")
        started = time.monotonic()
        kube.apply(sim_argocd.quotas_application(APP, repo.url, FOLDER))
        wait_until(
            "the first sync",
            lambda: sim_argocd.synced_healthy(sim_argocd.application_status(kube, APP), revision),
            timeout=600,
            interval=0.2,
        )
        print(f"first sync, Application created -> Synced and Healthy: {time.monotonic() - started:.1f} s")
        latencies = []
        for change in range(args.changes):
            quotas["bench-a"] = 17 + change
            repo.commit_config(FOLDER, sim_argocd.team_config(example, "bench-lab", quotas), "quota change")
            started = time.monotonic()
            sim_argocd.refresh(kube, APP)
            wanted = str(quotas["bench-a"])
            wait_until(
                "the change", lambda wanted=wanted: gpu_quota(kube, "bench-a") == wanted, timeout=300, interval=0.1
            )
            latencies.append(time.monotonic() - started)
        print(
            f"quota change committed + refresh -> ClusterQueue changed ({args.changes} changes): "
            f"p50 {statistics.median(latencies):.2f} s, max {max(latencies):.2f} s"
        )
    finally:
        instance.stop()
        kube.close()
        cluster.down()


if __name__ == "__main__":
    main()
