"""GPUs shared below one GPU: the MIG profiles of each GPU product, and what a shared node advertises.

Facts from docs/design/gpu-sharing.md: the profile table is the GPU Operator's own mig-parted layouts (v26.7.0, the
version the umbrella pins) cross-checked with NVIDIA's MIG user guide; the resource names are those the device
plugin v0.20.0 advertises under the `mixed` MIG strategy, and under time-slicing or MPS with `renameByDefault`.
Pure functions only: the config's lint, the quota renderer, the GPU Operator values, the simulated cluster and
what-if all read them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from konduktor.vocabulary import GPU_RESOURCE

# Time-slicing and MPS replicas, renamed so that a shared GPU is never counted as a whole one (`nvidia.com/gpu`
# stays 0 on a shared node, and quotas on whole GPUs remain honest).
SHARED_RESOURCE = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# The node labels the GPU Operator reads: mig-manager applies the layout named by the first, the device plugin's
# config-manager picks its sharing config by the second. `up` sets them on a sharing group's nodes, and the group's
# ResourceFlavor selects its nodes by them.
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
# A MIG GPU has 7 compute slices and 8 memory slices (NVIDIA's MIG user guide); a GPU instance's profile names its
# compute slices ("3g") and its memory ("40gb").
COMPUTE_SLICES = 7
MEMORY_SLICES = 8
MIG_DISABLED_LAYOUT = "all-disabled"

_PROFILE = re.compile(r"^(?P<compute>[1-7])g\.(?P<memory>\d+)gb(?P<me>\+me)?$")


@dataclass(frozen=True)
class MigProduct:
    """One family of MIG-capable GPUs: its whole memory (GB as profiles name it) and each profile's most
    instances on one GPU."""

    family: str
    memory_gb: int
    profiles: Mapping[str, int]


# The GPU Operator v26.7.0's default mig-parted layouts (`all-<profile>` at its most instances), per device family.
# docs/design/gpu-sharing.md#mig-profiles gives the source lines.
MIG_PRODUCTS = (
    MigProduct(
        "A100 40GB",
        40,
        {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
    ),
    MigProduct(
        "A100/H100 80GB",
        80,
        {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    ),
    MigProduct(
        "H100 NVL",
        94,
        {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1},
    ),
    MigProduct(
        "H200 141GB",
        141,
        {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
    ),
)

# GPU Feature Discovery's nvidia.com/gpu.product values (e.g. NVIDIA-A100-SXM4-80GB, NVIDIA-H100-80GB-HBM3,
# NVIDIA-H100-NVL, NVIDIA-H200) -> the family whose table applies; checked in order, the first match wins.
_PRODUCT_FAMILIES = (
    (re.compile(r"H100.*NVL", re.IGNORECASE), "H100 NVL"),
    (re.compile(r"(^|[^G])H200", re.IGNORECASE), "H200 141GB"),
    (re.compile(r"A100.*40GB", re.IGNORECASE), "A100 40GB"),
    (re.compile(r"A100.*80GB|H100.*(80GB|HBM3|SXM|PCIE)", re.IGNORECASE), "A100/H100 80GB"),
)


def mig_product(product: str) -> MigProduct | None:
    """The MIG table for a GPU product label, or None when Konduktor knows none for it."""
    for pattern, family in _PRODUCT_FAMILIES:
        if pattern.search(product):
            return next(p for p in MIG_PRODUCTS if p.family == family)
    return None


def mig_resource(profile: str) -> str:
    """The extended resource a MIG instance is advertised as under the mixed strategy: `+` becomes `.`."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def is_slice(resource: str) -> bool:
    """A slice of a GPU as a node advertises it and a pod asks for it: a MIG instance or a shared GPU."""
    return resource == SHARED_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


def is_gpu_resource(resource: str) -> bool:
    """A resource the device plugin advertises: whole GPUs, MIG instances, shared GPUs."""
    return resource == GPU_RESOURCE or is_slice(resource)


def resource_key(resource: str) -> str:
    """How config.yaml names a shared resource: without `nvidia.com/` (`mig-1g.10gb`, `gpu.shared`)."""
    return resource.removeprefix("nvidia.com/")


def compute_slices(profile: str) -> int:
    match = _PROFILE.match(profile)
    if match is None:
        raise ValueError(f"{profile!r} is not a MIG profile")
    return int(match["compute"])


def memory_slices(profile: str, product: MigProduct) -> int:
    """The memory slices (of 8) a profile takes on this product: its memory over an eighth of the GPU's."""
    match = _PROFILE.match(profile)
    if match is None:
        raise ValueError(f"{profile!r} is not a MIG profile")
    return max(1, round(int(match["memory"]) * MEMORY_SLICES / product.memory_gb))


def layout_problems(product_label: str, layout: Mapping[str, int]) -> list[str]:
    """Why a per-GPU MIG layout cannot be made on this product, each problem once; [] when it can.

    A layout fits when every profile is the product's, no profile exceeds its most instances, and the instances
    take at most 7 compute and 8 memory slices. That is necessary; whether the instances can also be placed without
    overlapping is mig-parted's last word on the node (it tries every order), reported by
    nvidia.com/mig.config.state=failed.
    """
    product = mig_product(product_label)
    if product is None:
        known = ", ".join(p.family for p in MIG_PRODUCTS)
        return [f"no MIG profile table for product {product_label!r} (known: {known})"]
    problems = []
    for profile, count in layout.items():
        most = product.profiles.get(profile)
        if most is None:
            problems.append(
                f"{profile!r} is not a MIG profile of {product.family} GPUs (profiles: {', '.join(product.profiles)})"
            )
        elif count > most:
            problems.append(f"{profile} fits at most {most} times on one {product.family} GPU, not {count}")
    if problems:
        return problems
    compute = sum(compute_slices(p) * n for p, n in layout.items())
    memory = sum(memory_slices(p, product) * n for p, n in layout.items())
    if compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        problems.append(
            f"the instances take {compute} of {COMPUTE_SLICES} compute slices and {memory} of {MEMORY_SLICES} "
            f"memory slices of one {product.family} GPU"
        )
    return problems


def mig_units(layout: Mapping[str, int], gpus_per_node: int) -> dict[str, int]:
    """The MIG resources one node advertises when every GPU has `layout`."""
    return {mig_resource(profile): count * gpus_per_node for profile, count in sorted(layout.items()) if count}


def shared_units(replicas: int, gpus_per_node: int) -> dict[str, int]:
    """What one time-sliced or MPS node advertises: each GPU as `replicas` shared GPUs."""
    return {SHARED_RESOURCE: replicas * gpus_per_node}


def gpu_fraction(resource: str, replicas: int | None = None) -> Fraction:
    """The part of one GPU's compute one unit of a shared resource is: a MIG instance its compute slices of 7, a
    replica 1/replicas. The cpu and memory quota that goes with a slice follows it."""
    if resource == SHARED_RESOURCE:
        if not replicas:
            raise ValueError("a shared GPU's fraction needs its replicas")
        return Fraction(1, replicas)
    profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
    return Fraction(int(profile.split("g.", 1)[0]), COMPUTE_SLICES)


def smallest_covering(fraction: float, offered: Mapping[str, Fraction]) -> str | None:
    """Of the shared resources offered (resource -> its fraction of a GPU), the smallest that covers `fraction` of
    one GPU (ties by name), or None when none does."""
    fitting = sorted(
        (share, name) for name, share in offered.items() if share >= Fraction(fraction).limit_denominator()
    )
    return fitting[0][1] if fitting else None


def shares_gpus(labels: Mapping[str, str]) -> bool:
    """Whether a node's labels give its GPUs a sharing layout (a MIG layout other than `all-disabled`, or a device
    plugin config): such a node advertises no whole `nvidia.com/gpu`, by design, not because it lost them."""
    layout = labels.get(MIG_CONFIG_LABEL)
    return (layout is not None and layout != MIG_DISABLED_LAYOUT) or DEVICE_PLUGIN_CONFIG_LABEL in labels
