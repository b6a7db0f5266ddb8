"""Burn-in Job manifests: pinning, GPUs, tolerations, deadlines, privileges with reasons, and step plumbing."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from konduktor.burnin import manifests
from konduktor.burnin.manifests import node_job, pair_objects, scripts_configmap, step_body, wrap_step
from konduktor.burnin.parsers.passive import parse_passive_snapshot
from konduktor.burnin.parsers.step import split_step_log
from konduktor.burnin.tiers import BurnInImages, Step, Tier, options_for_tier
from konduktor.errors import UsageError

RUN = "20251103-140000"
NODE = "gpu-node-07"
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
STANDARD = options_for_tier(Tier.STANDARD)


def pod_containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    spec = job["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.fixture
def job() -> dict[str, Any]:
    return node_job(RUN, NODE, 8, STANDARD, "konduktor-burnin")


def test_pinned_by_node_affinity_not_node_name(job: dict[str, Any]) -> None:
    spec = job["spec"]["template"]["spec"]
    assert "nodeName" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]


def test_hostname_label_may_differ_from_the_node_name() -> None:
    job = node_job(RUN, "ip-10-0-0-7.ec2.internal", 8, STANDARD, "ns", hostname="ip-10-0-0-7")
    expression = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expression["values"] == ["ip-10-0-0-7"]


def test_every_container_holds_all_gpus_with_requests_equal_to_limits(job: dict[str, Any]) -> None:
    for container in pod_containers(job):
        resources = container["resources"]
        assert resources["requests"] == resources["limits"]
        assert resources["limits"]["nvidia.com/gpu"] == 8


def test_tolerates_gpu_and_health_taints_and_the_clusters_own() -> None:
    extra = {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
    job = node_job(RUN, NODE, 8, STANDARD, "ns", extra_tolerations=[extra])
    tolerations = job["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in tolerations
    assert {"key": "konduktor.ai/gpu-health", "operator": "Exists"} in tolerations
    assert extra in tolerations


def test_runs_once_with_a_deadline_and_a_ttl(job: dict[str, Any]) -> None:
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    step_total = sum(STANDARD.timeout_s(step) for step in STANDARD.steps)
    assert spec["activeDeadlineSeconds"] == step_total + STANDARD.schedule_slack_s
    assert spec["ttlSecondsAfterFinished"] == 3600


def test_labels_identify_run_node_and_owner(job: dict[str, Any]) -> None:
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert labels["app.kubernetes.io/managed-by"] == "konduktor"
        assert labels["konduktor.ai/burnin-run"] == RUN
        assert labels["konduktor.ai/node"] == NODE


def test_steps_run_in_order_as_init_containers_then_the_last_one(job: dict[str, Any]) -> None:
    spec = job["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["passive", "dcgm-diag", "matmul"]
    assert [c["name"] for c in spec["containers"]] == ["nccl-allreduce"]
    quick = node_job(RUN, NODE, 8, options_for_tier("quick"), "ns")["spec"]["template"]["spec"]
    assert quick["initContainers"] == [] and [c["name"] for c in quick["containers"]] == ["passive"]


def test_privileges_only_where_needed_and_each_explained(job: dict[str, Any]) -> None:
    reasons = json.loads(job["spec"]["template"]["metadata"]["annotations"]["konduktor.ai/privileges"])
    for container in pod_containers(job):
        context = container["securityContext"]
        added = context["capabilities"].get("add", [])
        assert context["capabilities"]["drop"] == ["ALL"]
        assert not context.get("privileged", False)
        if container["name"] in {"matmul", "nccl-allreduce"}:
            assert added == [] and context["runAsNonRoot"] and context["readOnlyRootFilesystem"]
            assert container["name"] not in reasons
        else:
            assert added, container["name"]
            assert reasons[container["name"]], container["name"]
    assert [c["securityContext"]["capabilities"].get("add") for c in pod_containers(job)][:2] == [
        ["SYSLOG"],
        ["SYS_ADMIN"],
    ]
    assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_privileged_dcgm_is_opt_in_and_says_why() -> None:
    job = node_job(RUN, NODE, 8, replace(STANDARD, dcgm_privilege="privileged"), "ns")
    dcgm = next(c for c in pod_containers(job) if c["name"] == "dcgm-diag")
    assert dcgm["securityContext"]["privileged"] is True
    reasons = json.loads(job["spec"]["template"]["metadata"]["annotations"]["konduktor.ai/privileges"])
    assert "privileged" in reasons["dcgm-diag"]


def test_images_are_configurable_with_ngc_defaults(job: dict[str, Any]) -> None:
    images = {c["name"]: c["image"] for c in pod_containers(job)}
    assert images["dcgm-diag"].startswith("nvcr.io/nvidia/cloud-native/dcgm:")
    assert images["matmul"].startswith("nvcr.io/nvidia/pytorch:")
    custom = replace(STANDARD, images=BurnInImages(pytorch="registry.local/pytorch@sha256:" + "a" * 64))
    matmul = next(c for c in pod_containers(node_job(RUN, NODE, 8, custom, "ns")) if c["name"] == "matmul")
    assert matmul["image"] == "registry.local/pytorch@sha256:" + "a" * 64


def test_nccl_step_pins_the_algorithm_and_one_large_size(job: dict[str, Any]) -> None:
    nccl = next(c for c in pod_containers(job) if c["name"] == "nccl-allreduce")
    assert {"name": "NCCL_NVLS_ENABLE", "value": "1"} in nccl["env"]
    assert "-b 16G -e 16G" in nccl["command"][2] and "-g 8" in nccl["command"][2]


def test_gpu_burn_step_only_with_an_image() -> None:
    assert Step.GPU_BURN not in replace(STANDARD, gpu_burn_seconds=60).steps
    with_image = replace(STANDARD, gpu_burn_seconds=60, images=BurnInImages(gpu_burn="registry.local/gpu-burn:1"))
    assert Step.GPU_BURN in with_image.steps


def test_names_are_dns_labels_and_long_node_names_fit_labels() -> None:
    long_node = "gpu-" + "x" * 240 + ".example.internal"
    job = node_job(RUN, long_node, 8, STANDARD, "ns")
    assert DNS_LABEL.match(job["metadata"]["name"]) and len(job["metadata"]["name"]) <= 52
    label = job["metadata"]["labels"]["konduktor.ai/node"]
    assert len(label) <= 63 and label != long_node
    assert job["metadata"]["annotations"]["konduktor.ai/node"] == long_node
    assert manifests.node_job_name(RUN, "a") != manifests.node_job_name(RUN, "A")


def test_bad_input_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="run id"):
        node_job("Run_1", NODE, 8, STANDARD, "ns")
    with pytest.raises(UsageError, match="at least one GPU"):
        node_job(RUN, NODE, 0, STANDARD, "ns")
    with pytest.raises(UsageError, match="unknown burn-in level"):
        options_for_tier("extreme")
    with pytest.raises(UsageError, match="two different nodes"):
        pair_objects(RUN, ("a", "a"), 8, STANDARD, "ns")


def test_run_id_from_time_is_valid() -> None:
    run_id = manifests.make_run_id(datetime(2025, 11, 3, 14, 0, 0))
    assert run_id == RUN
    scripts_configmap(run_id, "ns")  # accepted


def test_configmap_carries_the_scripts_verbatim() -> None:
    configmap = scripts_configmap(RUN, "konduktor-burnin")
    package = Path(manifests.__file__).parent
    assert configmap["data"]["matmul.py"] == (package / "matmul.py").read_text()
    assert configmap["data"]["allreduce.py"] == (package / "allreduce.py").read_text()
    assert configmap["metadata"]["labels"]["konduktor.ai/burnin-run"] == RUN
    assert sum(len(v) for v in configmap["data"].values()) < 1 << 20  # ConfigMap limit


def test_pair_is_an_indexed_job_with_a_headless_service() -> None:
    service, job = pair_objects(RUN, ("gpu-node-01", "gpu-node-02"), 8, STANDARD, "ns")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (
        "Indexed",
        2,
        2,
        0,
    )
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    pod = spec["template"]
    assert pod["spec"]["subdomain"] == service["metadata"]["name"] == job["metadata"]["name"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    affinity = pod["spec"]["affinity"]
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ][0]["values"] == ["gpu-node-01", "gpu-node-02"]
    anti = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert f"--master-addr={job['metadata']['name']}-0.{service['metadata']['name']}" in container["command"][2]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "add" not in container["securityContext"]["capabilities"]
    # The same pair in either order is the same Job.
    assert (
        pair_objects(RUN, ("gpu-node-02", "gpu-node-01"), 8, STANDARD, "ns")[1]["metadata"]["name"]
        == (job["metadata"]["name"])
    )


def test_rdma_pair_gets_its_nics_and_ipc_lock_with_a_reason() -> None:
    _, job = pair_objects(RUN, ("a", "b"), 8, STANDARD, "ns", rdma_resources={"rdma/ib": 1})
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["rdma/ib"] == 1
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    reasons = json.loads(job["spec"]["template"]["metadata"]["annotations"]["konduktor.ai/privileges"])
    assert "pins" in reasons["nccl-pair"]


# --- the step plumbing, run for real with /bin/sh ------------------------------------------------


def run_script(command: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr  # a step always exits 0; the tool's code is in the end line
    return done.stdout


def test_step_wrapper_reports_the_tools_exit_code() -> None:
    log = split_step_log(run_script(wrap_step("dcgm-diag", 30, "echo report; exit 226")))
    assert (log.output, log.exit_code, log.timed_out) == ("report", 226, False)


def test_step_wrapper_stops_a_tool_at_its_time_limit() -> None:
    log = split_step_log(run_script(wrap_step("matmul", 1, "echo started; sleep 30")))
    assert log.output == "started" and log.timed_out


FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=*)
    echo "index, pci.bus_id, uuid, name, ecc.mode.current, ecc.errors.uncorrected.volatile.total, \\
ecc.errors.uncorrected.volatile.sram, ecc.errors.corrected.volatile.sram, retired_pages.pending, \\
clocks_event_reasons.active, temperature.gpu, power.draw [W], clocks.sm [MHz]"
    echo "0, 00000000:18:00.0, GPU-1, NVIDIA H100 80GB HBM3, Enabled, 0, 0, 0, [N/A], \
0x0000000000000001, 31, 69.50, 345"
    ;;
  *--query-remapped-rows=*)
    echo "gpu_bus_id, remapped_rows.correctable, remapped_rows.uncorrectable, \
remapped_rows.pending, remapped_rows.failure"
    echo "00000000:18:00.0, 0, 0, 0, 0"
    ;;
  "nvlink -s")
    printf 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\\n\\t Link 0: 26.562 GB/s\\n'
    ;;
esac
"""
FAKE_DMESG = """#!/bin/sh
echo "[    5.000000] Linux version 6.8.0"
echo "[  100.000000] NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=python, An uncorrectable double bit error"
"""


def test_passive_step_body_and_parser_agree(tmp_path: Path) -> None:
    for name, text in (("nvidia-smi", FAKE_NVIDIA_SMI), ("dmesg", FAKE_DMESG)):
        tool = tmp_path / name
        tool.write_text(text)
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "TMPDIR": str(tmp_path)}
    body = step_body(Step.PASSIVE, STANDARD, 8)
    log = split_step_log(run_script(wrap_step("passive", 30, body), env))
    assert log.exit_code == 0
    snapshot = parse_passive_snapshot(log.output)
    assert [g.name for g in snapshot.gpus] == ["NVIDIA H100 80GB HBM3"]
    assert snapshot.remapped_rows is not None and len(snapshot.remapped_rows) == 1
    assert snapshot.nvlink is not None and snapshot.nvlink[0].active_links == 1
    assert snapshot.uptime_s is not None and snapshot.uptime_s > 0
    assert snapshot.kernel_events is not None
    assert [(e.kind, e.code) for e in snapshot.kernel_events] == [("xid", 48)]
