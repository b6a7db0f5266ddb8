"""Parsers over recorded tool output: passing and failing runs, truncated output, exit codes that lie."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from konduktor.burnin.parsers.allreduce import parse_allreduce_bench
from konduktor.burnin.parsers.common import OutputError
from konduktor.burnin.parsers.dcgm import parse_dcgm_diag
from konduktor.burnin.parsers.gpu_burn import parse_gpu_burn
from konduktor.burnin.parsers.matmul import parse_matmul
from konduktor.burnin.parsers.nccl_tests import parse_nccl_tests
from konduktor.burnin.parsers.nvidia_smi import parse_gpu_query, parse_nvidia_smi_csv
from konduktor.burnin.parsers.passive import parse_passive_snapshot
from konduktor.burnin.parsers.step import StepLog, split_step_log

DATA = Path(__file__).parent / "data" / "burnin"


def step(name: str) -> StepLog:
    return split_step_log((DATA / name).read_text())


# --- step envelope -------------------------------------------------------------------------------


def test_end_line_gives_exit_code_and_strips_itself() -> None:
    log = step("dcgm_l3_fail_exit226.txt")
    assert (log.exit_code, log.seconds, log.finished, log.timed_out) == (226, 862, True, False)
    assert "KONDUKTOR-STEP-END" not in log.output


def test_log_without_end_line_is_unfinished() -> None:
    log = step("nccl_h100_cut.txt")
    assert log.exit_code is None and not log.finished


@pytest.mark.parametrize("code", [124, 137])
def test_timeout_exit_codes_mean_timed_out(code: int) -> None:
    log = split_step_log(f'tool output\nKONDUKTOR-STEP-END {{"step": "matmul", "exit_code": {code}, "seconds": 1}}\n')
    assert log.timed_out and log.output == "tool output"


# --- nvidia-smi (quick tier) ---------------------------------------------------------------------


def test_healthy_passive_snapshot() -> None:
    snapshot = parse_passive_snapshot(step("passive_h100_healthy.txt").output)
    assert len(snapshot.gpus) == 8
    gpu = snapshot.gpus[0]
    assert (gpu.name, gpu.ecc_enabled, gpu.ecc_uncorrected_volatile) == ("NVIDIA H100 80GB HBM3", True, 0)
    assert gpu.retired_pages_pending is None  # [N/A] on GPUs that remap rows
    assert gpu.clock_event_reasons == 0x1
    assert gpu.power_w == 69.5  # header unit "[W]" dropped
    assert snapshot.remapped_rows is not None and not any(r.pending for r in snapshot.remapped_rows)
    assert snapshot.nvlink is not None and all(s.active_links == 18 for s in snapshot.nvlink)
    assert snapshot.uptime_s == pytest.approx(86412.53)
    assert snapshot.kernel_events == ()


def test_faulty_passive_snapshot_keeps_every_fault() -> None:
    snapshot = parse_passive_snapshot(step("passive_h100_faulty.txt").output)
    assert snapshot.gpus[3].ecc_uncorrected_volatile == 2
    assert snapshot.gpus[2].clock_event_reasons == 0x41
    assert snapshot.remapped_rows is not None
    assert [r.bus_id for r in snapshot.remapped_rows if r.pending] == ["00000000:5D:00.0"]
    assert snapshot.nvlink is not None
    assert [(s.gpu, s.inactive_links) for s in snapshot.nvlink if s.inactive_links] == [(5, (7, 11))]
    assert snapshot.kernel_events is not None
    assert [(e.kind, e.code, e.pci) for e in snapshot.kernel_events] == [
        ("xid", 79, "0000:5d:00"),
        ("xid", 13, "0000:ab:00"),
    ]
    assert snapshot.kernel_events[0].seconds_since_boot == pytest.approx(85911.204117)


def test_unreadable_kernel_log_is_unknown_not_clean() -> None:
    snapshot = parse_passive_snapshot(step("passive_h100_no_dmesg.txt").output)
    assert snapshot.kernel_events is None
    assert snapshot.problems == ("kernel log not readable (dmesg failed)",)


def test_older_drivers_clock_field_name_is_accepted() -> None:
    gpus = parse_gpu_query(
        "index, name, clocks_throttle_reasons.active\n0, NVIDIA A100-SXM4-80GB, 0x0000000000000008\n"
    )
    assert gpus[0].clock_event_reasons == 0x8


def test_csv_without_header_or_with_a_short_row_is_an_error() -> None:
    with pytest.raises(OutputError):
        parse_nvidia_smi_csv("")
    with pytest.raises(OutputError, match="fields"):
        parse_nvidia_smi_csv("index, name\n0\n")


def test_no_devices_means_zero_gpus_and_a_driver_error_is_no_header() -> None:
    assert parse_nvidia_smi_csv("No devices were found\n") == []
    with pytest.raises(OutputError, match="no CSV header"):
        parse_nvidia_smi_csv("NVIDIA-SMI has failed because it couldn't communicate with the driver, sorry\n")


def test_passive_output_without_gpu_section_is_an_error() -> None:
    with pytest.raises(OutputError, match="GPU section"):
        parse_passive_snapshot("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


# --- DCGM ----------------------------------------------------------------------------------------


def test_dcgm_json_pass() -> None:
    diag = parse_dcgm_diag(step("dcgm_l2_pass.txt").output)
    assert [(t.name, t.category, t.status) for t in diag.tests] == [
        ("software", "Deployment", "Pass"),
        ("memory", "Hardware", "Pass"),
        ("pcie", "Integration", "Pass"),
    ]
    assert (diag.dcgm_version, diag.driver_version) == ("4.6.0", "580.95.05")


def test_dcgm_json_failure_with_exit_226() -> None:
    log = step("dcgm_l3_fail_exit226.txt")
    diag = parse_dcgm_diag(log.output)
    memory = next(t for t in diag.tests if t.name == "memory")
    assert memory.status == "Fail"
    (failing,) = [r for r in memory.results if r.status == "Fail"]
    assert failing.entity == "GPU3"
    assert failing.warnings[0].severity == 2 and "double-bit ECC" in failing.warnings[0].message


def test_dcgm_runtime_error() -> None:
    diag = parse_dcgm_diag(step("dcgm_runtime_error.txt").output)
    assert diag.tests == () and diag.runtime_error is not None and "ubergemm" in diag.runtime_error


def test_truncated_dcgm_json_is_an_error() -> None:
    with pytest.raises(OutputError, match="truncated"):
        parse_dcgm_diag(step("dcgm_truncated.txt").output)


def test_dcgm_table_with_wrapped_warning() -> None:
    diag = parse_dcgm_diag(step("dcgm_l2_fail_table.txt").output)
    memory = next(t for t in diag.tests if t.name == "memory")
    assert memory.category == "Hardware" and memory.status == "Fail"
    gpu6 = next(r for r in memory.results if r.entity == "GPU6")
    assert gpu6.status == "Fail"
    assert (
        gpu6.warnings[0].message == "Error using CUDA API cuMemAlloc Check DCGM and system logs for errors. Reset GPU."
    )
    assert len(memory.results) == 8
    pcie = next(t for t in diag.tests if t.name == "pcie")
    assert next(r.status for r in pcie.results if r.entity == "GPU6") == "Skip"


def test_dcgm3_table_cells() -> None:
    diag = parse_dcgm_diag(step("dcgm_legacy_table.txt").output)
    memory = next(t for t in diag.tests if t.name == "GPU Memory")
    assert memory.status == "Fail"
    assert [r.entity for r in memory.results] == ["GPU2", "GPU5"]
    assert "double bit ECC" in memory.warnings[0].message
    assert next(t for t in diag.tests if t.name == "PCIe").status == "Pass"
    assert diag.dcgm_version == "3.3.9"


def test_output_that_is_no_dcgm_report_is_an_error() -> None:
    with pytest.raises(OutputError):
        parse_dcgm_diag("Error: unable to establish a connection to the specified host: localhost\n")


# --- nccl-tests ----------------------------------------------------------------------------------


def test_nccl_single_size_pass() -> None:
    result = parse_nccl_tests(step("nccl_h100_nvls_pass.txt").output)
    assert result.largest is not None
    assert result.largest.size_bytes == 16 << 30
    assert result.largest.busbw_gb_s == pytest.approx(484.495)  # mean of out-of-place and in-place
    assert result.largest.busbw_gb_s == pytest.approx(result.avg_busbw_gb_s)
    assert (result.wrong, result.out_of_bounds, result.ranks, result.hosts) == (0, 0, 8, ("gpu-node-01",))


def test_nccl_wrong_data_is_counted() -> None:
    log = step("nccl_h100_wrong_data.txt")
    result = parse_nccl_tests(log.output)
    assert (result.wrong, result.out_of_bounds, log.exit_code) == (4096, 1, 7)


def test_nccl_sweep_uses_the_largest_size_not_the_average() -> None:
    result = parse_nccl_tests(step("nccl_h100_sweep.txt").output)
    assert len(result.rows) == 5
    assert result.largest is not None and result.largest.size_bytes == 16 << 30
    assert result.largest.busbw_gb_s == pytest.approx(484.4)
    assert result.avg_busbw_gb_s == pytest.approx(453.29)  # dragged down by the small sizes


def test_nccl_json_form() -> None:
    result = parse_nccl_tests((DATA / "nccl_h100_nvls.json").read_text())
    assert result.largest is not None and result.largest.busbw_gb_s == pytest.approx(484.495)
    assert (result.wrong, result.out_of_bounds, result.ranks, result.avg_busbw_gb_s) == (0, 0, 8, 484.495)


def test_nccl_text_and_json_agree() -> None:
    text = parse_nccl_tests(step("nccl_h100_nvls_pass.txt").output)
    json_form = parse_nccl_tests((DATA / "nccl_h100_nvls.json").read_text())
    assert text.rows == json_form.rows


def test_nccl_validation_off_reports_unknown_wrong() -> None:
    # `-c 0` turns the data check off; the #wrong columns then read N/A.
    line = "17179869184  4294967296  float  sum  -1  62011.2  277.04  484.82  N/A  62095.4  276.67  484.17  N/A"
    assert parse_nccl_tests(line).wrong is None


def test_nccl_failure_before_any_row_keeps_the_error() -> None:
    result = parse_nccl_tests(step("nccl_init_failure.txt").output)
    assert result.rows == ()
    assert any("NCCL failure" in e for e in result.errors)


def test_nccl_output_without_rows_or_errors_is_an_error() -> None:
    with pytest.raises(OutputError):
        parse_nccl_tests("# nccl-tests version 2.17.6\n# Using devices\n")


# --- gpu-burn ------------------------------------------------------------------------------------


def test_gpu_burn_faulty_despite_exit_0() -> None:
    log = step("gpu_burn_faulty_exit0.txt")
    result = parse_gpu_burn(log.output)
    assert log.exit_code == 0
    assert result.status[3] == "FAULTY" and sum(s == "OK" for s in result.status.values()) == 7
    assert result.errors[3] == 1874 and result.gflops[0] == 52345.0


def test_gpu_burn_died_child_is_seen_though_the_summary_says_ok() -> None:
    result = parse_gpu_burn(step("gpu_burn_died_exit0.txt").output)
    assert result.died == {5}
    assert result.status[5] == "OK"


def test_gpu_burn_without_output_is_an_error() -> None:
    with pytest.raises(OutputError):
        parse_gpu_burn("Couldn't init CUDA: no CUDA-capable device is detected\n")


# --- our scripts ---------------------------------------------------------------------------------


def test_matmul_lines_among_library_warnings() -> None:
    run = parse_matmul(step("matmul_h100_pass.txt").output)
    assert run.summary_seen and len(run.gpus) == 8
    gpu = run.gpus[3]
    assert gpu.tflops_min == pytest.approx(784.1) and gpu.dtype == "bfloat16"
    assert gpu.clock_event_reasons_seen == 0x4 and gpu.digest_key is not None


def test_matmul_worker_error_line() -> None:
    run = parse_matmul(step("matmul_h100_worker_died.txt").output)
    died = run.gpus[4]
    assert (died.status, died.phase) == ("error", "compute")
    assert died.error is not None and "illegal memory access" in died.error


def test_matmul_truncated_output_has_no_summary() -> None:
    run = parse_matmul(step("matmul_h100_truncated.txt").output)
    assert not run.summary_seen and len(run.gpus) == 5


def test_matmul_without_lines_is_an_error() -> None:
    with pytest.raises(OutputError):
        parse_matmul("ImportError: libcuda.so.1: cannot open shared object file\n")


def test_allreduce_result_line() -> None:
    result = parse_allreduce_bench(step("allreduce_pair_pass.txt").output)
    assert result.ranks == 16 and result.wrong == 0
    assert result.largest is not None and result.largest.busbw_gb_s == pytest.approx(372.418)


# --- never crash ---------------------------------------------------------------------------------

_TABLE_LINES = [line for line in step("dcgm_l2_fail_table.txt").output.splitlines()]
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)
_DCGM_KEYS = ["DCGM Diagnostic", "test_categories", "tests", "results", "status", "test_summary", "warnings", "errors"]


@given(
    st.lists(
        st.sampled_from(_TABLE_LINES)
        | st.builds(lambda name, cell: f"| {name} | {cell} |", st.text(max_size=20), st.text(max_size=30)),
        max_size=12,
    )
)
def test_dcgm_table_parser_never_crashes(lines: list[str]) -> None:
    try:
        diag = parse_dcgm_diag("\n".join(lines))
    except OutputError:
        return
    assert all(isinstance(test.status, str) for test in diag.tests)


@given(
    st.recursive(
        _JSON_VALUES,
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.sampled_from(_DCGM_KEYS) | st.text(max_size=6), children, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_dcgm_json_parser_never_crashes(document: object) -> None:
    try:
        diag = parse_dcgm_diag(json.dumps({"DCGM Diagnostic": document}))
    except OutputError:
        return
    assert all(isinstance(test.status, str) for test in diag.tests)


@given(st.dictionaries(st.sampled_from(["results", "out_of_bounds", "errors", "config"]), _JSON_VALUES, max_size=4))
def test_nccl_json_parser_never_crashes(document: dict[str, object]) -> None:
    try:
        parse_nccl_tests(json.dumps(document))
    except OutputError:
        return
