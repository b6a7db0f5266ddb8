#!/usr/bin/env python3
"""All-reduce bus bandwidth and data check across nodes, for the node-pair fabric test.

Started by torchrun in every pod of the pair Job (one process per GPU), so it needs no sshd or
MPI; its numbers agree closely with nccl-tests (docs/design/burnin.md#node-pairs-and-bisection). Shipped in the burn-in
ConfigMap next to matmul.py and, like it, uses only the standard library and PyTorch. Rank 0
prints one JSON result line; any rank that fails prints an error line.

    torchrun --nnodes 2 --nproc-per-node 8 ... allreduce.py --bytes 8589934592
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

SCHEMA = "konduktor.burnin.allreduce/1"
_FLOAT32_BYTES = 4


def busbw_factor(world_size: int) -> float:
    """all_reduce moves 2(n-1)/n of the buffer per rank (docs/design/burnin.md#nccl-tests)."""
    return 2 * (world_size - 1) / world_size


def bandwidths(size_bytes: int, seconds_per_iter: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of 1e9 bytes, the unit nccl-tests prints."""
    algbw = size_bytes / seconds_per_iter / 1e9
    return algbw, algbw * busbw_factor(world_size)


def expected_sum(world_size: int) -> float:
    """Rank r contributes r + 1 to every element; the sum is exact in float32 for any real world size."""
    return world_size * (world_size + 1) / 2


def measure(torch: Any, dist: Any, device: str, size_bytes: int, warmup: int, iters: int) -> dict[str, Any]:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    count = size_bytes // _FLOAT32_BYTES
    # Zeros stay zeros under repeated sums, so the timed loop cannot overflow to inf.
    buffer = torch.zeros(count, dtype=torch.float32, device=device)
    synchronize = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(warmup):
        dist.all_reduce(buffer)
    synchronize()
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buffer)
    synchronize()
    elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64, device=device)
    # The collective is as fast as its slowest rank.
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    seconds_per_iter = float(elapsed.item()) / iters

    buffer.fill_(rank + 1)
    dist.all_reduce(buffer)
    wrong = (buffer != expected_sum(world_size)).sum().to(torch.int64)
    dist.all_reduce(wrong)

    hosts: list[Any] = [None] * world_size
    dist.all_gather_object(hosts, socket.gethostname())
    algbw, busbw = bandwidths(count * _FLOAT32_BYTES, seconds_per_iter, world_size)
    return {
        "schema": SCHEMA,
        "kind": "result",
        "world_size": world_size,
        "hosts": sorted(set(hosts)),
        "bytes": count * _FLOAT32_BYTES,
        "dtype": "float32",
        "iters": iters,
        "time_us": round(seconds_per_iter * 1e6, 3),
        "algbw_gb_s": round(algbw, 3),
        "busbw_gb_s": round(busbw, 3),
        "wrong": int(wrong.item()),
        "backend": dist.get_backend(),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=int, default=8 << 30, help="buffer size per rank")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    try:
        use_cuda = args.backend == "nccl" or (args.backend == "auto" and torch.cuda.is_available())
        if use_cuda:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local_rank)
            device = f"cuda:{local_rank}"
        else:
            device = "cpu"
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        result = measure(torch, dist, device, args.bytes, args.warmup, args.iters)
        if rank == 0:
            print(json.dumps(result, sort_keys=True), flush=True)
        dist.destroy_process_group()
    except Exception as exc:  # every rank reports why it stopped; a silent hang is worse
        print(
            json.dumps(
                {"schema": SCHEMA, "kind": "error", "rank": rank, "error": f"{type(exc).__name__}: {exc}"[:2000]}
            ),
            flush=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
