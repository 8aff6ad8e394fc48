"""The CNN family of DFML Table 10.

Each layer is a 5x5 convolution ("same" padding), ReLU, 2x2 max-pool (ceil mode) and layer normalisation;
the feature map is flattened into one linear classifier, as in the classic federated CNN of McMahan et al.
that the H0 model ``[32, 64]`` mirrors. Layer normalisation over ``(C, H, W)`` is ``GroupNorm(1, C)``
(per-channel affine), as in the HeteroFL/FedRolex code the DFML baselines derive from; it can be sliced by
channel for partial training. Flattening keeps the spatial layout, which made every H2 model learn
MNIST within two epochs at lr 0.01, where a global average pool left ``[32, 64]`` at 84%
(measured on mnist5k; see the issue note).

Two choices the DFML paper leaves open (Table 10 names layers, not the head or the norm's exact form):
the head is flatten + linear, which makes the classifier the largest layer and so changes Phi, the parameter
count that weights every teacher in Eq. 3; and "layer norm" is ``GroupNorm(1, C)``.

``norm="batch"`` (``cnn_bn_<c1>_<c2>...``) puts ``BatchNorm2d`` where the layer norm is: the same CNN as a
BatchNorm model, for the methods whose papers use BatchNorm networks and rely on their statistics (FedORION's
noise distillation reads the teachers' BatchNorm statistics, sec. 3.3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from torch import Tensor, nn

from lit_fl.errors import ConfigError


class CNN(nn.Module):
    """``channels`` = output channels per layer, e.g. ``[32, 64]`` (H0 of DFML Table 10); ``norm`` the layer norm
    (``GroupNorm(1, C)``) or ``BatchNorm2d``."""

    def __init__(
        self,
        channels: Sequence[int],
        in_channels: int = 3,
        num_classes: int = 10,
        input_size: tuple[int, int] = (32, 32),
        norm: Literal["layer", "batch"] = "layer",
    ) -> None:
        super().__init__()
        if not channels:
            raise ConfigError("CNN needs at least one layer")
        layers: list[nn.Module] = []
        previous = in_channels
        for width in channels:
            layers += [
                nn.Conv2d(previous, width, kernel_size=5, padding=2),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2, ceil_mode=True),
                nn.GroupNorm(1, width) if norm == "layer" else nn.BatchNorm2d(width),
            ]
            previous = width
        self.channels = list(channels)
        self.features = nn.Sequential(*layers, nn.Flatten())
        height, width = input_size
        for _ in channels:
            height, width = -(-height // 2), -(-width // 2)
        self.feature_map = (previous, height, width)
        self.classifier = nn.Linear(previous * height * width, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))

    def layers(self) -> list[nn.Module]:
        """The layers :meth:`forward` applies, in order (lets :class:`~lit_fl.steps.fusion.FusedModels` fuse them
        by hand)."""
        return [*self.features, self.classifier]


def cnn(
    channels: Sequence[int],
    input_shape: tuple[int, int, int],
    num_classes: int,
    norm: Literal["layer", "batch"] = "layer",
) -> CNN:
    """Factory registered as ``cnn_<c1>_<c2>...`` (``cnn_32_64`` is the H0 model) and ``cnn_bn_<c1>_<c2>...``
    (``norm="batch"``)."""
    return CNN(channels, input_shape[0], num_classes, (input_shape[1], input_shape[2]), norm)

