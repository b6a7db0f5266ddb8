"""The GPUs a container and a pod ask for: requests, else limits (what the API server and Kueue default)."""

from __future__ import annotations

from typing import Any

import pytest

from konduktor.gpu.pod import container_gpus, pod_gpus


def container(requests: Any = None, limits: Any = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = {"nvidia.com/gpu": requests, "cpu": "1"}
    if limits is not None:
        resources["limits"] = {"nvidia.com/gpu": limits}
    return {"name": "c", "resources": resources, **extra}


def test_a_container_counts_its_request_else_its_limit() -> None:
    assert container_gpus(container(requests="8", limits="8")) == 8
    assert container_gpus(container(limits=8)) == 8  # as NVIDIA's and PyTorch's examples write it
    assert container_gpus(container(requests=2)) == 2
    assert container_gpus({"name": "cpu-only", "resources": {"requests": {"cpu": "1"}}}) == 0
    assert container_gpus({"name": "bare"}) == 0
    assert container_gpus(container(limits="1k")) == 1000


@pytest.mark.parametrize("value", ["1500m", "0.5", True, "eight"])
def test_a_quantity_that_is_no_whole_count_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="not a whole number of GPUs"):
        container_gpus(container(limits=value))


def test_a_pod_sums_containers_and_sidecars_or_takes_its_largest_init_container() -> None:
    assert pod_gpus({"containers": [container(limits=4), container(requests="4")]}) == 8
    assert pod_gpus({"initContainers": [container(limits=8)], "containers": [container(limits=2)]}) == 8
    sidecar = container(limits=1, restartPolicy="Always")
    assert pod_gpus({"initContainers": [sidecar], "containers": [container(limits=2)]}) == 3
    # A one-off init container after a sidecar runs alongside it.
    assert pod_gpus({"initContainers": [sidecar, container(limits=4)], "containers": [container(limits=2)]}) == 5
    assert pod_gpus({}) == 0
