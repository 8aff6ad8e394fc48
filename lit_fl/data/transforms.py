"""Normalisation and train-time augmentation as batched tensor ops (no PIL, no worker processes)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def to_float_images(images: Tensor) -> Tensor:
    """uint8 ``(N, H, W)``, ``(N, H, W, C)`` or ``(N, C, H, W)`` images as float ``(N, C, H, W)`` in [0, 1]."""
    x = images
    if x.ndim == 3:
        x = x.unsqueeze(1)
    elif x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        x = x.permute(0, 3, 1, 2)
    x = x.float()
    return x / 255.0 if images.dtype == torch.uint8 else x


def normalize(x: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """Per-channel ``(x - mean) / std``."""
    m = torch.tensor(mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return ((x - m) / s).contiguous()


def random_crop_flip(
    x: Tensor, padding: int = 4, generator: torch.Generator | None = None, fill: Sequence[float] = (0.0,)
) -> Tensor:
    """Random crop from the image padded by ``padding`` pixels of value ``fill`` (per channel, or one value
    for all), plus a random horizontal flip, for a whole batch at once.

    For normalised images ``fill`` is the normalised value of a black pixel, ``(0 - mean) / std``, so the
    padding is black in pixel space (torchvision's ``RandomCrop(padding=4)`` on the raw image). Every sample
    gets its own offset and flip, drawn from ``generator`` (which must live on ``x.device``). Implemented
    with one gather, so the cost is a single pass over the batch on any device.
    """
    n, c, h, w = x.shape
    value = torch.as_tensor(fill, dtype=x.dtype, device=x.device).reshape(1, -1, 1, 1)
    padded = value.expand(n, c, h + 2 * padding, w + 2 * padding).clone()
    padded[:, :, padding : padding + h, padding : padding + w] = x
    dev = x.device
    dy = torch.randint(0, 2 * padding + 1, (n,), device=dev, generator=generator)
    dx = torch.randint(0, 2 * padding + 1, (n,), device=dev, generator=generator)
    flip = torch.rand(n, device=dev, generator=generator) < 0.5
    rows = dy.view(n, 1) + torch.arange(h, device=dev).view(1, h)  # (n, h)
    cols = torch.arange(w, device=dev).view(1, w).expand(n, w)
    cols = torch.where(flip.view(n, 1), cols.flip(1), cols) + dx.view(n, 1)  # (n, w)
    idx_rows = rows.view(n, 1, h, 1).expand(n, c, h, w + 2 * padding)
    out = padded.gather(2, idx_rows)
    idx_cols = cols.view(n, 1, 1, w).expand(n, c, h, w)
    return out.gather(3, idx_cols)


def batch_crop_flip(
    x: Tensor, padding: int = 4, generator: torch.Generator | None = None, fill: Sequence[float] = (0.0,)
) -> Tensor:
    """FedJAX's training augmentation (``fedjax.datasets.cifar100.preprocess_image``): the batch padded by ``padding``
    pixels of value ``fill``, then ONE crop offset for the whole batch, row and column each uniform in
    ``0 .. 2 * padding - 1`` (``np.random.randint(8)``: the offset 8 is never drawn), and ONE horizontal flip for the
    whole batch with probability 1/2, drawn from ``generator`` (which must live on ``x.device``)."""
    n, c, h, w = x.shape
    value = torch.as_tensor(fill, dtype=x.dtype, device=x.device).reshape(1, -1, 1, 1)
    padded = value.expand(n, c, h + 2 * padding, w + 2 * padding).clone()
    padded[:, :, padding : padding + h, padding : padding + w] = x
    i, j = (int(v) for v in torch.randint(0, max(2 * padding, 1), (2,), device=x.device, generator=generator))
    out = padded[:, :, i : i + h, j : j + w]
    flip = int(torch.randint(0, 2, (1,), device=x.device, generator=generator)) == 1
    return out.flip(3) if flip else out.contiguous()


def black_value(mean: Sequence[float], std: Sequence[float]) -> tuple[float, ...]:
    """The normalised value of a black (all-zero) pixel per channel: ``(0 - mean) / std``."""
    return tuple(-m / s for m, s in zip(mean, std))
