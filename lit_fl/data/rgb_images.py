"""Decoded RGB images to the in-memory :class:`ImageDataset`: each image resized to a square side once, at load
time, then all of them normalised by the train split's own per-channel mean and standard deviation.

The papers state no normalisation constants for these datasets, so none is hard-coded: the statistics are the
train split's (the test split never informs them), computed in float64 from the uint8 pixels.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from PIL import Image

from lit_fl.data.dataset import ImageDataset
from lit_fl.data.transforms import black_value, normalize
from lit_fl.errors import ConfigError


def resized_rgb(image: Image.Image, size: int) -> np.ndarray:
    """``image`` as uint8 ``(size, size, 3)``: converted to RGB (Caltech101 has grayscale images), then resized
    bilinearly to ``size`` x ``size`` with PIL (the whole image, nothing cropped; an image of that size already is
    left unchanged)."""
    rgb = image.convert("RGB")
    if rgb.size != (size, size):
        rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(rgb, dtype=np.uint8)


def stack_rgb(images: Iterable[np.ndarray], size: int) -> np.ndarray:
    """uint8 ``(N, size, size, 3)`` from ``(size, size, 3)`` arrays (``(0, size, size, 3)`` for none)."""
    arrays = list(images)
    return np.stack(arrays) if arrays else np.zeros((0, size, size, 3), dtype=np.uint8)


def channel_statistics(images: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and (population) standard deviation of uint8 ``(N, H, W, C)`` images scaled to [0, 1]."""
    pixels = images.reshape(-1, images.shape[-1]).astype(np.float64) / 255.0
    return tuple(pixels.mean(axis=0).tolist()), tuple(pixels.std(axis=0).tolist())


def rgb_dataset(name: str, train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray,
                num_classes: int) -> ImageDataset:
    """An :class:`ImageDataset` from uint8 ``(N, H, W, 3)`` images and integer labels, normalised by the train
    split's statistics (:func:`channel_statistics`); no augmentation by default."""
    if len(train_x) == 0:
        raise ConfigError(f"data.dataset: {name} has no train images under data.root")
    mean, std = channel_statistics(train_x)
    if min(std) == 0.0:
        raise ConfigError(f"data.dataset: {name}: a colour channel of every train image is constant (std 0), so "
                          "the images cannot be normalised; the files are not images of this dataset")

    def tensor(images: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 255.0
        return normalize(x, mean, std)

    return ImageDataset(
        name, tensor(train_x), torch.as_tensor(train_y, dtype=torch.int64), tensor(test_x),
        torch.as_tensor(test_y, dtype=torch.int64), num_classes, black=black_value(mean, std),
    )
