"""What the simulated cluster's fake GPUs report when a burn-in step runs on them.

Fake nodes run no containers, so the sim answers for the tools: each step's log is written in the exact
format the real tool prints (nvidia-smi CSV and `nvlink -s`, `dcgmi diag -j`, nccl-tests, our matmul.py),
with figures a healthy GPU of the node's model reaches. A node annotation injects faults on chosen GPUs,
so the whole flow (Jobs, logs through the API, verdicts, report, quarantine) is exercised on the sim and
the verdicts come from the same parsers as on hardware.

Faults, as `<gpu index>=<kind>` pairs separated by commas in the annotation `sim.konduktor.ai/gpu-faults`:
  ecc      uncorrected volatile ECC errors (nvidia-smi) and a failing DCGM memory test
  xid      an Xid 79 (fell off the bus) line in the kernel log
  missing  the GPU is not listed by nvidia-smi and takes no part in matmul or NCCL
  slow     the GPU reaches 40 % of the model's BF16 peak, and NCCL over it half its goal
  sdc      the GPU's matmul digest differs from its peers' (silent data corruption)
and `sim.konduktor.ai/logs: none` makes the node's burn-in pods print nothing at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, cast, get_args

from konduktor.burnin.parsers.matmul import MATMUL_SCHEMA
from konduktor.burnin.parsers.passive import SECTION_MARKER
from konduktor.burnin.parsers.step import STEP_END_MARKER
from konduktor.burnin.thresholds import GpuModel, NcclAlgorithm, gpu_model_for
from konduktor.burnin.tiers import Step

FAULTS_ANNOTATION = "sim.konduktor.ai/gpu-faults"
# "none": the node's pods print nothing, as when a container never started or its log was lost.
LOGS_ANNOTATION = "sim.konduktor.ai/logs"
Fault = Literal["ecc", "xid", "missing", "slow", "sdc"]
FAULTS: tuple[str, ...] = get_args(Fault)

# Healthy figures as fractions of the model's peaks: comfortably above every goal in the thresholds table.
_MATMUL_FRACTION = 0.79
_SLOW_FRACTION = 0.40
_NCCL_OVER_GOAL = 1.08
_NVLINK_LINKS = 18
_SEED = 1234
_SIZE = 8192


class FaultSpecError(ValueError):
    pass


def parse_faults(text: str | None) -> dict[int, Fault]:
    """`"3=slow, 5=ecc"` -> {3: "slow", 5: "ecc"}."""
    faults: dict[int, Fault] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        index, _, kind = item.partition("=")
        kind = kind.strip()
        if not index.strip().isdigit() or kind not in FAULTS:
            raise FaultSpecError(f"{item.strip()!r}: expected <gpu index>=<{'|'.join(FAULTS)}>")
        faults[int(index)] = cast(Fault, kind)
    return faults


@dataclass(frozen=True)
class FakeNode:
    """One fake node's GPUs: its nvidia.com/gpu.product label, how many, and the faults injected."""

    name: str
    product: str
    gpus: int
    faults: Mapping[int, Fault] = field(default_factory=dict)
    silent: bool = False

    @property
    def smi_name(self) -> str:
        # The product label is nvidia-smi's name with spaces as dashes (GPU feature discovery).
        return self.product.replace("-", " ")

    @property
    def model(self) -> GpuModel | None:
        return gpu_model_for(self.product)

    def present(self) -> list[int]:
        return [i for i in range(self.gpus) if self.faults.get(i) != "missing"]

    def bus_id(self, index: int) -> str:
        return f"00000000:{0x18 + 0x10 * index:02X}:00.0"

    def uuid(self, index: int) -> str:
        digest = hashlib.sha256(f"{self.name}/{index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def step_log(step: str, node: FakeNode) -> str | None:
    """The whole log of one step's container, end line included; None for a step the sim cannot play."""
    outputs = {
        Step.PASSIVE.value: passive,
        Step.DCGM.value: dcgm_diag,
        Step.MATMUL.value: matmul,
        Step.NCCL.value: nccl_allreduce,
    }
    produce = outputs.get(step)
    if produce is None or node.silent:
        return None
    output, exit_code = produce(node)
    end = json.dumps({"step": step, "exit_code": exit_code, "seconds": 1})
    return f"{output}\n{STEP_END_MARKER} {end}\n"


def passive(node: FakeNode) -> tuple[str, int]:
    header = (
        "index, pci.bus_id, uuid, name, ecc.mode.current, ecc.errors.uncorrected.volatile.total, "
        "ecc.errors.uncorrected.volatile.sram, ecc.errors.corrected.volatile.sram, retired_pages.pending, "
        "clocks_event_reasons.active, temperature.gpu, power.draw [W], clocks.sm [MHz]"
    )
    gpu_rows = [
        f"{i}, {node.bus_id(i)}, {node.uuid(i)}, {node.smi_name}, Enabled, {2 if node.faults.get(i) == 'ecc' else 0}, "
        f"0, 0, [N/A], 0x0000000000000001, 31, 70.00, 345"
        for i in node.present()
    ]
    remap_rows = [
        "gpu_bus_id, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, "
        "remapped_rows.failure",
        *(f"{node.bus_id(i)}, 0, 0, 0, 0" for i in node.present()),
    ]
    nvlink: list[str] = []
    if node.model is not None and node.model.nvlink_gb_s:
        for i in node.present():
            nvlink.append(f"GPU {i}: {node.smi_name} (UUID: {node.uuid(i)})")
            nvlink += [f"\t Link {link}: 26.562 GB/s" for link in range(_NVLINK_LINKS)]
    kernel = ["dmesg-exit: 0"] + [
        f"[86352.530000] NVRM: Xid (PCI:{node.bus_id(i)[4:]}): 79, pid=0, GPU has fallen off the bus."
        for i, kind in sorted(node.faults.items())
        if kind == "xid"
    ]
    sections = {
        "gpu": [header, *gpu_rows],
        "remapped-rows": remap_rows,
        "nvlink": nvlink,
        "uptime": ["86412.53 1378923.11"],
        "kernel-log": kernel,
    }
    return "\n".join(f"{SECTION_MARKER}{name}\n" + "\n".join(lines) for name, lines in sections.items()), 0


def dcgm_diag(node: FakeNode) -> tuple[str, int]:
    def test(category: str, name: str, failing: set[int]) -> dict[str, object]:
        results = []
        for i in node.present():
            result: dict[str, object] = {"entity_group": "GPU", "entity_id": i, "status": "Pass"}
            if i in failing:
                result["status"] = "Fail"
                result["warnings"] = [
                    {"warning": f"GPU {i}: uncorrectable memory errors were found", "error_id": 5, "error_category": 2}
                ]
            results.append(result)
        return {"name": name, "results": results, "test_summary": {"status": "Fail" if failing else "Pass"}}

    ecc = {i for i, kind in node.faults.items() if kind == "ecc"}
    document = {
        "DCGM Diagnostic": {
            "test_categories": [
                {"category": "Deployment", "tests": [test("Deployment", "software", set())]},
                {"category": "Hardware", "tests": [test("Hardware", "memory", ecc)]},
                {"category": "Integration", "tests": [test("Integration", "pcie", set())]},
                {"category": "Stress", "tests": [test("Stress", "targeted_stress", set())]},
            ]
        },
        "metadata": {"version": "4.6.0", "Driver Version Detected": "580.95.05"},
    }
    # dcgmi exits non-zero when a test fails, as the real one does.
    return json.dumps(document, indent=4), 226 if ecc else 0


def matmul(node: FakeNode) -> tuple[str, int]:
    peak = node.model.bf16_dense_tflops if node.model else 100.0
    key = f"{node.smi_name}|132|9.0|sim|12.8|bfloat16|{_SIZE}|{_SIZE}|{_SIZE}|{_SEED}"
    good = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    lines = []
    groups: dict[str, list[int]] = {}
    for i in node.present():
        fraction = _SLOW_FRACTION if node.faults.get(i) == "slow" else _MATMUL_FRACTION
        tflops = [round(peak * fraction * (1 + 0.001 * window), 1) for window in range(6)]
        digest = good
        if node.faults.get(i) == "sdc":
            digest = "sha256:" + hashlib.sha256(f"{key}/corrupt/{i}".encode()).hexdigest()
        groups.setdefault(digest, []).append(i)
        lines.append(
            json.dumps(
                {
                    "schema": MATMUL_SCHEMA,
                    "kind": "gpu",
                    "index": i,
                    "device": f"cuda:{i}",
                    "name": node.smi_name,
                    "uuid": node.uuid(i),
                    "status": "ok",
                    "dtype": "bfloat16",
                    "m": _SIZE,
                    "n": _SIZE,
                    "k": _SIZE,
                    "seed": _SEED,
                    "tflops": tflops,
                    "digest": digest,
                    "digest_key": key,
                    "digest_mismatch_windows": 0,
                    "nonfinite": 0,
                    "clocks": {"event_reasons_seen": "0x0000000000000004", "sm_mhz_min": 1755.0, "temp_c_max": 71.0},
                },
                sort_keys=True,
            )
        )
    summary = {
        "schema": MATMUL_SCHEMA,
        "kind": "summary",
        "gpus": len(node.present()),
        "ok": len(node.present()),
        "errors": 0,
        "consistent": len(groups) <= 1,
        "digest_groups": {key: groups},
    }
    lines.append(json.dumps(summary, sort_keys=True))
    return "\n".join(lines), 0


def nccl_allreduce(node: FakeNode) -> tuple[str, int]:
    model = node.model
    band = model.nccl_allreduce.get(NcclAlgorithm.NVLS) if model else None
    goal = band.pass_at * model.nvlink_gb_s if model and band and model.nvlink_gb_s else 100.0
    busbw = goal * _NCCL_OVER_GOAL
    if any(kind == "slow" for kind in node.faults.values()):
        busbw = goal * 0.5
    ranks = node.present()
    size = 17179869184
    # all_reduce moves 2(n-1)/n of the buffer per rank: busbw = algbw * 2(n-1)/n.
    algbw = busbw * len(ranks) / (2 * max(len(ranks) - 1, 1))
    time_us = size / (algbw * 1e3)
    lines = [
        "# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703",
        "# Collective test starting: all_reduce_perf",
        f"# nThread 1 nGpus {len(ranks)} minBytes {size} maxBytes {size} step: 2(factor) warmup iters: 5 iters: 20",
        "# Using devices",
        *(
            f"#  Rank {rank:2d} Group  0 Pid   4242 on {node.name} device {i:2d} [{node.bus_id(i)[4:].lower()}] "
            f"{node.smi_name}"
            for rank, i in enumerate(ranks)
        ),
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
        "busbw  #wrong",
        f" {size:>11d} {size // 4:>13d}     float     sum      -1 {time_us:8.1f} {algbw:7.2f} {busbw:7.2f}       0 "
        f"{time_us:8.1f} {algbw:7.2f} {busbw:7.2f}       0",
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {busbw:.3f}",
        "# Collective test concluded: all_reduce_perf",
    ]
    return "\n".join(lines), 0
