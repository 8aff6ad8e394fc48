"""Model zoo of DFML Table 10: pre-activation ResNet18, small-dataset ViT, EfficientNet, timm, CNN pools; width
rates and classifier splits. Batch size 2 throughout; EfficientNet B1-B4 are only built (no backward)."""

from __future__ import annotations

from functools import cache

import pytest
import torch
from torch import nn

from lit_fl.models import (
    POOLS,
    classifier_module,
    classifier_prefix,
    create_model,
    extract_features,
    is_known,
    num_parameters,
    resolve_pool,
    split_state,
    width_rate,
)

SHAPE = (3, 32, 32)
H1_POOLS = ("h1_cnn", "h1_resnet", "h1_vit")
RATES = [1.0, 0.5, 0.25, 0.125, 0.0625]
CNNS = list(dict.fromkeys(POOLS["h1_cnn"] + POOLS["h2_cnn"]))
TRAINED = [*POOLS["h1_resnet"], *POOLS["h1_vit"], "efficientnet_b0", "timm:resnet18", *CNNS]
#: Sizes that are no hidden width and stay fixed across a width-scaled family at 3x32x32 and 10 classes: scalars
#: and singleton axes, input channels and kernel sides (3, 5), classes (10), ViT tokens (8 * 8 patches + 1 = 65)
#: and SPT patch features (4 * 4 * 5 shifted copies * 3 channels = 240).
FIXED_SIZES = {1, 3, 5, 10, 65, 240}


@cache
def _model(arch: str, num_classes: int = 10) -> nn.Module:
    """Built once per test session (read-only uses only)."""
    torch.manual_seed(0)
    return create_model(arch, SHAPE, num_classes)


def _cnn_params(channels: list[int], in_channels: int, num_classes: int, size: int = 32) -> int:
    """Per layer: conv 5x5 with bias + GroupNorm affine; then a linear classifier on the flattened map
    (each ceil-mode 2x2 pool halves the side)."""
    total, previous = 0, in_channels
    for out in channels:
        total += 25 * previous * out + out + 2 * out
        previous, size = out, -(-size // 2)
    return total + previous * size * size * num_classes + num_classes


def _resnet_params(widths: list[int], in_channels: int, num_classes: int) -> int:
    """Stem 3x3 conv (no bias); per block: BN(in) + 3x3 conv in->out + BN(out) + 3x3 conv out->out, plus a 1x1
    projection in->out in the first block of stages 2-4 (stride 2); final BN and linear classifier."""
    total, previous = 9 * in_channels * widths[0], widths[0]
    for stage, width in enumerate(widths):
        for block in range(2):
            projection = previous * width if stage > 0 and block == 0 else 0
            total += 2 * previous + 9 * previous * width + 2 * width + 9 * width * width + projection
            previous = width
    return total + 2 * previous + previous * num_classes + num_classes


def _vit_params(dim: int, mlp_dim: int, num_classes: int, tokens: int = 65, patch_features: int = 240) -> int:
    """SPT (LayerNorm + linear), positional embedding and class token; per layer LSA (temperature, LayerNorm,
    bias-free qkv, output projection; attention width = dim) and feed-forward (LayerNorm, two linears); head
    (LayerNorm + linear)."""
    spt = 2 * patch_features + patch_features * dim + dim
    attention = 1 + 2 * dim + 3 * dim * dim + dim * dim + dim
    feed_forward = 2 * dim + dim * mlp_dim + mlp_dim + mlp_dim * dim + dim
    return spt + tokens * dim + dim + 2 * (attention + feed_forward) + 2 * dim + dim * num_classes + num_classes


def test_resnet18_parameter_count():
    # pre-act ResNet18 for CIFAR (kuangliu's PreActResNet18: 11,171,146) plus the final BN (2 * 512)
    assert _resnet_params([64, 128, 256, 512], 3, 10) == 11_171_146 + 1_024
    assert num_parameters(_model("resnet18")) == 11_172_170
    assert num_parameters(_model("resnet18_64_128_256_512")) == 11_172_170


@pytest.mark.parametrize("num_classes", [10, 100])
@pytest.mark.parametrize("arch", POOLS["h1_resnet"] + POOLS["h1_vit"] + CNNS)
def test_parameter_counts_match_formulas(arch, num_classes):
    widths = [int(c) for c in arch.split("_")[1:]]
    formula = {"resnet18": _resnet_params, "cnn": _cnn_params}.get(arch.split("_")[0])
    expected = formula(widths, 3, num_classes) if formula else _vit_params(*widths, num_classes)
    assert num_parameters(_model(arch, num_classes)) == expected


def test_library_model_parameter_counts():
    # 1000-class counts minus the resized classifier: EfficientNet-B0 5,288,548 - 1280 * 990 - 990;
    # timm resnet18 11,689,512 - 512 * 990 - 990
    assert num_parameters(_model("efficientnet_b0")) == 5_288_548 - 1280 * 990 - 990 == 4_020_358
    assert num_parameters(_model("timm:resnet18")) == 11_689_512 - 512 * 990 - 990 == 11_181_642


def _forward_backward(model: nn.Module, num_classes: int) -> None:
    model.train()
    out = model(torch.randn(2, *SHAPE))
    assert out.shape == (2, num_classes)
    assert torch.isfinite(out).all()
    nn.functional.cross_entropy(out, torch.tensor([0, num_classes - 1])).backward()
    for name, param in model.named_parameters():
        if param.requires_grad:
            assert param.grad is not None, f"no gradient for {name}"
            assert torch.isfinite(param.grad).all(), f"non-finite gradient for {name}"


@pytest.mark.parametrize("num_classes", [10, 100])
@pytest.mark.parametrize("arch", TRAINED)
def test_forward_backward(arch, num_classes):
    torch.manual_seed(0)
    model = create_model(arch, SHAPE, num_classes)
    assert num_parameters(model) == sum(p.numel() for p in model.parameters()) > 0
    _forward_backward(model, num_classes)


@pytest.mark.parametrize("num_classes", [10, 100])
@pytest.mark.parametrize("arch", ["efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4"])
def test_efficientnet_builds(arch, num_classes):
    model = _model(arch, num_classes)
    assert model.get_submodule("_fc").out_features == num_classes
    assert num_parameters(model) > num_parameters(_model("efficientnet_b0", num_classes))


def test_efficientnet_grows_b0_to_b4():
    counts = [num_parameters(_model(arch)) for arch in POOLS["h2_efficientnet"]]
    assert counts == sorted(counts) and len(set(counts)) == 5


def _assert_width_scaled(small: nn.Module, full: nn.Module, rate: float) -> None:
    """Same keys and ranks; every hidden size is floor(rate * full size), every fixed size is unchanged."""
    small_state, full_state = small.state_dict(), full.state_dict()
    assert list(small_state) == list(full_state)
    for key, tensor in small_state.items():
        small_shape, full_shape = tuple(tensor.shape), tuple(full_state[key].shape)
        assert len(small_shape) == len(full_shape), key
        expected = tuple(d if d in FIXED_SIZES else int(rate * d) for d in full_shape)
        assert small_shape == expected, f"{key}: {small_shape} != {expected} (full {full_shape}, rate {rate})"


@pytest.mark.parametrize("pool", H1_POOLS)
def test_h1_pools_are_width_scaled_copies(pool):
    archs = POOLS[pool]
    assert len(archs) == 5
    assert [width_rate(arch) for arch in archs] == RATES
    for larger, smaller in zip(archs, archs[1:]):
        _assert_width_scaled(_model(smaller), _model(larger), 0.5)
    for arch, rate in zip(archs[1:], RATES[1:]):
        _assert_width_scaled(_model(arch), _model(archs[0]), rate)


def test_vit_heads_scale_with_width():
    heads = [_model(arch).transformer.layers[0][0].heads for arch in POOLS["h1_vit"]]
    assert heads == [8, 4, 2, 1, 1]


def test_resnet18_layout():
    model = _model("resnet18")
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert convs[0].kernel_size == (3, 3) and convs[0].stride == (1, 1)
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())
    assert len([c for c in convs if c.kernel_size == (3, 3)]) == 1 + 4 * 2 * 2
    assert [c.stride for c in convs if c.kernel_size == (1, 1)] == [(2, 2)] * 3  # projections of stages 2-4
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(norms) == 4 * 2 * 2 + 1 and all(n.track_running_stats for n in norms)
    assert model.classifier.in_features == 512


def test_width_rate_values():
    assert width_rate("resnet18") == 1.0
    assert width_rate("cnn_32_64") == 0.25
    assert width_rate("cnn_32_64_128") is None  # another depth: no copy of cnn_128_256
    assert width_rate("resnet18_64_64_64_64") is None  # not proportional
    assert width_rate("vit_96_96") is None  # one head of 64: the attention width does not scale
    assert width_rate("efficientnet_b0") is None
    assert width_rate("timm:resnet18") is None
    with pytest.raises(ValueError, match="nope"):
        width_rate("nope")


@pytest.mark.parametrize(
    ("arch", "prefix"),
    [
        ("cnn_8_16", "classifier."),
        ("resnet18_4_8_16_32", "classifier."),
        ("vit_32_32", "mlp_head."),
        ("efficientnet_b0", "_fc."),
        ("timm:resnet18", "fc."),
    ],
)
def test_classifier_split(arch, prefix):
    model = _model(arch)
    assert classifier_prefix(model) == prefix
    features, classifier = split_state(model)
    keys = list(model.state_dict())
    assert set(features) | set(classifier) == set(keys) and not set(features) & set(classifier)
    assert classifier and all(k.startswith(prefix) for k in classifier)
    assert f"{prefix}weight" in keys or f"{prefix}1.weight" in keys
    linear = [m for m in classifier_module(model).modules() if isinstance(m, nn.Linear)][-1]
    assert linear.out_features == 10
    model.eval()
    with torch.no_grad():
        assert extract_features(model, torch.randn(2, *SHAPE)).shape == (2, linear.in_features)


def test_classifier_prefix_unknown_model():
    with pytest.raises(ValueError, match="register_classifier"):
        classifier_prefix(nn.Sequential(nn.Linear(2, 2)))


def test_unknown_timm_name():
    assert is_known("timm:nope")  # timm is imported only when a model is built
    with pytest.raises(ValueError, match=r"timm:nope.*timm\.list_models\(\)"):
        create_model("timm:nope", SHAPE, 10)


def test_vit_image_size_must_fit_patches():
    with pytest.raises(ValueError, match=r"vit_32_32.*patch size 4"):
        create_model("vit_32_32", (1, 30, 30), 10)
    assert create_model("vit_32_32", (1, 28, 28), 10)(torch.randn(2, 1, 28, 28)).shape == (2, 10)


def test_names_registered():
    for arch in ["resnet18", "resnet18_2_4_8_16", "vit_64_128", "efficientnet_b4", "timm:resnet18"]:
        assert is_known(arch)
    for arch in ["resnet18_64_128", "vit_64", "efficientnet_b8", "timm:"]:
        assert not is_known(arch)


def test_new_pools():
    for name in ("h1_resnet", "h1_vit", "h2_efficientnet", "high_heterogeneity"):
        assert all(is_known(arch) for arch in resolve_pool(name))
    assert POOLS["h2_efficientnet"] == [f"efficientnet_b{k}" for k in range(5)]
    pool = resolve_pool("high_heterogeneity")
    families = [arch.split("_")[0] for arch in pool]
    assert len(pool) == len(set(pool)) == 10
    assert (families.count("vit"), families.count("resnet18"), families.count("cnn")) == (2, 4, 4)
    assert pool[:6] == POOLS["h1_vit"][:2] + POOLS["h1_resnet"][:4]
    h2 = sorted(POOLS["h2_cnn"], key=lambda arch: num_parameters(_model(arch)), reverse=True)
    assert pool[6:] == h2[:4]  # the four largest H2 CNNs
