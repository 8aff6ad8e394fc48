"""The in-memory dataset every federation is built from: images, or token sequences (:mod:`lit_fl.data.tokens`),
with the dataset's own clients where it has them (``data.partition: natural``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from lit_fl.constraints import check_arguments
from lit_fl.data.domains import Domains
from lit_fl.errors import ConfigError

Augment = Literal["none", "crop_flip", "crop_flip_per_batch"]
AUGMENTS: tuple[str, ...] = ("none", "crop_flip", "crop_flip_per_batch")


@dataclass
class ImageDataset:
    """Train and global-test tensors of one dataset, already normalised.

    ``train_x``/``test_x`` are float32 ``(N, C, H, W)``; ``train_y``/``test_y`` int64 ``(N,)``. Clients hold
    index tensors into ``train_x``; nothing is copied per client (DESIGN: "Data of a dataset is one tensor
    on the target device").

    Sequence datasets (next-token prediction) hold ``train_x``/``test_x`` and ``train_y``/``test_y`` as int64
    ``(N, T)`` token ids (:mod:`lit_fl.data.tokens`: PAD 0, BOS 1, EOS 2); ``num_classes`` is then the size of
    the vocabulary with its special tokens.

    ``clients`` (a federated dataset's own clients, ``data.partition: natural``) are the train indices of each
    client, ``client_ids`` their ids in the file; None for a dataset without clients.

    ``domains`` (:class:`~lit_fl.data.domains.Domains`) names each train and test sample's domain where the loader
    was asked for them (StackOverflow's post type, ``data.options.domains: type``); None otherwise.

    ``augment`` is the train-time augmentation (``none``; ``crop_flip_per_batch``: FedJAX's, one crop offset and
    one flip per batch; or ``crop_flip``: per sample, random crop from a 4-pixel black
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
    clients: tuple[np.ndarray, ...] | None = None
    client_ids: tuple[str, ...] | None = None
    domains: Domains | None = None

    def __post_init__(self) -> None:
        if self.is_sequence:
            shapes_ok = self.train_y.shape == self.train_x.shape and self.test_y.shape == self.test_x.shape
            if self.test_x.ndim != 2 or not shapes_ok:
                raise ValueError(f"dataset {self.name!r}: token sequences and their targets must be (N, T) tensors")
        elif self.train_x.ndim != 4 or self.test_x.ndim != 4:
            raise ValueError(f"dataset {self.name!r}: images must be (N, C, H, W) tensors (or token ids (N, T))")
        if len(self.train_x) != len(self.train_y) or len(self.test_x) != len(self.test_y):
            raise ValueError(f"dataset {self.name!r}: inputs and labels differ in length")
        if self.clients is not None and (self.client_ids is None or len(self.client_ids) != len(self.clients)):
            raise ValueError(f"dataset {self.name!r}: every client needs an id")
        if self.domains is not None and (len(self.domains.train), len(self.domains.test)) != (
                len(self.train_y), len(self.test_y)):
            raise ValueError(f"dataset {self.name!r}: every train and test sample needs a domain")

    @property
    def is_sequence(self) -> bool:
        """Whether the samples are token sequences (next-token prediction) rather than images."""
        return self.train_x.ndim == 2 and not torch.is_floating_point(self.train_x)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """``(C, H, W)`` of an image, ``(T,)`` of a token sequence."""
        return tuple(int(s) for s in self.train_x.shape[1:])

    def to(self, device: torch.device | str, channels_last: bool = False) -> ImageDataset:
        """The same dataset with every tensor on ``device``; images in channels-last layout if asked.

        Channels-last is the fast layout for convolutions on CPUs (oneDNN) and on GPUs with mixed precision.
        """
        fmt = torch.channels_last if channels_last and not self.is_sequence else torch.contiguous_format
        return replace(
            self,
            train_x=self.train_x.to(device).contiguous(memory_format=fmt),
            train_y=self.train_y.to(device),
            test_x=self.test_x.to(device).contiguous(memory_format=fmt),
            test_y=self.test_y.to(device),
        )

    def with_augment(self, augment: Augment) -> ImageDataset:
        """The same tensors with train-time augmentation ``augment``."""
        check_arguments(ImageDataset.with_augment, {"augment": augment}, "data.")  # the Literal Augment
        if augment != "none" and self.is_sequence:
            raise ConfigError(f"data.augment: {augment} crops and flips images; {self.name} holds token sequences; "
                              "allowed: auto, none")
        return replace(self, augment=augment)
