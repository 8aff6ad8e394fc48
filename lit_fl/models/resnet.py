"""Pre-activation ResNet18 for small images (DFML Table 10) and its width-scaled copies.

CIFAR style (He et al., 2016, "Identity Mappings in Deep Residual Networks"): a 3x3 stem convolution with
stride 1 and no max-pool, four stages of two pre-activation basic blocks (BN-ReLU before each convolution)
with strides 1, 2, 2, 2, a 1x1 projection shortcut wherever the shape changes, then a final BN-ReLU, global
average pool and one linear classifier. Every hidden size is a stage width, so the copy with widths
``floor(r * [64, 128, 256, 512])`` has the same parameter names and ranks as ResNet18 with every hidden
dimension scaled by ``r``: it can be sliced out of the full model channel-wise (HeteroFL-style partial
training). Convolutions have no bias (a BatchNorm follows each one).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from torch import Tensor, nn
from torch.nn import functional as F

from lit_fl.errors import ConfigError

#: Stage widths of ResNet18 (the largest ResNet of DFML Table 10).
RESNET18_WIDTHS: tuple[int, int, int, int] = (64, 128, 256, 512)
BLOCKS_PER_STAGE = 2
STAGE_STRIDES = (1, 2, 2, 2)


def _norm(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, track_running_stats=True)


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False)


class PreActBlock(nn.Module):
    """BN-ReLU-conv3x3-BN-ReLU-conv3x3 plus a shortcut (1x1 projection of the pre-activated input when the
    stride or width changes, the raw input otherwise)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.bn1 = _norm(in_channels)
        self.conv1 = _conv3x3(in_channels, out_channels, stride)
        self.bn2 = _norm(out_channels)
        self.conv2 = _conv3x3(out_channels, out_channels)
        self.shortcut: nn.Conv2d | None = None
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(x))
        shortcut = x if self.shortcut is None else self.shortcut(out)
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + shortcut


def _stage(in_channels: int, out_channels: int, stride: int) -> nn.Sequential:
    blocks = [PreActBlock(in_channels, out_channels, stride)]
    blocks += [PreActBlock(out_channels, out_channels) for _ in range(BLOCKS_PER_STAGE - 1)]
    return nn.Sequential(*blocks)


class PreActResNet18(nn.Module):
    """``widths`` = channels of the four stages, ``(64, 128, 256, 512)`` for ResNet18.

    ``features`` maps an image to the pooled feature vector, ``classifier`` is the final linear layer.
    """

    def __init__(self, widths: Sequence[int] = RESNET18_WIDTHS, in_channels: int = 3, num_classes: int = 10) -> None:
        super().__init__()
        if len(widths) != len(STAGE_STRIDES) or min(widths) < 1:
            raise ConfigError(f"PreActResNet18 needs {len(STAGE_STRIDES)} positive stage widths, got {list(widths)}")
        self.widths = list(widths)
        layers: OrderedDict[str, nn.Module] = OrderedDict(stem=_conv3x3(in_channels, widths[0]))
        previous = widths[0]
        for index, (width, stride) in enumerate(zip(widths, STAGE_STRIDES), start=1):
            layers[f"layer{index}"] = _stage(previous, width, stride)
            previous = width
        layers.update(norm=_norm(previous), relu=nn.ReLU(inplace=True))
        layers.update(pool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten())
        self.features = nn.Sequential(layers)
        self.classifier = nn.Linear(previous, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))


def resnet18(widths: Sequence[int], input_shape: tuple[int, int, int], num_classes: int) -> PreActResNet18:
    """Factory registered as ``resnet18`` and ``resnet18_<c1>_<c2>_<c3>_<c4>``."""
    return PreActResNet18(widths, input_shape[0], num_classes)
