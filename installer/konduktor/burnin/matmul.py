#!/usr/bin/env python3
"""BF16 matmul burn-in: TFLOPS per GPU and a digest of a seeded product for silent data corruption.

Shipped to the burn-in Job in a ConfigMap, so it needs only the standard library and PyTorch
(pynvml or nvidia-smi, when present, add clock samples). It reports facts and judges nothing:
one JSON line per GPU, then a summary line; konduktor's verdict code holds them against goals.

All GPUs run at once, one worker process each, because slot cooling changes results and a
crashed CUDA context must not take the other GPUs' measurements with it. Every GPU multiplies
the same seeded operands, so GPUs of one model, one image and one shape must produce bitwise
identical products; a GPU whose digest differs from its peers, or from its own earlier windows,
computed something wrong.

    python matmul.py                          # all CUDA GPUs, 8192^3 BF16, 300 s
    python matmul.py --devices cpu --size 64 --seconds 0 --dtype float32   # logic check on a CPU
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

SCHEMA = "konduktor.burnin.matmul/1"


@dataclass(frozen=True)
class MatmulConfig:
    m: int = 8192
    n: int = 8192
    k: int = 8192
    # Stated explicitly: float32 may silently run as TF32 (docs/design/burnin.md#matmul-pitfalls).
    dtype: str = "bfloat16"
    seed: int = 1234
    warmup_iters: int = 20
    window_s: float = 10.0
    duration_s: float = 300.0
    min_windows: int = 3  # enough windows for a median and for the cross-window digest check


class Stopwatch(Protocol):
    """Times queued device work: `stop()` returns once the device finished everything since `start()`."""

    def start(self) -> None: ...

    def stop(self) -> float: ...


class CudaStopwatch:
    """CUDA events on the current stream: the launch loop returns long before the GPU is done."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._begin: Any = None

    def start(self) -> None:
        self._begin = self._torch.cuda.Event(enable_timing=True)
        self._begin.record()

    def stop(self) -> float:
        end = self._torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        return float(self._begin.elapsed_time(end)) / 1e3


class HostStopwatch:
    """Wall clock for devices that compute synchronously (CPU)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._begin = 0.0

    def start(self) -> None:
        self._begin = self._clock()

    def stop(self) -> float:
        return self._clock() - self._begin


ClockSampler = Callable[[], "dict[str, Any] | None"]


def matmul_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of one (m x k) @ (k x n) product: a multiply and an add per term."""
    return 2 * m * n * k


def tflops(flops: int, seconds: float) -> float:
    return flops / seconds / 1e12


def digest_tensor(tensor: Any) -> str:
    """SHA-256 of the tensor's raw bytes.

    Read through ctypes so no numpy is needed; Python's `hash()` would be salted per process and
    useless across GPUs.
    """
    host = tensor.detach().to("cpu").contiguous()
    size = host.numel() * host.element_size()
    raw = (ctypes.c_char * size).from_address(host.data_ptr())
    return "sha256:" + hashlib.sha256(memoryview(raw)).hexdigest()


def seeded_operands(torch: Any, config: MatmulConfig, device: str) -> tuple[Any, Any]:
    """Identical A and B on every device: generated on the CPU from one seed, then copied."""
    generator = torch.Generator(device="cpu").manual_seed(config.seed)
    dtype = getattr(torch, config.dtype)
    a = torch.randn(config.m, config.k, generator=generator, dtype=torch.float32).to(dtype)
    b = torch.randn(config.k, config.n, generator=generator, dtype=torch.float32).to(dtype)
    return a.to(device), b.to(device)


def run_window(
    torch: Any, a: Any, b: Any, out: Any, iters: int, stopwatch: Stopwatch, sample: ClockSampler
) -> tuple[float, dict[str, Any] | None]:
    """`iters` products into `out`, timed, with one clock sample from the middle of the window.

    Launches return long before the GPU finishes, so halfway through the loop the launch queue is
    full: the GPU stays busy while the clocks are read, and the reading cannot idle it.
    """
    reading = None
    stopwatch.start()
    for i in range(iters):
        torch.matmul(a, b, out=out)
        if i == iters // 2:
            reading = sample()
    return stopwatch.stop(), reading


def iters_for_window(window_s: float, seconds_per_iter: float) -> int:
    return max(1, int(window_s / seconds_per_iter)) if seconds_per_iter > 0 else 1


def summarize_clocks(samples: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    if not samples:
        return None

    def values(key: str) -> list[float]:
        return [float(s[key]) for s in samples if s.get(key) is not None]

    reasons = 0
    for sample in samples:
        reasons |= int(sample.get("event_reasons") or 0)
    sm, temp, power = values("sm_mhz"), values("temp_c"), values("power_w")
    return {
        "samples": len(samples),
        "sm_mhz_min": min(sm, default=None),
        "sm_mhz_max": max(sm, default=None),
        "temp_c_max": max(temp, default=None),
        "power_w_max": max(power, default=None),
        # OR of every sample: one HW-slowdown sample is worth reporting.
        "event_reasons_seen": f"0x{reasons:016x}",
    }


def burn_device(
    torch: Any,
    device: str,
    index: int,
    config: MatmulConfig,
    stopwatch: Stopwatch,
    sample: ClockSampler,
    now: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Measure one device; returns its result line (status "error" with the phase on failure)."""
    line: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": "gpu",
        "index": index,
        "device": device,
        "dtype": config.dtype,
        "m": config.m,
        "n": config.n,
        "k": config.k,
        "seed": config.seed,
    }
    phase = "setup"
    try:
        line.update(describe_device(torch, device))
        line["digest_key"] = digest_key(line)
        a, b = seeded_operands(torch, config, device)
        out = torch.empty(config.m, config.n, dtype=a.dtype, device=device)
        phase = "compute"
        warmup_s, _ = run_window(torch, a, b, out, config.warmup_iters, stopwatch, lambda: None)
        iters = iters_for_window(config.window_s, warmup_s / max(config.warmup_iters, 1))
        flops = matmul_flops(config.m, config.n, config.k) * iters
        window_tflops: list[float] = []
        samples: list[dict[str, Any]] = []
        digests: list[str] = []
        nonfinite = 0
        started = now()
        while len(window_tflops) < config.min_windows or now() - started < config.duration_s:
            seconds, reading = run_window(torch, a, b, out, iters, stopwatch, sample)
            window_tflops.append(float(f"{tflops(flops, seconds):.6g}"))
            if reading:
                samples.append(reading)
            digests.append(digest_tensor(out))
            # NaN/Inf are only ~1 % of corruption outcomes (docs/design/burnin.md#matmul-pitfalls), so this complements
            # the digest comparison rather than replacing it.
            nonfinite += int((~torch.isfinite(out)).sum().item())
        line.update(
            status="ok",
            warmup_iters=config.warmup_iters,
            iters_per_window=iters,
            windows=len(window_tflops),
            tflops=window_tflops,
            tflops_min=min(window_tflops),
            tflops_median=statistics.median(window_tflops),
            tflops_max=max(window_tflops),
            digest=digests[0],
            # The same inputs every window: a later window that differs is an intermittent fault.
            digest_mismatch_windows=sum(d != digests[0] for d in digests[1:]),
            nonfinite=nonfinite,
            clocks=summarize_clocks(samples),
            elapsed_s=round(now() - started, 3),
        )
    except Exception as exc:  # a failing GPU must yield a result line, not a traceback
        line.update(status="error", phase=phase, error=f"{type(exc).__name__}: {exc}"[:2000])
    return line


def describe_device(torch: Any, device: str) -> dict[str, Any]:
    if not device.startswith("cuda"):
        return {"name": "cpu", "torch": torch.__version__}
    props = torch.cuda.get_device_properties(device)
    return {
        "name": props.name,
        "uuid": str(getattr(props, "uuid", "")) or None,
        "sm_count": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def digest_key(line: dict[str, Any]) -> str:
    """What must match for two digests to be comparable.

    cuBLAS results are bitwise reproducible only for the same toolkit, architecture and SM count
    (docs/design/burnin.md#matmul-pitfalls); shape, dtype and seed fix the computation itself.
    """
    parts = [
        line.get("name"),
        line.get("sm_count"),
        line.get("capability"),
        line.get("torch"),
        line.get("cuda"),
        line["dtype"],
        line["m"],
        line["n"],
        line["k"],
        line["seed"],
    ]
    return "|".join(str(part) for part in parts)


def nvml_sampler(index: int) -> ClockSampler | None:
    """Clock, clock-event reasons, temperature and power through pynvml, if it is installed."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None
    # Drivers before 535 only have the older "throttle reasons" name for the same bitmask.
    reasons_of = (
        getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )

    def sample() -> dict[str, Any] | None:
        try:
            return {
                "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "event_reasons": int(reasons_of(handle)),
                "temp_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            }
        except Exception:
            return None

    return sample


_SMI_FIELDS = ("clocks.sm", "clocks_event_reasons.active", "temperature.gpu", "power.draw")


def nvidia_smi_sampler(index: int) -> ClockSampler | None:
    """The same readings through nvidia-smi, for images without pynvml."""

    def query(fields: Sequence[str]) -> list[str] | None:
        try:
            done = subprocess.run(
                ["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        values = [v.strip() for v in done.stdout.strip().split(",")]
        return values if done.returncode == 0 and len(values) == len(fields) else None

    fields = _SMI_FIELDS
    if query(fields) is None:
        # Drivers before 535 know the field as clocks_throttle_reasons (docs/design/burnin.md#nvidia-smi).
        fields = ("clocks.sm", "clocks_throttle_reasons.active", "temperature.gpu", "power.draw")
        if query(fields) is None:
            return None

    def number(value: str) -> float | None:
        try:
            return float(value)
        except ValueError:
            return None

    def sample() -> dict[str, Any] | None:
        values = query(fields)
        if values is None:
            return None
        reasons = values[1]
        return {
            "sm_mhz": number(values[0]),
            "event_reasons": int(reasons, 16) if reasons.startswith("0x") else 0,
            "temp_c": number(values[2]),
            "power_w": number(values[3]),
        }

    return sample


def clock_sampler_for(device: str) -> ClockSampler:
    if not device.startswith("cuda"):
        return lambda: None
    index = int(device.partition(":")[2] or 0)
    return nvml_sampler(index) or nvidia_smi_sampler(index) or (lambda: None)


def summary_line(gpu_lines: Sequence[dict[str, Any]], elapsed_s: float) -> dict[str, Any]:
    """Counts and digest groups; `consistent` is false when GPUs of one key disagree."""
    groups: dict[str, dict[str, list[int]]] = {}
    for line in gpu_lines:
        if line.get("status") == "ok":
            by_digest = groups.setdefault(str(line.get("digest_key")), {})
            by_digest.setdefault(str(line["digest"]), []).append(int(line["index"]))
    return {
        "schema": SCHEMA,
        "kind": "summary",
        "gpus": len(gpu_lines),
        "ok": sum(line.get("status") == "ok" for line in gpu_lines),
        "errors": sum(line.get("status") != "ok" for line in gpu_lines),
        "digest_groups": groups,
        "consistent": all(len(by_digest) == 1 for by_digest in groups.values()),
        "elapsed_s": round(elapsed_s, 3),
    }


def emit(line: dict[str, Any]) -> None:
    print(json.dumps(line, sort_keys=True), flush=True)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="all", help="'all' CUDA devices, or a comma list: cuda:0,cuda:1 or cpu")
    parser.add_argument("--size", type=int, default=8192, help="square size (m = n = k)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--seconds", type=float, default=300.0, help="timed duration per GPU")
    parser.add_argument("--window", type=float, default=10.0, help="seconds per timed window")
    parser.add_argument("--warmup", type=int, default=20, help="untimed warm-up iterations")
    parser.add_argument("--min-windows", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def config_from(args: argparse.Namespace) -> MatmulConfig:
    return MatmulConfig(
        m=args.size,
        n=args.size,
        k=args.size,
        dtype=args.dtype,
        seed=args.seed,
        warmup_iters=args.warmup,
        window_s=args.window,
        duration_s=args.seconds,
        min_windows=args.min_windows,
    )


def run_worker(device: str, index: int, config: MatmulConfig) -> dict[str, Any]:
    import torch  # imported here: the parent only counts devices, each worker owns one GPU context

    if device.startswith("cuda"):
        torch.cuda.set_device(device)
        stopwatch: Stopwatch = CudaStopwatch(torch)
    else:
        stopwatch = HostStopwatch()
    return burn_device(torch, device, index, config, stopwatch, clock_sampler_for(device))


def list_devices(spec: str) -> list[str]:
    if spec != "all":
        return [d.strip() for d in spec.split(",") if d.strip()]
    import torch

    return [f"cuda:{i}" for i in range(torch.cuda.device_count())]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Pinned cuBLAS workspace keeps results bitwise reproducible (docs/design/burnin.md#matmul-pitfalls), and PCI
    # ordering makes CUDA device i the GPU nvidia-smi calls i. Both must precede CUDA init.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    config = config_from(args)
    if args.worker:
        index = int(os.environ.get("KONDUKTOR_MATMUL_INDEX", "0"))
        emit(run_worker(args.devices, index, config))
        return 0

    started = time.monotonic()
    devices = list_devices(args.devices)
    if not devices:
        emit(
            {
                "schema": SCHEMA,
                "kind": "gpu",
                "index": 0,
                "device": "",
                "status": "error",
                "phase": "setup",
                "error": "no CUDA device visible",
                "dtype": config.dtype,
            }
        )
        emit(summary_line([], time.monotonic() - started))
        return 1
    lines = run_workers(devices, config)
    summary = summary_line(lines, time.monotonic() - started)
    emit(summary)
    return 0 if summary["errors"] == 0 else 1


def worker_args(config: MatmulConfig) -> list[str]:
    return [
        "--size",
        str(config.m),
        "--dtype",
        config.dtype,
        "--seed",
        str(config.seed),
        "--seconds",
        str(config.duration_s),
        "--window",
        str(config.window_s),
        "--warmup",
        str(config.warmup_iters),
        "--min-windows",
        str(config.min_windows),
    ]


def run_workers(devices: Sequence[str], config: MatmulConfig) -> list[dict[str, Any]]:
    """One process per device, all at once; prints and returns one line per device, in order."""
    lines = []
    with contextlib.ExitStack() as files:
        workers = []
        for index, device in enumerate(devices):
            command = [sys.executable, os.path.abspath(__file__), *worker_args(config), "--devices", device, "--worker"]
            env = {**os.environ, "KONDUKTOR_MATMUL_INDEX": str(index)}
            # Files, not pipes: a worker blocked on a full pipe would idle its GPU mid-measurement.
            stdout = files.enter_context(tempfile.TemporaryFile("w+"))
            stderr = files.enter_context(tempfile.TemporaryFile("w+"))
            process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True, env=env)
            workers.append((index, device, process, stdout, stderr))
        for index, device, process, stdout, stderr in workers:
            returncode = process.wait()
            stdout.seek(0)
            stderr.seek(0)
            line = next(
                (json.loads(raw) for raw in stdout.read().splitlines() if raw.startswith("{") and SCHEMA in raw), None
            )
            if line is None:
                # The worker died without a line (segfault, OOM kill, CUDA abort): report it as a
                # compute failure with the end of its stderr, as gpu-burn reports DIED.
                line = {
                    "schema": SCHEMA,
                    "kind": "gpu",
                    "index": index,
                    "device": device,
                    "status": "error",
                    "phase": "compute",
                    "dtype": config.dtype,
                    "error": f"worker exited {returncode}: {stderr.read().strip()[-1500:]}",
                }
            emit(line)
            lines.append(line)
    return lines


if __name__ == "__main__":
    sys.exit(main())
