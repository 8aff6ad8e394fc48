"""FedORION's model pool (sec. 4.1): WRN-40-1/WRN-40-2 (Zagoruyko & Komodakis 2016), ShuffleNetV2 and MobileNetV2
with CIFAR stems. Parameter counts against a hand count of the architecture and against the papers' numbers (given
to one decimal, in millions); the stems' strides through the feature-map sizes they leave at 32 x 32. (That they fuse
exactly is checked with every pool architecture in test_fusion.py.)"""

from __future__ import annotations

import pytest
import torch
import torchvision.models as tvm
from torch import nn

from lit_fl.errors import ConfigError
from lit_fl.models import classifier_prefix, create_model, extract_features, num_parameters, width_rate

pytestmark = pytest.mark.usefixtures("one_thread")


def wrn_parameters(depth: int, k: int, num_classes: int, in_channels: int = 3) -> int:
    """WRN-d-k counted by hand: stem 3x3 conv to 16; per group of n = (d - 4) / 6 pre-activation blocks, each
    BN(in) + conv3x3(in, out) + BN(out) + conv3x3(out, out) (+ a 1x1 projection when in != out); final BN and the
    linear classifier. Convolutions have no bias, a BatchNorm has a weight and a bias per channel."""
    n = (depth - 4) // 6
    total, previous = in_channels * 16 * 9, 16
    for width in (16 * k, 32 * k, 64 * k):
        for block in range(n):
            inner = previous if block == 0 else width
            total += 2 * inner + inner * width * 9 + 2 * width + width * width * 9
            total += inner * width if inner != width else 0
        previous = width
    return total + 2 * previous + previous * num_classes + num_classes


@pytest.mark.parametrize(("depth", "k", "paper_millions"), [(40, 1, 0.6), (40, 2, 2.2), (16, 2, None)])
def test_wrn_parameter_counts_match_the_hand_count_and_the_wrn_paper(depth: int, k: int,
                                                                   paper_millions: float | None) -> None:
    """Wide Residual Networks' CIFAR table of depths and widths: WRN-40-1 0.6M, WRN-40-2 2.2M (WRN-16-2, a WRN16
    of FedORION's Table 4, is not in it). FedORION App. B's "WRN40 (0.5M parameters)" is WRN-40-1's 0.56M
    truncated."""
    for num_classes in (10, 100):
        model = create_model(f"wrn_{depth}_{k}", (3, 32, 32), num_classes)
        assert num_parameters(model) == wrn_parameters(depth, k, num_classes)
    if paper_millions is not None:
        assert round(wrn_parameters(depth, k, 10) / 1e6, 1) == paper_millions
    assert num_parameters(create_model("wrn_40_1", (1, 28, 28), 10)) == wrn_parameters(40, 1, 10, in_channels=1)
    assert wrn_parameters(40, 1, 10) == 563_930  # the count docs and the model's docstring state


@pytest.mark.parametrize(("arch", "imagenet", "head_features", "paper"), [
    ("shufflenetv2", tvm.shufflenet_v2_x1_0, 1024, 2.3e6),  # Ma et al. 2018, Table 8: ShuffleNet v2 1x, 2.3M
    ("mobilenetv2", tvm.mobilenet_v2, 1280, 3.4e6),  # Sandler et al. 2018, Table 4: MobileNetV2 (1.0), 3.4M
])
def test_cifar_stems_keep_torchvisions_parameter_count(arch: str, imagenet: object, head_features: int,
                                                        paper: float) -> None:
    """The stem changes strides, not shapes: at 1,000 classes the count is torchvision's ImageNet model's (within
    5% of the paper's), at 10 classes it is that minus 990 rows of the linear head (weights and bias)."""
    reference = num_parameters(imagenet(weights=None))  # type: ignore[operator]
    assert num_parameters(create_model(arch, (3, 32, 32), 1000)) == reference
    assert abs(reference - paper) <= 0.05 * paper
    assert num_parameters(create_model(arch, (3, 32, 32), 10)) == reference - 990 * (head_features + 1)


def feature_map(model: nn.Module, module: nn.Module, x: torch.Tensor) -> tuple[int, ...]:
    """The shape of ``module``'s output when ``model`` runs on ``x``."""
    shapes: list[tuple[int, ...]] = []
    handle = module.register_forward_hook(lambda _m, _i, out: shapes.append(tuple(out.shape)))
    with torch.no_grad():
        model.eval()(x)
    handle.remove()
    return shapes[0]


def test_cifar_stems_keep_32_pixels_through_the_first_convolution() -> None:
    """Stride-1 3x3 stems: a 32 x 32 image leaves the stem at 32 x 32; WRN ends at 8 x 8 (strides 1, 2, 2),
    ShuffleNetV2 at 4 x 4 (three stride-2 stages, no stem max-pool), MobileNetV2 at 2 x 2 (four stride-2 stages);
    torchvision's ImageNet stems would leave 1 x 1."""
    x = torch.randn(2, 3, 32, 32)
    wrn = create_model("wrn_40_1", (3, 32, 32), 10)
    assert feature_map(wrn, wrn.features.stem, x) == (2, 16, 32, 32)
    assert feature_map(wrn, wrn.features.group3, x) == (2, 64, 8, 8)
    shufflenet = create_model("shufflenetv2", (3, 32, 32), 10)
    assert feature_map(shufflenet, shufflenet.conv1, x) == (2, 24, 32, 32)
    assert feature_map(shufflenet, shufflenet.conv5, x) == (2, 1024, 4, 4)
    mobilenet = create_model("mobilenetv2", (3, 32, 32), 10)
    assert feature_map(mobilenet, mobilenet.features[0], x) == (2, 32, 32, 32)
    assert feature_map(mobilenet, mobilenet.features, x) == (2, 1280, 2, 2)


@pytest.mark.parametrize(("arch", "features"), [("wrn_40_2", 128), ("shufflenetv2", 1024), ("mobilenetv2", 1280)])
def test_pool_models_take_any_input_and_name_their_classifier(arch: str, features: int) -> None:
    """Grayscale 28 x 28 (MNIST) and 64 x 64 (Tiny-ImageNet) inputs; the classifier split that FedPer, FML and
    UA-PDFL use; no dropout, so the models draw no random numbers and can be fused."""
    for shape in ((1, 28, 28), (3, 64, 64)):
        model = create_model(arch, shape, 7)
        x = torch.randn(2, *shape)
        assert model(x).shape == (2, 7) and extract_features(model, x).shape == (2, features)
    assert classifier_prefix(model) in ("classifier.", "fc.")
    assert not any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules())
    assert width_rate(arch) is None  # no width-scaled family: partial training refuses them


@pytest.mark.parametrize("arch", ["wrn_41_1", "wrn_4_1"])
def test_a_wrn_depth_other_than_6n_plus_4_is_refused_in_one_line(arch: str) -> None:
    with pytest.raises(ConfigError, match=r"models: WRN depth \d+ is not allowed; allowed: 6n \+ 4"):
        create_model(arch, (3, 32, 32), 10)
