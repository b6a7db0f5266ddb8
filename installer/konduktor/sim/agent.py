"""The simulated cluster's GPU agent: it plays the tools of burn-in pods that land on fake GPU nodes.

kwok runs no containers, but it serves a pod's container logs from files that a `Logs` object names
(kwok.x-k8s.io/v1alpha1, one per pod, enabled in the sim's kwokctl configuration). For every burn-in pod
bound to a node, this process writes each step's output as its fake GPUs would print it (`sim.gpus`) and
creates that pod's `Logs` object, owned by the pod so it goes when the pod goes. Burn-in runs and the health
controller's requalification then read results through the real `pods/log` endpoint, as on hardware.

It also stands in for the GPU Operator's mig-manager, device plugin and GPU Feature Discovery on the nodes of GPU
types with sharing groups (`konduktor.sim.sharing`): a node labelled `nvidia.com/mig.config=<group>` or
`nvidia.com/device-plugin.config=<group>` advertises the group's slices instead of whole GPUs, with the labels a
real node gets. It watches only those nodes (label `sim.konduktor.ai/sharing=true`), so a fleet of whole-GPU nodes
costs it nothing.

`sim up` starts it beside Kueue; it needs only the kubeconfig and a directory for the log files.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from konduktor.burnin.manifests import APP_LABEL, BURNIN_APP
from konduktor.gpu.sharing import SHARED_RESOURCE
from konduktor.kube.client import Kube
from konduktor.sim.faults import DEVICE_PLUGIN, device_plugin_status
from konduktor.sim.gpus import FAULTS_ANNOTATION, LOGS_ANNOTATION, FakeNode, FaultSpecError, parse_faults, step_log
from konduktor.sim.sharing import SHARING_NODES, operator_steps, physical_gpus
from konduktor.vocabulary import PRODUCT_LABEL

LOGS_API = "kwok.x-k8s.io/v1alpha1"
BURNIN_SELECTOR = (APP_LABEL, BURNIN_APP)

logger = logging.getLogger("konduktor.sim.agent")


def cri_log(text: str, at: datetime) -> str:
    """Text in the CRI log file format that kubelet and kwok read back: `<RFC 3339> stdout F <line>`."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    return "".join(f"{stamp} stdout F {line}\n" for line in text.splitlines())


def is_burnin_pod(pod: Mapping[str, Any]) -> bool:
    key, value = BURNIN_SELECTOR
    labels: Mapping[str, str] = pod.get("metadata", {}).get("labels") or {}
    return labels.get(key) == value


def fake_node(node: Mapping[str, Any]) -> FakeNode:
    metadata = node.get("metadata", {})
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    faults = node_faults(node)
    return FakeNode(
        metadata.get("name", ""),
        labels.get(PRODUCT_LABEL, "unknown"),
        physical_gpus(node),
        faults,
        silent=annotations.get(LOGS_ANNOTATION) == "none",
    )


def seen_by(pod: Mapping[str, Any], node: FakeNode) -> FakeNode:
    """The node's GPUs a pod sees: one per time-sliced or MPS replica it holds (each replica is one GPU's share),
    else all of them (whole GPUs, or every MIG instance of the node)."""
    containers = pod.get("spec", {}).get("containers") or ()
    replicas = max(
        (int(str(c.get("resources", {}).get("limits", {}).get(SHARED_RESOURCE, 0))) for c in containers), default=0
    )
    return replace(node, gpus=min(replicas, node.gpus)) if replicas else node


def node_faults(node: Mapping[str, Any]) -> dict[int, Any]:
    metadata = node.get("metadata", {})
    try:
        return dict(parse_faults((metadata.get("annotations") or {}).get(FAULTS_ANNOTATION)))
    except FaultSpecError as problem:
        logger.warning("node %s: ignoring %s: %s", metadata.get("name"), FAULTS_ANNOTATION, problem)
        return {}


def pod_logs(pod: Mapping[str, Any], node: FakeNode) -> dict[str, str]:
    """Container name -> log text, for the steps the sim can play."""
    spec = pod.get("spec", {})
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    return {c["name"]: text for c in containers if (text := step_log(c["name"], node)) is not None}


def logs_object(pod: Mapping[str, Any], files: Mapping[str, Path]) -> dict[str, Any]:
    metadata = pod["metadata"]
    return {
        "apiVersion": LOGS_API,
        "kind": "Logs",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "uid": metadata["uid"]}],
        },
        "spec": {"logs": [{"containers": [name], "logsFile": str(path)} for name, path in sorted(files.items())]},
    }


class Agent:
    def __init__(self, kube: Kube, directory: Path) -> None:
        self.kube = kube
        self.directory = directory
        self.served: set[str] = set()

    def serve(self, pod: Mapping[str, Any]) -> None:
        metadata = pod["metadata"]
        node_name = pod.get("spec", {}).get("nodeName")
        if not node_name or metadata["uid"] in self.served or not is_burnin_pod(pod):
            return
        node = self.kube.get("v1", "Node", node_name)
        if node is None:
            return
        logs = pod_logs(pod, seen_by(pod, fake_node(node)))
        folder = self.directory / metadata["namespace"] / metadata["name"]
        folder.mkdir(parents=True, exist_ok=True)
        files = {}
        now = datetime.now(UTC)
        for container, text in logs.items():
            files[container] = folder / f"{container}.log"
            files[container].write_text(cri_log(text, now))
        if files:
            self.kube.apply(logs_object(pod, files))
            logger.info("served %d step logs for %s/%s on %s", len(files), folder.parent.name, folder.name, node_name)
        self.served.add(metadata["uid"])

    def run(self) -> None:
        """List, then watch from there; any break (timeout, 410, API restart) starts over with a list."""
        while True:
            try:
                pods = self.kube.request("GET", "/api/v1/pods", query={"labelSelector": "=".join(BURNIN_SELECTOR)})
                for pod in pods.get("items", []):
                    self.serve(pod)
                stream = self.kube.watch("v1", "Pod", resource_version=pods["metadata"]["resourceVersion"])
                try:
                    for event in stream:
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self.serve(event["object"])
                finally:
                    stream.close()
            except Exception as problem:
                # The agent lives as long as the simulated cluster: an API server restart or outage (refused
                # connections, a dropped watch, an error status) ends one pass, never the agent.
                logger.warning("%s; listing again in 1 s", problem)
                time.sleep(1)


class GpuOperator:
    """The GPU Operator's components on the nodes with sharing groups: each node brought to what mig-manager, the
    device plugin and GFD would make of its labels (`konduktor.sim.sharing.operator_steps`)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        # Per node, the resourceVersion of the Node as this loop last left it: the events of its own writes, which
        # arrive after, carry nothing newer and are passed over.
        self.left: dict[str, int] = {}

    def reconcile(self, node: Mapping[str, Any]) -> None:
        name = node["metadata"]["name"]
        version = _version(node)
        if version is not None and version <= self.left.get(name, -1):
            return
        for _ in range(3):  # the Node each write returns is judged again: someone may have changed it meanwhile
            steps = operator_steps(
                node["metadata"].get("labels") or {},
                node["metadata"].get("annotations") or {},
                node.get("status", {}),
                device_plugin_status(node, node_faults(node)),
                (node["metadata"].get("labels") or {}).get(PRODUCT_LABEL, ""),
                physical_gpus(node),
            )
            if not steps:
                break
            for kind, change in steps:
                if kind == "labels":
                    node = self.kube.patch("v1", "Node", name, {"metadata": {"labels": change}})
                else:
                    status = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": change}
                    node = self.kube.apply_status(status, DEVICE_PLUGIN)
            logger.info("node %s: %s", name, "; ".join(f"{kind} {change}" for kind, change in steps))
        version = _version(node)
        if version is not None:
            self.left[name] = version

    def run(self) -> None:
        """List the nodes with sharing groups, then watch them; any break starts over with a list."""
        while True:
            try:
                nodes = self.kube.request("GET", "/api/v1/nodes", query={"labelSelector": SHARING_NODES})
                for node in nodes.get("items", []):
                    self.reconcile(node)
                stream = self.kube.watch(
                    "v1", "Node", resource_version=nodes["metadata"]["resourceVersion"], label_selector=SHARING_NODES
                )
                try:
                    for event in stream:
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self.reconcile(event["object"])
                finally:
                    stream.close()
            except Exception as problem:  # as Agent.run: an API outage ends one pass, never the agent
                logger.warning("gpu operator: %s; listing again in 1 s", problem)
                time.sleep(1)


def _version(node: Mapping[str, Any]) -> int | None:
    # resourceVersions are opaque by contract and etcd revisions in practice (as the health controller reads them);
    # one that does not read as a number is never passed over.
    text = str(node.get("metadata", {}).get("resourceVersion", ""))
    return int(text) if text.isdigit() else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m konduktor.sim.agent", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--logs-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Each loop with a client of its own.
    threading.Thread(target=GpuOperator(Kube(args.kubeconfig)).run, name="gpu-operator", daemon=True).start()
    Agent(Kube(args.kubeconfig), args.logs_dir).run()


if __name__ == "__main__":
    main()
