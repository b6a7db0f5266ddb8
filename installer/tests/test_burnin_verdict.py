"""Verdicts: each outcome, the median rule, unknown models, exit codes that lie, and whole nodes and runs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from konduktor.burnin.isolation import plan_pair_tests
from konduktor.burnin.parsers.collective import CollectiveResult, CollectiveRow, Placement
from konduktor.burnin.parsers.common import OutputError
from konduktor.burnin.parsers.dcgm import parse_dcgm_diag
from konduktor.burnin.parsers.gpu_burn import parse_gpu_burn
from konduktor.burnin.parsers.matmul import MatmulRun, parse_matmul
from konduktor.burnin.parsers.nccl_tests import parse_nccl_tests, parse_nccl_tests_text
from konduktor.burnin.parsers.passive import parse_passive_snapshot
from konduktor.burnin.parsers.step import split_step_log
from konduktor.burnin.results import CheckResult, Verdict, worst
from konduktor.burnin.thresholds import DEFAULT_THRESHOLDS, GpuModel, NcclAlgorithm, gpu_model_for
from konduktor.burnin.tiers import Step, Tier, options_for_tier
from konduktor.burnin.verdict import NodeEvidence, apply_isolation, judge_node, judge_pair, judge_run, pair_outcomes
from konduktor.burnin.verdict.collective import judge_collective, judge_nccl_one_node
from konduktor.burnin.verdict.common import judge_per_gpu_metric
from konduktor.burnin.verdict.dcgm import judge_dcgm
from konduktor.burnin.verdict.gpu_burn import judge_gpu_burn
from konduktor.burnin.verdict.matmul import fleet_reference_digests, judge_matmul
from konduktor.burnin.verdict.passive import judge_passive

DATA = Path(__file__).parent / "data" / "burnin"


def known_model(product: str) -> GpuModel:
    model = gpu_model_for(product)
    assert model is not None
    return model


H100 = known_model("NVIDIA-H100-80GB-HBM3")
LIMITS = DEFAULT_THRESHOLDS.passive
STANDARD = options_for_tier(Tier.STANDARD)


def raw(name: str) -> str:
    return (DATA / name).read_text()


def output(name: str) -> str:
    return split_step_log(raw(name)).output


def by_check(checks: tuple[CheckResult, ...]) -> dict[str, CheckResult]:
    return {c.check: c for c in checks}


def node_logs(**overrides: str | None) -> dict[str, str | None]:
    logs: dict[str, str | None] = {
        Step.PASSIVE.value: raw("passive_h100_healthy.txt"),
        Step.DCGM.value: raw("dcgm_l2_pass.txt"),
        Step.MATMUL.value: raw("matmul_h100_pass.txt"),
        Step.NCCL.value: raw("nccl_h100_nvls_pass.txt"),
    }
    logs.update({step.replace("_", "-"): text for step, text in overrides.items()})
    return logs


# --- quick tier ----------------------------------------------------------------------------------


def test_healthy_node_passes_every_passive_check() -> None:
    checks = judge_passive(parse_passive_snapshot(output("passive_h100_healthy.txt")), H100, 8, LIMITS)
    assert {c.check: c.verdict for c in checks} == {
        "inventory": Verdict.PASS,
        "ecc": Verdict.PASS,
        "row_remap": Verdict.PASS,
        "retired_pages": Verdict.SKIPPED,  # H100 remaps rows instead
        "clock_events": Verdict.PASS,
        "nvlink_state": Verdict.PASS,
        "kernel_log": Verdict.PASS,
    }


def test_faulty_node_fails_with_evidence_per_fault() -> None:
    checks = by_check(judge_passive(parse_passive_snapshot(output("passive_h100_faulty.txt")), H100, 8, LIMITS))
    assert checks["ecc"].verdict is Verdict.FAIL
    assert checks["ecc"].reasons == ("GPU3: ecc_uncorrected_volatile = 2 (allowed 0)",)
    assert checks["row_remap"].verdict is Verdict.FAIL
    assert "00000000:5D:00.0: row remap pending" in checks["row_remap"].reasons
    assert checks["nvlink_state"].reasons == ("GPU5: NVLink 7, 11 inactive",)
    # Throttling is a WARN: a cooling problem to look at, not a broken GPU.
    assert checks["clock_events"].verdict is Verdict.WARN
    assert "hw_thermal_slowdown" in checks["clock_events"].reasons[0]
    # Xid 79 logged 501 s ago fails; the application Xid 13 only shows up as a warning line.
    kernel = checks["kernel_log"]
    assert kernel.verdict is Verdict.FAIL
    assert kernel.reasons[0].startswith("XID 79 at 0000:5d:00, 501 s ago")
    assert any(r.startswith("XID 13") for r in kernel.reasons[1:])


def test_old_hardware_xid_only_warns() -> None:
    text = output("passive_h100_faulty.txt").replace("[85911.204117]", "[ 3911.204117]")
    kernel = by_check(judge_passive(parse_passive_snapshot(text), H100, 8, LIMITS))["kernel_log"]
    assert kernel.verdict is Verdict.WARN


def test_missing_gpu_fails_inventory() -> None:
    inventory = judge_passive(parse_passive_snapshot(output("passive_h100_missing_gpu.txt")), H100, 8, LIMITS)[0]
    assert inventory.verdict is Verdict.FAIL and inventory.summary == "7 of 8 GPUs present"  # "7/8" read either way
    assert inventory.reasons == ("nvidia-smi lists 7 GPUs, the node advertises 8",)
    more = judge_passive(parse_passive_snapshot(output("passive_h100_healthy.txt")), H100, 7, LIMITS)[0]
    assert more.verdict is Verdict.FAIL and more.summary == "8 GPUs present, 7 expected"


def test_unreadable_kernel_log_is_an_error_not_a_pass() -> None:
    checks = by_check(judge_passive(parse_passive_snapshot(output("passive_h100_no_dmesg.txt")), H100, 8, LIMITS))
    assert checks["kernel_log"].verdict is Verdict.ERROR


def test_label_that_disagrees_with_the_hardware_warns() -> None:
    h200 = gpu_model_for("NVIDIA-H200")
    snapshot = parse_passive_snapshot(output("passive_h100_healthy.txt"))
    inventory = judge_passive(snapshot, h200, 8, LIMITS, label_model=h200)[0]
    assert inventory.verdict is Verdict.WARN and "NVIDIA H100 80GB HBM3" in inventory.reasons[0]


# --- DCGM ----------------------------------------------------------------------------------------


def dcgm(name: str, ignored: frozenset[str] = frozenset()) -> CheckResult:
    log = split_step_log(raw(name))
    return judge_dcgm(parse_dcgm_diag(log.output), log.exit_code, ignored)


def test_dcgm_pass() -> None:
    result = dcgm("dcgm_l2_pass.txt")
    assert (result.verdict, result.summary) == (Verdict.PASS, "3 tests passed")


def test_dcgm_226_with_a_failing_test_fails() -> None:
    result = dcgm("dcgm_l3_fail_exit226.txt")
    assert result.verdict is Verdict.FAIL
    assert result.reasons[0].startswith("memory (Hardware) Fail on GPU3: A DBE occurred on GPU 3")
    assert result.reasons[-1] == "dcgmi exited 226: a test failed"
    assert [(e.metric, e.gpu) for e in result.evidence] == [("dcgm.memory", 3)]


def test_dcgm_226_without_a_failing_test_is_an_error() -> None:
    result = dcgm("dcgm_l2_pass_exit226.txt")
    assert result.verdict is Verdict.ERROR
    assert "no failing test" in result.reasons[0]


def test_dcgm_exit_0_does_not_hide_a_failure() -> None:
    log = split_step_log(raw("dcgm_l3_fail_exit226.txt"))
    assert judge_dcgm(parse_dcgm_diag(log.output), 0).verdict is Verdict.FAIL


def test_dcgm_config_severity_only_warns() -> None:
    result = dcgm("dcgm_l1_config_warning.txt")
    assert result.verdict is Verdict.WARN
    assert "Persistence mode" in result.reasons[0]


def test_dcgm_runtime_error_is_an_error() -> None:
    assert dcgm("dcgm_runtime_error.txt").verdict is Verdict.ERROR


def test_dcgm_table_failure_fails() -> None:
    result = dcgm("dcgm_l2_fail_table.txt")
    assert result.verdict is Verdict.FAIL and "GPU6" in result.reasons[0]


def test_dcgm_test_ignored_for_the_model_is_reported_not_judged() -> None:
    result = dcgm("dcgm_l1_config_warning.txt", ignored=frozenset({"software"}))
    assert result.verdict is Verdict.ERROR  # exit 226 with nothing left failing
    assert any("ignored for this GPU model" in r for r in result.reasons)


def test_dcgm_error_rows_and_unknown_statuses_are_errors() -> None:
    diag = parse_dcgm_diag(split_step_log(raw("dcgm_l2_error_row_table.txt")).output)
    memory = next(t for t in diag.tests if t.name == "memory")
    assert [(r.entity, r.status) for r in memory.results] == [("GPU0", "Pass"), ("GPU1", "Error")]
    assert memory.results[1].warnings[0].message.endswith("the plugin exited before reporting a result.")
    pcie = next(t for t in diag.tests if t.name == "pcie")
    assert [r.status for r in pcie.results] == ["Pass", "Unknown"]
    result = dcgm("dcgm_l2_error_row_table.txt")
    assert (result.verdict, result.summary) == (Verdict.ERROR, "2/3 tests without a result")
    assert result.reasons == (
        "memory (Hardware) has no result: GPU1 Error (Unable to allocate memory for the test: the plugin exited"
        " before reporting a result.)",
        "pcie (Integration) has no result: GPU1 Unknown",
    )
    assert [(e.metric, e.gpu) for e in result.evidence] == [("dcgm.memory", 1), ("dcgm.pcie", 1)]


def dcgm_json(test_status: str | None, entity_statuses: list[str]) -> str:
    test: dict[str, object] = {
        "name": "memory",
        "results": [{"entity_group": "GPU", "entity_id": i, "status": s} for i, s in enumerate(entity_statuses)],
    }
    if test_status is not None:
        test["test_summary"] = {"status": test_status}
    return json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [test]}]}})


@pytest.mark.parametrize(
    ("test_status", "entity_statuses"),
    [
        ("Pass", ["Pass", "Not Run"]),  # a GPU the diagnostic did not reach
        ("Not Run", []),
        ("Error", ["Pass"]),
        (None, ["Skip", "Unknown"]),
        ("Pass", ["Pass", ""]),
    ],
)
def test_dcgm_result_that_is_no_outcome_is_an_error(test_status: str | None, entity_statuses: list[str]) -> None:
    result = judge_dcgm(parse_dcgm_diag(dcgm_json(test_status, entity_statuses)), 0)
    assert result.verdict is Verdict.ERROR
    assert result.reasons[0].startswith("memory (Hardware) has no result")


def test_dcgm_failing_gpu_under_a_passing_summary_fails() -> None:
    result = judge_dcgm(parse_dcgm_diag(dcgm_json("Pass", ["Pass", "Fail"])), 0)
    assert result.verdict is Verdict.FAIL and "GPU1" in result.reasons[0]


def test_dcgm_pass_and_skip_still_pass_and_skip() -> None:
    assert judge_dcgm(parse_dcgm_diag(dcgm_json(None, ["Pass", "Skip"])), 0).verdict is Verdict.PASS
    assert judge_dcgm(parse_dcgm_diag(dcgm_json("Skip", ["Skip", "Skip"])), 0).verdict is Verdict.SKIPPED


@given(
    test_status=st.none() | st.text(max_size=12),
    entity_statuses=st.lists(st.text(max_size=12) | st.sampled_from(["Pass", "Skip", "Warn", "Fail"]), max_size=4),
)
def test_dcgm_never_passes_or_skips_a_status_that_is_not_pass_skip_or_warn(
    test_status: str | None, entity_statuses: list[str]
) -> None:
    result = judge_dcgm(parse_dcgm_diag(dcgm_json(test_status, entity_statuses)), 0)
    # An empty summary status falls back to the entities' statuses, as dcgmi's own summary would.
    statuses = {*entity_statuses, *([test_status] if test_status else [])}
    if result.verdict in {Verdict.PASS, Verdict.SKIPPED}:
        assert statuses <= {"Pass", "Skip"}
    if statuses - {"Pass", "Skip", "Warn"}:
        assert result.verdict not in {Verdict.PASS, Verdict.SKIPPED}


# --- matmul --------------------------------------------------------------------------------------


def matmul(name: str, model: GpuModel | None = H100) -> tuple[CheckResult, CheckResult]:
    return judge_matmul(parse_matmul(output(name)), model, 8)


def test_matmul_pass() -> None:
    tflops, sdc = matmul("matmul_h100_pass.txt")
    assert (tflops.verdict, sdc.verdict) == (Verdict.PASS, Verdict.PASS)
    assert tflops.summary == "min 773 / med 780 TFLOPS (78%)"
    gpu0 = tflops.evidence[0]
    assert (gpu0.gpu, gpu0.measured) == (0, 781.4)
    assert gpu0.fraction_of_peak == pytest.approx(0.7901, abs=1e-4)
    assert gpu0.threshold == pytest.approx(0.70 * 989)


def test_slow_gpu_fails_against_peak_and_median_and_shows_its_throttling() -> None:
    tflops, _ = matmul("matmul_h100_slow_gpu.txt")
    assert tflops.verdict is Verdict.FAIL
    assert tflops.reasons[0].startswith("GPU3: 612 TFLOPS is 62% of the 989 TFLOPS peak")
    assert tflops.reasons[1].startswith("GPU3: 612 TFLOPS is 79% of the node median")
    assert tflops.reasons[-1] == "GPU3: sw_thermal_slowdown, hw_thermal_slowdown during the run"
    assert all(r.startswith("GPU3") for r in tflops.reasons)


def test_silent_data_corruption_fails_the_gpu_that_differs() -> None:
    _, sdc = matmul("matmul_h100_sdc.txt")
    assert sdc.verdict is Verdict.FAIL
    assert sdc.reasons == (
        "GPU6: 2 window(s) computed a different product",
        "GPU5: product differs from its node peers (silent data corruption)",
    )


def test_worker_that_died_under_load_fails() -> None:
    tflops, sdc = matmul("matmul_h100_worker_died.txt")
    assert tflops.verdict is Verdict.FAIL
    assert "GPU4 compute error" in tflops.reasons[-1]
    assert sdc.verdict is Verdict.PASS  # the seven that finished agree


def test_truncated_matmul_output_is_an_error() -> None:
    tflops, _ = matmul("matmul_h100_truncated.txt")
    assert tflops.verdict is Verdict.ERROR
    assert "5 of 8 GPUs reported a result" in tflops.reasons


def test_unknown_model_skips_tflops_but_still_checks_correctness() -> None:
    tflops, sdc = matmul("matmul_h100_sdc.txt", model=None)
    assert tflops.verdict is Verdict.SKIPPED
    assert tflops.reasons == ("GPU model not in the thresholds table; TFLOPS not judged",)
    assert len(tflops.evidence) == 8  # the measurements are still reported
    assert sdc.verdict is Verdict.FAIL


def test_digests_are_compared_against_the_fleet() -> None:
    good = parse_matmul(output("matmul_h100_pass.txt"))
    other = "sha256:" + "0" * 64
    odd_node = MatmulRun(tuple(replace(g, digest=other) for g in good.gpus), True)
    references = fleet_reference_digests([good, good, odd_node])
    _, sdc = judge_matmul(odd_node, H100, 8, reference_digests=references)
    assert sdc.verdict is Verdict.FAIL
    assert sdc.reasons[0] == "GPU0: product differs from the fleet (silent data corruption)"
    # On its own the node agrees with itself.
    assert judge_matmul(odd_node, H100, 8)[1].verdict is Verdict.PASS


def test_gpus_split_evenly_have_no_majority_and_fail() -> None:
    good = parse_matmul(output("matmul_h100_pass.txt"))
    split = MatmulRun(tuple(replace(g, digest="sha256:b") if g.index % 2 else g for g in good.gpus), True)
    _, sdc = judge_matmul(split, H100, 8)
    assert sdc.verdict is Verdict.FAIL and "no majority" in sdc.reasons[0]


# --- the median rule ----------------------------------------------------------------------------


def h100_tflops(values: dict[int, float]) -> CheckResult:
    return judge_per_gpu_metric(
        "matmul_tflops",
        "matmul",
        "tflops_min",
        "TFLOPS",
        values,
        989.0,
        H100.matmul_bf16,
        DEFAULT_THRESHOLDS.node_median,
    )


def test_median_rule_catches_one_slow_gpu_among_eight() -> None:
    values = {0: 781.0, 1: 776.0, 2: 779.0, 3: 784.0, 4: 772.0, 5: 695.0, 6: 777.0, 7: 783.0}
    result = h100_tflops(values)
    # 695 TFLOPS clears the 0.70 x peak goal (692) but is 89 % of its node's median: WARN.
    assert result.verdict is Verdict.WARN
    assert result.reasons == ("GPU5: 695 TFLOPS is 89% of the node median 778 (goal 90%, FAIL under 85%)",)


@given(
    healthy=st.lists(st.floats(min_value=760, max_value=800), min_size=7, max_size=7),
    slow_gpu=st.integers(min_value=0, max_value=7),
    slowdown=st.floats(min_value=0.5, max_value=0.84),
)
def test_median_rule_fails_exactly_the_slow_gpu(healthy: list[float], slow_gpu: int, slowdown: float) -> None:
    values = dict(enumerate(healthy))
    values = {i if i < slow_gpu else i + 1: v for i, v in values.items()}
    values[slow_gpu] = min(healthy) * slowdown
    result = h100_tflops(values)
    assert result.verdict is Verdict.FAIL
    assert {r.split(":")[0] for r in result.reasons} == {f"GPU{slow_gpu}"}


def test_uniformly_slow_node_warns_but_does_not_fail_on_the_median() -> None:
    values = dict.fromkeys(range(8), 0.66 * 989)  # all power capped alike
    result = h100_tflops(values)
    assert result.verdict is Verdict.WARN
    assert all("peak" in r for r in result.reasons)


# --- NCCL ----------------------------------------------------------------------------------------


def nccl(name: str, model: GpuModel | None = H100, algorithm: NcclAlgorithm = NcclAlgorithm.NVLS) -> CheckResult:
    log = split_step_log(raw(name))
    options = replace(STANDARD, nccl_algorithm=algorithm)
    return judge_nccl_one_node(parse_nccl_tests(log.output), log.exit_code, model, options, 8)


def test_nccl_pass() -> None:
    result = nccl("nccl_h100_nvls_pass.txt")
    assert (result.verdict, result.summary) == (Verdict.PASS, "484 GB/s @ 16 GiB")
    assert result.evidence[0].threshold == pytest.approx(430, abs=0.5)


def test_nccl_wrong_data_fails() -> None:
    result = nccl("nccl_h100_wrong_data.txt")
    assert result.verdict is Verdict.FAIL
    assert result.reasons[0] == "wrong data: 4096 wrong elements, 1 out of bounds"


def test_nccl_busbw_below_goal_fails() -> None:
    result = nccl("nccl_h100_slow.txt")
    assert result.verdict is Verdict.FAIL
    assert result.reasons[0].startswith("busbw 301 GB/s at 16 GiB is under the goal 430 GB/s")


def test_the_ring_goal_applies_when_nvls_is_off() -> None:
    # 301 GB/s fails the NVLS goal but is only just under the ring goal (WARN down to 0.9 x 333).
    assert nccl("nccl_h100_slow.txt", algorithm=NcclAlgorithm.RING).verdict is Verdict.WARN
    ring = CollectiveResult((CollectiveRow(16 << 30, (Placement("out-of-place", 1.0, 211.4, 370.0, 0),)),), ranks=8)
    result = judge_collective(
        "nccl_allreduce", "nccl-allreduce", ring, 0, H100.nvlink_gb_s, H100.nccl_allreduce[NcclAlgorithm.RING]
    )
    assert result.verdict is Verdict.PASS


def test_nccl_goal_uses_the_largest_size_of_a_sweep() -> None:
    assert nccl("nccl_h100_sweep.txt").verdict is Verdict.PASS  # 484 at 16 GiB, average 453


def test_nccl_failure_before_results_is_an_error() -> None:
    result = nccl("nccl_init_failure.txt")
    assert result.verdict is Verdict.ERROR and "NCCL failure" in result.reasons[0]


def test_nccl_without_goal_is_skipped_but_wrong_data_still_fails() -> None:
    b200 = gpu_model_for("NVIDIA B200")
    skipped = nccl("nccl_h100_nvls_pass.txt", model=b200, algorithm=NcclAlgorithm.RING)
    assert skipped.verdict is Verdict.SKIPPED
    assert skipped.reasons[0] == "no documented ring all_reduce goal for B200 (HGX)"
    assert nccl("nccl_h100_nvls_pass.txt", model=None).verdict is Verdict.SKIPPED
    assert nccl("nccl_h100_wrong_data.txt", model=None).verdict is Verdict.FAIL


# The same run in each table layout nccl-tests has printed: the `#wrong` count is 0 in every row and only the
# summary line says that values were out of bounds.
_ROW = "17179869184  4294967296  float  sum  -1  62130.1  276.51  483.90  {w}  62114.7  276.58  484.02  {w}"
NCCL_OUT_OF_BOUNDS_LAYOUTS = {
    "current": "\n".join(
        [
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw"
            "   busbw  #wrong",
            _ROW.format(w="0"),
            "# Out of bounds values : 3 FAILED",
            "# Avg bus bandwidth    : 483.96",
        ]
    ),
    # Releases before 2.10: an `error` column printed as a float and summary lines without `#`.
    "legacy": "\n".join(
        [
            "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw"
            "  error",
            "17179869184  4294967296  float  sum  62130.1  276.51  483.90  0e+00  62114.7  276.58  484.02  0e+00",
            " Out of bounds values : 3 FAILED",
            " Avg bus bandwidth    : 483.96 ",
        ]
    ),
    # `-C 1` reports CPU time: the time columns are named `cputime`.
    "cputime": "\n".join(
        [
            "#  size  count  type  redop  root  cputime  algbw  busbw  #wrong  cputime  algbw  busbw  #wrong",
            _ROW.format(w="0"),
            "# Out of bounds values : 3 FAILED",
        ]
    ),
    "no-header": "\n".join([_ROW.format(w="0"), "# Out of bounds values : 3 FAILED"]),
    "json": json.dumps(
        {
            "results": [
                {
                    "size": 17179869184,
                    "out_of_place": {"time": 62130.1, "alg_bw": 276.51, "bus_bw": 483.9, "nwrong": 0.0},
                    "in_place": {"time": 62114.7, "alg_bw": 276.58, "bus_bw": 484.02, "nwrong": 0.0},
                }
            ],
            "out_of_bounds": {"count": 3, "okay": "false"},
        }
    ),
}


@pytest.mark.parametrize("layout", sorted(NCCL_OUT_OF_BOUNDS_LAYOUTS))
def test_out_of_bounds_values_fail_in_every_layout(layout: str) -> None:
    result = parse_nccl_tests(NCCL_OUT_OF_BOUNDS_LAYOUTS[layout])
    assert (result.out_of_bounds, result.wrong) == (3, 0)
    assert result.largest is not None and result.largest.size_bytes == 17179869184
    verdict = judge_nccl_one_node(result, 0, H100, STANDARD, 8)  # exit 0: the summary line alone decides
    assert verdict.verdict is Verdict.FAIL
    assert verdict.reasons[0] == "wrong data: 0 wrong elements, 3 out of bounds"


def test_failed_out_of_bounds_line_counts_even_without_a_number_or_rows() -> None:
    result = parse_nccl_tests("# nccl-tests version 2.17.6\n# Out of bounds values : FAILED\n")
    assert result.out_of_bounds == 1 and result.rows == ()
    assert judge_nccl_one_node(result, 7, H100, STANDARD, 8).verdict is Verdict.FAIL
    okay_json = json.dumps({"results": [], "out_of_bounds": {"count": 0, "okay": "false"}})
    assert parse_nccl_tests(okay_json).out_of_bounds == 1


@given(
    lines=st.lists(
        st.text(max_size=80)
        | st.sampled_from(list(NCCL_OUT_OF_BOUNDS_LAYOUTS["current"].splitlines()))
        | st.sampled_from(list(NCCL_OUT_OF_BOUNDS_LAYOUTS["legacy"].splitlines()))
        | st.builds(
            lambda n, word, hashes: f"{hashes}Out of bounds values : {n} {word}",
            st.integers(0, 10**15),
            st.sampled_from(["OK", "FAILED", ""]),
            st.sampled_from(["", "#", "# ", " "]),
        ),
        max_size=8,
    )
)
def test_nccl_text_parser_never_crashes_and_never_hides_a_failed_line(lines: list[str]) -> None:
    text = "\n".join(lines)
    try:
        result = parse_nccl_tests_text(text)
    except OutputError:
        return
    if any(line.lstrip("# ").startswith("Out of bounds values") and line.rstrip().endswith("FAILED") for line in lines):
        assert (result.out_of_bounds or 0) > 0
        assert judge_nccl_one_node(result, 0, H100, STANDARD, 8).verdict is Verdict.FAIL


# --- gpu-burn ------------------------------------------------------------------------------------


def test_gpu_burn_faulty_with_exit_0_fails() -> None:
    result = judge_gpu_burn(parse_gpu_burn(output("gpu_burn_faulty_exit0.txt")), 8, DEFAULT_THRESHOLDS.node_median)
    assert result.verdict is Verdict.FAIL and result.reasons == ("GPU3: FAULTY (compare errors)",)


def test_gpu_burn_died_with_exit_0_fails() -> None:
    result = judge_gpu_burn(parse_gpu_burn(output("gpu_burn_died_exit0.txt")), 8, DEFAULT_THRESHOLDS.node_median)
    assert result.verdict is Verdict.FAIL and result.reasons == ("GPU5: DIED during the run",)


def test_gpu_burn_ok() -> None:
    result = judge_gpu_burn(parse_gpu_burn(output("gpu_burn_ok.txt")), 8, DEFAULT_THRESHOLDS.node_median)
    assert result.verdict is Verdict.PASS


# --- nodes and runs ------------------------------------------------------------------------------


def evidence(product: str | None = "NVIDIA-H100-80GB-HBM3", **logs: str | None) -> NodeEvidence:
    return NodeEvidence("gpu-node-01", product, 8, node_logs(**logs))


def test_healthy_node_passes_the_standard_tier() -> None:
    verdict = judge_node(evidence(), STANDARD)
    assert verdict.verdict is Verdict.PASS and not verdict.quarantine
    assert verdict.gpu_model == "h100-sxm5"
    assert [c.check for c in verdict.checks] == [
        "inventory",
        "ecc",
        "row_remap",
        "retired_pages",
        "clock_events",
        "nvlink_state",
        "kernel_log",
        "dcgm_diag",
        "matmul_tflops",
        "matmul_sdc",
        "nccl_allreduce",
    ]


def test_one_failing_check_quarantines_the_node() -> None:
    verdict = judge_node(evidence(matmul=raw("matmul_h100_slow_gpu.txt")), STANDARD)
    assert verdict.verdict is Verdict.FAIL and verdict.quarantine


def test_unknown_model_skips_performance_checks_with_a_reason() -> None:
    verdict = judge_node(evidence(product="NVIDIA-RTX-PRO-6000"), STANDARD)
    checks = by_check(verdict.checks)
    assert verdict.gpu_model is None
    assert checks["matmul_tflops"].verdict is Verdict.SKIPPED
    assert checks["nccl_allreduce"].verdict is Verdict.SKIPPED
    assert "not in the thresholds table" in checks["nccl_allreduce"].reasons[0]
    assert checks["matmul_sdc"].verdict is Verdict.PASS  # correctness needs no model
    assert verdict.verdict is Verdict.PASS and not verdict.quarantine


def test_node_without_label_uses_the_gpu_names() -> None:
    assert judge_node(evidence(product=None), STANDARD).gpu_model == "h100-sxm5"


def test_missing_step_log_is_an_error() -> None:
    verdict = judge_node(evidence(nccl_allreduce=None), STANDARD)
    nccl_check = by_check(verdict.checks)["nccl_allreduce"]
    assert nccl_check.verdict is Verdict.ERROR and verdict.verdict is Verdict.ERROR
    assert not verdict.quarantine  # ERROR never quarantines


def test_truncated_output_is_an_error() -> None:
    verdict = judge_node(evidence(dcgm_diag=raw("dcgm_truncated.txt")), STANDARD)
    dcgm_check = by_check(verdict.checks)["dcgm_diag"]
    assert dcgm_check.verdict is Verdict.ERROR
    assert dcgm_check.reasons[0] == "the step ended without its end line (killed, deadline, or log cut)"


def test_timed_out_step_cannot_pass_but_can_still_fail() -> None:
    def timed_out(name: str) -> str:
        text = raw(name)
        return text[: text.index("KONDUKTOR-STEP-END")] + 'KONDUKTOR-STEP-END {"step": "matmul", "exit_code": 124}\n'

    passing = by_check(judge_node(evidence(matmul=timed_out("matmul_h100_pass.txt")), STANDARD).checks)
    assert passing["matmul_tflops"].verdict is Verdict.ERROR
    assert passing["matmul_tflops"].reasons[0] == "the step hit its time limit (exit 124)"
    failing = by_check(judge_node(evidence(matmul=timed_out("matmul_h100_sdc.txt")), STANDARD).checks)
    assert failing["matmul_sdc"].verdict is Verdict.FAIL


def test_quick_tier_judges_only_the_passive_step() -> None:
    verdict = judge_node(evidence(passive=raw("passive_h100_faulty.txt")), options_for_tier("quick"))
    assert {c.step for c in verdict.checks} == {"passive"}
    assert verdict.verdict is Verdict.FAIL


def test_run_compares_digests_across_nodes() -> None:
    good = raw("matmul_h100_pass.txt")
    odd = good.replace("c0b7a294", "c0b7a2ff")  # every GPU of one node computes the same wrong product
    nodes = [NodeEvidence(f"gpu-node-0{i}", "NVIDIA-H100-80GB-HBM3", 8, node_logs(matmul=good)) for i in range(3)]
    nodes.append(NodeEvidence("gpu-node-09", "NVIDIA-H100-80GB-HBM3", 8, node_logs(matmul=odd)))
    verdicts = judge_run(nodes, STANDARD)
    assert [v.verdict for v in verdicts] == [Verdict.PASS, Verdict.PASS, Verdict.PASS, Verdict.FAIL]
    assert "differs from the fleet" in by_check(verdicts[3].checks)["matmul_sdc"].reasons[0]


# --- node pairs ----------------------------------------------------------------------------------


def test_pair_verdicts_and_isolation_reach_the_nodes() -> None:
    ok = judge_pair(("a", "b"), raw("allreduce_pair_pass.txt"), expected_ranks=16)
    slow = judge_pair(("b", "c"), raw("allreduce_pair_slow.txt"), expected_ranks=16)
    lost = judge_pair(("c", "d"), None)
    assert (ok.result.verdict, slow.result.verdict, lost.result.verdict) == (Verdict.PASS, Verdict.FAIL, Verdict.ERROR)
    assert slow.result.reasons[0].startswith("busbw 122 GB/s at 8 GiB is under the goal 350 GB/s")
    outcomes = pair_outcomes([ok, slow, lost])
    assert [(o.nodes, o.passed) for o in outcomes] == [(("a", "b"), True), (("b", "c"), False)]

    nodes = [judge_node(replace(evidence(), node=name), STANDARD) for name in "abc"]
    plan = plan_pair_tests(["a", "b", "c"], outcomes)
    updated = {n.node: n for n in apply_isolation(nodes, plan, [ok, slow])}
    assert updated["c"].verdict is Verdict.FAIL and updated["c"].quarantine
    assert by_check(updated["a"].checks)["nccl_pair"].verdict is Verdict.PASS
    assert updated["b"].verdict is Verdict.PASS


def test_pair_with_the_wrong_rank_count_is_an_error() -> None:
    assert judge_pair(("a", "b"), raw("allreduce_pair_pass.txt"), expected_ranks=8).result.verdict is Verdict.ERROR


def test_allreduce_error_lines_are_an_error() -> None:
    line = json.dumps(
        {"schema": "konduktor.burnin.allreduce/1", "kind": "error", "rank": 3, "error": "DistBackendError"}
    )
    result = judge_pair(("a", "b"), line + '\nKONDUKTOR-STEP-END {"step": "nccl-pair", "exit_code": 1}\n').result
    assert result.verdict is Verdict.ERROR and "DistBackendError" in result.reasons[0]


def test_worst_orders_fail_over_error_over_warn() -> None:
    assert worst([Verdict.PASS, Verdict.ERROR, Verdict.FAIL]) is Verdict.FAIL
    assert worst([Verdict.PASS, Verdict.WARN, Verdict.ERROR]) is Verdict.ERROR
    assert worst([Verdict.SKIPPED, Verdict.PASS]) is Verdict.PASS
    assert worst([]) is Verdict.SKIPPED
