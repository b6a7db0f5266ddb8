"""The Xid/SXid catalog: application faults never quarantine, every code has a remedy, the tables agree."""

from __future__ import annotations

import pytest

from konduktor.gpu.catalog import (
    APPLICATION_XIDS,
    CATALOG,
    DCGM_RULES,
    XID_154_RECOVERY,
    CatalogEntry,
    RecommendedAction,
    Severity,
)

ALL_ENTRIES: list[CatalogEntry] = [
    *CATALOG.xid.values(),
    *CATALOG.sxid.values(),
    *XID_154_RECOVERY.values(),
    CATALOG.peermem,
]

# Every Xid row of docs/design/gpu-faults.md#xid-catalog that has a resolution bucket.
REFERENCE_XIDS = {
    8,
    13,
    31,
    43,
    45,
    46,
    48,
    54,
    62,
    63,
    64,
    68,
    74,
    79,
    92,
    94,
    95,
    109,
    110,
    119,
    120,
    121,
    136,
    137,
    *range(144, 151),
    140,
    143,
    151,
    154,
    155,
    156,
    158,
    159,
}
# Hardware Xids that the EKS agent turns into a node condition (docs/design/gpu-faults.md#node-faults), minus 63,
# a row-remap *event* that the catalog says to ignore.
HARDWARE_XIDS = {46, 48, 54, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 151, 155, 156, 158}


@pytest.mark.parametrize("code", sorted(APPLICATION_XIDS))
def test_application_xids_never_quarantine(code: int) -> None:
    entry = CATALOG.xid[code]
    assert not entry.quarantine
    assert not entry.node_unusable
    assert entry.action in {RecommendedAction.NONE, RecommendedAction.RESTART_APP}


def test_every_reference_xid_is_in_the_catalog() -> None:
    assert set(CATALOG.xid) >= REFERENCE_XIDS


@pytest.mark.parametrize("code", sorted(HARDWARE_XIDS))
def test_hardware_xids_quarantine(code: int) -> None:
    entry = CATALOG.xid[code]
    assert entry.quarantine
    assert entry.severity == Severity.CRITICAL


@pytest.mark.parametrize("entry", ALL_ENTRIES, ids=lambda e: f"{e.kind}-{e.code}-{e.meaning}")
def test_every_entry_has_a_consistent_action(entry: CatalogEntry) -> None:
    assert isinstance(entry.action, RecommendedAction)
    assert entry.name and entry.meaning
    if entry.quarantine:
        # A quarantine must tell the engineer what brings the node back.
        assert entry.action not in {RecommendedAction.NONE, RecommendedAction.RESTART_APP}
        assert entry.severity == Severity.CRITICAL
    if entry.node_unusable:
        assert entry.quarantine, "NoExecute without quarantine would evict pods from a schedulable node"


def test_lookup_keys_match_entries() -> None:
    for code, entry in CATALOG.xid.items():
        assert (entry.kind, entry.code) == ("xid", code)
    for code, entry in CATALOG.sxid.items():
        assert (entry.kind, entry.code) == ("sxid", code)


@pytest.mark.parametrize(
    ("code", "quarantine", "unusable"),
    [
        (11012, False, False),  # non-fatal single-bit ECC
        (24003, False, False),
        (12028, False, False),  # non-fatal config/other
        (11001, True, False),  # potentially fatal port error
        (20034, True, False),
        (12020, True, True),  # whole fabric
        (23017, True, True),
    ],
)
def test_sxid_classes(code: int, quarantine: bool, unusable: bool) -> None:
    entry = CATALOG.lookup("sxid", code)
    assert entry is not None
    assert (entry.quarantine, entry.node_unusable) == (quarantine, unusable)


def test_unknown_codes_are_not_in_the_catalog() -> None:
    assert CATALOG.lookup("xid", 999) is None
    assert CATALOG.lookup("sxid", 1) is None
    assert CATALOG.lookup("xid", None) is None


def test_xid_154_reboot_is_the_only_unusable_recovery() -> None:
    unusable = {text for text, entry in XID_154_RECOVERY.items() if entry.node_unusable}
    assert unusable == {"node reboot required", "os reboot"}
    assert not XID_154_RECOVERY["none"].quarantine


def test_dcgm_rules_name_their_own_series() -> None:
    for name, rule in DCGM_RULES.items():
        assert name == rule.field_name and name.startswith("DCGM_FI_DEV_")
    assert DCGM_RULES["DCGM_FI_DEV_ROW_REMAP_FAILURE"].quarantine
    assert not DCGM_RULES["DCGM_FI_DEV_THERMAL_VIOLATION"].quarantine
