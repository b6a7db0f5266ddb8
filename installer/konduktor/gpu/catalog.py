"""What each GPU fault report means and what to do about it: the Xid, SXid and DCGM catalogs as data.

Sources are the tables of docs/design/gpu-faults.md: NVIDIA's Xid catalog (XIDCAT: the "Immediate" resolution
bucket), the Fabric Manager guide's SXid classes, and the DCGM failure-code map of NVSentinel. Each entry's comment
names the row it comes from, with the short tags of docs/design/gpu-faults.md#sources. Codes missing here are
*unknown*: the classifier reports them as warnings and quarantines only when the controller's config says so,
because an unmapped code that defaulted to fatal is what flooded NVSentinel with 672 false events (NVS #1710).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

ReportKind = Literal["xid", "sxid", "peermem"]
# Where a finding about a GPU comes from: a kernel report above, a GPU gone from allocatable, a DCGM field, a
# burn-in verdict or a node condition. The controller's metrics label faults with it.
FindingKind = Literal["xid", "sxid", "peermem", "gpu_lost", "dcgm", "burnin", "condition"]


class Severity(StrEnum):
    INFO = "info"  # expected noise; an Event of type Normal at most
    WARNING = "warning"  # worth telling the node's users about; the node stays schedulable
    CRITICAL = "critical"  # the GPU or fabric is faulty; jobs placed here will fail


class RecommendedAction(StrEnum):
    NONE = "none"
    RESTART_APP = "restart_app"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    QUARANTINE = "quarantine"  # keep work off the node until it requalifies; no specific remedy known
    CONTACT_SUPPORT = "contact_support"


@dataclass(frozen=True)
class CatalogEntry:
    """One fault code: its meaning, how bad it is, what fixes it, and whether the node leaves scheduling.

    `node_unusable` marks faults after which no GPU work on the node can succeed until a reboot (a GPU
    gone from the bus, the NVSwitch fabric down): only these may evict running pods (NoExecute).
    """

    kind: ReportKind
    code: int | None
    name: str
    meaning: str
    severity: Severity
    action: RecommendedAction
    quarantine: bool = False
    node_unusable: bool = False


# Application faults: the catalog sends these to the application (RESTART_APP / IGNORE / app teardown).
# k8s-device-plugin leaves a GPU healthy for these (docs/design/gpu-faults.md#application-xids) and, in its
# current releases, for 109 as well (docs/design/gpu-loss.md); they never quarantine.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})

_S = Severity
_A = RecommendedAction


def _xid(
    code: int,
    name: str,
    meaning: str,
    severity: Severity,
    action: RecommendedAction,
    *,
    quarantine: bool = False,
    node_unusable: bool = False,
) -> CatalogEntry:
    return CatalogEntry("xid", code, name, meaning, severity, action, quarantine, node_unusable)


def _fault(
    code: int, name: str, meaning: str, action: RecommendedAction, *, node_unusable: bool = False
) -> CatalogEntry:
    """A hardware fault that takes the node out of scheduling until it requalifies."""
    return _xid(code, name, meaning, _S.CRITICAL, action, quarantine=True, node_unusable=node_unusable)


_XIDS: tuple[CatalogEntry, ...] = (
    # 8: XIDCAT RESTART_APP / CONTACT_SUPPORT; NVS NONE; EKS event; ours E.
    _xid(8, "FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", _S.WARNING, _A.RESTART_APP),
    # 13: XIDCAT RESTART_APP / WORKFLOW_XID_13; NVS NONE; DP skip; ours E (application).
    _xid(13, "GR_EXCEPTION", "Graphics engine exception", _S.WARNING, _A.RESTART_APP),
    # 31: XIDCAT RESTART_APP / WORKFLOW_XID_31; NVS NONE; DP skip; ours E (application).
    _xid(31, "MMU_ERR_FLT", "GPU memory page fault", _S.WARNING, _A.RESTART_APP),
    # 43: XIDCAT IGNORE / CONTACT_SUPPORT ("app fault, GPU healthy"); NVS NONE; DP skip; ours E.
    _xid(43, "RESETCHANNEL_VERIF", "GPU stopped processing; application fault, GPU healthy", _S.INFO, _A.NONE),
    # 45: XIDCAT WORKFLOW_XID_45 (app teardown); NVS made it fatal by default (#1710); DP skip; ours E.
    _xid(
        45, "PREEMPTIVE_REMOVAL", "Preemptive cleanup after an earlier error (application teardown)", _S.INFO, _A.NONE
    ),
    # 46: XIDCAT RESET_GPU / CONTACT_SUPPORT; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(46, "GPU_TIMEOUT_ERROR", "GPU timeout", _A.RESET_GPU),
    # 48: XIDCAT WORKFLOW_XID_48 (solo RESET_GPU); NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(48, "GPU_ECC_DBE", "Double-bit ECC error", _A.RESET_GPU),
    # 54: XIDCAT CHECK_MECHANICALS / CONTACT_SUPPORT; NVS CONTACT_SUPPORT; EKS condition; ours C+ticket.
    _fault(54, "PWR_REDUCED_CLOCKING", "Auxiliary power not connected; clocks reduced", _A.CONTACT_SUPPORT),
    # 62: XIDCAT RESET_GPU / CONTACT_SUPPORT; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(62, "PMU_HALT_ERROR", "Internal micro-controller halt", _A.RESET_GPU),
    # 63: XIDCAT IGNORE / IGNORE; NVS NONE; ours E (a later 64 is the failure).
    _xid(63, "DRAM_RETIREMENT_EVENT", "Row remapping event", _S.INFO, _A.NONE),
    # 64: XIDCAT RESET_GPU / CONTACT_SUPPORT; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(64, "DRAM_RETIREMENT_FAILURE", "Row remapping failure", _A.RESET_GPU),
    # 68: XIDCAT RESTART_APP / CONTACT_SUPPORT; NVS NONE; DP skip (DP #945); ours E (application).
    _xid(68, "NVDEC0_ERROR", "Video decoder exception", _S.WARNING, _A.RESTART_APP),
    # 74: XIDCAT WORKFLOW_NVLINK_ERR / CONTACT_SUPPORT; NVS CONTACT_SUPPORT; EKS condition; ours C.
    _fault(74, "NVLINK_ERROR", "NVLink error", _A.CONTACT_SUPPORT),
    # 79: XIDCAT RESTART_BM ("system should be restarted"); NVS RESTART_BM; EKS condition; ours C+reboot.
    # The GPU is gone until a reboot, and jobs spanning the node's GPUs hang: the node is unusable.
    _fault(79, "GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", _A.REBOOT, node_unusable=True),
    # 92: XIDCAT IGNORE / CONTACT_SUPPORT; NVS NONE; ours E (trend only).
    _xid(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", _S.WARNING, _A.NONE),
    # 94: XIDCAT RESTART_APP / IGNORE (contained, sympathetic); NVS NONE; ours E.
    _xid(94, "CONTAINED_ERROR", "Contained ECC error", _S.WARNING, _A.RESTART_APP),
    # 95: XIDCAT RESET_GPU; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(95, "UNCONTAINED_ERROR", "Uncontained ECC error", _A.RESET_GPU),
    # 109: XIDCAT RESET_GPU / CONTACT_SUPPORT; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(109, "CTXSW_TIMEOUT_ERROR", "Context switch timeout", _A.RESET_GPU),
    # 110: XIDCAT RESET_GPU / INVESTIGATE_SW; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(110, "SEC_FAULT_ERROR", "Security fault", _A.RESET_GPU),
    # 119: XIDCAT RESET_GPU / INVESTIGATE_SW; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(119, "GSP_RPC_TIMEOUT", "GSP RPC timeout", _A.RESET_GPU),
    # 120: XIDCAT RESET_GPU / INVESTIGATE_SW; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(120, "GSP_ERROR", "GSP error", _A.RESET_GPU),
    # 121: XIDCAT IGNORE / CONTACT_SUPPORT; NVS NONE; ours E.
    _xid(121, "C2C_ERROR", "Chip-to-chip link error (GB200)", _S.WARNING, _A.NONE),
    # 136: XIDCAT RESET_GPU / INVESTIGATE_LINK_SI; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(136, "ALI_TRAINING_FAIL", "NVLink link training failed", _A.RESET_GPU),
    # 137: XIDCAT IGNORE / XID_137_FLOW (application bug); NVS NONE; ours E.
    _xid(137, "NVLINK_PRIV_ERR", "NVLink privilege error (application bug)", _S.WARNING, _A.NONE),
    # 140: XIDCAT RESET_GPU / CONTACT_SUPPORT; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "Unrecoverable ECC error escape", _A.RESET_GPU),
    # 143: XIDCAT RESET_GPU / CONTACT_SUPPORT; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(143, "GPU_INIT_ERROR", "GPU initialization error", _A.RESET_GPU),
    # 144-150: XIDCAT WORKFLOW_NVLINK5_ERR, fatal only for some decoded register values. Until the
    # decode sheet is implemented they report without quarantine; the driver's Xid 154 that accompanies
    # a fatal one carries the required action and does quarantine.
    *(
        _xid(code, f"NVLINK_{unit}_ERROR", f"NVLink5 {unit} error", _S.WARNING, _A.CONTACT_SUPPORT)
        for code, unit in zip(range(144, 151), ("SAW", "RLW", "TLW", "TREX", "NVLPW", "NETIR", "MSE"), strict=True)
    ),
    # 151: XIDCAT RESTART_VM / CONTACT_SUPPORT; NVS RESTART_VM; EKS condition; ours C+reboot.
    _fault(151, "KEY_ROTATION_ERROR", "Confidential-computing key rotation error", _A.REBOOT),
    # 154: XIDCAT "follow reported action"; the decoded action is in XID_154_RECOVERY below.
    _xid(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed", _S.INFO, _A.NONE),
    # 155: XIDCAT RESET_GPU / INVESTIGATE_SW_USER; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(155, "NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", _A.RESET_GPU),
    # 156: XIDCAT RESET_GPU / IGNORE; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(156, "RESOURCE_RETIREMENT_EVENT", "Resource retirement event", _A.RESET_GPU),
    # 158: XIDCAT RESET_GPU / CONTACT_SUPPORT; NVS COMPONENT_RESET; EKS condition; ours C+reset.
    _fault(158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", _A.RESET_GPU),
    # 159: XIDCAT CHECK_UVM / SYMPATHETIC_REPORT_SOLO; NVS CONTACT_SUPPORT; ours E unless UVM/vGPU.
    _xid(159, "CHI_NON_DATA_ERROR", "CHI non-data error", _S.WARNING, _A.NONE),
    # 162-172 have no resolution bucket in the pinned catalog copy: they stay unknown
    # (docs/design/gpu-faults.md#codes-without-a-bucket).
)

# Xid 154 is the driver's own verdict on the Xids it accompanies (docs/design/gpu-faults.md#xid-154; NVS parses the
# text in the last parentheses: "... from 0x0 (None) to 0x2 (Node Reboot Required)"). Keys are lower case.
XID_154_RECOVERY: Mapping[str, CatalogEntry] = {
    "none": _xid(154, "GPU_RECOVERY_ACTION_CHANGED", "Recovery action: none", _S.INFO, _A.NONE),
    "drain p2p": _fault(154, "GPU_RECOVERY_ACTION_CHANGED", "Recovery action: drain P2P", _A.QUARANTINE),
    "drain and reset": _fault(154, "GPU_RECOVERY_ACTION_CHANGED", "Recovery action: drain and reset", _A.RESET_GPU),
    "gpu reset required": _fault(
        154, "GPU_RECOVERY_ACTION_CHANGED", "Recovery action: GPU reset required", _A.RESET_GPU
    ),
    "node reboot required": _fault(
        154, "GPU_RECOVERY_ACTION_CHANGED", "Recovery action: node reboot required", _A.REBOOT, node_unusable=True
    ),
    # Older drivers word the reboot case this way.
    "os reboot": _fault(
        154, "GPU_RECOVERY_ACTION_CHANGED", "Recovery action: OS reboot", _A.REBOOT, node_unusable=True
    ),
}


def _codes(*spans: int | tuple[int, int]) -> Iterable[int]:
    for span in spans:
        if isinstance(span, tuple):
            yield from range(span[0], span[1] + 1)
        else:
            yield span


def _sxid_class(
    codes: Iterable[int],
    name: str,
    meaning: str,
    severity: Severity,
    action: RecommendedAction,
    *,
    quarantine: bool = False,
    node_unusable: bool = False,
) -> tuple[CatalogEntry, ...]:
    return tuple(
        CatalogEntry("sxid", code, name, meaning, severity, action, quarantine, node_unusable) for code in codes
    )


# SXids: the Fabric Manager guide's four classes (docs/design/gpu-faults.md#sxid-classes; GPUD sxid.go encoding).
_SXIDS: tuple[CatalogEntry, ...] = (
    # Non-fatal single-bit ECC: the guide's recovery is "none" (KON's allow-list holds these too).
    *_sxid_class(
        _codes(
            11012,
            (11021, 11023),
            12021,
            12023,
            15008,
            15011,
            19049,
            19055,
            19057,
            19059,
            19062,
            19065,
            19068,
            19071,
            (24001, 24003),
        ),
        "NVSWITCH_SBE_CORRECTED",
        "NVSwitch single-bit ECC error, corrected",
        _S.INFO,
        _A.NONE,
    ),
    # Non-fatal config/other: GPUD reboots, but NVS trusts the message's "Non-fatal" token and takes no
    # action; we report without quarantine (a "Fatal" token in the line escalates, see classify.py).
    *_sxid_class([11004], "NVSWITCH_INGRESS_INVALID_ACL", "NVSwitch ingress invalid ACL", _S.WARNING, _A.NONE),
    *_sxid_class(
        [12028], "NVSWITCH_EGRESS_NONPOSTED_PRIV", "NVSwitch egress non-posted PRIV error", _S.WARNING, _A.NONE
    ),
    *_sxid_class([19084], "NVSWITCH_AN1_HEARTBEAT_TIMEOUT", "NVSwitch AN1 heartbeat timeout", _S.WARNING, _A.NONE),
    # Potentially fatal (access/trunk port, surfaces on GPUs as Xid 74): guide "restart the guest VM to
    # see if the NVSwitch comes back"; GPUD reboot + hardware inspection.
    *_sxid_class(
        _codes(
            11001,
            11009,
            11013,
            (11018, 11020),
            12001,
            12002,
            12022,
            (12024, 12027),
            (12030, 12032),
            14017,
            15001,
            15006,
            15009,
            15010,
            15012,
            15013,
            19047,
            19048,
            19054,
            19056,
            19058,
            19060,
            19061,
            19063,
            19064,
            19066,
            19067,
            19069,
            19070,
            20034,
            22012,
            (24004, 24007),
        ),
        "NVSWITCH_PORT_FATAL",
        "NVSwitch port error, potentially fatal",
        _S.CRITICAL,
        _A.REBOOT,
        quarantine=True,
    ),
    # Always fatal: guide "restart the host to reset the entire fabric" - no GPU job on the node can run.
    *_sxid_class(
        _codes(12020, 22003, 22011, (23001, 23017)),
        "NVSWITCH_FABRIC_FATAL",
        "NVSwitch fatal error, whole fabric down",
        _S.CRITICAL,
        _A.REBOOT,
        quarantine=True,
        node_unusable=True,
    ),
)

# nvidia-peermem "invalid context": KON taints on it, but no catalog calls it a hardware fault; GPUD
# notes only that repeats "may indicate a more persistent issue". Reported, never quarantined.
PEERMEM_ERROR = CatalogEntry("peermem", None, "PEERMEM_ERROR", "GPUDirect RDMA peer-memory error", _S.WARNING, _A.NONE)


def _by_code(entries: Iterable[CatalogEntry]) -> dict[int, CatalogEntry]:
    table: dict[int, CatalogEntry] = {}
    for entry in entries:
        # A code listed twice is a typo in the tables above; the later row must not silently win.
        if entry.code is None or entry.code in table:
            raise ValueError(f"{entry.kind} {entry.code}: listed twice or without a code")
        table[entry.code] = entry
    return table


@dataclass(frozen=True)
class Catalog:
    """The codes the classifier knows. Injectable so that a pinned newer catalog can replace the default."""

    xid: Mapping[int, CatalogEntry] = field(default_factory=lambda: _by_code(_XIDS))
    sxid: Mapping[int, CatalogEntry] = field(default_factory=lambda: _by_code(_SXIDS))
    xid_154_recovery: Mapping[str, CatalogEntry] = field(default_factory=lambda: dict(XID_154_RECOVERY))
    peermem: CatalogEntry = PEERMEM_ERROR

    def lookup(self, kind: ReportKind, code: int | None) -> CatalogEntry | None:
        if kind == "peermem":
            return self.peermem
        table = self.xid if kind == "xid" else self.sxid
        return table.get(code) if code is not None else None


CATALOG = Catalog()


@dataclass(frozen=True)
class DcgmRule:
    """How a DCGM exporter series reads as a fault. A sample above zero is a finding."""

    field_name: str
    reason: str
    meaning: str
    severity: Severity
    action: RecommendedAction
    quarantine: bool = False


# DCGM exporter series (docs/design/gpu-faults.md#exporter-fields: names from dcgm-exporter default-counters.csv;
# actions from NVS dcgmerrorsmapping.csv). DCGM_FI_DEV_XID_ERRORS is not here: its value is an Xid code and goes
# through the Xid catalog.
DCGM_RULES: Mapping[str, DcgmRule] = {
    rule.field_name: rule
    for rule in (
        # VOLATILE_DBE_DETECTED -> COMPONENT_RESET.
        DcgmRule(
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "EccDoubleBitError",
            "Volatile double-bit ECC errors",
            _S.CRITICAL,
            _A.RESET_GPU,
            quarantine=True,
        ),
        # ROW_REMAP_FAILURE -> CONTACT_SUPPORT; "remap failure => RMA candidate".
        DcgmRule(
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "RowRemapFailure",
            "Row remapping failed",
            _S.CRITICAL,
            _A.CONTACT_SUPPORT,
            quarantine=True,
        ),
        # PENDING_ROW_REMAP -> COMPONENT_RESET; "pending => reset needed".
        DcgmRule(
            "DCGM_FI_DEV_ROW_REMAP_PENDING",
            "RowRemapPending",
            "Row remapping pending a GPU reset",
            _S.CRITICAL,
            _A.RESET_GPU,
            quarantine=True,
        ),
        # NVLINK_CRC_ERROR_THRESHOLD -> CONTACT_SUPPORT, but no threshold is published for the raw counters:
        # reported without quarantine (a dead link shows up as Xid 74 / SXid).
        *(
            DcgmRule(
                f"DCGM_FI_DEV_NVLINK_{counter}_ERROR_COUNT_TOTAL",
                "NVLinkErrors",
                f"NVLink {text} errors",
                _S.WARNING,
                _A.CONTACT_SUPPORT,
            )
            for counter, text in (
                ("CRC_FLIT", "CRC flit"),
                ("CRC_DATA", "CRC data"),
                ("REPLAY", "replay"),
                ("RECOVERY", "recovery"),
            )
        ),
        # CLOCK_THROTTLE_THERMAL -> NONE: throttling slows jobs, it does not break them.
        DcgmRule(
            "DCGM_FI_DEV_THERMAL_VIOLATION", "ThermalViolation", "Clocks throttled for temperature", _S.WARNING, _A.NONE
        ),
        DcgmRule("DCGM_FI_DEV_POWER_VIOLATION", "PowerViolation", "Clocks throttled for power", _S.WARNING, _A.NONE),
    )
}

DCGM_XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
