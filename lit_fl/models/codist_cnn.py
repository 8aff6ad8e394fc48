"""The small and large CNNs of knowledge codistillation (papers/codistillation.txt, Appendix E; SPEC).

Three 3x3 "valid" convolutions and two hidden dense layers, then the classifier::

    conv c1 -> ReLU -> conv c2 -> ReLU -> 2x2 max-pool -> conv c3 -> ReLU -> 2x2 max-pool
    -> flatten -> dense d1 -> ReLU -> dense d2 -> ReLU -> dense num_classes

For 3x32x32 inputs the spatial layout is 32 -> 30 -> 28 -> pool 14 -> 12 -> pool 6 (SPEC). The paper gives
the widths and the parameter counts only (109,348 and 410,084 at 100 classes), not the activations: ReLU
and max-pooling are the haiku/FedJax defaults, and they have no parameters, so the counts fix the rest: no
normalisation layer, biases everywhere and a classifier on top of the two dense layers (the paper's "five
layers" count the hidden layers). The flatten size is computed from the input shape, so the models also
take e.g. 1x28x28 (28 -> 26 -> 24 -> 12 -> 10 -> 5).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from lit_fl.errors import ConfigError

#: ``(conv widths, dense widths)`` of the models registered as :data:`lit_fl.models.registry.CODIST_NAMES`.
CODIST_CNNS: dict[str, tuple[tuple[int, int, int], tuple[int, int]]] = {
    "codist_small": ((16, 32, 32), (64, 128)),
    "codist_large": ((32, 64, 64), (128, 256)),
}


class CodistCNN(nn.Module):
    """``conv`` = three output-channel counts, ``dense`` = two hidden widths (papers/codistillation.txt E)."""

    def __init__(
        self,
        conv: Sequence[int],
        dense: Sequence[int],
        in_channels: int = 3,
        num_classes: int = 100,
        input_size: tuple[int, int] = (32, 32),
    ) -> None:
        super().__init__()
        if len(conv) != 3 or len(dense) != 2:
            raise ConfigError(f"CodistCNN needs 3 conv widths and 2 dense widths, got {list(conv)} and {list(dense)}")
        c1, c2, c3 = (int(c) for c in conv)
        height, width = input_size
        # 2 valid convs (-2 each), pool /2, valid conv (-2), pool /2 (floor, as a VALID max-pool)
        height, width = ((height - 4) // 2 - 2) // 2, ((width - 4) // 2 - 2) // 2
        # at least 1 x 1 from 12 x 12 up: the input the names codist_small/large declare (create_model checks it)
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.Conv2d(c1, c2, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(c2, c3, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.feature_map = (c3, height, width)
        d1, d2 = (int(d) for d in dense)
        self.dense = nn.Sequential(
            nn.Linear(c3 * height * width, d1),
            nn.ReLU(inplace=True),
            nn.Linear(d1, d2),
            nn.ReLU(inplace=True),
        )
        self.classifier = nn.Linear(d2, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.dense(self.features(x)))

    def layers(self) -> list[nn.Module]:
        """The layers :meth:`forward` applies, in order (lets :class:`~lit_fl.steps.fusion.FusedModels` fuse them
        by hand)."""
        return [*self.features, *self.dense, self.classifier]


def codist_cnn(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> CodistCNN:
    """Factory registered as ``codist_small`` and ``codist_large``."""
    conv, dense = CODIST_CNNS[arch]
    return CodistCNN(conv, dense, input_shape[0], num_classes, (input_shape[1], input_shape[2]))

