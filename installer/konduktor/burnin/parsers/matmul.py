"""matmul.py, our own burn-in: one JSON line per GPU and a summary."""

from __future__ import annotations

from dataclasses import dataclass

from konduktor.burnin.parsers.common import OutputError, schema_lines

MATMUL_SCHEMA = "konduktor.burnin.matmul/1"


@dataclass(frozen=True)
class MatmulGpu:
    index: int
    device: str
    name: str | None
    status: str  # "ok" or "error"
    phase: str | None  # for errors: "setup" (before any matmul) or "compute"
    error: str | None
    dtype: str
    tflops: tuple[float, ...]  # per timed window
    digest: str | None
    digest_key: str | None  # digests are comparable only between GPUs with equal keys
    digest_mismatch_windows: int
    nonfinite: int
    clock_event_reasons_seen: int | None
    sm_clock_mhz_min: float | None
    temperature_c_max: float | None

    @property
    def tflops_min(self) -> float | None:
        return min(self.tflops) if self.tflops else None


@dataclass(frozen=True)
class MatmulRun:
    gpus: tuple[MatmulGpu, ...]
    summary_seen: bool


def parse_matmul(text: str) -> MatmulRun:
    gpus = []
    summary_seen = False
    for record in schema_lines(text, MATMUL_SCHEMA):
        if record.get("kind") == "summary":
            summary_seen = True
        elif record.get("kind") == "gpu":
            clocks = record.get("clocks") or {}
            reasons = clocks.get("event_reasons_seen")
            gpus.append(
                MatmulGpu(
                    index=int(record["index"]),
                    device=str(record.get("device", "")),
                    name=record.get("name"),
                    status=str(record.get("status", "error")),
                    phase=record.get("phase"),
                    error=record.get("error"),
                    dtype=str(record.get("dtype", "")),
                    tflops=tuple(float(t) for t in record.get("tflops") or ()),
                    digest=record.get("digest"),
                    digest_key=record.get("digest_key"),
                    digest_mismatch_windows=int(record.get("digest_mismatch_windows") or 0),
                    nonfinite=int(record.get("nonfinite") or 0),
                    clock_event_reasons_seen=int(reasons, 16) if isinstance(reasons, str) else None,
                    sm_clock_mhz_min=clocks.get("sm_mhz_min"),
                    temperature_c_max=clocks.get("temp_c_max"),
                )
            )
    if not gpus and not summary_seen:
        raise OutputError("no matmul result lines")
    return MatmulRun(tuple(sorted(gpus, key=lambda g: g.index)), summary_seen)
