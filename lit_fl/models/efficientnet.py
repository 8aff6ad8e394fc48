"""EfficientNet B0-B4 of DFML Table 10 (the H2 pool), from efficientnet-pytorch.

``EfficientNet.from_name`` builds a randomly initialised network and never downloads weights. The
``image_size`` given to it only sets the "same" padding of the stem when ``in_channels != 3``; the network
itself accepts any image size (global average pool before the classifier ``_fc``).
"""

from __future__ import annotations

from torch import nn


def efficientnet(variant: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """Factory behind ``efficientnet_<variant>`` (``variant`` one of ``b0`` .. ``b4``)."""
    from efficientnet_pytorch import EfficientNet  # lazy: keeps ``import lit_fl.models`` fast

    channels, height, width = input_shape
    return EfficientNet.from_name(
        f"efficientnet-{variant}", in_channels=channels, num_classes=num_classes, image_size=(height, width)
    )
