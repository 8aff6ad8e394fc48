"""Noise batches of data-free distillation (see :mod:`lit_fl.steps.noise_distillation`): Gaussian noise or
dead-leaves images (:mod:`lit_fl.steps.dead_leaves`); torch only, so configs can name the options without
Lightning."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from lit_fl.choices import NOISES, NoiseKind
from lit_fl.steps.dead_leaves import dead_leaves


class NoiseBatches:
    """``steps`` batches ``(z, dummy)`` of shape ``(batch_size, *shape)``: ``z ~ N(0, I)`` (``kind="gaussian"``) or
    standardised dead-leaves images (``kind="dead_leaves"``, image shapes ``(C, H, W)`` only).

    ``z`` is drawn on the CPU from ``generator`` (identical on every device, so a resumed run draws the same
    noise) and moved to ``device``; ``dummy`` is an empty label tensor (the steps ignore it). Iterating twice
    draws fresh noise: the generator advances. As a client work's batches (:class:`~lit_fl.steps.phase.ClientWork`)
    :meth:`plan` draws the pass (every process, in the works' order: the host then holds the pass's noise) and
    :meth:`cut` moves a batch to the device: the batches iterating gives.
    """

    def __init__(
        self,
        shape: Sequence[int],
        batch_size: int,
        steps: int,
        generator: torch.Generator,
        device: torch.device | str = "cpu",
        channels_last: bool = False,
        kind: NoiseKind = "gaussian",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"noise batch_size must be >= 1, got {batch_size}")
        if steps < 0:
            raise ValueError(f"noise steps must be >= 0, got {steps}")
        if kind not in NOISES:
            raise ValueError(f"noise kind must be one of {', '.join(NOISES)}, got {kind!r}")
        if kind == "dead_leaves" and len(shape) != 3:
            raise ValueError(f"dead_leaves noise needs image inputs (C, H, W), got the shape {tuple(shape)}")
        self.shape = tuple(int(s) for s in shape)
        self.batch_size, self.steps = batch_size, steps
        self.generator, self.device = generator, torch.device(device)
        self.channels_last = channels_last and len(self.shape) == 3
        self.kind: NoiseKind = kind
        self._dummy: Tensor | None = None

    def draw(self) -> Tensor:
        """One batch on the CPU, from the generator."""
        if self.kind == "dead_leaves":
            return dead_leaves(self.batch_size, self.shape, self.generator)
        return torch.randn((self.batch_size, *self.shape), generator=self.generator)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for _ in range(self.steps):
            yield self.cut(self.draw())

    def plan(self) -> list[Tensor]:
        """One pass's noise on the CPU, drawn from the generator as iterating draws it."""
        return [self.draw() for _ in range(self.steps)]

    def cut(self, planned: Tensor) -> tuple[Tensor, Tensor]:
        """A batch of drawn noise on the device (channels last when asked), with the empty label tensor (one per
        instance)."""
        z = planned.to(self.device)
        if self.channels_last:
            z = z.contiguous(memory_format=torch.channels_last)
        if self._dummy is None:
            self._dummy = torch.empty(0, dtype=torch.long, device=self.device)
        return z, self._dummy
