"""The node-pair all-reduce benchmark: bandwidth arithmetic, and two real ranks over gloo on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from konduktor.burnin import allreduce
from konduktor.burnin.parsers.allreduce import parse_allreduce_bench
from konduktor.burnin.results import Verdict
from konduktor.burnin.verdict.collective import judge_collective
from konduktor.sim.processes import free_port

SCRIPT = Path(allreduce.__file__)


def test_bus_bandwidth_factor_follows_nccl_tests() -> None:
    assert allreduce.busbw_factor(8) == 1.75
    assert allreduce.busbw_factor(16) == pytest.approx(1.875)
    algbw, busbw = allreduce.bandwidths(8 << 30, 0.043247, 16)
    assert algbw == pytest.approx(198.6, abs=0.1)
    assert busbw == pytest.approx(372.4, abs=0.1)


def test_expected_sum_is_exact() -> None:
    assert allreduce.expected_sum(16) == 136.0


@pytest.mark.slow  # two torch processes
def test_two_ranks_over_gloo_report_one_clean_result() -> None:
    port = free_port()
    ranks = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        ranks.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(SCRIPT),
                    "--backend",
                    "gloo",
                    "--bytes",
                    str(1 << 20),
                    "--warmup",
                    "1",
                    "--iters",
                    "3",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        )
    outputs = [process.communicate(timeout=300) for process in ranks]
    assert [process.returncode for process in ranks] == [0, 0], [err for _, err in outputs]
    result = parse_allreduce_bench(outputs[0][0])
    assert outputs[1][0].strip() == ""  # only rank 0 prints the result
    assert (result.ranks, result.wrong) == (2, 0)
    assert result.largest is not None and result.largest.size_bytes == 1 << 20
    assert result.largest.busbw_gb_s > 0
    check = judge_collective("nccl_pair", "nccl-pair", result, 0, 350.0, None, expected_ranks=2, skip_reason="CPU")
    assert check.verdict is Verdict.SKIPPED  # no goal on a CPU, but the data check passed
