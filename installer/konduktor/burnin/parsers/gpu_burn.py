"""gpu-burn (optional second opinion)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from konduktor.burnin.parsers.common import OutputError


@dataclass(frozen=True)
class GpuBurnResult:
    status: dict[int, str]  # final `GPU n: OK|FAULTY`
    died: frozenset[int]  # progress showed `(DIED!)`: the child crashed, summary may still say OK
    errors: dict[int, int]  # compare errors in the last progress line
    gflops: dict[int, float]  # last progress figure per GPU
    summary_seen: bool
    all_died: bool  # "No clients are alive!  Aborting"


_BURN_STATUS = re.compile(r"GPU (\d+): (OK|FAULTY)")


def parse_gpu_burn(text: str) -> GpuBurnResult:
    """gpu-burn prints `\\r`-separated progress and a final `Tested N GPUs:` list (docs/design/burnin.md#gpu-burn)."""
    status: dict[int, str] = {}
    died: set[int] = set()
    errors: dict[int, int] = {}
    gflops: dict[int, float] = {}
    summary_seen = False
    for line in re.split(r"[\r\n]+", text):
        if line.strip().startswith("Tested") and "GPUs" in line:
            summary_seen = True
        if final := _BURN_STATUS.search(line):
            status[int(final.group(1))] = final.group(2)
        if "proc'd:" in line:
            rates = re.findall(r"(-?\d+) \((\d+(?:\.\d+)?) Gflop/s\)", line)
            gflops = {gpu: float(rate) for gpu, (_, rate) in enumerate(rates)}
            if section := re.search(r"errors:(.*?)(?:temps:|$)", line):
                for gpu, item in enumerate(section.group(1).split("- ")):
                    if count := re.match(r"\s*(\d+)", item):
                        errors[gpu] = max(errors.get(gpu, 0), int(count.group(1)))
                    if "DIED" in item:
                        died.add(gpu)
    if not summary_seen and not gflops:
        raise OutputError("gpu-burn printed neither progress nor a summary")
    return GpuBurnResult(status, frozenset(died), errors, gflops, summary_seen, "No clients are alive" in text)
