"""The in-memory image dataset every federation is built from."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor

Augment = Literal["none", "crop_flip"]
AUGMENTS: tuple[str, ...] = ("none", "crop_flip")


@dataclass
class ImageDataset:
    """Train and global-test tensors of one dataset, already normalised.

    ``train_x``/``test_x`` are float32 ``(N, C, H, W)``; ``train_y``/``test_y`` int64 ``(N,)``. Clients hold
    index tensors into ``train_x``; nothing is copied per client (DESIGN: "Data of a dataset is one tensor
    on the target device").

    ``augment`` is the train-time augmentation (``none`` or ``crop_flip``: random crop from a 4-pixel black
    border plus horizontal flip); a loader sets its dataset's default, ``data.augment`` overrides it.
    ``black`` is the normalised value of a black pixel per channel, the crop's padding.
    """

    name: str
    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    num_classes: int
    augment: Augment = "none"
    black: tuple[float, ...] = (0.0,)

    def __post_init__(self) -> None:
        if self.train_x.ndim != 4 or self.test_x.ndim != 4:
            raise ValueError(f"dataset {self.name!r}: images must be (N, C, H, W) tensors")
        if len(self.train_x) != len(self.train_y) or len(self.test_x) != len(self.test_y):
            raise ValueError(f"dataset {self.name!r}: images and labels differ in length")

    @property
    def input_shape(self) -> tuple[int, int, int]:
        c, h, w = self.train_x.shape[1:]
        return int(c), int(h), int(w)

    def to(self, device: torch.device | str, channels_last: bool = False) -> ImageDataset:
        """The same dataset with every tensor on ``device``; images in channels-last layout if asked.

        Channels-last is the fast layout for convolutions on CPUs (oneDNN) and on GPUs with mixed precision.
        """
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        return ImageDataset(
            self.name,
            self.train_x.to(device).contiguous(memory_format=fmt),
            self.train_y.to(device),
            self.test_x.to(device).contiguous(memory_format=fmt),
            self.test_y.to(device),
            self.num_classes,
            self.augment,
            self.black,
        )

    def with_augment(self, augment: Augment) -> ImageDataset:
        """The same tensors with train-time augmentation ``augment``."""
        if augment not in AUGMENTS:
            raise ValueError(f"data.augment: {augment!r} is not allowed; allowed: auto, {', '.join(AUGMENTS)}")
        return replace(self, augment=augment)
