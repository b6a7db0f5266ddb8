"""The GPUs a container or a pod asks for, as Kubernetes and Kueue count them.

One reading for every count of asked-for GPUs (`konduktor submit`, `why`, `queue`, the published capacity, the
simulated cluster's checks): a container's `resources.requests["nvidia.com/gpu"]`, else its
`resources.limits["nvidia.com/gpu"]`. Extended resources may be given as limits only: the API server then copies
the limit into the request of the pod it creates, and Kueue does the same when it computes a Workload's usage
(docs/design/gpu-requests.md). A job written as NVIDIA's and PyTorch's examples write it (`limits` only) asks for
as many GPUs as one that gives both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from konduktor.vocabulary import GPU_RESOURCE

# A whole quantity: digits with an optional decimal SI suffix ("8", or "1k" as the API server may write 1000).
_WHOLE = re.compile(r"^(\d+)([kMGTPE]?)$")
_SUFFIX = {"": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def _count(value: Any, resource: str = GPU_RESOURCE) -> int:
    """An extended resource's quantity, which the API server admits only as a whole number (YAML may read it as
    an int); ValueError for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    found = _WHOLE.match(str(value).strip()) if not isinstance(value, bool) else None
    if found is None:
        unit = " of GPUs" if resource == GPU_RESOURCE else ""
        raise ValueError(f"{resource}: {value!r} is not a whole number{unit}")
    return int(found[1]) * int(10 ** _SUFFIX[found[2]])


def container_amount(container: Mapping[str, Any], resource: str) -> int:
    """What one container asks of an extended resource: its request, else its limit (the request the API server
    defaults)."""
    resources = container.get("resources") or {}
    for field in ("requests", "limits"):
        value = (resources.get(field) or {}).get(resource)
        if value is not None:
            return _count(value, resource)
    return 0


def container_gpus(container: Mapping[str, Any]) -> int:
    """The GPUs one container asks for: its request, else its limit (the request the API server defaults)."""
    return container_amount(container, GPU_RESOURCE)


def pod_amount(spec: Mapping[str, Any], resource: str) -> int:
    """What a pod (its spec) holds of an extended resource while it runs, as the scheduler counts it: the sum over
    its containers and sidecars (init containers that keep running, `restartPolicy: Always`), or the largest one-off
    init container plus those sidecars started before it, whichever is more."""
    sidecars = 0
    init_peak = 0
    for container in spec.get("initContainers") or ():
        if container.get("restartPolicy") == "Always":
            sidecars += container_amount(container, resource)
        else:
            init_peak = max(init_peak, sidecars + container_amount(container, resource))
    containers = sum(container_amount(c, resource) for c in spec.get("containers") or ())
    return max(containers + sidecars, init_peak)


def pod_gpus(spec: Mapping[str, Any]) -> int:
    """The GPUs a pod (its spec) holds while it runs (`pod_amount` of nvidia.com/gpu)."""
    return pod_amount(spec, GPU_RESOURCE)
