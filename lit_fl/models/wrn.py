"""Wide residual networks WRN-d-k for small images (Zagoruyko & Komodakis 2016, "Wide Residual Networks", sec. 2):
FedORION's global model WRN40 (sec. 4.1) and its Table 4 alternative WRN16.

A 3x3 stem convolution to 16 channels (stride 1), three groups of ``n = (d - 4) / 6`` pre-activation basic blocks
(BN-ReLU-conv3x3-BN-ReLU-conv3x3, :class:`lit_fl.models.resnet.PreActBlock`) of widths ``16k``, ``32k``, ``64k``
with strides 1, 2, 2 and a 1x1 projection of the pre-activated input where the width or stride changes, then
BN-ReLU, global average pooling and one linear classifier. No dropout (the paper's default; it would also keep the
model out of fusion). Parameters: WRN-40-1 563,930 and WRN-40-2 2,243,546 for 10 classes (the paper's CIFAR
table: 0.6M and 2.2M; FedORION App. B's "WRN40 (0.5M parameters)" is WRN-40-1, the pool's smallest model,
truncated).
"""

from __future__ import annotations

from collections import OrderedDict

from torch import Tensor, nn

from lit_fl.errors import ConfigError
from lit_fl.models.resnet import PreActBlock

STEM_WIDTH = 16
GROUP_STRIDES = (1, 2, 2)


def blocks_per_group(depth: int) -> int:
    """``n = (d - 4) / 6``: each group's basic blocks (two 3x3 convolutions each) for a WRN of depth ``d``."""
    if depth < 10 or (depth - 4) % 6:
        raise ConfigError(f"models: WRN depth {depth} is not allowed; allowed: 6n + 4 for n >= 1 (10, 16, 22, 28, 40)")
    return (depth - 4) // 6


class WideResNet(nn.Module):
    """WRN-``depth``-``widen``: ``features`` maps an image to its pooled ``64 * widen`` features, ``classifier`` is
    the final linear layer."""

    def __init__(self, depth: int, widen: int, in_channels: int = 3, num_classes: int = 10) -> None:
        super().__init__()
        if widen < 1:
            raise ConfigError(f"models: WRN widening factor {widen} is not allowed; allowed: an integer >= 1")
        n = blocks_per_group(depth)
        layers: OrderedDict[str, nn.Module] = OrderedDict(
            stem=nn.Conv2d(in_channels, STEM_WIDTH, kernel_size=3, padding=1, bias=False))
        previous = STEM_WIDTH
        for index, stride in enumerate(GROUP_STRIDES, start=1):
            width = STEM_WIDTH * widen * 2 ** (index - 1)
            blocks = [PreActBlock(previous, width, stride)] + [PreActBlock(width, width) for _ in range(n - 1)]
            layers[f"group{index}"] = nn.Sequential(*blocks)
            previous = width
        layers.update(norm=nn.BatchNorm2d(previous), relu=nn.ReLU(inplace=True))
        layers.update(pool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten())
        self.features = nn.Sequential(layers)
        self.classifier = nn.Linear(previous, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))


def wrn(depth: int, widen: int, input_shape: tuple[int, int, int], num_classes: int) -> WideResNet:
    """Factory behind ``wrn_<depth>_<k>`` (``wrn_40_1``, ``wrn_40_2``, ``wrn_16_2``, ...)."""
    return WideResNet(depth, widen, input_shape[0], num_classes)
