"""Batches of one client's samples, cut from the dataset tensors on the target device."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from lit_fl.data.transforms import random_crop_flip


class ClientBatches:
    """Shuffled ``(x, y)`` mini-batches over ``indices`` of ``(x_all, y_all)`` for ``epochs`` epochs.

    The order comes from ``generator`` (a CPU generator: identical streams on every device, so a resumed
    run on another machine draws the same batches); ``augment="crop_flip"`` runs random crop (padding of value
    ``black``, the normalised black pixel) and flip on the batch tensor.
    Iterating twice draws two different orders: the generator advances.
    """

    def __init__(
        self,
        x_all: Tensor,
        y_all: Tensor,
        indices: Tensor,
        batch_size: int,
        generator: torch.Generator,
        epochs: int = 1,
        augment: str = "none",
        black: tuple[float, ...] = (0.0,),
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.x_all, self.y_all = x_all, y_all
        self.indices = indices.to(torch.long).cpu()
        if augment not in ("none", "crop_flip"):
            raise ValueError(f"augment must be none or crop_flip, got {augment!r}")
        self.batch_size, self.epochs, self.augment, self.black = batch_size, epochs, augment, black
        self.generator = generator

    def __len__(self) -> int:
        per_epoch = -(-len(self.indices) // self.batch_size)
        return per_epoch * self.epochs

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        device = self.x_all.device
        for _ in range(self.epochs):
            order = self.indices[torch.randperm(len(self.indices), generator=self.generator)].to(device)
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                x = self.x_all[idx]
                if self.augment == "crop_flip":
                    x = self._augment(x)
                yield x, self.y_all[idx]

    def skip(self) -> None:
        """Advance ``generator`` exactly as one iteration would, without cutting a batch (a process that does not
        compute this client's phase keeps its streams in step with the one that does)."""
        for _ in range(self.epochs):
            torch.randperm(len(self.indices), generator=self.generator)
            if self.augment == "crop_flip":
                for _ in range(0, len(self.indices), self.batch_size):
                    torch.randint(0, 2**62, (1,), generator=self.generator)

    def _augment(self, x: Tensor) -> Tensor:
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        g = torch.Generator(device=x.device).manual_seed(seed)
        return random_crop_flip(x, padding=4, generator=g, fill=self.black)
