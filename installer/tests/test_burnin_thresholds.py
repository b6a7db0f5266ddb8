"""GPU model mapping and the goals derived from physical peaks."""

from __future__ import annotations

import pytest

from konduktor.burnin.thresholds import (
    DEFAULT_THRESHOLDS,
    GPU_MODELS,
    Band,
    NcclAlgorithm,
    gpu_model_for,
    normalise_product,
)


@pytest.mark.parametrize(
    ("product", "key"),
    [
        ("NVIDIA-H100-80GB-HBM3", "h100-sxm5"),  # GFD label
        ("NVIDIA H100 80GB HBM3", "h100-sxm5"),  # nvidia-smi name
        ("NVIDIA-H100-80GB-HBM3-SHARED", "h100-sxm5"),  # time-sliced: same silicon
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA-A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA-H200", "h200-sxm"),
        ("NVIDIA-H200-141GB-HBM3e", "h200-sxm"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA-GB200", "gb200"),
        ("NVIDIA-L40S", "l40s"),
    ],
)
def test_known_products_map_to_their_exact_model(product: str, key: str) -> None:
    model = gpu_model_for(product)
    assert model is not None
    assert model.key == key


@pytest.mark.parametrize(
    "product",
    [
        "NVIDIA A100-SXM4-40GB",  # other HBM size: other peaks
        "NVIDIA-H100-NVL",  # other form factor
        "NVIDIA H200 NVL",
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",  # MIG slice: other SM count
        "Tesla-T4",
        "NVIDIA-RTX-PRO-6000",
        "",
        None,
    ],
)
def test_unknown_products_get_no_model_rather_than_a_guess(product: str | None) -> None:
    assert gpu_model_for(product) is None


def test_normalised_names_of_label_and_nvidia_smi_agree() -> None:
    assert normalise_product("NVIDIA H100 80GB HBM3") == normalise_product("NVIDIA-H100-80GB-HBM3")


def test_every_model_is_reachable_from_its_own_patterns_and_from_no_other() -> None:
    for model in GPU_MODELS:
        for pattern in model.product_patterns:
            plain = pattern.replace(r"(-80GB)?", "").replace(r"\d+", "192")
            assert gpu_model_for(plain) is model, pattern


@pytest.mark.parametrize(
    ("key", "goal_tflops"),
    [("h100-sxm5", 692), ("h200-sxm", 692), ("a100-sxm4-80gb", 218), ("b200", 1575)],
)
def test_matmul_goals_are_the_documented_fraction_of_peak(key: str, goal_tflops: float) -> None:
    model = DEFAULT_THRESHOLDS.model(key)
    assert model is not None
    assert model.matmul_bf16.pass_at * model.bf16_dense_tflops == pytest.approx(goal_tflops, abs=1)


@pytest.mark.parametrize(
    ("key", "algorithm", "goal_gb_s"),
    [
        ("h100-sxm5", NcclAlgorithm.NVLS, 430),
        ("h100-sxm5", NcclAlgorithm.RING, 333),
        ("h200-sxm", NcclAlgorithm.NVLS, 430),
        ("a100-sxm4-80gb", NcclAlgorithm.RING, 210),
        ("b200", NcclAlgorithm.NVLS, 761),
    ],
)
def test_one_node_nccl_goals_match_the_reference(key: str, algorithm: NcclAlgorithm, goal_gb_s: float) -> None:
    model = DEFAULT_THRESHOLDS.model(key)
    assert model is not None and model.nvlink_gb_s is not None
    assert model.nccl_allreduce[algorithm].pass_at * model.nvlink_gb_s == pytest.approx(goal_gb_s, abs=1)


def test_models_without_a_documented_figure_have_no_goal() -> None:
    b200 = DEFAULT_THRESHOLDS.model("b200")
    l40s = DEFAULT_THRESHOLDS.model("l40s")
    assert b200 is not None and l40s is not None
    assert NcclAlgorithm.RING not in b200.nccl_allreduce
    assert l40s.nccl_allreduce == {} and l40s.nvlink_gb_s is None


def test_every_band_warns_before_it_fails() -> None:
    bands = [DEFAULT_THRESHOLDS.node_median, DEFAULT_THRESHOLDS.nccl_pair]
    for model in GPU_MODELS:
        bands += [model.matmul_bf16, *model.nccl_allreduce.values()]
        bands += [b for b in (model.nvlink_p2p, model.pcie_copy, model.hbm_copy) if b is not None]
    for band in bands:
        assert 0 < band.fail_below < band.pass_at <= 1.0


def test_a_band_that_fails_above_its_pass_line_is_rejected() -> None:
    with pytest.raises(ValueError, match="fail_below"):
        Band(pass_at=0.7, fail_below=0.8)
