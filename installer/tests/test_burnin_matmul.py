"""The matmul burn-in script's logic on a CPU at small sizes: digests, TFLOPS arithmetic, failure lines."""

from __future__ import annotations

import ast
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from konduktor.burnin import matmul
from konduktor.burnin.matmul import MatmulConfig
from konduktor.burnin.parsers.matmul import parse_matmul
from konduktor.burnin.verdict.matmul import judge_matmul

SCRIPT = Path(matmul.__file__)
SMALL = MatmulConfig(m=64, n=48, k=32, dtype="bfloat16", warmup_iters=2, window_s=0.01, duration_s=0.0, min_windows=3)


class FakeStopwatch:
    """Returns scripted durations: the warm-up first, then one per timed window."""

    def __init__(self, durations: list[float]) -> None:
        self._durations: Iterator[float] = iter(durations)
        self.starts = 0

    def start(self) -> None:
        self.starts += 1

    def stop(self) -> float:
        return next(self._durations)


class FlakyTorch:
    """torch, except that matmul results go wrong after `good_calls` products (an intermittent fault)."""

    def __init__(self, good_calls: int) -> None:
        self._good_calls = good_calls
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def matmul(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        torch.matmul(a, b, out=out)
        self.calls += 1
        if self.calls > self._good_calls:
            out[0, 0] += 1
        return out


def no_clock() -> None:
    return None


def test_digest_is_identical_for_the_same_seed() -> None:
    first = matmul.seeded_operands(torch, SMALL, "cpu")
    second = matmul.seeded_operands(torch, SMALL, "cpu")
    assert matmul.digest_tensor(first[0] @ first[1]) == matmul.digest_tensor(second[0] @ second[1])


def test_digest_differs_for_another_seed() -> None:
    a, b = matmul.seeded_operands(torch, SMALL, "cpu")
    c, d = matmul.seeded_operands(torch, MatmulConfig(m=64, n=48, k=32, seed=SMALL.seed + 1), "cpu")
    assert matmul.digest_tensor(a @ b) != matmul.digest_tensor(c @ d)


def test_digest_catches_a_single_flipped_bit() -> None:
    a, b = matmul.seeded_operands(torch, SMALL, "cpu")
    product = a @ b
    corrupted = product.clone()
    corrupted.view(torch.int16)[17, 5] ^= 1  # the lowest mantissa bit of one element
    assert not torch.equal(product, corrupted)
    assert matmul.digest_tensor(product) != matmul.digest_tensor(corrupted)


def test_digest_is_of_the_raw_bytes() -> None:
    tensor = torch.arange(6, dtype=torch.int16)
    expected = hashlib.sha256(b"".join(int(v).to_bytes(2, sys.byteorder) for v in range(6))).hexdigest()
    assert matmul.digest_tensor(tensor) == f"sha256:{expected}"


def test_flops_and_tflops() -> None:
    assert matmul.matmul_flops(8192, 8192, 8192) == 2 * 8192**3
    assert matmul.tflops(2 * 8192**3 * 1000, 1.4) == pytest.approx(785.4, abs=0.1)


def test_tflops_from_a_fake_timer() -> None:
    # Warm-up: 2 products in 0.004 s -> 0.002 s each -> a 0.01 s window holds 5 products.
    stopwatch = FakeStopwatch([0.004, 0.5, 0.25, 1.0])
    readings = []

    def clock() -> dict[str, Any]:
        readings.append(1)
        return {"sm_mhz": 1980, "event_reasons": 0x4, "temp_c": 60, "power_w": 690.0}

    line = matmul.burn_device(torch, "cpu", 0, SMALL, stopwatch, clock)
    assert line["status"] == "ok", line
    assert line["iters_per_window"] == 5
    flops = 2 * 64 * 48 * 32 * 5
    assert line["tflops"] == pytest.approx([flops / 0.5 / 1e12, flops / 0.25 / 1e12, flops / 1.0 / 1e12], rel=1e-5)
    assert line["tflops_min"] == line["tflops"][2]
    assert stopwatch.starts == 4  # warm-up and three windows, each timed separately
    assert len(readings) == 3 and line["clocks"]["samples"] == 3  # one per timed window, none in warm-up


def test_window_length_follows_the_warm_up_speed() -> None:
    assert matmul.iters_for_window(10.0, 0.0011) == 9090
    assert matmul.iters_for_window(10.0, 30.0) == 1
    assert matmul.iters_for_window(10.0, 0.0) == 1


def test_real_cpu_run_is_consistent() -> None:
    line = matmul.burn_device(torch, "cpu", 0, SMALL, matmul.HostStopwatch(), no_clock)
    assert line["status"] == "ok", line
    assert line["windows"] >= 3 and line["digest_mismatch_windows"] == 0 and line["nonfinite"] == 0
    a, b = matmul.seeded_operands(torch, SMALL, "cpu")
    assert line["digest"] == matmul.digest_tensor(torch.matmul(a, b))


def test_intermittent_fault_shows_as_window_mismatch() -> None:
    # Warm-up (2) and the first window (1 product) are clean; later windows corrupt the result.
    flaky = FlakyTorch(good_calls=3)
    stopwatch = FakeStopwatch([0.02, 0.01, 0.01, 0.01])
    config = MatmulConfig(m=64, n=48, k=32, warmup_iters=2, window_s=0.01, duration_s=0.0, min_windows=3)
    line = matmul.burn_device(flaky, "cpu", 0, config, stopwatch, no_clock)
    assert line["iters_per_window"] == 1
    assert line["digest_mismatch_windows"] == 2


def test_nonfinite_values_are_counted() -> None:
    class NanTorch(FlakyTorch):
        def matmul(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            torch.matmul(a, b, out=out)
            out[1, 1] = float("nan")
            return out

    line = matmul.burn_device(NanTorch(0), "cpu", 0, SMALL, matmul.HostStopwatch(), no_clock)
    assert line["nonfinite"] == line["windows"]


def test_a_device_that_cannot_start_reports_a_setup_error() -> None:
    line = matmul.burn_device(torch, "cuda:7", 7, SMALL, matmul.HostStopwatch(), no_clock)
    assert (line["status"], line["phase"], line["index"]) == ("error", "setup", 7)
    assert line["error"]


def test_clock_samples_are_summarised() -> None:
    samples = [
        {"sm_mhz": 1980, "event_reasons": 0x4, "temp_c": 65, "power_w": 690.0},
        {"sm_mhz": 1410, "event_reasons": 0x40, "temp_c": 88, "power_w": 612.5},
    ]
    assert matmul.summarize_clocks(samples) == {
        "samples": 2,
        "sm_mhz_min": 1410.0,
        "sm_mhz_max": 1980.0,
        "temp_c_max": 88.0,
        "power_w_max": 690.0,
        "event_reasons_seen": "0x0000000000000044",
    }
    assert matmul.summarize_clocks([]) is None


def test_summary_groups_digests_by_comparison_key() -> None:
    lines = [
        {"index": 0, "status": "ok", "digest_key": "h100", "digest": "x"},
        {"index": 1, "status": "ok", "digest_key": "h100", "digest": "y"},
        {"index": 2, "status": "error", "phase": "compute"},
    ]
    summary = matmul.summary_line(lines, 1.0)
    assert summary["digest_groups"] == {"h100": {"x": [0], "y": [1]}}
    assert (summary["consistent"], summary["ok"], summary["errors"]) == (False, 2, 1)


@pytest.mark.slow  # two torch processes
def test_script_end_to_end_on_two_cpu_workers() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--devices",
            "cpu,cpu",
            "--size",
            "64",
            "--seconds",
            "0",
            "--warmup",
            "2",
            "--window",
            "0.01",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    run = parse_matmul(done.stdout)
    assert run.summary_seen and [g.index for g in run.gpus] == [0, 1]
    assert run.gpus[0].digest == run.gpus[1].digest
    _, sdc = judge_matmul(run, None, 2)
    assert sdc.verdict.value == "PASS"


def test_script_imports_only_the_standard_library_and_torch() -> None:
    for script in (SCRIPT, SCRIPT.with_name("allreduce.py")):
        imported = set()
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
        assert imported - sys.stdlib_module_names <= {"torch", "pynvml"}, script.name
