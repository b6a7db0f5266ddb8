"""Node checks: is this GPU host fit? Each check takes a testinfra host, so the same code runs over SSH
(`ssh://user@gpu-node-1`), on the machine itself (`local://`), or from a pod on the node in the host's
namespaces (`konduktor.preflight.host_namespaces`).

A check runs a few read-only commands through `host.run` and judges their output with pure functions; nothing
on the host is changed. A host without GPUs, drivers or tools gets FAIL or SKIPPED with the reason, never an
exception: a missing command is a finding. The GPU-state rules (GPU count, ECC, row remapping, retired pages)
are the burn-in's quick-tier rules (`konduktor.burnin.verdict.passive.judge_passive`), so a node that passes
here does not fail the first burn-in step on the same facts.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from konduktor.burnin.parsers.common import OutputError
from konduktor.burnin.parsers.nvidia_smi import parse_gpu_query, parse_nvidia_smi_csv, parse_remapped_rows
from konduktor.burnin.parsers.passive import PassiveSnapshot
from konduktor.burnin.results import CheckResult, Verdict
from konduktor.burnin.thresholds import DEFAULT_THRESHOLDS
from konduktor.burnin.verdict.common import ECC, INVENTORY, RETIRED_PAGES, ROW_REMAP
from konduktor.burnin.verdict.passive import judge_passive
from konduktor.preflight.results import Check, Status, check

# Fields of the one nvidia-smi query the GPU checks share; parse_gpu_query reads the ones it knows.
GPU_FIELDS = (
    "index",
    "pci.bus_id",
    "name",
    "driver_version",
    "persistence_mode",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
)
REMAP_FIELDS = (
    "gpu_bus_id",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
# NVIDIA's open GPU kernel modules (the only ones for Blackwell) build against Linux 4.15 or newer.
MIN_KERNEL = (4, 15)
# Container image stores, most specific first; the burn-in's PyTorch image alone unpacks to ~20 GB.
IMAGE_STORES = ("/var/lib/containerd", "/var/lib/docker", "/var/lib/kubelet", "/var/lib", "/")
DEFAULT_MIN_FREE_GIB = 50.0
_UNREACHABLE = 255  # ssh's own exit code when it cannot connect


class CommandOutput(Protocol):
    @property
    def rc(self) -> int: ...

    @property
    def stdout(self) -> str: ...

    @property
    def stderr(self) -> str: ...


class Host(Protocol):
    """The part of testinfra's Host the checks use."""

    def run(self, command: str) -> CommandOutput: ...


@dataclass(frozen=True)
class Ran:
    rc: int
    stdout: str
    stderr: str

    @property
    def said(self) -> str:
        """The first line of what the command printed, for evidence."""
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return text[0][:200] if text else f"exit {self.rc}, no output"


def run(host: Host, *argv: str) -> Ran:
    """One command: a shell string, or a program and its arguments (quoted here).

    testinfra's ssh backend raises RuntimeError holding the result when ssh itself fails (exit 255: no route,
    no such host, key refused); a backend that cannot start at all (no ssh binary) raises OSError. Both read
    as ssh's exit 255 with what it said.
    """
    command = argv[0] if len(argv) == 1 else shlex.join(argv)
    try:
        result = host.run(command)
    except RuntimeError as problem:
        failed = problem.args[0] if problem.args else None
        return Ran(_UNREACHABLE, "", str(getattr(failed, "stderr", None) or problem))
    except OSError as problem:
        return Ran(_UNREACHABLE, "", f"{type(problem).__name__}: {problem}")
    return Ran(result.rc, result.stdout or "", result.stderr or "")


@dataclass(frozen=True)
class NodeExpectations:
    """What the node should have, from its GPU type in the config and what its Node object advertises."""

    gpus: int | None = None  # None: unknown (the host is not a node of a configured GPU type)
    rdma: bool = False  # InfiniBand/RoCE ports must be up
    min_free_gib: float = DEFAULT_MIN_FREE_GIB


@dataclass(frozen=True)
class GpuQuery:
    """The shared nvidia-smi query, run once; `problem` says why it could not be read."""

    rows: tuple[dict[str, str], ...] = ()
    snapshot: PassiveSnapshot | None = None
    problem: str | None = None


SSH_HINT = "check the SSH user, key and host key (ssh USER@HOST true)"


def run_node_checks(host: Host, subject: str, expect: NodeExpectations, reach_hint: str = SSH_HINT) -> list[Check]:
    """Every node check on `host`; `reach_hint` says what to fix when no command runs there at all."""
    reachable = run(host, "true")
    if reachable.rc != 0:
        return unreachable(subject, "cannot run commands on the host", [reachable.said], reach_hint)
    checks = [check("host-reachable", Status.PASS, "runs commands", subject)]
    checks += [judge(host, expect, subject) for _, judge in _HOST_CHECKS]
    query = query_gpus(host)
    checks.append(judge_nvidia_smi(query, subject))
    checks += judge_gpu_state(query, expect, subject)
    checks.append(judge_persistence_mode(query, subject))
    checks.append(judge_infiniband(run(host, _IB_PORTS), expect, subject))
    return checks


def unreachable(
    subject: str, summary: str, evidence: Sequence[str], hint: str, skipped: str = "host not reachable"
) -> list[Check]:
    """No check could run on the host: `host-reachable` FAILs with the reason, every other check is SKIPPED."""
    names = [name for name, _ in _HOST_CHECKS] + list(_GPU_CHECK_NAMES)
    return [
        check("host-reachable", Status.FAIL, summary, subject, evidence, hint),
        *(check(name, Status.SKIPPED, skipped, subject) for name in names),
    ]


# --------------------------------------------------------------------------------------------
# Host: kernel, driver modules, time, disk.


def kernel_check(host: Host, _expect: NodeExpectations, subject: str) -> Check:
    return judge_kernel(run(host, "uname -r"), subject)


def judge_kernel(uname: Ran, subject: str) -> Check:
    release = uname.stdout.strip()
    match = re.match(r"^(\d+)\.(\d+)", release)
    if uname.rc != 0 or not match:
        return check("kernel", Status.FAIL, "cannot read the kernel version", subject, [uname.said])
    if (int(match.group(1)), int(match.group(2))) < MIN_KERNEL:
        return check(
            "kernel",
            Status.WARN,
            f"Linux {release} is older than {MIN_KERNEL[0]}.{MIN_KERNEL[1]}",
            subject,
            hint="NVIDIA's open kernel modules (required from Blackwell on) need Linux 4.15 or newer",
        )
    return check("kernel", Status.PASS, f"Linux {release}", subject)


def modules_check(host: Host, expect: NodeExpectations, subject: str) -> Check:
    return judge_modules(run(host, "cat /proc/modules"), expect, subject)


def judge_modules(modules: Ran, expect: NodeExpectations, subject: str) -> Check:
    if modules.rc != 0:
        return check(
            "nvidia-modules",
            Status.FAIL,
            "cannot read /proc/modules, so the NVIDIA driver cannot be confirmed",
            subject,
            [modules.said],
        )
    loaded = {line.split()[0] for line in modules.stdout.splitlines() if line.strip()}
    nvidia = sorted(m for m in loaded if m.startswith("nvidia"))
    if "nvidia" not in loaded:
        return check(
            "nvidia-modules",
            Status.FAIL,
            "the nvidia kernel module is not loaded",
            subject,
            [f"loaded NVIDIA modules: {', '.join(nvidia) or 'none'}"],
            "install the NVIDIA driver (or let the GPU Operator's driver container load it), then reboot or modprobe",
        )
    if expect.rdma and "nvidia_peermem" not in loaded:
        return check(
            "nvidia-modules",
            Status.WARN,
            "nvidia_peermem is not loaded: GPUDirect RDMA is off",
            subject,
            [f"loaded NVIDIA modules: {', '.join(nvidia)}"],
            "load nvidia_peermem (GPU Operator: driver.rdma.enabled=true) so NCCL can move GPU memory over the NICs",
        )
    return check("nvidia-modules", Status.PASS, ", ".join(nvidia), subject)


_DRIVER_VERSION = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def driver_check(host: Host, _expect: NodeExpectations, subject: str) -> Check:
    return judge_driver(run(host, "cat /proc/driver/nvidia/version"), subject)


def judge_driver(version_file: Ran, subject: str) -> Check:
    """`/proc/driver/nvidia/version` exists only while the kernel driver is loaded and names its version."""
    match = _DRIVER_VERSION.search(version_file.stdout)
    if version_file.rc != 0 or not match:
        return check(
            "nvidia-driver",
            Status.FAIL,
            "no NVIDIA kernel driver version (/proc/driver/nvidia/version)",
            subject,
            [version_file.said],
            "install the NVIDIA data-center driver for this kernel",
        )
    flavour = "open" if "Open Kernel Module" in version_file.stdout else "proprietary"
    return check("nvidia-driver", Status.PASS, f"{match.group(1)} ({flavour} kernel module)", subject)


def time_sync_check(host: Host, _expect: NodeExpectations, subject: str) -> Check:
    timedatectl = run(host, "timedatectl show -p NTPSynchronized --value")
    if timedatectl.rc == 0 and timedatectl.stdout.strip() in ("yes", "no"):
        return judge_time_sync(timedatectl.stdout.strip() == "yes", "timedatectl: NTPSynchronized", subject)
    chrony = run(host, "chronyc tracking")
    if chrony.rc == 0 and (leap := re.search(r"^Leap status\s*:\s*(.+)$", chrony.stdout, re.M)):
        return judge_time_sync(leap.group(1).strip() != "Not synchronised", f"chronyc: {leap.group(0)}", subject)
    return check(
        "time-sync",
        Status.SKIPPED,
        "cannot tell: neither timedatectl (systemd) nor chronyc answered",
        subject,
        [f"timedatectl: {timedatectl.said}", f"chronyc: {chrony.said}"],
    )


def judge_time_sync(synchronised: bool, source: str, subject: str) -> Check:
    if synchronised:
        return check("time-sync", Status.PASS, "clock synchronised", subject, [source])
    return check(
        "time-sync",
        Status.FAIL,
        "clock not synchronised",
        subject,
        [source],
        "enable NTP (chrony or systemd-timesyncd): skewed clocks break certificates, tokens and log correlation",
    )


def image_disk_check(host: Host, expect: NodeExpectations, subject: str) -> Check:
    # The first store that exists; `df -P -k` prints one portable line in KiB.
    stores = " ".join(IMAGE_STORES)
    script = f'for d in {stores}; do if [ -d "$d" ]; then df -P -k "$d"; exit $?; fi; done; exit 1'
    return judge_image_disk(run(host, "sh", "-c", script), expect.min_free_gib, subject)


def judge_image_disk(df: Ran, min_free_gib: float, subject: str) -> Check:
    lines = [line.split() for line in df.stdout.splitlines()[1:] if line.strip()]
    if df.rc != 0 or not lines or len(lines[-1]) < 6 or not lines[-1][3].isdigit():
        return check("image-disk", Status.FAIL, "cannot read free disk space", subject, [df.said])
    fields = lines[-1]
    free_gib = int(fields[3]) / 2**20
    where = f"{fields[5]} ({fields[0]}): {free_gib:.0f} GiB free"
    if free_gib < min_free_gib:
        return check(
            "image-disk",
            Status.FAIL,
            f"{free_gib:.0f} GiB free for container images, {min_free_gib:.0f} GiB needed",
            subject,
            [where],
            "free space under the container runtime's store: the burn-in and training images are tens of GB",
        )
    return check("image-disk", Status.PASS, where, subject)


_HOST_CHECKS: tuple[tuple[str, Callable[[Host, NodeExpectations, str], Check]], ...] = (
    ("kernel", kernel_check),
    ("nvidia-modules", modules_check),
    ("nvidia-driver", driver_check),
    ("time-sync", time_sync_check),
    ("image-disk", image_disk_check),
)


# --------------------------------------------------------------------------------------------
# GPUs: nvidia-smi, count, ECC, row remapping, persistence mode.

_GPU_CHECK_NAMES = ("nvidia-smi", "gpu-count", "ecc", "row-remap", "retired-pages", "persistence-mode", "infiniband")
# Preflight names of the burn-in's quick-tier checks that run here.
_PASSIVE_NAMES = {INVENTORY: "gpu-count", ECC: "ecc", ROW_REMAP: "row-remap", RETIRED_PAGES: "retired-pages"}
# ERROR (the state could not be read) is not fit either.
_STATUS = {
    Verdict.PASS: Status.PASS,
    Verdict.WARN: Status.WARN,
    Verdict.FAIL: Status.FAIL,
    Verdict.ERROR: Status.FAIL,
    Verdict.SKIPPED: Status.SKIPPED,
}


def query_gpus(host: Host) -> GpuQuery:
    gpu = run(host, "nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,nounits")
    if gpu.rc != 0:
        missing = gpu.rc == 127 or "not found" in gpu.said
        return GpuQuery(problem="nvidia-smi is not installed" if missing else f"nvidia-smi failed: {gpu.said}")
    remap = run(host, "nvidia-smi", f"--query-remapped-rows={','.join(REMAP_FIELDS)}", "--format=csv,nounits")
    return read_gpu_query(gpu.stdout, remap.stdout if remap.rc == 0 else None)


def read_gpu_query(gpu_csv: str, remap_csv: str | None) -> GpuQuery:
    try:
        rows = tuple(parse_nvidia_smi_csv(gpu_csv))
        gpus = parse_gpu_query(gpu_csv)
    except OutputError as problem:
        return GpuQuery(problem=f"nvidia-smi output unreadable: {problem}")
    try:
        # Pre-Ampere GPUs have no row remapping; the query then fails and the check says so.
        remapped = parse_remapped_rows(remap_csv) if remap_csv is not None else None
    except OutputError:
        remapped = None
    return GpuQuery(rows, PassiveSnapshot(gpus, remapped, None, None, None))


def judge_nvidia_smi(query: GpuQuery, subject: str) -> Check:
    if query.problem is not None:
        return check(
            "nvidia-smi",
            Status.FAIL,
            query.problem,
            subject,
            hint="nvidia-smi comes with the driver; 'Driver/library version mismatch' needs a reboot after an upgrade",
        )
    if not query.rows:
        return check("nvidia-smi", Status.FAIL, "nvidia-smi sees no GPU", subject, hint="check lspci and dmesg")
    names = sorted({row.get("name", "?") for row in query.rows})
    drivers = sorted({row.get("driver_version", "?") for row in query.rows})
    return check(
        "nvidia-smi", Status.PASS, f"{len(query.rows)} x {', '.join(names)}, driver {', '.join(drivers)}", subject
    )


def judge_gpu_state(query: GpuQuery, expect: NodeExpectations, subject: str) -> list[Check]:
    """GPU count, ECC, row remapping and retired pages, judged by the burn-in's quick-tier rules."""
    names = list(_PASSIVE_NAMES.values())
    if query.snapshot is None:
        return [check(name, Status.SKIPPED, "nvidia-smi did not work (see nvidia-smi)", subject) for name in names]
    expected = expect.gpus if expect.gpus is not None else len(query.snapshot.gpus)
    results = {r.check: r for r in judge_passive(query.snapshot, None, expected, DEFAULT_THRESHOLDS.passive)}
    checks = [_from_burnin(_PASSIVE_NAMES[name], results[name], subject) for name in _PASSIVE_NAMES]
    if expect.gpus is None:
        checks[0] = check(
            "gpu-count",
            Status.SKIPPED,
            f"{len(query.snapshot.gpus)} GPUs; the expected count is unknown (not a node of a configured GPU type)",
            subject,
        )
    return checks


def _from_burnin(name: str, result: CheckResult, subject: str) -> Check:
    evidence = list(result.reasons) + [
        f"{'' if e.gpu is None else f'GPU{e.gpu} '}{e.metric} = {e.measured}" for e in result.evidence
    ]
    return check(name, _STATUS[result.verdict], result.summary, subject, evidence)


def judge_persistence_mode(query: GpuQuery, subject: str) -> Check:
    if query.snapshot is None:
        return check("persistence-mode", Status.SKIPPED, "nvidia-smi did not work (see nvidia-smi)", subject)
    modes = {row.get("index", "?"): row.get("persistence_mode", "").strip() for row in query.rows}
    off = sorted(index for index, mode in modes.items() if mode.lower() == "disabled")
    if not any(mode.lower() in ("enabled", "disabled") for mode in modes.values()):
        return check("persistence-mode", Status.SKIPPED, "nvidia-smi reports no persistence mode", subject)
    if off:
        return check(
            "persistence-mode",
            Status.WARN,
            f"off on GPU {', '.join(off)}",
            subject,
            hint="run nvidia-persistenced: without it the driver re-initialises idle GPUs on every job start, and "
            "DCGM diagnostics expect it",
        )
    return check("persistence-mode", Status.PASS, f"on for all {len(modes)} GPUs", subject)


# --------------------------------------------------------------------------------------------
# InfiniBand / RoCE ports.

# One line per port: path|state|phys_state|rate|link_layer, read from sysfs (no OFED tools needed).
_IB_PORTS = (
    'sh -c \'for p in /sys/class/infiniband/*/ports/*; do [ -e "$p/state" ] || continue; '
    'echo "$p|$(cat $p/state)|$(cat $p/phys_state)|$(cat $p/rate)|$(cat $p/link_layer 2>/dev/null)"; done\''
)


@dataclass(frozen=True)
class IbPort:
    device: str
    port: str
    state: str
    phys_state: str
    rate: str
    link_layer: str

    @property
    def up(self) -> bool:
        return self.state.endswith("ACTIVE") and self.phys_state.endswith("LinkUp")

    def describe(self) -> str:
        layer = f" {self.link_layer}" if self.link_layer else ""
        return f"{self.device}/{self.port}: {self.state}, {self.phys_state}, {self.rate}{layer}"


def parse_ib_ports(text: str) -> list[IbPort]:
    ports = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5:
            continue
        match = re.search(r"/infiniband/([^/]+)/ports/([^/]+)$", fields[0])
        if match:
            state, phys, rate, layer = (f.strip() for f in fields[1:])
            ports.append(IbPort(match.group(1), match.group(2), state, phys, rate, layer))
    return ports


def judge_infiniband(ports_output: Ran, expect: NodeExpectations, subject: str) -> Check:
    if not expect.rdma:
        return check(
            "infiniband", Status.SKIPPED, "RDMA not expected on this node (no rdma/ resources advertised)", subject
        )
    ports = parse_ib_ports(ports_output.stdout)
    if not ports:
        return check(
            "infiniband",
            Status.FAIL,
            "no InfiniBand/RoCE ports in /sys/class/infiniband",
            subject,
            [ports_output.said] if ports_output.rc != 0 else [],
            "load the NIC driver (mlx5_ib; network operator's OFED container) or drop RDMA for this node",
        )
    down = [p for p in ports if not p.up]
    evidence = [p.describe() for p in ports]
    if down:
        return check(
            "infiniband",
            Status.FAIL,
            f"{len(down)} of {len(ports)} ports not ACTIVE/LinkUp: {', '.join(f'{p.device}/{p.port}' for p in down)}",
            subject,
            evidence,
            "check cables, the switch port and the subnet manager (ibstat, ibstatus)",
        )
    rates = sorted({p.rate for p in ports})
    return check("infiniband", Status.PASS, f"{len(ports)} ports up ({', '.join(rates)})", subject, evidence)
